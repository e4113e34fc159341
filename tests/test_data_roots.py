"""One data root, named by one variable (FLOW_PLUGIN_SHARED_DATA): every task takes its part of it; the older
per-part variables are still read, with a warning naming the one to set."""

from __future__ import annotations

from pathlib import Path

import pytest

from flow_plugin.data import roots
from flow_plugin.data.roots import DATA_ENV, PARTS, data_part, data_root
from flow_plugin.data.senteval import resolve_senteval_root
from flow_plugin.integrations.mteb.retrieval_tasks import configured_glue_data
from flow_plugin.integrations.mteb.sts_tasks import configured_data_dir


@pytest.fixture()
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data root of the shared folder's layout (empty files), and an environment that names nothing."""
    for variable in (DATA_ENV, *PARTS.values()):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(roots, "_warned", set())
    (tmp_path / "senteval" / "downstream" / "STS").mkdir(parents=True)
    (tmp_path / "glue" / "QNLI").mkdir(parents=True)
    (tmp_path / "glue" / "QNLI" / "dev.tsv").write_text("index\tquestion\tsentence\tlabel\n")
    return tmp_path


def test_one_variable_names_every_part(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert configured_data_dir() is None and configured_glue_data() is None
    monkeypatch.setenv(DATA_ENV, str(root))
    assert data_root() == root
    assert configured_data_dir() == root / "senteval" and configured_glue_data() == root / "glue"
    assert resolve_senteval_root(root) == root / "senteval"  # --data may name the root too


def test_the_older_per_part_variables_are_read_with_a_warning_naming_the_new_one(root: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PARTS["senteval"], str(root / "senteval"))
    with pytest.warns(FutureWarning, match=f"set {DATA_ENV} to the folder that holds senteval/"):
        assert data_part("senteval") == root / "senteval"
    assert data_root() == root  # the part's parent is the root, so the other parts are found beside it
    assert configured_glue_data() == root / "glue"
    monkeypatch.setenv(DATA_ENV, str(root / "elsewhere"))
    assert data_part("senteval") == root / "elsewhere"  # the one variable wins over the older ones


def test_a_part_that_is_not_one_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown data part 'mteb-data'; the parts: senteval, glue"):
        data_part("mteb-data")


def test_a_commands_data_folder_reaches_the_labelled_tasks(subset_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``flow-plugin eval --data DIR -t FlowPluginTRECClassification`` reads DIR, given as the data root, its
    SentEval folder or that folder's downstream/ (the forms the STS sets accept), and a root without SentEval's
    sets as it is."""
    from flow_plugin.integrations.mteb.task_resolver import resolve_tasks

    monkeypatch.delenv(DATA_ENV, raising=False)
    for given in (subset_root, subset_root / "senteval", subset_root / "senteval" / "downstream"):
        (task,) = resolve_tasks(["FlowPluginTRECClassification"], data=given)
        assert task.data_dir == subset_root
        task.check_files()
    (task,) = resolve_tasks(["FlowPluginBanking77Retrieval"], data=subset_root / "mteb")
    assert task.data_dir == subset_root / "mteb"  # not a SentEval form: read as given
