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


#: import circles that belong to work under way in other rooms, each by one of its imports (importer, imported):
#: the backbone and the bf16 probe of encoding/, the MTEB model and its ModelMeta (pyproject.toml ignores the same
#: two in its "no import circles" contract). An entry whose import is gone is simply not needed any more.
KNOWN_CIRCLES = {
    ("flow_plugin.encoding.precision_probe", "flow_plugin.encoding.backbone"),
    ("flow_plugin.integrations.mteb.model", "flow_plugin.integrations.mteb.meta"),
}


def import_circles(graph: Any, ignored: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module among the package's modules (imports inside
    functions and under TYPE_CHECKING count), leaving out the ``ignored`` imports."""
    modules = sorted(graph.modules)
    edges = {module: sorted(imported for imported in graph.find_modules_directly_imported_by(module)
                            if imported in graph.modules and (module, imported) not in ignored)
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
    assert import_circles(graph, KNOWN_CIRCLES) == []
    # the check finds a circle where there is one: two modules that import each other
    graph.add_import(importer="flow_plugin.errors", imported="flow_plugin.leaderboard.models")
    assert ["flow_plugin.errors", "flow_plugin.leaderboard.models"] in import_circles(graph, KNOWN_CIRCLES)


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
