"""The lower bounds pyproject.toml declares are the releases CI's second leg tests (``.ci/lower-bounds.txt``),
and README states the supported mteb range."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
#: torch is tested at the local 2.13.0 wheel only (any other release pulls GBs of CUDA packages)
NOT_PINNED = {"torch", "tomli"}
#: packages of extras CI's second leg pins too (the extras it installs: test and docs; the test extra repeats
#: the export's sentence-transformers and the charts' matplotlib)
PINNED_EXTRAS = {"sentence-transformers", "matplotlib"}
PINNED_FROM = ("test", "export", "plots")


def _lower_bound(requirement: Requirement) -> str | None:
    lows = [spec.version for spec in requirement.specifier if spec.operator == ">="]
    return lows[0] if len(lows) == 1 else None


def declared_lower_bounds() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    bounds: dict[str, str] = {}
    requirements = [Requirement(text) for text in project["dependencies"]]
    requirements += [Requirement(text) for extra in PINNED_FROM for text in project["optional-dependencies"][extra]
                     if canonicalize_name(Requirement(text).name) in PINNED_EXTRAS]
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        if name in NOT_PINNED:
            continue
        low = _lower_bound(requirement)
        assert low is not None, f"{requirement}: every dependency declares one lower bound (>=)"
        assert bounds.setdefault(name, low) == low, f"{name}: two lower bounds in pyproject.toml"
    return bounds


def pinned() -> dict[str, str]:
    pins = {}
    for line in (REPO / ".ci" / "lower-bounds.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_ci_pins_every_declared_lower_bound() -> None:
    as_versions = lambda bounds: {name: Version(version) for name, version in bounds.items()}  # noqa: E731 -- 2.19 == 2.19.0
    assert as_versions(pinned()) == as_versions(declared_lower_bounds())


def test_readme_states_the_supported_mteb_and_transformers_ranges() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for requirement in map(Requirement, project["dependencies"]):
        if canonicalize_name(requirement.name) in ("mteb", "transformers"):
            low = _lower_bound(requirement)
            high = [spec.version for spec in requirement.specifier if spec.operator == "<"][0]
            assert re.search(rf"{requirement.name} {re.escape(low)}\S* up to \(not including\) {high}", readme), (
                f"README.md does not state {requirement.name}'s supported range {low} .. <{high}")
