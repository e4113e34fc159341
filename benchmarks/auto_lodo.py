"""Leave-one-dataset-out validation of ``auto``'s rule (docs/gentle.md, "Validated by dataset").

``auto`` chooses a calibrator per task from label-free signals of the task's own text (its family and the
embeddings' anisotropy, then a safeguard on whitening's split-half stability: ``flow_plugin.calibration.auto.Rule``).
Its table, threshold and floor are fitted here on the published task-types boards, and judged by dataset: for each
dataset D (the ``dataset`` of the tasks' entries: QNLI's pair classification, reranking and retrieval are one), the
rule is fitted on the tasks of every other dataset (every backbone at once) and scored on D's tasks, for each
backbone. A rule that only one dataset supports does not survive that.

Two steps::

    # the signals of every task's fit text, per backbone (the study's embedding cache makes it a read)
    python -m benchmarks.auto_lodo signals -b minilm-l6 --data ../shared/data --cache-dir CACHE \\
        -o benchmarks/results/auto-signals.json
    # the fit on all datasets, and each left-out dataset's scores, from the boards and the signals
    python -m benchmarks.auto_lodo validate --signals benchmarks/results/auto-signals.json \\
        --boards leaderboards/task-types-*.json -o benchmarks/results/auto-lodo.md

The objective counts a loss ``w`` times as much as a gain of the same size, and ``w`` (from :data:`LOSS_WEIGHTS`) is
itself chosen by leave-one-dataset-out on the datasets the fit is given (:func:`choose_loss_weight`): how averse to
losses the rule must be to hold on a dataset it has not seen is judged on held-out datasets too, so each fold of the
validation chooses its own ``w`` without the left-out dataset (a nested check). Of rules that score alike, the
lowest floor wins (the safeguard steps a choice down only where the tuning data shows that it pays),
then the gentler table; the threshold goes in the middle of the gap between the anisotropies it separates, except
that the fit on every dataset keeps auto's released threshold while it lies in that gap (it then makes every choice
the middle makes, and no published ``auto`` result goes stale). A left-out task's Δ is the board's Δ of the
calibrator the rule chose there, with the board's 95% interval (paired bootstrap over the test items and evaluator
seeds); a type's mean over its tasks takes the tasks' intervals as independent normal ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from flow_plugin.calibration.auto import (CANDIDATES, DEFAULT_THRESHOLD, FAMILIES, FITTED_FAMILIES, RULES, STEP_DOWN,
                                          Rule)
from flow_plugin.calibration.signals import Signals

#: the weights a loss may count with against a gain of the same size; the fit chooses one (:func:`choose_loss_weight`)
LOSS_WEIGHTS = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
#: the targets of a left-out dataset (issue 58): no type significantly below raw, and none below this Δ
WORST_DELTA = -0.5
#: the share of a significant gain (the best candidate's) auto must keep
KEPT_GAIN = 0.5
#: the thresholds and floors the fit tries: a coarse grid (a finer one splits a backbone's own tasks by noise)
THRESHOLDS = (*(round(0.05 * step, 2) for step in range(1, 13)), 1.01)
FLOORS = (0.0, 0.6, 0.7, 0.8, 0.9)
#: the guards the fit may choose from (:func:`choose_guard`): none, or a signal auto measures at fit time and the side
#: of its range on an entry's tasks that a task may not pass
GUARDS: tuple[tuple[str, str] | None, ...] = (None, *((field.name, side) for field in dataclasses.fields(Signals)
                                                      for side in ("high", "low")))


@dataclass(frozen=True)
class Cell:
    """One task of one backbone's board: its type, dataset, signals, and each candidate's Δ and interval."""

    backbone: str
    task: str
    task_type: str
    dataset: str
    signals: dict[str, float]
    deltas: dict[str, tuple[float, float, float]]  # calibrator -> (Δ, low, high)

    @property
    def family(self) -> str:
        return FAMILIES.get(self.task_type, "pairs")


def read_cells(boards: list[Path], signals: dict[str, dict[str, dict[str, float]]]) -> list[Cell]:
    """The cells of the boards whose backbone and task have signals."""
    from flow_plugin.catalog.labelled_tasks import labelled_tasks

    entries, cells = labelled_tasks(), []
    for path in boards:
        board = json.loads(path.read_text(encoding="utf-8"))
        measured = signals.get(board["backbone"], {})
        types = {task["name"]: task["type"] for task in board["tasks"]}
        for task, task_type in types.items():
            if task not in measured or task not in entries:
                continue
            deltas = {"raw": (0.0, 0.0, 0.0)}
            for row in board["rows"]:
                found = (row.get("delta") or {}).get(task)
                if row["calibrator"] in CANDIDATES and row.get("seeds") is None and found is not None:
                    deltas[row["calibrator"]] = (found["delta"], *found["ci95"])
            cells.append(Cell(board["backbone"], task, task_type, entries[task].dataset or task, measured[task],
                              deltas))
    return cells


def utility(delta: float, loss_weight: float) -> float:
    return delta if delta >= 0 else loss_weight * delta


def chosen(cell: Cell, rule: Rule) -> str:
    return rule.decide(cell.family, cell.signals)[0]


def _gentleness(choice: str) -> int:
    return CANDIDATES.index(choice)


def fit_rule(cells: list[Cell], loss_weight: float, keep: float | None = None) -> Rule:
    """The rule with the best total utility on ``cells`` (ties: the lower floor, the gentler table), its threshold
    in the middle of the gap between the measured anisotropies it separates (:func:`threshold_gap`); ``keep`` (the
    released threshold) stays where it lies inside that gap, since there it makes every choice the middle makes,
    and the results published under it stay valid. The folds of :func:`leave_one_dataset_out` never keep one: the
    released threshold was fitted with the left-out dataset. ``loss_weight``: how much a loss counts against a gain
    (:func:`choose_loss_weight` chooses it)."""
    scored = {}
    for threshold in THRESHOLDS:
        for floor in FLOORS:
            choices, total = _best_table(cells, threshold, floor, loss_weight)
            gentleness = -sum(_gentleness(c) for pair in choices.values() for c in pair)
            scored[threshold, floor] = ((round(total, 6), -floor, gentleness), choices)
    (best_key, choices) = max(scored.values(), key=lambda item: item[0])
    floor = -best_key[1]
    tied = [t for t in THRESHOLDS if scored[t, floor] == (best_key, choices)]
    low, high = threshold_gap(cells, tied)
    if keep is not None and low < keep <= high:
        return Rule(keep, floor, choices, guard=None, support={})
    return Rule(round((low + high) / 2, 3) if high > low else high, floor, choices, guard=None, support={})


def guarded(rule: Rule, cells: list[Cell], guard: tuple[str, str] | None) -> Rule:
    """``rule`` (fitted on ``cells``) with ``guard``: the guard signal's range over the cells of each fitted family
    and regime, where the entry was learned."""
    if guard is None:
        return dataclasses.replace(rule, guard=None, support={})
    support = {}
    for family in FITTED_FAMILIES:
        ranges = []
        for regime in (0, 1):
            values = [cell.signals[guard[0]] for cell in cells if cell.family == family
                      and int(cell.signals["anisotropy"] >= rule.threshold) == regime]
            ranges.append((min(values), max(values)) if values else None)
        support[family] = tuple(ranges)
    return dataclasses.replace(rule, guard=guard, support=support)


def choose_guard(cells: list[Cell], folds: list[LeftOut] | None = None) -> tuple[
        tuple[str, str] | None, dict[tuple[str, str] | None, tuple[int, int]]]:
    """The guard of :data:`GUARDS` whose rules, fitted without one dataset of ``cells`` at a time (each with its own
    loss weight: ``folds``, :func:`leave_one_dataset_out`'s, computed when not given), meet the targets on the most
    left-out tasks (ties: fewer significantly below raw, then no guard, then the list's order); and each guard's
    (meeting, significantly below) counts."""
    folds = leave_one_dataset_out(cells) if folds is None else folds
    judged = {}
    for guard in GUARDS:
        scored = [_rescored(item, cells, guard) for item in folds]
        judged[guard] = (sum(not item.misses() for item in scored), sum(item.delta[2] < 0 for item in scored))
    best = max(GUARDS, key=lambda guard: (judged[guard][0], -judged[guard][1], guard is None, -GUARDS.index(guard)))
    return best, judged


def _rescored(item: LeftOut, cells: list[Cell], guard: tuple[str, str] | None) -> LeftOut:
    """``item``'s fold rule with ``guard`` (its range from the fold's training cells), applied to its cell again."""
    training = [cell for cell in cells if cell.dataset != item.cell.dataset]
    rule = guarded(item.rule, training, guard)
    return LeftOut(item.cell, rule, chosen(item.cell, rule), item.loss_weight)


def weigh_losses(cells: list[Cell]) -> dict[float, tuple[int, int]]:
    """For each loss weight of :data:`LOSS_WEIGHTS`, its rules fitted on ``cells`` without one dataset at a time,
    judged on the left-out tasks: (how many meet the targets, how many are significantly below raw)."""
    judged = {}
    for weight in LOSS_WEIGHTS:
        scored = leave_one_dataset_out(cells, loss_weight=weight)
        judged[weight] = (sum(not item.misses() for item in scored), sum(item.delta[2] < 0 for item in scored))
    return judged


def choose_loss_weight(judged: dict[float, tuple[int, int]]) -> float:
    """The weight of :func:`weigh_losses`' table whose left-out tasks meet the targets most often (ties: fewer tasks
    significantly below raw, then the smaller weight)."""
    return max(judged, key=lambda weight: (judged[weight][0], -judged[weight][1], -weight))


def _best_table(cells: list[Cell], threshold: float, floor: float,
                loss_weight: float) -> tuple[dict[str, tuple[str, str]], float]:
    """Each fitted family's best (isotropic, anisotropic) entries at ``threshold`` and ``floor``, and their total
    utility with losses counted ``loss_weight`` times; the families not fitted here keep auto.py's entries."""
    choices = {family: RULES[family] for family in RULES if family not in FITTED_FAMILIES}
    total = 0.0
    for family in FITTED_FAMILIES:
        picked = []
        for regime in (0, 1):
            mine = [cell for cell in cells if cell.family == family
                    and int(cell.signals["anisotropy"] >= threshold) == regime]
            scored = [(sum(utility(_delta(cell, _stepped(choice, cell, floor)), loss_weight) for cell in mine),
                       -_gentleness(choice), choice) for choice in CANDIDATES
                      if all(_stepped(choice, cell, floor) in cell.deltas for cell in mine)]
            value, _, choice = max(scored)
            picked.append(choice)
            total += value
        choices[family] = tuple(picked)
    return choices, total


