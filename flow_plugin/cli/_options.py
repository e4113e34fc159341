"""The encoder options as command-line flags, made from :class:`EncoderOptions` itself.

>>> import argparse
>>> parser = argparse.ArgumentParser()
>>> add_encoder_arguments(parser)
>>> encoder_options(parser.parse_args(["--precision", "float32", "--batch-size", "16"]))
EncoderOptions(device=None, precision='float32', batch_size=16, cache_dir=None, show_progress_bar=None)
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from flow_plugin.encoding.options import EncoderOptions

_TYPES = {"batch_size": int, "cache_dir": Path}


def _cli_fields() -> list[dataclasses.Field[Any]]:
    return [item for item in dataclasses.fields(EncoderOptions) if item.metadata.get("cli", True)]


def add_encoder_arguments(parser: argparse.ArgumentParser) -> None:
    """``--device``, ``--precision``, ``--batch-size``, ``--cache-dir``."""
    for item in _cli_fields():
        kwargs: dict[str, Any] = {"default": None, "help": item.metadata["help"]}
        if "choices" in item.metadata:
            kwargs["choices"] = item.metadata["choices"]
        if item.name in _TYPES:
            kwargs["type"] = _TYPES[item.name]
        parser.add_argument("--" + item.name.replace("_", "-"), **kwargs)


def encoder_options(args: argparse.Namespace) -> EncoderOptions:
    """The options given on the command line (unset flags keep the defaults); bad values are
    one-line errors (:class:`flow_plugin.errors.InputError`)."""
    given = {item.name: getattr(args, item.name) for item in _cli_fields() if getattr(args, item.name, None) is not None}
    return EncoderOptions(**given)
