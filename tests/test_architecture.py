"""What docs/architecture.md describes: the import contract of pyproject.toml holds, and the
light rooms stay light (no torch behind the linear calibrators, the data readers or the CLI)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def import_circles(graph: Any) -> list[list[str]]:
    """The strongly connected components of more than one module among the package's modules (imports inside
    functions and under TYPE_CHECKING count)."""
    modules = sorted(graph.modules)
    edges = {module: sorted(imported for imported in graph.find_modules_directly_imported_by(module)
                            if imported in graph.modules)
             for module in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in edges[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return circles


def test_no_module_of_the_package_takes_part_in_an_import_circle() -> None:
    """grimp's graph of every module of flow_plugin (a package and its __init__ included) has no circle."""
    import grimp

    graph = grimp.build_graph("flow_plugin", cache_dir=None)
    assert import_circles(graph) == []
    # the check finds a circle where there is one: two modules that import each other
    graph.add_import(importer="flow_plugin.errors", imported="flow_plugin.leaderboard.models")
    assert ["flow_plugin.errors", "flow_plugin.leaderboard.models"] in import_circles(graph)


def test_import_contracts_hold() -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    if not lint_imports.exists():
        pytest.fail("lint-imports is missing: install the test extra (pip install -e '.[test]')")
    result = subprocess.run([str(lint_imports), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    "statement",
    [
        "from flow_plugin.calibration import Whitening, make_calibrator; make_calibrator('sn')",
        "import flow_plugin.data.senteval, flow_plugin.data.fit_corpus, flow_plugin.evaluation",
        "import flow_plugin.catalog.registry, flow_plugin.cli.main",
    ],
)
def test_light_rooms_import_neither_torch_nor_nflows(statement: str) -> None:
    code = f"import sys; {statement}; print(sorted(m for m in ('torch', 'nflows', 'mteb') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_only_the_fast_trainer_reads_private_nflows_attributes() -> None:
    # the nflows privates the fused trainer relies on (an attribute, not a call of our own ``_transform``);
    # anywhere else they would tie us to nflows' internals
    private = re.compile(r"\._(transforms?|distribution|permutation|embedding_net|split_dim|log_z|output_shapes)\b(?!\()")
    offenders = []
    for path in (REPO / "flow_plugin").rglob("*.py"):
        if path.name == "_fast.py":
            continue
        text = path.read_text(encoding="utf-8")
        offenders += [f"{path.relative_to(REPO)}: {match.group(0)}" for match in private.finditer(text)]
    assert offenders == []
    assert private.search((REPO / "flow_plugin" / "calibration" / "flow" / "_fast.py").read_text(encoding="utf-8"))


def test_the_mteb_adapter_keeps_its_shape() -> None:
    """The adapter's shape, as docs/architecture.md describes it: no function in integrations/ over 60 lines, the
    calibrated model class at most 150, and the call stack read (``sys._getframe``) and MTEB's task hooks
    overridden only in compat.py."""
    long_functions, frame_walks, hooks = [], [], []
    hook = re.compile(r"def (_evaluate_subset|_save_task_predictions|_calculate_scores|_undersample_data)\(")
    for path in (REPO / "flow_plugin" / "integrations").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long_functions.append(f"{path.relative_to(REPO)}:{node.name}")
            if isinstance(node, ast.ClassDef) and node.name == "CalibratedModel":
                assert node.end_lineno - node.lineno < 150, "CalibratedModel is over 150 lines"
        if path.name != "compat.py":
            frame_walks += [str(path.relative_to(REPO))] if "_getframe" in text else []
            hooks += [f"{path.relative_to(REPO)}: {match.group(1)}" for match in hook.finditer(text)]
    assert long_functions == [] and frame_walks == [] and hooks == []


# ---------------------------------------------------------------- imports at module top
#: the most imports inside functions the package may hold (each with its reason); lower it as they go
MAX_INNER_IMPORTS = 60
#: imported at every Python start-up (a .pth file): standard library only at its top, its inner imports
#: justified once in its own comment
STARTUP_MODULE = "flow_plugin/integrations/mteb/hook.py"


def inner_imports(source: str) -> list[tuple[int, bool]]:
    """(line, has a reason) of every import statement inside a function: the reason is a comment on one of the
    statement's lines, or on the nearest line above that is neither blank nor another of these imports."""
    lines = source.splitlines()
    found = {id(node): node for function in ast.walk(ast.parse(source))
             if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
             for node in ast.walk(function) if isinstance(node, (ast.Import, ast.ImportFrom))}
    import_lines = {line for node in found.values() for line in range(node.lineno, node.end_lineno + 1)}
    result = []
    for node in sorted(found.values(), key=lambda node: node.lineno):
        reason = any("#" in lines[line - 1] for line in range(node.lineno, node.end_lineno + 1))
        above = node.lineno - 1
        while not reason and above >= 1 and (not lines[above - 1].strip() or above in import_lines):
            reason = "#" in lines[above - 1]
            above -= 1
        result.append((node.lineno, reason or (above >= 1 and "#" in lines[above - 1])))
    return result


def test_imports_sit_at_module_top_unless_a_reason_keeps_them_in_a_function() -> None:
    """An import inside a function is a heavy or optional package (torch, MTEB, transformers, matplotlib, Ray,
    scikit-learn's seconds), or a module that pulls one in, kept out of a light module, and says why in a comment;
    the package holds at most MAX_INNER_IMPORTS of them."""
    counted, unexplained = 0, []
    for path in sorted((REPO / "flow_plugin").rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        found = inner_imports(path.read_text(encoding="utf-8"))
        counted += len(found)
        if name != STARTUP_MODULE:
            unexplained += [f"{name}:{line}" for line, reason in found if not reason]
    assert unexplained == []
    assert counted <= MAX_INNER_IMPORTS
    # the check sees a reason above a run of imports, on the line, and its absence
    source = ("def f():\n    # heavy: loads torch\n    import torch\n\n    from x import y\n    return y\n\n\n"
              "def g():\n    import json  # one line\n    import os\n    return json, os\n\n\n"
              "def h():\n    x = 1\n    import re\n    return re, x\n")
    assert inner_imports(source) == [(3, True), (5, True), (10, True), (11, True), (17, False)]


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_imported_package_is_declared_in_pyproject() -> None:
    """Each third-party package the package imports is a dependency or in an extra of pyproject.toml."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    declared = {_normalized(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]) for requirement in requirements}
    distributions = importlib.metadata.packages_distributions()
    undeclared = set()
    for path in (REPO / "flow_plugin").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in (name.split(".")[0] for name in names):
                if name in sys.stdlib_module_names or name == "flow_plugin":
                    continue
                owners = {_normalized(owner) for owner in distributions.get(name, [name])}
                if not owners & declared:
                    undeclared.add(f"{name} ({path.relative_to(REPO)})")
    assert not undeclared, f"imported but not declared in pyproject.toml: {sorted(undeclared)}"


# ---------------------------------------------------------------- every fact has one home
def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of every string constant but docstrings (f-strings' literal parts included)."""
    skip = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip]


def _collections(tree: ast.AST) -> list[tuple[int, set[str]]]:
    """(line, the strings) of every literal tuple, list, set and dict (its keys and values) written in the source."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [key for key in node.keys if key is not None] + list(node.values)
        else:
            continue
        found.append((node.lineno, {item.value for item in items
                                    if isinstance(item, ast.Constant) and isinstance(item.value, str)}))
    return found


#: fact -> (its home, what a second copy looks like: a literal collection holding at least ``n`` of ``names``,
#: or a string constant containing one of ``phrases``)
FACTS: dict[str, tuple[str, dict[str, Any]]] = {
    "the protocols (all, wmean)": ("flow_plugin/protocols.py", {"names": {"all", "wmean"}, "n": 2}),
    "what each protocol means": ("flow_plugin/protocols.py",
                                 {"phrases": ("weighted by pair count", "pairs of all subsets pooled",
                                              "all test pairs pooled", "unweighted mean of per-subset")}),
    "the calibrator methods": ("flow_plugin/calibration/names.py",
                               {"names": {"raw", "sn", "natsv", "sn-natsv", "whiten", "flow"}, "n": 3}),
    "the calibrators' labels": ("flow_plugin/calibration/names.py",
                                {"names": {"SN", "NATSV", "SN+NATSV", "whitening"}, "n": 2}),
    "the gentle family": ("flow_plugin/calibration/names.py",
                          {"names": {"center", "remove-mean-dir", "soft-whiten", "whiten-third"}, "n": 2}),
    "the flow variants": ("flow_plugin/calibration/names.py",
                          {"names": {"flow-lu", "flow-affine", "flow-glow", "flow-white", "flow-es", "flow-ens"},
                           "n": 2}),
    "the fit-corpus policies": ("flow_plugin/data/fit_corpus.py", {"names": {"target", "per-call"}, "n": 2}),
    "the duplicate policies": ("flow_plugin/data/fit_corpus.py", {"names": {"keep", "unique"}, "n": 2}),
    "the task labels": ("flow_plugin/data/tasks.py", {"names": {"STS-B", "SICK-R"}, "n": 2}),
    "the precisions": ("flow_plugin/encoding/options.py", {"names": {"float32", "bf16", "fp16", "auto"}, "n": 3}),
}


def second_copies(sources: dict[str, str]) -> list[str]:
    """Where a fact of :data:`FACTS` is written outside its home ("<fact>: <file>:<line>")."""
    found = []
    for path, source in sorted(sources.items()):
        tree = ast.parse(source)
        for fact, (home, copy) in FACTS.items():
            if path == home:
                continue
            if "names" in copy:
                found += [f"{fact}: {path}:{line}" for line, strings in _collections(tree)
                          if len(strings & copy["names"]) >= copy["n"]]
            for line, text in _strings(tree) if "phrases" in copy else []:
                if any(phrase in text for phrase in copy["phrases"]):
                    found.append(f"{fact}: {path}:{line}")
    return found


def test_every_fact_has_one_home() -> None:
    """The protocols and what they mean, the calibrator names, labels and flow variants, the fit-corpus and
    duplicate policies, the task labels and the precisions are written once, in their home module; everything
    else imports them. (The test fails on a second copy, as the last check shows.)"""
    sources = {path.relative_to(REPO).as_posix(): path.read_text(encoding="utf-8")
               for path in (REPO / "flow_plugin").rglob("*.py")}
    assert second_copies(sources) == []
    # the leaderboard's row types are declared once (integrations may not re-declare them as Protocols)
    protocols = [f"{path}:{node.lineno} {node.name}" for path, source in sources.items()
                 for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef)
                 and any(isinstance(base, ast.Name) and base.id == "Protocol" for base in node.bases)
                 and {"average", "average_wmean"} <= {item.name for item in node.body if isinstance(item, ast.FunctionDef)}]
    assert protocols == []
    copied = {"flow_plugin/studies/example.py": 'ORDER = ("raw", "sn", "whiten")\nHELP = "mean weighted by pair count"\n'}
    assert sorted(second_copies(copied)) == ["the calibrator methods: flow_plugin/studies/example.py:1",
                                             "what each protocol means: flow_plugin/studies/example.py:2"]
