"""The software a result was produced with: Python, package versions, the code's git commit, OS, CPU.

Every result record carries one (``EvaluationResult.environment``). :func:`environment` takes
the packages of a method from its source: every module its code imports (at module level or
inside functions), following its imports within ``kbench_baselines``, mapped to the installed
distributions that provide them; kbench itself and the packages scoring needs are always listed.

>>> env = environment()                        # doctest: +SKIP
>>> env.packages["numpy"], env.git.commit      # doctest: +SKIP
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata as md
import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from kbench.core.errors import KbenchInputError
from kbench.core.version import __version__

#: distributions every record lists: kbench and what loading and scoring use
CORE_PACKAGES = ("kbench", "numpy", "pandas", "pyarrow", "pydantic")
#: first-party packages (their distribution is ``kbench``, listed with the core packages)
FIRST_PARTY = ("kbench", "kbench_baselines", "baselines")
#: of those, the ones whose imports are followed: the methods' code (kbench's own are the core packages)
FOLLOWED = ("kbench_baselines", "baselines")
#: the folder holding the ``kbench`` package: a git checkout in development, site-packages when installed
CODE_ROOT = Path(__file__).resolve().parents[2]
NOT_A_CHECKOUT = "not a checkout"
#: environment variable: thread count for the tree learners, recorded in the environment when set
TREE_THREADS_VARIABLE = "KBENCH_THREADS"
#: the manifest of a thinned copy of a checkout (no ``.git``) that travels to another machine:
#: ``commit <sha>`` then ``git ls-files -s`` (tools/device/device_tree.sh writes it)
SOURCE_MANIFEST = ".kbench-source"


class GitState(BaseModel):
    """The commit of the kbench code that made a record, or why there is none."""

    model_config = ConfigDict(extra="forbid")
    commit: str | None = Field(description="git commit (sha1) of the kbench checkout; null when not a checkout")
    dirty: bool | None = Field(description="tracked files differ from the commit; null when not a checkout")
    note: str | None = Field(None, description="why commit is null (e.g. 'not a checkout': an installed package)")

    def describe(self) -> str:
        if self.commit is None:
            return self.note or NOT_A_CHECKOUT
        text = self.commit[:12] + (" (dirty: uncommitted changes)" if self.dirty else "")
        return text + (f" ({self.note})" if self.note else "")


class Environment(BaseModel):
    """Python, the versions of the packages a method imports, the code's commit, the OS and the CPU."""

    model_config = ConfigDict(extra="forbid")
    python: str = Field(description="Python version and implementation, e.g. '3.11.7 (CPython)'")
    packages: dict[str, str] = Field(description="installed distribution -> version: kbench, the packages scoring "
                                                 "needs and every package the method's code imports")
    git: GitState
    os: str = Field(description="platform.platform(), e.g. 'Linux-6.1.0-x86_64-with-glibc2.36'")
    cpu: str = Field(description="CPU model and the cores this process may use")
    tree_threads: int | None = Field(
        None, description=f"{TREE_THREADS_VARIABLE} when it was set: the threads of the tree learners (XGBoost "
                          "nthread, scikit-learn forests' n_jobs) in place of each method's own setting; absent "
                          "when it was not set")

    @model_serializer(mode="wrap")
    def _omit_unset_threads(self, handler):
        # absent unless set, so that records made without the override stay the same files
        data = handler(self)
        if isinstance(data, dict) and data.get("tree_threads", 0) is None:
            data.pop("tree_threads")
        return data


def tree_threads(own: int) -> int:
    """Threads for a tree learner whose method sets ``own``: ``KBENCH_THREADS`` when set, else ``own``.

    Only the speed changes: XGBoost's ``hist`` trees and scikit-learn's seeded forests are the
    same for any thread count (XGBoost bit for bit; a forest's average of the same trees up to
    the order of a float sum). A machine with many cores can thus train a board's entries
    faster than the 2 threads the methods set for a shared 2-core runner.
    """
    text = os.environ.get(TREE_THREADS_VARIABLE, "").strip()
    if not text:
        return int(own)
    if not text.isdigit() or int(text) < 1:
        raise KbenchInputError(f"{TREE_THREADS_VARIABLE}={text!r}: expected a whole number of threads >= 1 "
                               f"(or leave it unset for each method's own setting)")
    return int(text)


