"""What bounds the step, with the TensorFlow profiler's own cut-offs (PROFILER.md)."""

from __future__ import annotations

from dataclasses import dataclass

from tfdoctor.profile.breakdown import Breakdown

# part -> (HIGH threshold, MODERATE threshold) as shares of the step
THRESHOLDS = {"input": (0.20, 0.05), "sync": (0.15, 0.03), "host": (0.15, 0.15)}
NAMES = {"input": "input-bound", "sync": "sync-bound", "host": "host-bound"}
CAUSES = {
    "input": "waiting for the input pipeline",
    "sync": "in the cross-replica gradient all-reduce",
    "host": "in Python and dispatch overhead outside the graph",
}


@dataclass(frozen=True)
class Verdict:
    primary: str  # input-bound | sync-bound | host-bound | compute-bound | out-of-memory
    level: str    # high | moderate
    statement: str


def judge(result: Breakdown) -> Verdict:
    shares = result.shares()
    step_ms = result.step.median * 1000
    for level, index in (("high", 0), ("moderate", 1)):
        over = [part for part, limits in THRESHOLDS.items() if shares[part] >= limits[index]]
        if over:
            part = max(over, key=lambda p: shares[p])
            seconds = getattr(result, part)
            return Verdict(NAMES[part], level, (
                f"{'Highly' if level == 'high' else 'Moderately'} {NAMES[part]}: {shares[part]:.0%} of each "
                f"{step_ms:.0f} ms step ({seconds * 1000:.0f} ms) is spent {CAUSES[part]}."
            ))
    return Verdict("compute-bound", "high", (
        f"Compute-bound: {shares['compute']:.0%} of each {step_ms:.0f} ms step is device compute; input "
        f"{shares['input']:.0%}, all-reduce {shares['sync']:.0%}, host overhead {shares['host']:.0%}."
    ))


def out_of_memory(per_replica_batch: int, fits: int | None, detail: str) -> Verdict:
    advice = (f"a per-replica batch of {fits} fits" if fits else "no smaller per-replica batch fitted either")
    return Verdict("out-of-memory", "high", (
        f"Out of memory at a per-replica batch of {per_replica_batch} ({detail}); {advice}. Lower the per-replica "
        "batch, use mixed precision, or accumulate gradients correctly (TFD303); never multi_gpu_model (TFD101)."
    ))