def threshold_gap(cells: list[Cell], tied: list[float]) -> tuple[float, float]:
    """Of the grid thresholds that score alike (the highest run of them), the gap between the most anisotropic cell
    below the run and the least anisotropic one at or above it: every threshold above its low end and up to its high
    end makes the same choices on ``cells``. Its middle is as far from either side's data as the data allows, so a
    new task near the boundary falls on the side its neighbours are on. No cell on one side: the run's top, twice."""
    run = [tied[-1]]
    for threshold in reversed(tied[:-1]):
        if THRESHOLDS.index(threshold) != THRESHOLDS.index(run[0]) - 1:
            break
        run.insert(0, threshold)
    below, above = nearest_anisotropies(cells, run[0], run[-1])
    if below is None or above is None:
        return run[-1], run[-1]
    return below, above


def nearest_anisotropies(cells: list[Cell], low: float, high: float) -> tuple[float | None, float | None]:
    """The most anisotropic cell below ``low`` and the least anisotropic one at or above ``high`` (``None``: none)."""
    values = [cell.signals["anisotropy"] for cell in cells]
    return max((v for v in values if v < low), default=None), min((v for v in values if v >= high), default=None)


def _stepped(choice: str, cell: Cell, floor: float) -> str:
    while choice in STEP_DOWN and cell.signals.get("whitening_stability", 1.0) < floor:
        choice = STEP_DOWN[choice]
    return choice


