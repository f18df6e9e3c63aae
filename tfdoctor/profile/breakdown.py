"""From phase timings to the four parts of a step (pure Python: no TensorFlow)."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field, replace
from typing import Any

PARTS = ("input", "sync", "host", "compute")
RESAMPLES = 400  # bootstrap resamples of the rounds
COVERAGE = 0.90  # each part's interval holds 90% of the resampled values
# A part whose shares in the window's first and second half differ by more than this is unstable: another run
# may well look like either half, which resampling rounds that are not alike does not show.
DRIFT = 0.05
MIN_HALF = 4  # rounds in each half before the halves are compared
# Replays of one step on one batch whose p90 is this much above their p10: the machine's speed changes over
# seconds by more than the bootstrap of calls timed apart from the replays can show.
UNSTEADY = 0.10


@dataclass(frozen=True)
class StepTime:
    median: float
    p10: float
    p90: float

    @classmethod
    def of(cls, values: list[float]) -> StepTime:
        ordered = sorted(values)
        if not ordered:
            return cls(0.0, 0.0, 0.0)
        if len(ordered) == 1:
            return cls(ordered[0], ordered[0], ordered[0])
        deciles = statistics.quantiles(ordered, n=10, method="inclusive")
        return cls(statistics.median(ordered), deciles[0], deciles[-1])


@dataclass(frozen=True)
class Launch:
    """One launch of a script measured several times: its shares and their intervals."""

    shares: dict[str, float]
    share_intervals: dict[str, tuple[float, float]]


@dataclass(frozen=True)
class Breakdown:
    """Seconds per step in each part; they add up to the median full step. `contention` is the part of
    `compute` that is the replicas running slower while the input pipeline's threads take host cores from
    them (measured only where the replicas are logical CPU devices, None elsewhere). `waiting` is the part of
    `sync` that is one worker of a multi-worker job waiting for the others (None outside such a job).
    `separated` False: the step could not be replayed, so only input was measured; host, sync and compute are
    one part, the step call, held in `compute` (and reported as not separated). `input_inside`: each step call
    runs many steps and reads their input inside (a whole epoch in one tf.function), so `compute` holds that
    input and `input` is only what comes between the calls."""

    step: StepTime
    input: float
    sync: float
    host: float
    compute: float
    contention: float | None = None
    contention_interval: tuple[float, float] | None = None  # seconds, where `contention` was measured apart
    waiting: float | None = None
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)        # part -> (low, high) s
    share_intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # part -> (low, high) share
    separated: bool = True
    input_inside: bool = False
    drift: dict[str, tuple[float, float]] = field(default_factory=dict)  # part -> (first half, second half) share
    unsteady: tuple[str, float, float] | None = None  # the part the replayed step's p10 and p90 (s) widened
    launches: tuple[Launch, ...] = ()  # each launch of the script, when several were measured (this one among them)

    def seconds(self) -> dict[str, float]:
        return {part: getattr(self, part) for part in PARTS}

    def measured(self) -> tuple[str, ...]:
        """The parts measured apart from the others: all four, or input alone."""
        return PARTS if self.separated else ("input",)

    def reported(self, values: dict[str, Any]) -> dict[str, Any]:
        """`values` (one per part) as reports show them: None for a part not measured apart."""
        return {part: value if part in self.measured() else None for part, value in values.items()}

    def shares(self) -> dict[str, float]:
        total = sum(self.seconds().values()) or 1.0
        return {part: value / total for part, value in self.seconds().items()}

    def share_interval(self, part: str) -> tuple[float, float]:
        """The part's interval as shares of the step (the share itself when none was measured)."""
        share = self.shares()[part]
        return self.share_intervals.get(part, (share, share))

    def launches_apart(self) -> list[str]:
        """The measured parts whose intervals in two of the launches do not overlap."""
        return [part for part in self.measured() if any(
            first.share_intervals[part][1] < second.share_intervals[part][0]
            for first in self.launches for second in self.launches)]


