"""What bounds the step (PROFILER.md): the part past its HIGH cut-off is the verdict, else compute-bound;
MODERATE shares are secondary findings; a share whose interval straddles a cut-off is called borderline.

Input and sync use the TensorFlow profiler's cut-offs (its input-pipeline analysis: input 20% / 5%, device
collectives 15% / 3%). Host overhead (B - H: Python and dispatch outside the graph) has no category of its own
there, so its cut-offs are tfdoctor's: 15% HIGH, as the profiler's other step-time categories, and 5%
MODERATE, not their 3%, because host overhead is a difference of two steps timed in different calls and a
20-round figure is known to about +-2% of the step, so a 3% line would name noise.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfdoctor.profile.breakdown import Breakdown

# part -> (HIGH, MODERATE) cut-offs as shares of the step
THRESHOLDS = {"input": (0.20, 0.05), "sync": (0.15, 0.03), "host": (0.15, 0.05)}
THRESHOLD_SOURCE = {"input": "TensorFlow profiler", "sync": "TensorFlow profiler", "host": "tfdoctor"}
NAMES = {"input": "input-bound", "sync": "sync-bound", "host": "host-bound"}
CAUSES = {
    "input": "waiting for the input pipeline",
    "sync": "in the cross-replica gradient all-reduce",
    "host": "in Python and dispatch overhead outside the graph",
}
LABELS = {"input": "input", "sync": "all-reduce", "host": "host overhead"}


@dataclass(frozen=True)
class Finding:
    """One part past a cut-off: `level` high or moderate; `borderline` when its interval straddles it."""

    part: str
    level: str
    share: float
    interval: tuple[float, float]
    borderline: bool

    def phrase(self) -> str:
        words = f"{'borderline ' if self.borderline else ''}{'highly' if self.level == 'high' else 'moderately'}"
        return f"{words} {NAMES[self.part]} ({LABELS[self.part]} {_share(self.share, self.interval)})"

    def to_json(self) -> dict[str, object]:
        return {"part": self.part, "level": self.level, "share": self.share, "interval": list(self.interval),
                "borderline": self.borderline}


@dataclass(frozen=True)
class Verdict:
    primary: str  # input-bound | sync-bound | host-bound | compute-bound | not-separated | out-of-memory
    level: str    # high | moderate
    statement: str
    secondary: tuple[Finding, ...] = ()
    borderline: bool = False  # another run may give another primary verdict: an interval straddles a HIGH cut-off


def _share(share: float, interval: tuple[float, float]) -> str:
    return f"{share:.0%}, {interval[0]:.0%}-{interval[1]:.0%}"


def findings(result: Breakdown) -> list[Finding]:
    """Each part past its MODERATE cut-off, largest share first; borderline when its interval straddles one
    of its cut-offs. A part below MODERATE is never named, whatever its interval."""
    shares = result.shares()
    found = []
    for part, (high, moderate) in THRESHOLDS.items():
        share, (low, top) = shares[part], result.share_interval(part)
        if share < moderate:
            continue
        found.append(Finding(part, "high" if share >= high else "moderate", share, (low, top),
                             any(low < line <= top for line in (high, moderate))))
    return sorted(found, key=lambda f: f.share, reverse=True)


def judge(result: Breakdown) -> Verdict:
    step_ms = result.step.median * 1000
    if not result.separated:
        return _input_only(result)
    found = findings(result)
    primary = next((f for f in found if f.level == "high"), None)
    secondary = tuple(f for f in found if f is not primary)
    also = f" Secondary: {'; '.join(f.phrase() for f in secondary)}." if secondary else ""
    if result.input_inside and primary is None:  # not compute-bound: compute holds the input read inside the calls
        return _input_inside(result, secondary, also)
    if primary is None:
        shares = result.shares()
        caveat = _may_pass(secondary)
        return Verdict("compute-bound", "high", (
            f"Compute-bound: {shares['compute']:.0%} of each {step_ms:.0f} ms step is device compute, and no "
            f"part passes its high cut-off.{also}{caveat}"), secondary, bool(caveat))
    part = primary.part
    line = THRESHOLDS[part][0]
    close = primary.interval[0] < line
    caveat = (f" Borderline: the interval {primary.interval[0]:.0%}-{primary.interval[1]:.0%} straddles the "
              f"{line:.0%} cut-off, so another run may not call it {NAMES[part]}." if close else "")
    return Verdict(NAMES[part], "high", (
        f"Highly {NAMES[part]}: {primary.share:.0%} of each {step_ms:.0f} ms step "
        f"({getattr(result, part) * 1000:.0f} ms; interval {primary.interval[0]:.0%}-{primary.interval[1]:.0%}) "
        f"is spent {CAUSES[part]}.{caveat}{also}"), secondary, close)


def _may_pass(secondary: tuple[Finding, ...]) -> str:
    """A sentence for each secondary part whose interval reaches its HIGH cut-off: another run may make it the
    primary verdict (empty when none does)."""
    return "".join(f" Borderline: the {LABELS[f.part]} interval {f.interval[0]:.0%}-{f.interval[1]:.0%} reaches "
                   f"the {THRESHOLDS[f.part][0]:.0%} cut-off, so another run may call it {NAMES[f.part]}."
                   for f in secondary if f.interval[1] >= THRESHOLDS[f.part][0])


def _input_only(result: Breakdown) -> Verdict:
    """The verdict when only input was measured: no share is put on host overhead, all-reduce or compute."""
    share, (low, top) = result.shares()["input"], result.share_interval("input")
    step_ms, line = result.step.median * 1000, THRESHOLDS["input"][0]
    rest = (f"the other {result.step.median * (1 - share) * 1000:.0f} ms are the step call, whose host overhead, "
            "all-reduce and compute were not told apart (the step could not be replayed on a captured batch)")
    if share >= line:
        return Verdict("input-bound", "high", (
            f"Highly input-bound: {share:.0%} of each {step_ms:.0f} ms step ({result.input * 1000:.0f} ms; interval "
            f"{low:.0%}-{top:.0%}) is spent {CAUSES['input']}; {rest}."), (), low < line)
    return Verdict("not-separated", "high", (
        f"Not separated: input is {share:.0%} of each {step_ms:.0f} ms step (interval {low:.0%}-{top:.0%}); {rest}."),
        (), top >= line)


def _input_inside(result: Breakdown, secondary: tuple[Finding, ...], also: str) -> Verdict:
    """The verdict when each step call runs many steps and reads their input inside (a whole epoch in one
    tf.function): compute then holds that input, so no share is put on compute, and input is a lower bound."""
    shares, step_ms = result.shares(), result.step.median * 1000
    low, top = result.share_interval("input")
    caveat = _may_pass(secondary)
    return Verdict("not-separated", "high", (
        f"Not separated: each {step_ms:.0f} ms call runs many steps in one tf.function and reads their input "
        f"inside it, so that input is not told apart from compute ({shares['compute']:.0%} together); input "
        f"between the calls is {shares['input']:.0%} (interval {low:.0%}-{top:.0%}), a lower "
        f"bound. Time the input pipeline alone, or call the step once per batch, to separate it.{also}{caveat}"),
        secondary, top >= THRESHOLDS["input"][0] or bool(caveat))


def out_of_memory(per_replica_batch: int, fits: int | None, detail: str) -> Verdict:
    advice = (f"a per-replica batch of {fits} fits" if fits else "no smaller per-replica batch fitted either")
    return Verdict("out-of-memory", "high", (
        f"Out of memory at a per-replica batch of {per_replica_batch} ({detail}); {advice}. Lower the per-replica "
        "batch, use mixed precision, or accumulate gradients correctly (TFD303); never multi_gpu_model (TFD101)."
    ))
