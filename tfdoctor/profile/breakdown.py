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
    """Seconds per step in each part; they add up to the median full step."""

    step: StepTime
    input: float
    sync: float
    host: float
    compute: float

    def seconds(self) -> dict[str, float]:
        return {part: getattr(self, part) for part in PARTS}

    def shares(self) -> dict[str, float]:
        total = sum(self.seconds().values()) or 1.0
        return {part: value / total for part, value in self.seconds().items()}


def breakdown(full: list[float], on_device: list[float], looped: float, gradients: list[float],
              reduced: list[float], paired: bool = False) -> Breakdown:
    """input = A - B, host = B - H, sync = R - G, compute = the rest of H (each at least 0).

    `paired`: the i-th values of A and B (and of G and R) were timed next to each other. Neighbouring calls
    share most of the machine's drift, so the median of the differences is then far steadier than the
    difference of the medians."""
    step = StepTime.of(full)
    a = step.median
    input_s = _difference(full, on_device, paired)
    b = a - min(max(input_s, 0.0), a)
    h = min(looped, b)
    sync = min(max(_difference(reduced, gradients, paired), 0.0), h)
    return Breakdown(step=step, input=a - b, host=b - h, sync=sync, compute=h - sync)


def _difference(slower: list[float], faster: list[float], paired: bool) -> float:
    if paired:
        return statistics.median(x - y for x, y in zip(slower, faster, strict=True))
    return statistics.median(slower) - statistics.median(faster)
