"""How ``precision="auto"`` is decided: on a CPU by the bf16 probe (cached per machine), on a GPU by its
compute capability, anywhere by ``$FLOW_PLUGIN_AUTO_PRECISION``; an explicit precision always wins.

Every decision here comes from a faked timer or measurement; no test asserts a timing. One test runs the
real probe on tiny shapes and checks only that its result is well formed.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from flow_plugin.encoding import precision_probe
from flow_plugin.encoding.device import PrecisionChoice, choose_precision
from flow_plugin.encoding.options import AUTO_PRECISION_ENV, BF16_MIN_SPEEDUP
from flow_plugin.encoding.precision_probe import (
    Bf16Measurement,
    ProbeShapes,
    bf16_or_float32,
    cached_bf16_measurement,
    measure_bf16_speedup,
    probe_key,
)
from flow_plugin.errors import InputError

CPU = torch.device("cpu")
SHAPES = ProbeShapes(hidden_size=16, intermediate_size=64, tokens=128)


@pytest.fixture(autouse=True)
def _no_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(AUTO_PRECISION_ENV, raising=False)


def fake_timer(float32: float, bf16: float, calls: list[tuple[str, int]] | None = None) -> Any:
    def timer(precision: str, tokens: int) -> float:
        if calls is not None:
            calls.append((precision, tokens))
        return ({"float32": float32, "bf16": bf16}[precision] * tokens / SHAPES.tokens,)

    return timer


def measurement(speedup: float) -> Bf16Measurement:
    return Bf16Measurement(bf16_speedup=speedup, float32_seconds=0.01, bf16_seconds=0.01 / speedup if speedup else 1.0,
                           pairs=5, probe_seconds=0.2, measured="2026-11-25T10:00:00+00:00")


class CountingMeasure:
    """A fake ``measure(shapes)`` that returns a fixed speed ratio and counts its calls."""

    def __init__(self, speedup: float) -> None:
        self.speedup, self.calls = speedup, 0

    def __call__(self, shapes: ProbeShapes) -> Bf16Measurement:
        self.calls += 1
        return measurement(self.speedup)


# ------------------------------------------------------------------ the decision
@pytest.mark.parametrize(("speedup", "expected"), [
    (2.0, "bf16"), (0.5, "float32"), (BF16_MIN_SPEEDUP, "bf16"), (BF16_MIN_SPEEDUP - 0.01, "float32"),
    (1.0, "float32"), (float("nan"), "float32"), (float("inf"), "float32"),
])
def test_bf16_only_where_clearly_faster(speedup: float, expected: str) -> None:
    assert bf16_or_float32(speedup) == expected


@pytest.mark.parametrize(("float32", "bf16", "expected"), [(0.010, 0.005, "bf16"), (0.005, 0.010, "float32"),
                                                           (0.0115, 0.010, "float32")])
def test_probe_decides_from_the_timer(float32: float, bf16: float, expected: str) -> None:
    measured = measure_bf16_speedup(SHAPES, timer=fake_timer(float32, bf16))
    assert measured.precision == expected
    assert measured.bf16_speedup == pytest.approx(float32 / bf16, rel=1e-3) and measured.is_valid()


def test_probe_interleaves_and_keeps_the_best_time() -> None:
    calls: list[tuple[str, int]] = []
    slow_once = iter([0.05])  # one bf16 pass disturbed by another process

    def timer(precision: str, tokens: int) -> tuple[float, float]:
        calls.append((precision, tokens))
        if precision == "bf16" and tokens == SHAPES.tokens and len(calls) > 9:
            return next(slow_once, 0.004), 0.001
        return (0.008, 0.002) if precision == "float32" else (0.004, 0.001)

    threads = torch.get_num_threads()
    measured = measure_bf16_speedup(SHAPES, timer=timer, repeats=4, budget_seconds=60)
    assert torch.get_num_threads() == threads  # timed on one thread, then restored
    full = [precision for precision, tokens in calls if tokens == SHAPES.tokens]
    assert full[2:] == ["float32", "bf16", "bf16", "float32", "float32", "bf16", "bf16", "float32"]  # after warm-up
    assert measured.pairs == 4 and measured.bf16_speedup == 2.0 and measured.float32_seconds == pytest.approx(0.010)


def test_each_product_counts_with_its_own_best_time() -> None:
    rounds = iter([(0.010, 0.001), (0.001, 0.010)] * 20)  # each product disturbed every other time
    measured = measure_bf16_speedup(SHAPES, timer=lambda precision, tokens: next(rounds), budget_seconds=0)
    assert measured.float32_seconds == pytest.approx(0.002) and measured.pairs == precision_probe.MIN_PAIRS


def test_probe_stops_after_the_pilot_when_bf16_is_far_slower() -> None:
    calls: list[tuple[str, int]] = []
    measured = measure_bf16_speedup(SHAPES, timer=fake_timer(0.010, 0.5, calls))  # emulated bf16: 50x slower
    assert {tokens for _, tokens in calls} == {precision_probe.PILOT_TOKENS}  # no full-size pass
    assert measured.precision == "float32" and measured.pairs == 0 and measured.bf16_speedup == pytest.approx(0.02)


# ------------------------------------------------------------------ the cache
def test_a_cached_measurement_avoids_the_probe(tmp_path: Path) -> None:
    measure = CountingMeasure(2.0)
    first = choose_precision("auto", CPU, shapes=SHAPES, cache_folder=tmp_path, measure=measure)
    second = choose_precision("auto", CPU, shapes=SHAPES, cache_folder=tmp_path, measure=measure)
    assert (first.precision, first.source, second.precision, second.source) == ("bf16", "probe", "bf16", "cache")
    assert measure.calls == 1 and second.bf16_speedup == 2.0
    assert second.describe() == "auto -> bf16 (bf16 2.00x float32, measured 2026-11-25, cached)"
    assert first.describe().endswith("probed now)")
    (written,) = tmp_path.glob("*.json")
    content = json.loads(written.read_text())
    assert content["key"] == probe_key(SHAPES) and content["precision"] == "bf16"
    assert not list(tmp_path.glob("*.tmp"))


def test_other_shapes_are_probed_on_their_own(tmp_path: Path) -> None:
    measure = CountingMeasure(0.5)
    choose_precision("auto", CPU, shapes=SHAPES, cache_folder=tmp_path, measure=measure)
    choose_precision("auto", CPU, shapes=ProbeShapes(32, 128, 128), cache_folder=tmp_path, measure=measure)
    assert measure.calls == 2 and len(list(tmp_path.glob("*.json"))) == 2


@pytest.mark.parametrize("content", ["", "{not json", "[]", '{"key": null}', "\udcff"])
def test_a_corrupt_cache_file_is_ignored_and_rewritten(tmp_path: Path, content: str) -> None:
    choose_precision("auto", CPU, shapes=SHAPES, cache_folder=tmp_path, measure=CountingMeasure(2.0))
    (path,) = tmp_path.glob("*.json")
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    measure = CountingMeasure(0.5)
    choice = choose_precision("auto", CPU, shapes=SHAPES, cache_folder=tmp_path, measure=measure)
    assert (choice.precision, choice.source, measure.calls) == ("float32", "probe", 1)
    assert json.loads(path.read_text())["measurement"]["bf16_speedup"] == 0.5
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("field", ["torch", "torch_threads", "cpu", "probe_version"])
def test_a_measurement_of_another_machine_or_torch_is_ignored(tmp_path: Path, field: str) -> None:
    choose_precision("auto", CPU, shapes=SHAPES, cache_folder=tmp_path, measure=CountingMeasure(2.0))
    (path,) = tmp_path.glob("*.json")
    content = json.loads(path.read_text())
    content["key"][field] = "something else"  # e.g. a file copied from another machine or torch version
    path.write_text(json.dumps(content))
    measure = CountingMeasure(0.5)
    choice = choose_precision("auto", CPU, shapes=SHAPES, cache_folder=tmp_path, measure=measure)
    assert (choice.precision, choice.source, measure.calls) == ("float32", "probe", 1)
    assert json.loads(path.read_text())["key"] == probe_key(SHAPES)


def test_another_thread_count_is_another_key(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    measure = CountingMeasure(2.0)
    choose_precision("auto", CPU, shapes=SHAPES, cache_folder=tmp_path, measure=measure)
    key = probe_key(SHAPES)
    try:
        torch.set_num_threads(threads + 1)
        assert probe_key(SHAPES)["torch_threads"] == threads + 1 and probe_key(SHAPES) != key
        assert choose_precision("auto", CPU, shapes=SHAPES, cache_folder=tmp_path, measure=measure).source == "probe"
    finally:
        torch.set_num_threads(threads)
    assert measure.calls == 2


@pytest.mark.parametrize("speedup", [float("nan"), float("inf"), 0.0, -1.0])
def test_an_invalid_measurement_is_not_cached_and_means_float32(tmp_path: Path, speedup: float) -> None:
    choice = choose_precision("auto", CPU, shapes=SHAPES, cache_folder=tmp_path, measure=CountingMeasure(speedup))
    assert choice.precision == "float32" and choice.source == "probe"
    assert not list(tmp_path.glob("*.json"))


def test_a_cache_folder_that_cannot_be_written_still_decides(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    measure = CountingMeasure(2.0)
    measured, cached = cached_bf16_measurement(SHAPES, folder=blocker / "precision", measure=measure)
    assert (measured.precision, cached, measure.calls) == ("bf16", False, 1)


def test_the_default_cache_is_in_the_user_cache_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("XDG_CACHE_HOME places the user cache folder on Linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert precision_probe.probe_cache_dir() == tmp_path / "flow-plugin" / "precision"


# ------------------------------------------------------------------ overrides
@pytest.mark.parametrize("value", ["float32", "bf16"])
def test_the_environment_overrides_auto(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str) -> None:
    monkeypatch.setenv(AUTO_PRECISION_ENV, value)
    measure = CountingMeasure(2.0 if value == "float32" else 0.5)  # the probe would say the opposite
    choice = choose_precision("auto", CPU, shapes=SHAPES, cache_folder=tmp_path, measure=measure)
    assert (choice.precision, choice.source, measure.calls) == (value, "environment", 0)
    assert choice.describe() == f"auto -> {value} (${AUTO_PRECISION_ENV})"


def test_an_explicit_precision_beats_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(AUTO_PRECISION_ENV, "bf16")
    assert choose_precision("float32", CPU) == PrecisionChoice("float32", "float32", "requested")


def test_a_bad_environment_value_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(AUTO_PRECISION_ENV, "fast")
    with pytest.raises(InputError) as raised:
        choose_precision("auto", CPU, shapes=SHAPES)
    message = str(raised.value)
    assert "\n" not in message and AUTO_PRECISION_ENV in message and "'fast'" in message
    assert "float32, bf16, fp16" in message


def test_an_unknown_precision_is_an_error() -> None:
    with pytest.raises(InputError, match="unknown precision 'fp32'; use one of auto, float32, bf16, fp16"):
        choose_precision("fp32", CPU)


# ------------------------------------------------------------------ the backbone
@pytest.fixture()
def faked_probe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """Make the probe report ``speedup`` (and count its calls), with its cache in a temporary folder."""
    monkeypatch.setattr(precision_probe, "probe_cache_dir", lambda: tmp_path / "precision-cache")

    def fake(speedup: float) -> CountingMeasure:
        measure = CountingMeasure(speedup)
        monkeypatch.setattr(precision_probe, "measure_bf16_speedup", measure)
        return measure

    return fake


@pytest.mark.parametrize(("speedup", "expected"), [(2.0, "bf16"), (0.5, "float32")])
def test_the_backbone_key_holds_the_resolved_precision(tiny_bert_dir: Path, faked_probe: Any, speedup: float,
                                                       expected: str) -> None:
    from flow_plugin.encoding.backbone import Backbone

    measure = faked_probe(speedup)
    backbone = Backbone(tiny_bert_dir, precision="auto", device="cpu", batch_size=8)
    assert measure.calls == 0  # decided on first use
    assert backbone.key.precision == expected and backbone.key.kernels.startswith(f"cpu-{expected}")
    assert backbone.requested_precision == "auto" and backbone.precision_choice.source == "probe"
    assert not backbone.is_loaded  # the probe reads the config's widths, not the weights
    assert Backbone(tiny_bert_dir, precision="auto", device="cpu", batch_size=8).precision_choice.source == "cache"
    assert measure.calls == 1
    explicit = Backbone(tiny_bert_dir, precision="float32", device="cpu")
    assert explicit.key.precision == "float32" and explicit.precision_choice.source == "requested"


def test_the_probe_uses_the_models_shapes(tiny_bert_dir: Path, faked_probe: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from flow_plugin.encoding.backbone import Backbone

    seen: list[ProbeShapes] = []
    monkeypatch.setattr(precision_probe, "measure_bf16_speedup", lambda shapes: seen.append(shapes) or measurement(2.0))
    backbone = Backbone(tiny_bert_dir, precision="auto", device="cpu", batch_size=8)
    assert backbone.precision == "bf16"
    config = backbone.config
    assert seen == [ProbeShapes(config.hidden_size, 4 * config.hidden_size, 8 * 16)]
    registry_like = Backbone(tiny_bert_dir, precision="auto", device="cpu", batch_size=8, expected_embedding_dim=32)
    assert registry_like.precision == "bf16" and registry_like._config is None  # the registry's width: no config read


def test_a_bad_environment_value_fails_when_the_backbone_is_built(tiny_bert_dir: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from flow_plugin.encoding.backbone import Backbone

    monkeypatch.setenv(AUTO_PRECISION_ENV, "float")
    with pytest.raises(InputError, match=AUTO_PRECISION_ENV):
        Backbone(tiny_bert_dir, precision="auto", device="cpu")


def test_the_machine_description_holds_the_decision() -> None:
    from flow_plugin._machine import describe_machine

    choice = PrecisionChoice("auto", "float32", "cache", 0.52, "2026-11-25T10:00:00+00:00")
    info = describe_machine("cpu", choice.precision, choice.as_dict())
    assert info["precision"] == "float32"
    assert info["precision_choice"] == {"requested": "auto", "precision": "float32", "source": "cache",
                                        "bf16_speedup": 0.52, "measured": "2026-11-25T10:00:00+00:00"}


# ------------------------------------------------------------------ the real probe
def test_the_real_probe_gives_a_well_formed_measurement() -> None:
    """Structure only: the ratio's value depends on the machine and its load."""
    measured = measure_bf16_speedup(ProbeShapes(hidden_size=32, intermediate_size=128, tokens=64))
    assert measured.is_valid() and math.isfinite(measured.bf16_speedup) and measured.bf16_speedup > 0
    assert measured.precision in ("float32", "bf16") and measured.probe_seconds > 0