# ----------------------------------------------------------------------------- pieces
def cpu_description() -> str:
    """The CPU this process runs on, as the OS reports it."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    model = model or platform.processor() or platform.machine()
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"CPU: {model}, {n} cores available"


@functools.lru_cache(maxsize=4)
def git_state(root: Path = CODE_ROOT) -> GitState:
    """The commit of ``root`` and whether tracked files differ from it; 'not a checkout' without ``.git``.

    A copy carrying ``SOURCE_MANIFEST`` is checked against it instead (:func:`copy_state`).

    Only ``root/.git`` counts (a folder, or a file in a git worktree): an installed package inside
    some other repository's folder is not that repository's code.
    """
    if (root / SOURCE_MANIFEST).is_file():
        # a copy made to travel: the lent GPU machine's copy may carry a .git of its own, at another
        # commit, so the manifest written with the copy is the one to trust
        return copy_state(root)
    if not (root / ".git").exists():
        return GitState(commit=None, dirty=None, note=NOT_A_CHECKOUT)
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=30, env=env)
        if head.returncode != 0:
            return GitState(commit=None, dirty=None, note=f"{NOT_A_CHECKOUT} (git: {head.stderr.strip()[:80]})")
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        return GitState(commit=None, dirty=None, note=f"{NOT_A_CHECKOUT} (git unavailable: {type(exc).__name__})")
    dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    return GitState(commit=head.stdout.strip(), dirty=dirty)


def git_blob_id(data: bytes) -> str:
    """The id git gives a file's content (``git hash-object``): sha1 of ``blob <size>\\0`` and the bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def copy_state(root: Path) -> GitState:
    """The commit of a copy of a checkout, checked against the manifest it carries.

    The copy is dirty when a tracked file that is present differs from the commit's blob. Files the
    copy left out (a thinned tree travels without its data) are counted in the note, not as changes.
    """
    lines = (root / SOURCE_MANIFEST).read_text(encoding="utf-8").splitlines()
    if not lines or not lines[0].startswith("commit "):
        return GitState(commit=None, dirty=None, note=f"{NOT_A_CHECKOUT} ({SOURCE_MANIFEST} has no commit line)")
    commit = lines[0].split()[1]
    present = changed = 0
    for line in lines[1:]:
        meta, _, path = line.partition("\t")
        mode, blob = meta.split()[:2]
        file = root / path
        if mode == "160000" or not (file.exists() or file.is_symlink()):  # a submodule, or left out of the copy
            continue
        data = os.readlink(file).encode() if mode == "120000" else file.read_bytes()
        present += 1
        changed += git_blob_id(data) != blob
    return GitState(commit=commit, dirty=changed > 0,
                    note=f"a travelling copy: {present} of {len(lines) - 1} tracked files present, "
                         f"{changed} differ from the commit")


def _module_file(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None) if spec else None
    return Path(origin) if origin and origin.endswith(".py") else None


def _imports(path: Path, module: str) -> set[str]:
    """Absolute names of every module ``path`` (module ``module``) imports, anywhere in its code."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            out.add(stem)
            out.update(f"{stem}.{a.name}" for a in node.names if a.name != "*")
    return {m for m in out if m}


def imported_top_level(modules) -> set[str]:
    """Top-level names of the third-party modules that ``modules`` import, following first-party imports."""
    seen, todo, found = set(), [m for m in modules if m], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        top = name.split(".")[0]
        if top not in FIRST_PARTY:
            found.add(top)
            continue
        if top not in FOLLOWED:
            continue
        path = _module_file(name)
        if path is None:
            continue
        todo.extend(m for m in _imports(path, name) if m not in seen)
    return {t for t in found if t not in sys.stdlib_module_names and t != "__future__"}


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    return md.packages_distributions()


@functools.cache  # read once per process: every record a process scores names the same
def _version(dist: str) -> str | None:
    if dist == "kbench":
        return __version__
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def package_versions(top_level: set[str]) -> dict[str, str]:
    """Distribution -> version of kbench, the core packages and the importable ``top_level`` modules."""
    dists = {d: None for d in CORE_PACKAGES}
    # packages_distributions() reads every installed distribution's file list (~0.4 s): only a
    # method's modules need it, the scorer's own record (no modules) names its core packages directly
    by_module = _distributions() if top_level else {}
    for name in sorted(top_level):
        if importlib.util.find_spec(name) is None:  # an optional import that is not installed here
            continue
        for dist in by_module.get(name, [name]):
            dists.setdefault(dist, None)
    out = {}
    for dist in dists:
        version = _version(dist)
        if version is not None:
            out[dist.lower()] = version
    return dict(sorted(out.items()))


def method_modules(cls) -> list[str]:
    """The modules holding a method class's code: its own and, for a wrapper, the wrapped class's."""
    mods = []
    for c in (cls, getattr(cls, "wrapped", None)):
        for klass in getattr(c, "__mro__", ()):
            mod = getattr(klass, "__module__", None)
            if mod and mod.split(".")[0] in FIRST_PARTY and mod not in mods:
                mods.append(mod)
    return mods


def code_path(module_name: str) -> str:
    """Where a module's source is, as a path in the repository (``kbench_baselines.xgb`` -> ``baselines/xgb.py``).

    The baselines' import name is not their folder's, so the path comes from the module's file; outside
    the checkout (an installed package, no file) it falls back to the dotted name.
    """
    module = sys.modules.get(module_name)
    try:
        return Path(module.__file__).resolve().relative_to(CODE_ROOT).as_posix()
    except (AttributeError, TypeError, ValueError):
        return module_name.replace(".", "/") + ".py"


def environment(modules=()) -> Environment:
    """The environment of this process for a method whose code is in ``modules`` (module names).

    With no modules: the scorer's own (kbench and the core packages).
    """
    impl = platform.python_implementation()
    overridden = bool(os.environ.get(TREE_THREADS_VARIABLE, "").strip())
    return Environment(python=f"{platform.python_version()} ({impl})",
                       packages=package_versions(imported_top_level(modules)),
                       git=git_state(), os=platform.platform(), cpu=cpu_description(),
                       tree_threads=tree_threads(1) if overridden else None)