def breakdown(full: list[float], on_device: list[float], looped: list[float], gradients: list[float],
              reduced: list[float], paired: bool = False, waits: list[float] | None = None,
              stored: list[float] | None = None, across_workers: bool = False) -> Breakdown:
    """input = A - B, host = B - H, sync = R - G, compute = the rest of H (each at least 0).

    `paired`: the i-th values of A and B (and of G and R) were timed next to each other. Neighbouring calls
    share most of the machine's drift, so the median of the differences is then far steadier than the
    difference of the medians. `looped`: seconds per step of each H call.

    `waits` and `stored`: each A step's time in `next(batches)`, and phase S (the step on batches taken from
    the pipeline earlier, timed while it is idle), given when the replicas are logical CPU devices. They share
    the host's cores with the pipeline's threads, so a prefetching pipeline that never makes the step wait
    still slows the replicas down; on GPUs that work runs beside the devices. That part of A - B, A's step
    call against S, is then counted as compute and kept as `contention`.

    `across_workers`: one worker of a multi-worker job, whose steps wait in the all-reduce until the slowest
    worker arrives (B runs in step on every worker). Input is then the wait in `next(batches)` (`waits`), and
    the step call beyond B is waiting for the other workers: counted as sync and kept as `waiting`.

    Each part's `intervals` come from the same arithmetic on bootstrap resamples of the rounds: a round's
    A, B and S (and a turn's G and R) stay together, so the spread is that of the paired differences."""
    point = _parts(full, on_device, looped, gradients, reduced, paired, waits, stored, across_workers)
    arrays = {"full": full, "on_device": on_device, "looped": looped, "gradients": gradients, "reduced": reduced,
              "waits": waits or [], "stored": stored or []}
    groups = ([("full", "on_device", "waits", "stored"), ("gradients", "reduced"), ("looped",)] if paired else
              [("full", "waits"), ("on_device",), ("stored",), ("gradients",), ("reduced",), ("looped",)])
    rng = random.Random(0)  # the same timings give the same intervals
    seconds: dict[str, list[float]] = {part: [] for part in PARTS}
    shares: dict[str, list[float]] = {part: [] for part in PARTS}
    for _ in range(RESAMPLES):
        drawn: dict[str, list[float]] = {}
        for group in groups:
            count = len(arrays[group[0]])
            at = [rng.randrange(count) for _ in range(count)]
            drawn.update({name: [arrays[name][i] for i in at] if arrays[name] else [] for name in group})
        again = _parts(drawn["full"], drawn["on_device"], drawn["looped"], drawn["gradients"], drawn["reduced"],
                       paired, drawn["waits"] or None, drawn["stored"] or None, across_workers)
        for part, share in again.shares().items():
            seconds[part].append(getattr(again, part))
            shares[part].append(share)
    measured = replace(point, intervals={part: _central(values) for part, values in seconds.items()},
                       share_intervals={part: _central(values) for part, values in shares.items()})
    return _with_drift(measured, arrays, groups, paired, across_workers)


