"""From phase timings to the four parts of a step (pure Python: no TensorFlow)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

PARTS = ("input", "sync", "host", "compute")


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
class Breakdown:
    """Seconds per step in each part; they add up to the median full step. `contention` is the part of
    `compute` that is the replicas running slower while the input pipeline's threads take host cores from
    them (measured only where the replicas are logical CPU devices, None elsewhere)."""

    step: StepTime
    input: float
    sync: float
    host: float
    compute: float
    contention: float | None = None

    def seconds(self) -> dict[str, float]:
        return {part: getattr(self, part) for part in PARTS}

    def shares(self) -> dict[str, float]:
        total = sum(self.seconds().values()) or 1.0
        return {part: value / total for part, value in self.seconds().items()}


def breakdown(full: list[float], on_device: list[float], looped: list[float], gradients: list[float],
              reduced: list[float], paired: bool = False, waits: list[float] | None = None,
              stored: list[float] | None = None) -> Breakdown:
    """input = A - B, host = B - H, sync = R - G, compute = the rest of H (each at least 0).

    `paired`: the i-th values of A and B (and of G and R) were timed next to each other. Neighbouring calls
    share most of the machine's drift, so the median of the differences is then far steadier than the
    difference of the medians. `looped`: seconds per step of each H call.

    `waits` and `stored`: each A step's time in `next(batches)`, and phase S (the step on batches taken from
    the pipeline earlier, timed while it is idle), given when the replicas are logical CPU devices. They share
    the host's cores with the pipeline's threads, so a prefetching pipeline that never makes the step wait
    still slows the replicas down; on GPUs that work runs beside the devices. That part of A - B, A's step
    call against S, is then counted as compute and kept as `contention`."""
    step = StepTime.of(full)
    a = step.median
    a_minus_b = _clamp(_difference(full, on_device, paired), a)
    contention = None
    if waits and stored:
        calls = [f - w for f, w in zip(full, waits, strict=True)]
        contention = _clamp(_difference(calls, stored, paired), a_minus_b)
    slowed = contention or 0.0
    b = a - a_minus_b
    h = min(statistics.median(looped), b)
    sync = _clamp(_difference(reduced, gradients, paired), h)
    return Breakdown(step=step, input=a_minus_b - slowed, host=b - h, sync=sync, compute=h - sync + slowed,
                     contention=contention)


def _clamp(seconds: float, most: float) -> float:
    return min(max(seconds, 0.0), most)


def _difference(slower: list[float], faster: list[float], paired: bool) -> float:
    if paired:
        return statistics.median(x - y for x, y in zip(slower, faster, strict=True))
    return statistics.median(slower) - statistics.median(faster)
