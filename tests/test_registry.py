"""registry/*.toml: every shipped file parses, names expand, bad files fail clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from flow_plugin.errors import RegistryError
from flow_plugin.catalog.registry import (
    VARIANT_SUFFIXES,
    get_backbone,
    load_registry,
    parse_backbone_file,
    parse_model_name,
    registry_dirs,
)

REPO_REGISTRY = Path(__file__).resolve().parents[1] / "registry"
SHIPPED = ("bert-base", "bert-large", "roberta-base", "minilm-l6", "mpnet-base")

VALID = """
hub_id = "org/tiny"
pooling = "first-last-avg"
max_seq_length = 64
embedding_dim = 32
n_parameters = 1000
license = "mit"
release_date = "2024-01-02"
reference = "https://example.org/tiny"
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_every_shipped_file_parses_and_expands_to_six_names() -> None:
    registry = load_registry([REPO_REGISTRY])
    assert set(SHIPPED) <= set(registry)
    for name, spec in registry.items():
        assert spec.source_file == REPO_REGISTRY / f"{name}.toml"
        assert spec.model_names == [
            f"flow_plugin/{name}",
            f"flow_plugin/{name}-sn",
            f"flow_plugin/{name}-natsv",
            f"flow_plugin/{name}-sn-natsv",
            f"flow_plugin/{name}-whiten",
            f"flow_plugin/{name}-flow",
        ]
        for method in VARIANT_SUFFIXES:
            assert parse_model_name(spec.model_name(method), registry).calibrator == method


def test_shipped_backbones_follow_the_paper_and_pin_revisions() -> None:
    registry = load_registry([REPO_REGISTRY])
    bert = registry["bert-base"]
    assert bert.hub_id == "google-bert/bert-base-uncased" and bert.pooling == "first-last-avg"
    assert bert.max_seq_length == 64 and bert.embedding_dim == 768
    assert registry["bert-large"].embedding_dim == 1024
    assert registry["minilm-l6"].local_weights is not None and registry["minilm-l6"].pooling == "last-avg"
    assert registry["mpnet-base"].local_weights.kind == "split-zip"
    for spec in registry.values():
        assert spec.revision and len(spec.revision) == 40


def test_source_checkout_registry_is_the_one_read() -> None:
    assert registry_dirs()[0] == REPO_REGISTRY


def test_model_name_parsing_prefers_the_longest_suffix() -> None:
    registry = load_registry([REPO_REGISTRY])
    variant = parse_model_name("flow_plugin/bert-base-sn-natsv", registry)
    assert (variant.backbone.name, variant.calibrator) == ("bert-base", "sn-natsv")
    assert parse_model_name("minilm-l6", registry).calibrator == "raw"
    assert parse_model_name("flow_plugin/minilm-l6-natsv", registry).name == "flow_plugin/minilm-l6-natsv"


def test_unknown_names_list_close_names() -> None:
    registry = load_registry([REPO_REGISTRY])
    with pytest.raises(RegistryError, match=r"unknown model 'flow_plugin/bert-bse-flow'\. Close names: flow_plugin/bert-base-flow"):
        parse_model_name("flow_plugin/bert-bse-flow", registry)
    with pytest.raises(RegistryError, match="unknown backbone 'minilm'. Close names: minilm-l6"):
        get_backbone("minilm", registry)


def test_adding_a_backbone_is_one_file(tmp_path: Path) -> None:
    write(tmp_path, "tiny", VALID + '\n[calibrators.whiten]\nn_components = 8\n')
    registry = load_registry([REPO_REGISTRY, tmp_path])
    variant = parse_model_name("flow_plugin/tiny-whiten", registry)
    assert variant.calibrator_params == {"n_components": 8}
    assert variant.backbone.hub_id == "org/tiny"


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("typo", VALID + 'poolng = "cls"\n', r"unknown key\(s\) 'poolng' \(did you mean 'pooling'\?\)"),
        ("missing", VALID.replace('license = "mit"\n', ""), "missing required key\\(s\\) 'license'"),
        ("badpool", VALID.replace('"first-last-avg"', '"median"'), "key 'pooling': unknown pooling 'median'"),
        ("baddate", VALID.replace("2024-01-02", "Jan 2024"), "release_date' must be YYYY-MM-DD"),
        ("badtype", VALID.replace("embedding_dim = 32", 'embedding_dim = "32"'), "key 'embedding_dim' must be int"),
        ("badurl", VALID.replace("https://example.org/tiny", "example.org"), "key 'reference' must be a URL"),
        ("nottoml", "hub_id = \n", "not valid TOML"),
        ("tiny-flow", VALID, "ends with '-flow', which would clash with the flow variant"),
        ("Upper", VALID, "must be lower-case"),
        ("badcal", VALID + "[calibrators.pca]\nn = 1\n", r"\[calibrators.pca\] is not a calibrator"),
        ("badlocal", VALID + '[local_weights]\nkind = "zip"\npackages = ["x"]\nfolder = "m"\ninstall = "pip"\n',
         "local_weights.kind must be one of"),
    ],
)
def test_malformed_files_fail_naming_file_and_key(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(RegistryError, match=message) as caught:
        parse_backbone_file(path)
    assert str(path) in str(caught.value)


def test_missing_registry_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="does not exist"):
        load_registry([tmp_path / "nowhere"])