def _delta(cell: Cell, choice: str) -> float:
    return cell.deltas[choice][0]


@dataclass
class LeftOut:
    """auto's Δ on one left-out cell, with what the best candidate gained there."""

    cell: Cell
    rule: Rule
    choice: str
    loss_weight: float

    @property
    def delta(self) -> tuple[float, float, float]:
        return self.cell.deltas[self.choice]

    @property
    def best(self) -> tuple[str, tuple[float, float, float]]:
        return max(self.cell.deltas.items(), key=lambda item: item[1][0])

    def misses(self) -> list[str]:
        """The targets this cell misses (empty: it meets them)."""
        delta, low, high = self.delta
        problems = []
        if high < 0:
            problems.append(f"significantly below raw ({delta:+.2f} [{low:+.2f}, {high:+.2f}])")
        if delta < WORST_DELTA:
            problems.append(f"below {WORST_DELTA} ({delta:+.2f})")
        name, (gain, gain_low, _) = self.best
        if gain_low > 0 and delta < KEPT_GAIN * gain:
            problems.append(f"kept {delta:+.2f} of {name}'s significant {gain:+.2f}")
        return problems


def leave_one_dataset_out(cells: list[Cell], loss_weight: float | None = None) -> list[LeftOut]:
    """Each cell scored by the (unguarded) rule fitted without its dataset; ``loss_weight`` fixes the loss weight of
    every fold (default: each fold chooses its own, :func:`choose_loss_weight`, without the left-out dataset)."""
    scored = []
    for dataset in sorted({cell.dataset for cell in cells}):
        training = [cell for cell in cells if cell.dataset != dataset]
        weight = choose_loss_weight(weigh_losses(training)) if loss_weight is None else loss_weight
        rule = fit_rule(training, weight)
        scored += [LeftOut(cell, rule, chosen(cell, rule), weight) for cell in cells if cell.dataset == dataset]
    return scored


