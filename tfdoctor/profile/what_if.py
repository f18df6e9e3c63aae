"""Measured what-if: each change the profiler suggests, tried on the measured step and timed in the same rounds
as today's step, judged here as examples/s and a speed-up with a 90% interval (pure Python: no TensorFlow).

The child that owns the step runs the changes (`trials.py` in reference mode, `script/what_if_replays.py` in
script mode) and sends one `protocol.WhatIf` per change; this module turns each into an `Outcome`."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field

from tfdoctor.profile.breakdown import COVERAGE, RESAMPLES
from tfdoctor.profile.protocol import Event, WhatIf
from tfdoctor.profile.suggest import Cause
from tfdoctor.profile.verdict import THRESHOLDS

CHANGES = ("input-on-device", "tf-data-tuned", "batch-x2", "xla", "mixed-precision", "all-reduce",
           "steps-per-call")
# What each change does, for the report and `--help`.
DESCRIPTIONS = {
    "input-on-device": "the step on a batch already on the devices: the ceiling of any input-side fix",
    "tf-data-tuned": "the input pipeline with the linter's changes (parallel map, prefetch, autotune options)",
    "batch-x2": "twice the per-replica batch (a larger batch changes the optimisation: scale the learning rate)",
    "xla": "the replica step compiled with jit_compile=True (compile time is not counted)",
    "mixed-precision": "mixed_float16 compute (with loss scaling in custom loops); GPUs only",
    "all-reduce": "the other all-reduce implementations the strategy offers on this hardware",
    "steps-per-call": "several steps inside one tf.function call (steps_per_execution for fit)",
}
RULES = {
    "input-on-device": ("TFD201", "TFD103", "TFD202", "TFD203", "TFD206"),
    "tf-data-tuned": ("TFD202", "TFD203", "TFD204", "TFD201", "TFD206"),
    "batch-x2": ("TFD106",),
    "xla": (),
    "mixed-precision": ("TFD302",),
    "all-reduce": ("TFD111",),
    "steps-per-call": ("TFD107", "TFD301"),
}


INPUT_BOUND = THRESHOLDS["input"][0]
CEILING = "input-on-device"  # the bound of every input change, measured beside them


class WhatIfError(ValueError):
    """A `--what-if` list naming no known change; the message is one line."""


def parse_changes(text: str) -> list[str]:
    """`all`, or change names separated by commas, in the order of CHANGES."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names == ["all"]:
        return list(CHANGES)
    unknown = [name for name in names if name not in CHANGES]
    if unknown or not names:
        raise WhatIfError(f"unknown what-if change {unknown[0] if unknown else text!r}: choose 'all' or from "
                          f"{', '.join(CHANGES)}")
    return [change for change in CHANGES if change in names]


@dataclass(frozen=True)
class Outcome:
    """A change as measured: examples/s and time per step with it, its speed-up over today with a 90% interval,
    or why it was not applied."""

    change: str
    applied: bool
    why_not: str | None = None
    step_time_s: float | None = None
    examples_per_s: float | None = None
    speedup: float | None = None
    interval: tuple[float, float] | None = None
    note: str = ""
    rules: tuple[str, ...] = ()
    locations: tuple[str, ...] = field(default=())
    today_examples_per_s: float | None = None
    out_of_memory: bool = False
    step_only: bool = False  # measured on the step alone, without its input (script mode's replays)

    @property
    def measurable(self) -> bool:
        """The interval lies wholly above or below 1.0."""
        return self.interval is not None and not self.interval[0] <= 1.0 <= self.interval[1]

    def effect(self) -> str:
        """In words: a measured effect, no measurable effect, or why the change was not measured."""
        if self.out_of_memory:
            return "does not fit: out of memory"
        if not self.applied:
            return f"not applied: {self.why_not}"
        alone = " (the step alone)" if self.step_only else ""
        if not self.measurable:
            return f"no measurable effect{alone}"
        return f"{'faster' if self.speedup and self.speedup > 1 else 'slower'}{alone}"

    def to_json(self) -> dict[str, object]:
        return {"change": self.change, "applied": self.applied, "why_not": self.why_not,
                "step_time_s": self.step_time_s, "examples_per_s": self.examples_per_s, "speedup": self.speedup,
                "interval": list(self.interval) if self.interval else None, "note": self.note,
                "rules": list(self.rules), "locations": list(self.locations),
                "measurable": self.measurable, "out_of_memory": self.out_of_memory, "step_only": self.step_only}


