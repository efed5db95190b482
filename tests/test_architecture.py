"""The import graph of ``kbench/`` and ``baselines/`` reads one way (layers in ``kbench/layers.py``).

Every ``import`` statement is parsed with ``ast``, at module level and inside functions,
with relative imports resolved. The graph must have no cycle, no core module (a ``kbench``
module below the baselines layer) may import ``baselines``, no module may import a higher layer, and no module may import the
``__init__`` of a package it belongs to.

Run as a script to print the graph's cycles and upward edges for any checkout::

    python tests/test_architecture.py [ROOT]      # ROOT: a source tree (default: this one)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kbench.layers import LAYER_NAMES, LAYERS, PACKAGES, layer_of, place_of  # noqa: E402


def module_files(root: Path) -> dict[str, tuple[Path, bool]]:
    """module name -> (file, is a package ``__init__``) for every .py file of the packages."""
    out = {}
    for package, folder in PACKAGES.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = [package, *path.relative_to(root / folder).with_suffix("").parts]
            if package == "kbench_baselines" and parts[1:2] in (["_legacy"], ["_old_name"]):
                continue  # the deprecated ``baselines`` shim: it only re-exports the package
            is_package = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _known(name: str, modules) -> str | None:
    """The longest module of ours that ``name`` (a module or a module attribute) lies in."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(root: Path) -> list[tuple[str, str, int]]:
    """(importer, imported module, line) for every import between our modules, at any depth."""
    modules = module_files(root)
    edges = []
    for module, (path, is_package) in modules.items():
        package = module if is_package else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: ``from . import x``, ``from ..a import b``
                    anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                # ``from a import b``: b is a submodule or a name defined in a
                names = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                target = _known(name, modules)
                if target is not None and target != module:
                    edges.append((module, target, node.lineno))
    return edges


def cycles(edges) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for a, b, _ in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def upward_edges(edges) -> list[str]:
    """Imports of a higher layer, as 'a (layer) -> b (layer), line n'."""
    out = []
    for a, b, line in sorted(set(edges)):
        la, lb = layer_of(a), layer_of(b)
        if la is not None and lb is not None and lb > la:
            out.append(f"{a} ({LAYER_NAMES[la]}) -> {b} ({LAYER_NAMES[lb]}), line {line}")
    return out


def core_imports_of_baselines(edges) -> list[str]:
    """Imports of ``baselines`` by the core: kbench modules below the baselines layer (the
    application layer above it, ``kbench run`` and ``kbench baseline``, runs the baselines)."""
    below = LAYER_NAMES.index("baselines")
    return sorted({f"{a} -> {b}, line {n}" for a, b, n in edges
                   if a.split(".")[0] == "kbench" and b.split(".")[0] == "kbench_baselines"
                   and (layer_of(a) is None or layer_of(a) < below)})


def own_package_imports(edges) -> list[str]:
    """Imports of the ``__init__`` of a package the importer belongs to (``kbench.x`` importing ``kbench``).

    A package's ``__main__`` is exempt: ``python -m pkg`` runs it as a script after the
    package is imported, and nothing imports it back, so it cannot close a cycle.
    """
    return sorted({f"{a} -> {b}, line {n}" for a, b, n in edges
                   if a.startswith(b + ".") and a.rpartition(".")[2] != "__main__"})


# ----------------------------------------------------------------------------- tests
def test_parser_sees_function_level_and_relative_imports(tmp_path):
    """A hand-made tree: every kind of import gives the edge written next to it."""
    (tmp_path / "kbench" / "sub").mkdir(parents=True)
    (tmp_path / "baselines").mkdir()
    files = {
        "kbench/__init__.py": "",
        "kbench/errors.py": "",
        "kbench/a.py": "from kbench.errors import X\n",                       # a -> errors
        "kbench/sub/__init__.py": "",
        "kbench/sub/b.py": "def f():\n    from ..a import g\n    from . import c\n",  # b -> a, b -> sub.c
        "kbench/sub/c.py": "import kbench.sub.b\n",                         # c -> sub.b (a cycle with b)
        "baselines/__init__.py": "",
        "baselines/m.py": "import numpy\nfrom kbench import errors\n",    # kbench_baselines.m -> errors (numpy ignored)
    }
    for rel, text in files.items():
        (tmp_path / rel).write_text(text)
    edges = {(a, b) for a, b, _ in import_edges(tmp_path)}
    assert edges == {("kbench.a", "kbench.errors"), ("kbench.sub.b", "kbench.a"),
                     ("kbench.sub.b", "kbench.sub.c"), ("kbench.sub.c", "kbench.sub.b"),
                     ("kbench_baselines.m", "kbench.errors")}
    assert cycles(import_edges(tmp_path)) == [["kbench.sub.b", "kbench.sub.c"]]


