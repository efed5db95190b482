"""A model named on the command line -> an ``nn.Module``: ``torchvision:NAME``, ``timm:NAME`` or ``module.path:factory``."""

from __future__ import annotations

import importlib
import os
import sys
import types

from kbench.core.errors import KbenchInputError, suggest

SPEC_HELP = ("torchvision:NAME (e.g. torchvision:resnet50, torchvision:r3d_18), timm:NAME (with timm installed), "
             "or module.path:factory (a callable returning an nn.Module, importable from the current folder "
             "or sys.path)")


def _import_torchvision():
    """torchvision, importable even where its compiled ops do not match the installed torch.

    torchvision registers fake kernels for its C++ ops (nms, roi_align) when it is imported; a build whose
    extension does not load (a CUDA wheel beside a CPU torch) fails there, although the model definitions,
    all a trace needs, are plain Python. Then the import is retried without those registrations.
    """
    try:
        import torchvision
        return torchvision
    except ModuleNotFoundError:
        raise KbenchInputError("torchvision is not installed: `pip install torchvision` (the build that matches "
                               "your torch), or name your own model as module.path:factory.") from None
    except (RuntimeError, OSError):
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
        import torchvision
        return torchvision


def _torchvision_model(name: str):
    tv = _import_torchvision()
    available = tv.models.list_models()
    if name not in available:
        raise KbenchInputError(f"torchvision:{name}: torchvision {tv.__version__} has no model {name!r}."
                               f"{suggest(name, available)} `python -c 'import torchvision; "
                               "print(torchvision.models.list_models())'` lists them.")
    return lambda: tv.models.get_model(name, weights=None)


def _timm_model(name: str):
    try:
        import timm
    except ModuleNotFoundError:
        raise KbenchInputError(f"timm:{name}: timm is not installed; `pip install timm`, or name the model as "
                               "torchvision:NAME or module.path:factory.") from None
    if name not in timm.list_models():
        raise KbenchInputError(f"timm:{name}: timm {timm.__version__} has no model {name!r}."
                               f"{suggest(name, timm.list_models())}")
    return lambda: timm.create_model(name, pretrained=False)


def _factory(spec: str):
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise KbenchInputError(f"model {spec!r}: expected {SPEC_HELP}.")
    # a console script's sys.path lacks the current folder, where a user's own model file usually is
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise KbenchInputError(f"model {spec!r}: cannot import {module_name!r} ({exc}); the module must be "
                               "importable from the current folder or sys.path (set PYTHONPATH).") from None
    except Exception as exc:  # noqa: BLE001 - any failure while importing is the user's module
        raise KbenchInputError(f"model {spec!r}: importing {module_name!r} failed: {type(exc).__name__}: "
                               f"{exc}") from None
    finally:
        if added:
            sys.path.remove(os.getcwd())
    factory = module
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise KbenchInputError(f"model {spec!r}: {module_name!r} has no attribute {attr!r}.")
        factory = getattr(factory, part)
    if not callable(factory):
        raise KbenchInputError(f"model {spec!r}: {attr!r} is not callable; give a function or class that "
                               "returns an nn.Module when called with no arguments.")
    return factory


def build_model(spec: str):
    """The ``nn.Module`` that ``spec`` names, built on the CPU with random weights (nothing is downloaded)."""
    import torch
    kind, _, name = spec.partition(":")
    factory = {"torchvision": _torchvision_model, "timm": _timm_model}.get(kind)
    factory = factory(name) if factory else _factory(spec)
    try:
        model = factory()
    except Exception as exc:  # noqa: BLE001 - a model that does not build is the user's input
        raise KbenchInputError(f"model {spec!r} does not build: {type(exc).__name__}: {exc}. Check the factory "
                               "builds with no arguments.") from None
    if not isinstance(model, torch.nn.Module):
        raise KbenchInputError(f"model {spec!r}: the factory returned a {type(model).__name__}, not an "
                               "nn.Module.")
    return model