def judge(times: WhatIf, causes: list[Cause]) -> Outcome:
    """The outcome of one tried change: the ratio of median throughputs over its paired rounds, with a
    bootstrap interval over the rounds (resampled in pairs, so drift that touched both sides cancels)."""
    rules = RULES.get(_family(times.change), ())
    found = [cause for cause in causes if cause.code in rules]
    shown_rules = tuple(dict.fromkeys(cause.code for cause in found)) or rules
    locations = tuple(f"{cause.code} at {cause.location()}" for cause in found)
    common = {"change": times.change, "note": times.note, "rules": shown_rules, "locations": locations,
              "step_only": times.step_only}
    pairs = [(t, c) for t, c in zip(times.today, times.changed) if t > 0 and c > 0]
    if not times.applied or not pairs:
        return Outcome(applied=False, why_not=times.why_not or "nothing was timed", out_of_memory=times.out_of_memory,
                       **common)
    today, changed = [t for t, _ in pairs], [c for _, c in pairs]
    speedup = _speedup(today, changed, times.today_examples, times.changed_examples)
    generator = random.Random(0)
    resampled = []
    for _ in range(RESAMPLES):
        picks = [pairs[generator.randrange(len(pairs))] for _ in pairs]
        resampled.append(_speedup([t for t, _ in picks], [c for _, c in picks], times.today_examples,
                                  times.changed_examples))
    resampled.sort()
    tail = (1 - COVERAGE) / 2
    interval = (resampled[int(tail * (RESAMPLES - 1))], resampled[int((1 - tail) * (RESAMPLES - 1))])
    changed_median = statistics.median(changed)
    return Outcome(applied=True, step_time_s=changed_median / max(times.calls_per_step, 1),
                   examples_per_s=times.changed_examples / changed_median, speedup=speedup, interval=interval,
                   today_examples_per_s=times.today_examples / statistics.median(today), **common)


def _speedup(today: list[float], changed: list[float], today_examples: int, changed_examples: int) -> float:
    return (changed_examples / statistics.median(changed)) / (today_examples / statistics.median(today))


def _family(change: str) -> str:
    """`all-reduce: ReductionToOneDevice` belongs to `all-reduce`."""
    return change.split(":")[0].strip()


def tried(events: list[Event], causes: list[Cause], requested: tuple[str, ...] | list[str]) -> list[Outcome] | None:
    """The outcomes of the changes a child tried (its WhatIf events), best first; None when none was asked for."""
    if not requested:
        return None
    return ranked([judge(event, causes) for event in events if isinstance(event, WhatIf)])


def ranked(outcomes: list[Outcome]) -> list[Outcome]:
    """Measured gains first (those measured with their input before those on the step alone), fastest first;
    then the changes without a measurable effect; then those not applied."""
    def key(outcome: Outcome) -> tuple[int, bool, float]:
        if not outcome.applied:
            return 2, True, 0.0
        faster = outcome.measurable and (outcome.speedup or 0) > 1
        return (0 if faster else 1), outcome.step_only, -(outcome.speedup or 0.0)
    return sorted(outcomes, key=key)


def best(outcomes: list[Outcome], input_share: float = 0.0) -> Outcome | None:
    """The change with the largest measured speed-up whose interval lies above 1.0 (input-on-device is the
    ceiling of the input changes, not a change one can make). When waiting for input is a
    large share of the step (`input_share` past the input-bound cut-off), one measured with its input comes
    before one measured on the step alone, whose gain such a step would not see."""
    faster = [o for o in outcomes if o.applied and o.measurable and (o.speedup or 0) > 1 and o.change != CEILING]
    input_bound = input_share >= INPUT_BOUND
    return max(faster, key=lambda o: (input_bound and not o.step_only, o.speedup or 0.0)) if faster else None


def sentence(outcomes: list[Outcome], input_share: float = 0.0) -> str | None:
    """The verdict's closing sentence about the tried changes; None when none was tried."""
    if not outcomes:
        return None
    top = best(outcomes, input_share)
    ceiling = next((o for o in outcomes if o.change == CEILING and o.applied and o.speedup), None)
    bound = f" With the input already on the devices: {ceiling.speedup:.2f}x." if ceiling and ceiling.measurable else ""
    if top is None:
        return f"No tried change made a measurable difference.{bound}"
    low, high = top.interval or (0.0, 0.0)
    alone = ", on the step alone" if top.step_only else ""
    return (f"Best measured change: {top.change}, {top.speedup:.2f}x examples/s "
            f"(90% interval {low:.2f}-{high:.2f}{alone}).{bound}")