def test_layer_table_places_modules_by_folder():
    assert LAYER_NAMES[layer_of("kbench.core.errors")] == "core"
    assert LAYER_NAMES[layer_of("kbench.sources.tuning_grammar")] == "sources"
    assert LAYER_NAMES[layer_of("kbench.scoring.tuning_metrics")] == "scoring"
    assert LAYER_NAMES[layer_of("kbench.collect.packaging.package")] == "collect"
    assert LAYER_NAMES[layer_of("kbench.collect.measure.cudnn.timing")] == "collect"
    assert LAYER_NAMES[layer_of("kbench.collect.__main__")] == "collect"
    assert LAYER_NAMES[layer_of("kbench.cli.collect")] == "application"
    assert LAYER_NAMES[layer_of("kbench.gpu_check.shipped_labels")] == "application"
    assert LAYER_NAMES[layer_of("kbench.data.hub_download")] == "data"
    assert LAYER_NAMES[layer_of("kbench.hub")] == "application"
    assert LAYER_NAMES[layer_of("kbench")] == "application"
    assert LAYER_NAMES[layer_of("kbench_baselines.rules")] == "baselines"
    assert layer_of("numpy") is None


def test_folders_are_the_layers():
    """Every folder of kbench/ (and baselines/) is in exactly one layer, the layer of every module is its
    folder's, and each layer below the application is one folder named as the layer."""
    places = [place for _, _, places in LAYERS for place in places]
    assert len(places) == len(set(places)), "a folder in two layers"
    folders = {f"kbench/{p.name}" for p in (REPO / "kbench").iterdir()
               if p.is_dir() and (p / "__init__.py").exists()}
    modules = {f"kbench/{p.name}" for p in (REPO / "kbench").glob("*.py")}
    assert folders | modules | {"baselines"} <= set(places)
    for layer, _, layer_places in LAYERS:
        if layer != "application":
            assert [p.rpartition("/")[2] for p in layer_places] == [layer], layer
    assert {place_of(m) for m in module_files(REPO)} - {p.removesuffix(".py") for p in places} <= {"kbench/__init__.py"}


def test_kbench_has_few_top_level_modules():
    """kbench/ holds its layers as folders, and at most eight modules beside them."""
    top = sorted(p.name for p in (REPO / "kbench").glob("*.py"))
    assert len(top) <= 8, top


def test_no_module_imports_a_deprecated_path():
    """The old flat import paths (``kbench.dataset``, ...) are kept for users, with a DeprecationWarning:
    the code imports the new ones."""
    import kbench
    modules = module_files(REPO)
    found = []
    for module, (path, _) in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            found += [f"{module} -> {n}" for n in names
                      if n not in modules and (kbench._new_path(n) is not None or n == "kbench.tuning")]
    assert found == []


def test_deprecated_paths_import_the_moved_modules():
    import importlib
    import warnings

    import kbench
    for old, new in kbench.DEPRECATED_PATHS.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(old)
        assert module is importlib.import_module(new), old
        assert any(issubclass(w.category, DeprecationWarning) for w in caught) or old in sys.modules, old
    from kbench.scoring.tuning_metrics import score_tuning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kbench.tuning
    assert kbench.tuning.score_tuning is score_tuning


EDGES = import_edges(REPO)


def test_no_import_cycles():
    assert cycles(EDGES) == []


def test_core_never_imports_baselines():
    assert core_imports_of_baselines(EDGES) == []


def test_no_import_goes_up_a_layer():
    assert upward_edges(EDGES) == []


def test_no_module_imports_its_own_package_init():
    assert own_package_imports(EDGES) == []


