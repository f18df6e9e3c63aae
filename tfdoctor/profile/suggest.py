"""Fixes ranked by the time they would save, in ms per step of today's global batch, each with its evidence and
the lint rules (and, when known, the source locations) that find the cause (pure Python: no TensorFlow).

A part is suggested only when its interval lies above zero (it is more than the noise) and its share reaches
the verdict's MODERATE cut-off; compute, whose saving cannot be estimated from timings, is suggested without
one."""

from __future__ import annotations

from dataclasses import dataclass, field

from tfdoctor.profile.breakdown import Breakdown
from tfdoctor.profile.verdict import THRESHOLDS


@dataclass(frozen=True)
class Cause:
    """A lint finding (or a known location) that explains a part of the step."""

    code: str
    path: str
    line: int

    def location(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Seen:
    """What the run saw the script already do, so that no suggestion asks for it again ('' when not seen)."""

    input_kind: str = ""  # where the step's batches came from: "tf.data", "a Keras Sequence", "arrays", ...
    precision: str = ""   # the Keras global dtype policy when it is a mixed one ("mixed_float16")


@dataclass(frozen=True)
class Suggestion:
    title: str
    evidence: str
    change: str
    estimated_saving_s: float
    rules: tuple[str, ...]
    locations: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, object]:
        return {"title": self.title, "evidence": self.evidence, "change": self.change,
                "estimated_saving_s": round(self.estimated_saving_s, 6), "rules": list(self.rules),
                "locations": list(self.locations)}


RULES_FOR = {
    "input": ("TFD201", "TFD103", "TFD202", "TFD203", "TFD206", "TFD204", "TFD205", "TFD305"),
    "sync": ("TFD106", "TFD114", "TFD111"),
    "host": ("TFD107", "TFD301"),
    "compute": ("TFD102", "TFD103", "TFD302"),
}
_TEXT = {
    "input": ("Feed the devices from a parallel, prefetched tf.data pipeline",
              "Build the batches with tf.data from the files (parallel map, batch, prefetch) and give them to "
              "strategy.experimental_distribute_dataset, so decoding overlaps the step and each replica gets "
              "its own shard."),
    "sync": ("Spend less of each step in the gradient all-reduce",
             "Raise the per-replica batch (global batch = per-replica x num_replicas_in_sync) so the same "
             "all-reduce serves more examples; on real GPUs keep NCCL (no virtual GPUs)."),
    "host": ("Keep Python out of the step",
             "Run the step in @tf.function, read step outputs every N steps instead of every step, and run "
             "several steps per call (steps_per_execution for Keras fit)."),
    "compute": ("Make the device work smaller or faster",
                "Give each replica only its own shard (no tf.split of the batch again), and consider mixed "
                "precision (with LossScaleOptimizer in custom loops) or XLA."),
}


_ALREADY = {  # (part, what the script already does): the change that is left to make
    ("input", "tf.data"): ("Make the script's tf.data pipeline keep up with the step",
                           "Run its map calls with num_parallel_calls=tf.data.AUTOTUNE, cache() before the random "
                           "steps and end it with prefetch(tf.data.AUTOTUNE); in a custom loop, distribute it "
                           "with strategy.experimental_distribute_dataset so each replica gets its own shard "
                           "(Model.fit does that itself)."),
    ("compute", "mixed"): ("Make the device work smaller or faster",
                           "Give each replica only its own shard (no tf.split of the batch again) and try XLA "
                           "(jit_compile=True); the script already runs the {precision} policy."),
}


def _text(part: str, seen: Seen) -> tuple[str, str]:
    """The suggestion's title and change for `part`, minus what the script already does."""
    already = {"input": seen.input_kind, "compute": "mixed" if seen.precision.startswith("mixed") else ""}
    title, change = _ALREADY.get((part, already.get(part, "")), _TEXT[part])
    return title, change.format(precision=seen.precision)


def suggest(result: Breakdown, causes: list[Cause], replicas: int, seen: Seen = Seen()) -> list[Suggestion]:
    """One suggestion per part that costs time above the noise, ranked by the time it would save per step;
    none for parts that were not measured apart."""
    shares = result.shares()
    a_ms = result.step.median * 1000
    savings = {
        "input": result.input,    # overlapped with compute, it costs (almost) nothing
        "sync": result.sync / 2,  # twice the per-replica batch: today's examples need half the all-reduces
        "host": result.host,      # inside one graph it disappears (phase H)
        "compute": 0.0,           # not estimable from timings alone
    }
    evidence = {
        "input": f"input {shares['input']:.0%} of the {a_ms:.0f} ms step: the same step takes "
                 f"{(result.step.median - result.input) * 1000:.0f} ms when the batch is already on the devices",
        "sync": f"all-reduce {shares['sync']:.0%} of the step ({result.sync * 1000:.1f} ms: gradients with the "
                f"all-reduce minus gradients without it, {replicas} replica{'s' if replicas != 1 else ''}); with twice "
                f"the per-replica batch "
                f"today's examples take half as many all-reduces, {savings['sync'] * 1000:.1f} ms less per step's "
                "worth of examples",
        "host": f"host overhead {shares['host']:.0%} of the step ({result.host * 1000:.1f} ms per step disappears "
                "when the steps run inside one graph call)",
        "compute": f"device compute {shares['compute']:.0%} of the step ({result.compute * 1000:.0f} ms)",
    }
    suggestions = []
    for part in result.measured():
        found = [c for c in causes if c.code in RULES_FOR[part]]
        if part == "compute":
            if not found and shares["compute"] < 0.5:
                continue
        elif not above_noise(result, part) or round(savings[part] * 1000) < 1:
            continue
        title, change = _text(part, seen)
        rules = tuple(dict.fromkeys(c.code for c in found)) or RULES_FOR[part][:3]
        locations = tuple(f"{c.code} at {c.location()}" for c in found)
        suggestions.append(Suggestion(title, evidence[part], change, savings[part], rules, locations))
    return sorted(suggestions, key=lambda s: s.estimated_saving_s, reverse=True)


def above_noise(result: Breakdown, part: str) -> bool:
    """The part costs time beyond doubt and is worth a change: its whole interval lies above zero and its
    share reaches the verdict's MODERATE cut-off (a 1% input is not worth rebuilding a pipeline for)."""
    low, _ = result.intervals.get(part, (getattr(result, part), 0.0))
    return low > 0 and result.shares()[part] >= THRESHOLDS[part][1]