def with_fold_guards(cells: list[Cell], folds: list[LeftOut]) -> list[LeftOut]:
    """:func:`leave_one_dataset_out`'s ``folds`` of ``cells``, each fold's rule given the guard it chooses
    (:func:`choose_guard`) without its left-out dataset."""
    guards = {dataset: choose_guard([cell for cell in cells if cell.dataset != dataset])[0]
              for dataset in sorted({item.cell.dataset for item in folds})}
    return [_rescored(item, cells, guards[item.cell.dataset]) for item in folds]


def _mean_interval(values: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """The mean of independent Δs and its 95% interval (each interval taken as normal)."""
    mean = sum(value[0] for value in values) / len(values)
    spread = math.sqrt(sum(((high - low) / (2 * 1.96)) ** 2 for _, low, high in values)) / len(values)
    return mean, mean - 1.96 * spread, mean + 1.96 * spread


def report(cells: list[Cell], scored: list[LeftOut], final: Rule, judged: dict[float, tuple[int, int]],
           weight: float, guards: dict[tuple[str, str] | None, tuple[int, int]]) -> str:
    """The validation as Markdown: the rule fitted on every dataset with the loss weight ``weight`` that ``judged``
    (the table of :func:`weigh_losses`) chose and the guard ``guards`` (:func:`choose_guard`'s table) chose, then the
    left-out Δ per backbone and type, the cells that miss a target, where the safeguards changed a choice, and the
    rule each fold chose."""
    lines = _rule_lines(cells, final, weight)
    lines += ["", "## The loss weight, chosen by dataset", "",
              "Each weight's rules, fitted without one dataset at a time on every dataset: how many left-out tasks",
              "meet the targets, and how many are significantly below raw. The most meeting wins (ties: fewer",
              "significant losses, then the smaller weight); each fold below chose its own weight the same way,",
              "without its left-out dataset.", "", "| loss weight | left-out tasks meeting the targets | "
              "significantly below raw |", "|---:|---:|---:|"]
    lines += [f"| {w:g} | {meets} of {len(cells)} | {losses} |" for w, (meets, losses) in judged.items()]
    lines += ["", "## The guard, chosen by dataset", "",
              "Each guard on the rules above (each fitted without one dataset, with its own loss weight), its range",
              "taken from the fold's own tasks: how many left-out tasks meet the targets, and how many are",
              "significantly below raw. The most meeting wins (ties: fewer significant losses, then no guard); each",
              "fold below chose its own guard the same way, without its left-out dataset.", "",
              "| guard | left-out tasks meeting the targets | significantly below raw |", "|---|---:|---:|"]
    lines += [f"| {_guard_name(guard)} | {meets} of {len(cells)} | {losses} |"
              for guard, (meets, losses) in guards.items()]
    lines += _left_out_lines(scored)
    lines += _changed_lines(cells, final)
    lines += ["", "## The rule each fold fitted", "",
              "| left out | loss weight | threshold | floor | guard | ranking | pairs | labels |",
              "|---|---:|---:|---:|---|---|---|---|"]
    for dataset in sorted({item.cell.dataset for item in scored}):
        item = next(item for item in scored if item.cell.dataset == dataset)
        table = " | ".join("/".join(item.rule.choices[family]) for family in ("ranking", "pairs", "labels"))
        lines.append(f"| {dataset} | {item.loss_weight:g} | {item.rule.threshold} | {item.rule.stability_floor} | "
                     f"{_guard_name(item.rule.guard)} | {table} |")
    return "\n".join(lines) + "\n"


def _guard_name(guard: tuple[str, str] | None) -> str:
    return "none" if guard is None else f"{guard[0]}, {guard[1]}"


def _rule_lines(cells: list[Cell], final: Rule, weight: float) -> list[str]:
    below, above = nearest_anisotropies(cells, final.threshold, final.threshold)
    lines = ["## The rule fitted on every dataset", "",
             f"- loss weight: {weight} (a loss counts {weight:g} times a gain of the same size; chosen below)",
             f"- threshold (anisotropy): {final.threshold} (the measured anisotropies nearest it: {below} below, "
             f"{above} at or above; any threshold between them makes the same choices)",
             f"- whitening's split-half stability floor: {final.stability_floor}",
             f"- guard: {_guard_name(final.guard)} (chosen below)"]
    for family, pair in final.choices.items():
        ranges = final.support.get(family)
        seen = "" if not ranges or final.guard is None else (
            f" ({final.guard[0]} on their tasks: " + ", ".join("none" if bounds is None else f"{bounds[0]}-{bounds[1]}"
                                                              for bounds in ranges) + ")")
        lines.append(f"- {family}: isotropic → {pair[0]}, anisotropic → {pair[1]}{seen}")
    return lines


def _left_out_lines(scored: list[LeftOut]) -> list[str]:
    lines = ["", "## Left out: auto's Δ against raw per backbone and task type", "",
             "Each task scored by the rule fitted without its dataset; the mean over the type's tasks, 95% interval.",
             "", "| Backbone | Task type | tasks | auto (left out) | best fixed candidate per task (mean) |",
             "|---|---|---:|---:|---:|"]
    grouped: dict[tuple[str, str], list[LeftOut]] = defaultdict(list)
    for item in scored:
        grouped[(item.cell.backbone, item.cell.task_type)].append(item)
    for (backbone, task_type), items in sorted(grouped.items()):
        mean, low, high = _mean_interval([item.delta for item in items])
        best = sum(item.best[1][0] for item in items) / len(items)
        star = "*" if low > 0 or high < 0 else ""
        lines.append(f"| {backbone} | {task_type} | {len(items)} | {mean:+.2f} [{low:+.2f}, {high:+.2f}]{star} | "
                     f"{best:+.2f} |")
    missed = [(item, item.misses()) for item in scored if item.misses()]
    lines += ["", f"## Targets: {len(scored) - len(missed)} of {len(scored)} left-out tasks meet them", ""]
    lines += [f"- {item.cell.backbone}, {item.cell.task} ({item.cell.dataset} left out): auto chose {item.choice}: "
              f"{'; '.join(problems)}" for item, problems in missed]
    stepped = [item for item in scored if item.choice != chosen(item.cell, _unguarded(item.rule))]
    lines += ["", f"## Where the safeguards changed a left-out task's choice: {len(stepped)} of {len(scored)}", ""]
    lines += [_change_line(item.cell, item.rule) for item in stepped]
    return lines


def _changed_lines(cells: list[Cell], final: Rule) -> list[str]:
    """The tasks of the boards on which the final rule's safeguards change its table's choice (none, for a guard:
    its ranges hold every task it was fitted on)."""
    stepped = [cell for cell in cells if chosen(cell, final) != chosen(cell, _unguarded(final))]
    lines = ["", f"## Where the safeguards changed the final rule's choice: {len(stepped)} of {len(cells)} tasks", ""]
    return lines + [_change_line(cell, final) for cell in stepped]


def _unguarded(rule: Rule) -> Rule:
    return dataclasses.replace(rule, stability_floor=0.0, guard=None, support={})


def _change_line(cell: Cell, rule: Rule) -> str:
    before, (after, why) = chosen(cell, _unguarded(rule)), rule.decide(cell.family, cell.signals)
    return (f"- {cell.backbone}, {cell.task}: {before} → {after} ({why}; Δ {_delta(cell, before):+.2f} → "
            f"{_delta(cell, after):+.2f})")


def measure_signals(backbone: str, data: str, cache_dir: str | None) -> dict[str, dict[str, float]]:
    """The signals auto measures on each study task's fit text for ``backbone`` (a registry backbone or a base MTEB
    loads), as its fit record keeps them, with the fit's distinct sentences."""
    from flow_plugin.catalog.labelled_tasks import labelled_tasks
    from flow_plugin.catalog.registry import BackboneSpec, RegistryModel, get_base
    from flow_plugin.integrations.mteb.base_models import calibrate, load_base, registry_model
    from flow_plugin.studies.study_steps import load_task
    from flow_plugin.studies.task_types import STUDY_MAX_FIT_SENTENCES

    base, cap = get_base(backbone), STUDY_MAX_FIT_SENTENCES  # the study's fit sample: its cache holds it
    if isinstance(base, BackboneSpec):
        model = registry_model(RegistryModel(base, "auto"), cache_dir=cache_dir, precision="float32",
                               max_fit_sentences=cap)
    else:
        model = calibrate(load_base(backbone, cache_dir=cache_dir), "auto", max_fit_sentences=cap)
    found = {}
    for name in labelled_tasks():
        record = model.prepare(load_task(name, data))[0]
        found[name] = {**record["effective_params"]["signals_"], "n_unique": record["n_unique_sentences"]}
        print(f"{backbone} {name}: {found[name]}", file=sys.stderr, flush=True)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.auto_lodo", description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    signals = steps.add_parser("signals", help="measure the signals of every task's fit text for a backbone")
    signals.add_argument("-b", "--backbone", required=True)
    signals.add_argument("--data", required=True, help="the shared data folder")
    signals.add_argument("--cache-dir", help="the study's embedding cache folder")
    signals.add_argument("-o", "--output", required=True, type=Path, help="JSON file (backbones are added to it)")
    validate = steps.add_parser("validate", help="fit and validate the rule on boards and signals")
    validate.add_argument("--signals", required=True, type=Path)
    validate.add_argument("--boards", required=True, nargs="+", type=Path)
    validate.add_argument("-o", "--output", type=Path, help="Markdown report (default: stdout only)")
    args = parser.parse_args(argv)
    if args.step == "signals":
        found = json.loads(args.output.read_text(encoding="utf-8")) if args.output.is_file() else {}
        found[args.backbone] = measure_signals(args.backbone, args.data, args.cache_dir)
        args.output.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return 0
    cells = read_cells(args.boards, json.loads(args.signals.read_text(encoding="utf-8")))
    judged = weigh_losses(cells)
    weight = choose_loss_weight(judged)
    folds = leave_one_dataset_out(cells)
    guard, guards = choose_guard(cells, folds)
    final = guarded(fit_rule(cells, weight, keep=DEFAULT_THRESHOLD), cells, guard)
    text = report(cells, with_fold_guards(cells, folds), final, judged, weight, guards)
    print(text)
    if args.output is not None:
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