def test_package_imports_no_scripts():
    """Nothing in kbench/ or baselines/ imports the scripts under bench/, experiments/, tools/ or tests/, nor
    the deprecated name ``baselines``."""
    found = []
    for module, (path, _) in module_files(REPO).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{module} -> {n}" for n in names
                      if n.split(".")[0] in ("bench", "experiments", "tools", "tests", "baselines")]
    assert found == []


def test_every_module_sits_in_one_layer_named_in_the_docs():
    """Each module file has a layer, and docs/architecture.md's table row of each layer names every
    folder that layers.py gives it (so the docs and the table cannot drift apart)."""
    assert [m for m in module_files(REPO) if layer_of(m) is None] == []
    rows = {line.split("|")[1].strip(): line for line in
            (REPO / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines() if line.startswith("| ")}
    missing = [f"{layer}: {place}" for layer, _, places in LAYERS for place in places
               if f"`{place}" not in rows.get(layer, "")]
    assert missing == []


def test_collect_is_grouped_by_job():
    """kbench/collect/ holds its jobs in subpackages (measurement with the collector ``cudnn/``, the raw-folder
    store, packaging, label re-timing, studies) and only its command line at its top; the diagnostics live in
    tools/collect/ and the device scripts in tools/device/, which nothing imports."""
    top = sorted(p.stem for p in (REPO / "kbench" / "collect").glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert top == ["command"], top
    assert {p.name for p in (REPO / "kbench" / "collect").iterdir() if p.is_dir() and p.name != "__pycache__"} == {
        "measure", "raw_store", "packaging", "label_retiming", "studies"}
    assert (REPO / "tools" / "README.md").exists() and (REPO / "tools" / "collect" / "probe_api.py").exists()
    assert (REPO / "tools" / "device" / "run_on_device.sh").exists()


def test_pyproject_installs_every_package_folder():
    """pyproject.toml lists its packages by hand (the baselines folder installs under another name):
    the list must hold every package folder of kbench/, and map the baselines as designed."""
    import tomllib
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    folders = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "kbench").rglob("__init__.py")}
    assert set(setuptools["packages"]) == folders | {"kbench_baselines", "baselines"}
    assert setuptools["package-dir"] == {"kbench_baselines": "baselines", "baselines": "baselines/_legacy"}


#: modules allowed past the size limit: the Evaluator, which is being split into its prediction-file
#: reader and the scorer
LONG_MODULES = {"kbench/scoring/evaluate.py"}


def test_no_module_is_over_700_lines():
    long = {str(p.relative_to(REPO)): n for p in sorted((REPO / "kbench").rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 700}
    assert set(long) <= LONG_MODULES, long


def test_comments_and_docstrings_name_no_issue_numbers():
    """Code says what is; history (which issue or session asked for what, earlier layouts) lives in git and
    CHANGELOG.md. Strings
    that render data cards are data, not comments, and are not checked here."""
    import io
    import re
    import tokenize
    pattern = re.compile(r"\bissues? #?\d+\b|\bsessions?\b|\bearlier layouts?\b", re.IGNORECASE)
    found = []
    for path, _ in module_files(REPO).values():
        text = path.read_text(encoding="utf-8")
        comments = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
                    if tok.type == tokenize.COMMENT]
        docstrings = [(node.body[0].lineno, node.body[0].value.value) for node in ast.walk(ast.parse(text))
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str)]
        found += [f"{path.relative_to(REPO)}:{line}" for line, s in comments + docstrings if pattern.search(s)]
    assert found == []


def main(argv: list[str]) -> int:
    root = Path(argv[0]).resolve() if argv else REPO
    edges = import_edges(root)
    print(f"{root}: {len(module_files(root))} modules, {len({(a, b) for a, b, _ in edges})} import edges")
    found = cycles(edges)
    print(f"cycles (strongly connected components): {len(found)}")
    for component in found:
        print(f"  {len(component)} modules: {', '.join(component)}")
    for title, lines in (("upward edges", upward_edges(edges)),
                         ("core modules importing baselines", core_imports_of_baselines(edges)),
                         ("imports of the importer's own package __init__", own_package_imports(edges))):
        print(f"{title}: {len(lines)}")
        for line in lines:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
