"""Which plans count: a right answer, the FP32 precision class, the numerical notes, the candidate sets.

A plan whose output is over its data type's :data:`TOLERANCE` is wrong and never a winner. The
numerical notes (:data:`NOTE_NAMES`) come from the frontend's note filters, read by
:func:`classify_note_probe`. The candidate sets a dataset ships as variants are drawn from these:
:func:`default_set` (the default), every correct plan (``tf32``) and :func:`pytorch_default_mask`
(``pytorch``), one line each in :data:`VARIANT_TEXT`.
"""

from __future__ import annotations

import pandas as pd

#: relative L2 error over which a plan's output is "wrong" (never a winner)
TOLERANCE = {"FP16": 1e-2, "BF16": 4e-2, "FP32": 1e-2}
#: FP32 plan counts as full-FP32 when its error is under this fraction of TF32 rounding's error
FP32_PRECISE_FRACTION = 0.1
NOTE_NAMES = ("TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "FFT",
              "WINOGRAD", "NONDETERMINISTIC")
REDUCED_NOTES = {"TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION"}


def classify_note_probe(message: str) -> bool | None:
    """Read a note probe's build error: True = the plan has the note, False = not, None = unclear.

    The probe graph keeps only plans WITH the note (``select_numeric_notes``)
    and bars every plan by a workspace limit of -1 bytes: a plan without the
    note fails as "deselected", one with it passes the note filter and fails on
    the workspace limit. Neither builds anything.
    """
    m = message.lower()
    if "deselecting execution plan" in m and "workspace" not in m:
        return False
    if "workspace" in m:
        return True
    return None


def default_set(plan: dict, dtype: str, notes_reliable: bool) -> bool:
    """Is a plan in the default candidate set of its data type?

    FP32: full-FP32 arithmetic only (calibrated error class ``fp32``, and no
    tensor-core / down-convert / reduced-precision note where notes are
    known); TF32 and down-converting plans form the opt-in ``tf32`` variant.
    FP16/BF16: every plan without a reduced-precision-reduction note.
    """
    notes = set(filter(None, (plan.get("numeric_notes") or "").split(";"))) if notes_reliable else set()
    if dtype == "FP32":
        if plan.get("precision") != "fp32":
            return False
        return not (notes & REDUCED_NOTES)
    return "REDUCED_PRECISION_REDUCTION" not in notes


#: one line per candidate set, for the card's header (the rules: default_set, pytorch_default_mask)
VARIANT_TEXT = {
    "default": "FP32 data with full-FP32 plans only, FP16/BF16 data without reduced-precision reduction",
    "tf32": "every plan that built, ran and computed the right answer",
    "pytorch": "what PyTorch's cuDNN path may run with its default flags, `allow_tf32 = True` and "
               "`deterministic = False`: every correct plan but those with the DOWN_CONVERT_INPUTS note, "
               "as `filterEngineConfigs` in `aten/src/ATen/native/cudnn/Conv_v8.cpp` removes them",
}


def pytorch_default_mask(plans: pd.DataFrame) -> pd.Series:
    """Which plans of a plans table (its ``numeric_notes`` column) PyTorch's cuDNN path may run with its
    default flags.

    ``filterEngineConfigs`` (``aten/src/ATen/native/cudnn/Conv_v8.cpp``) drops every engine
    configuration with the DOWN_CONVERT_INPUTS note; with ``deterministic=True`` also the
    NONDETERMINISTIC ones, and for float32 data with ``allow_tf32=False`` the TENSOR_CORE ones.
    PyTorch's defaults (``torch.backends.cudnn.allow_tf32 = True``, ``deterministic = False``) leave
    the first rule alone, so TF32 and reduced-precision-reduction plans are in. A plan whose notes
    are unknown (None) is left out: nothing shows PyTorch would keep it.
    """
    notes = plans["numeric_notes"]
    down = notes.fillna("").astype(str).str.contains(r"(?:^|;)DOWN_CONVERT_INPUTS(?:;|$)", regex=True)
    return notes.notna() & ~down