def _with_drift(measured: Breakdown, arrays: dict[str, list[float]], groups: list[tuple[str, ...]], paired: bool,
                across_workers: bool) -> Breakdown:
    """The breakdown with each part that drifted between the window's two halves named in `drift`, and its
    intervals widened to hold both halves' values: rounds that are not alike make the bootstrap too narrow,
    and the next run may well look like either half."""
    if len(arrays["full"]) < 2 * MIN_HALF:
        return measured
    halves = []
    for half in (0, 1):
        taken: dict[str, list[float]] = {}
        for group in groups:
            count = len(arrays[group[0]])
            cut = slice(0, count // 2) if half == 0 else slice(count // 2, count)
            taken.update({name: arrays[name][cut] if count >= 2 else arrays[name] for name in group})
        halves.append(_parts(taken["full"], taken["on_device"], taken["looped"], taken["gradients"],
                             taken["reduced"], paired, taken["waits"] or None, taken["stored"] or None, across_workers))
    drift, intervals, share_intervals = {}, dict(measured.intervals), dict(measured.share_intervals)
    for part in PARTS:
        first, second = (half.shares()[part] for half in halves)
        if abs(first - second) <= DRIFT:
            continue
        low, high = share_intervals[part]
        drift[part] = (first, second)
        share_intervals[part] = (min(low, first, second), max(high, first, second))
        values = [getattr(half, part) for half in halves]
        intervals[part] = (min(intervals[part][0], *values), max(intervals[part][1], *values))
    return replace(measured, drift=drift, intervals=intervals, share_intervals=share_intervals)


def with_sampled_reference(measured: Breakdown, full: list[float], calls: list[float], reference: list[float],
                           part: str = "input") -> Breakdown:
    """`part` measured as the median of the step calls' excess over the median of a `reference` step replayed
    apart from them (fit's calls fetch their own batch): that median is itself a sample of a few replays, which
    the bootstrap of the calls alone treats as exact. The part's interval then also holds its values over
    resamples of the calls (with their step-to-step times in `full`) and of the replays, each on its own (the
    two were timed apart, so nothing pairs them); compute's interval gives that time back."""
    if len(reference) < 2 or len(calls) < 2:
        return measured
    rng = random.Random(0)  # the same timings give the same intervals
    seconds, shares = [], []
    for _ in range(RESAMPLES):
        step = statistics.median(rng.choices(reference, k=len(reference)))
        at = [rng.randrange(len(calls)) for _ in calls]
        value = statistics.median(max(calls[i] - step, 0.0) for i in at)
        seconds.append(value)
        shares.append(value / (statistics.median(full[i] for i in at) or 1.0))
    return _widened(measured, part, _central(seconds), _central(shares))


def with_unsteady_reference(measured: Breakdown, reference: list[float], part: str = "input") -> Breakdown:
    """`part` measured as the step calls' excess over a `reference` step timed apart from them (fit's calls
    fetch their own batch, a worker's calls also wait for the other workers; the reference is that step
    replayed on one batch): when the reference's own times spread by more than UNSTEADY, the machine's speed
    changed between them, and the calls may have run at either end of that spread. The part's interval then
    also holds its value against the reference's p10 and p90, and compute's interval gives that time back."""
    if len(reference) < MIN_HALF:
        return measured
    deciles = statistics.quantiles(reference, n=10, method="inclusive")
    fast, slow, middle = deciles[0], deciles[-1], statistics.median(reference)
    if slow <= (1 + UNSTEADY) * fast:
        return measured
    total = sum(measured.seconds().values()) or 1.0
    value = getattr(measured, part)
    least, most = clamp(value - (slow - middle), total), clamp(value + (middle - fast), total)
    return replace(_widened(measured, part, (least, most), (least / total, most / total)),
                   unsteady=(part, fast, slow))


def with_input_in_turns(measured: Breakdown, fed: list[float], captured: list[float]) -> Breakdown:
    """`input` as the median over rounds of the step on the script's own batches (`fed`) less the same step on a
    captured batch (`captured`), the two timed in the same round: fit's calls fetch their own batch, and their
    excess over replays timed after the window moves with the machine's drift, which the rounds share. Its
    interval comes from resamples of the rounds' differences; compute gives up or takes back the change, so the
    parts still add up to the step, and no drift between the window's halves is said of input."""
    if len(fed) < 2 or len(fed) != len(captured):
        return measured
    total = sum(measured.seconds().values()) or 1.0
    most = measured.input + measured.compute
    differences = [f - c for f, c in zip(fed, captured)]
    value = clamp(statistics.median(differences), most)
    rng = random.Random(0)  # the same timings give the same interval
    low, high = _central([clamp(statistics.median(rng.choices(differences, k=len(differences))), most)
                          for _ in range(RESAMPLES)])
    low, high = min(low, value), max(high, value)
    shift = measured.input - value
    compute_low, compute_high = measured.intervals.get("compute", (measured.compute, measured.compute))
    compute_interval = (clamp(compute_low + shift - (high - value), total),
                        clamp(compute_high + shift + (value - low), total))
    intervals = {**measured.intervals, "input": (low, high), "compute": compute_interval}
    share_intervals = {**measured.share_intervals, "input": (low / total, high / total),
                       "compute": (compute_interval[0] / total, compute_interval[1] / total)}
    drift = {part: halves for part, halves in measured.drift.items() if part != "input"}
    return replace(measured, input=value, compute=measured.compute + shift, intervals=intervals,
                   share_intervals=share_intervals, drift=drift)


def _widened(measured: Breakdown, part: str, seconds: tuple[float, float], shares: tuple[float, float]) -> Breakdown:
    """The breakdown with `part`'s intervals widened to hold `seconds` and `shares`, and compute's widened by
    the same time the other way (the parts add up to the step)."""
    total = sum(measured.seconds().values()) or 1.0
    value = getattr(measured, part)
    intervals, share_intervals = dict(measured.intervals), dict(measured.share_intervals)
    low, high = intervals.get(part, (value, value))
    intervals[part] = (min(low, seconds[0]), max(high, seconds[1]))
    low, high = intervals.get("compute", (measured.compute, measured.compute))
    intervals["compute"] = (clamp(min(low, measured.compute - (intervals[part][1] - value)), total),
                            max(high, measured.compute + (value - intervals[part][0])))
    low, high = share_intervals.get(part, (measured.shares()[part],) * 2)
    share_intervals[part] = (min(low, shares[0], intervals[part][0] / total),
                             max(high, shares[1], intervals[part][1] / total))
    low, high = share_intervals.get("compute", (measured.shares()["compute"],) * 2)
    share_intervals["compute"] = (min(low, intervals["compute"][0] / total), max(high, intervals["compute"][1] / total))
    return replace(measured, intervals=intervals, share_intervals=share_intervals)


def typical(launches: list[Breakdown]) -> int:
    """The index of the launch whose shares lie nearest every part's median share over the launches."""
    middle = {part: statistics.median(launch.shares()[part] for launch in launches) for part in PARTS}
    return min(range(len(launches)), key=lambda index: sum(
        abs(launches[index].shares()[part] - middle[part]) for part in PARTS))


def across_launches(chosen: Breakdown, launches: list[Breakdown]) -> Breakdown:
    """`chosen`, one of several `launches` of the same script, with each part's intervals widened to hold every
    launch's interval and share: something set at launch (the input's start, thread placement, the machine's
    load) can move a part by more than one launch's steps vary, which only other launches show."""
    intervals, share_intervals = dict(chosen.intervals), dict(chosen.share_intervals)
    for part in PARTS:
        for launch in launches:
            low, high = launch.share_interval(part)
            own = share_intervals.get(part, chosen.share_interval(part))
            share_intervals[part] = (min(own[0], low, launch.shares()[part]), max(own[1], high, launch.shares()[part]))
            seconds = launch.intervals.get(part, (getattr(launch, part),) * 2)
            own = intervals.get(part, (getattr(chosen, part),) * 2)
            intervals[part] = (min(own[0], seconds[0]), max(own[1], seconds[1]))
    recorded = tuple(Launch(launch.shares(), {part: launch.share_interval(part) for part in PARTS})
                     for launch in launches)
    return replace(chosen, intervals=intervals, share_intervals=share_intervals, launches=recorded)


def difference_interval(slower: list[float], faster: list[float]) -> tuple[float, float]:
    """The interval of median(slower) - median(faster) over bootstrap resamples of each list on its own (the
    two were timed apart, so nothing pairs them)."""
    rng = random.Random(0)
    differences = [statistics.median(rng.choices(slower, k=len(slower))) -
                   statistics.median(rng.choices(faster, k=len(faster))) for _ in range(RESAMPLES)]
    return _central(differences)


def _central(values: list[float]) -> tuple[float, float]:
    """The interval that holds COVERAGE of `values`."""
    ordered = sorted(values)
    tail = (1 - COVERAGE) / 2
    return ordered[int(tail * len(ordered))], ordered[min(int((1 - tail) * len(ordered)), len(ordered) - 1)]


def _parts(full: list[float], on_device: list[float], looped: list[float], gradients: list[float],
           reduced: list[float], paired: bool, waits: list[float] | None, stored: list[float] | None,
           across_workers: bool = False) -> Breakdown:
    step = StepTime.of(full)
    a = step.median
    if across_workers:
        assert waits, "a worker of a job is split by its waits in next()"
        input_s = clamp(statistics.median(waits), a)
        calls = [f - w for f, w in zip(full, waits, strict=True)]
        waiting = clamp(_difference(calls, on_device, paired), a - input_s)
        on_device_s = a - input_s - waiting
        h = min(statistics.median(looped), on_device_s)
        all_reduce = clamp(_difference(reduced, gradients, paired), h)
        return Breakdown(step=step, input=input_s, host=on_device_s - h, sync=all_reduce + waiting,
                         compute=h - all_reduce, waiting=waiting)
    a_minus_b = clamp(_difference(full, on_device, paired), a)
    contention = None
    if waits and stored:
        calls = [f - w for f, w in zip(full, waits, strict=True)]
        contention = clamp(_difference(calls, stored, paired), a_minus_b)
    slowed = contention or 0.0
    b = a - a_minus_b
    h = min(statistics.median(looped), b)
    sync = clamp(_difference(reduced, gradients, paired), h)
    return Breakdown(step=step, input=a_minus_b - slowed, host=b - h, sync=sync, compute=h - sync + slowed,
                     contention=contention)


def clamp(seconds: float, most: float) -> float:
    return min(max(seconds, 0.0), most)


def _difference(slower: list[float], faster: list[float], paired: bool) -> float:
    if paired:
        return statistics.median(x - y for x, y in zip(slower, faster, strict=True))
    return statistics.median(slower) - statistics.median(faster)
