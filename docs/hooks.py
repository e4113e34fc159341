"""MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks``).

Every text has one home, so the site takes three things from where they live instead of copying them:

- the front page is ``README.md`` (its links to ``docs/<page>.md`` made relative to the site, its links
  to a leaderboard's Markdown pointed at the leaderboard's interactive page);
- the published leaderboard pages (``leaderboards/*.html``, ``index.html``, the JSON and the charts) are
  added to the site as they are committed, under ``leaderboards/``;
- the leaderboard JSON schema is what ``flow-plugin leaderboard --schema`` prints.

The docstrings name objects with Sphinx roles (``:class:`FitRecord```), which Markdown leaves as text
before the code span; the API pages show the code span alone.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
#: the file types of ``leaderboards/`` the site serves (the Markdown tables are read on GitHub)
BOARD_SUFFIXES = (".html", ".json", ".png")
SCHEMA_MARKER = "<!-- schema: flow-plugin leaderboard --schema -->"
SPHINX_ROLE = re.compile(r":(?:py:)?(?:class|mod|func|meth|attr|data|exc|obj|const):(?=<code>)")


def on_files(files: Files, config: Any) -> Files:
    taken = {file.dest_uri: file.src_uri for file in files}
    for path in sorted((ROOT / "leaderboards").iterdir()):
        if path.suffix in BOARD_SUFFIXES and path.is_file():
            board = File(f"leaderboards/{path.name}", str(ROOT), config["site_dir"], config["use_directory_urls"])
            if board.dest_uri in taken:  # a page of docs/ would overwrite the board (or the board the page)
                raise PluginError(f"docs/{taken[board.dest_uri]} and {board.src_uri} both become {board.dest_uri}")
            files.append(board)
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri == "index.md":
        return front_page()
    if SCHEMA_MARKER in markdown:
        return markdown.replace(SCHEMA_MARKER, f"```text\n{leaderboard_schema().rstrip()}\n```")
    return markdown


def on_page_content(html: str, page: Any, config: Any, files: Files) -> str:
    return SPHINX_ROLE.sub("", html)


def front_page() -> str:
    """README.md, with its links made to work from the site's root."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    text = re.sub(r"\]\(docs/", "](", text)
    return re.sub(r"\]\((leaderboards/[\w.-]+)\.md\)", r"](\1.html)", text)


def leaderboard_schema() -> str:
    """The schema text, as the installed ``flow-plugin`` command prints it."""
    (script,) = importlib.metadata.entry_points(group="console_scripts", name="flow-plugin")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = script.load()(["leaderboard", "--schema"])
    if status:
        raise RuntimeError(f"flow-plugin leaderboard --schema exited with {status}")
    return out.getvalue()
