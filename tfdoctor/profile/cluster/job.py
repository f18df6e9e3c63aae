"""From the workers' parts to one job: each worker's breakdown, the straggler, and the whole job's verdict
(pure Python: no TensorFlow).

In a multi-worker step every worker waits in the gradient all-reduce until the slowest one arrives. So a
worker's step call, beyond the same step on a batch already on its devices (phase B, run in lockstep by all
workers), is time spent waiting for the others; it is counted as sync, and kept apart as `waiting`. A
worker's own work is its step minus that wait: the worker with the most of it is the one the job waits for.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from tfdoctor.profile.breakdown import Breakdown, breakdown, with_unsteady_reference
from tfdoctor.profile.cluster.parts import WorkerPart

OWN_PARTS = ("input", "host", "compute")
STRAGGLER_SHARE = 0.20  # own work this much (of the step) beyond the other workers' median makes a straggler; on
# one shared host two balanced workers differed by up to 12% (the reference job on 2 cores), so less is noise
NO_STRAGGLER = f"No straggler: every worker's own work per step is within {STRAGGLER_SHARE:.0%} of the others'."
UNKNOWN_STRAGGLER = ("Straggler not known: a worker's step was not replayed, so its wait for the others is not "
                     "separated from its own work.")


@dataclass(frozen=True)
class WorkerBreakdown:
    part: WorkerPart
    breakdown: Breakdown  # its sync includes `waiting`
    waiting: float        # seconds per step this worker waited for the others in the all-reduce

    @property
    def own_work(self) -> float:
        return self.breakdown.step.median - self.waiting

    def to_json(self) -> dict[str, object]:
        result = self.breakdown
        return {"task": self.part.task, "address": self.part.address, "host": self.part.host,
                "step_time_s": {"median": result.step.median, "p10": result.step.p10, "p90": result.step.p90},
                "breakdown_s": result.reported(result.seconds()), "shares": result.reported(result.shares()),
                "waiting_for_others_s": self.waiting if result.separated else None}


@dataclass(frozen=True)
class Straggler:
    task: str
    excess_s: float       # its own work per step beyond the other workers' median
    part: str             # the part of its own work that makes the difference: input, host or compute
    part_excess_s: float

    @property
    def statement(self) -> str:
        return (f"{self.task} is the straggler: its own work takes {self.excess_s * 1000:.0f} ms per step more than "
                f"the other workers' ({self.part} +{self.part_excess_s * 1000:.0f} ms). The others wait for it in "
                "the all-reduce, so on them that wait shows as sync.")

    def to_json(self) -> dict[str, object]:
        return {"task": self.task, "excess_s": self.excess_s, "part": self.part,
                "part_excess_s": self.part_excess_s, "statement": self.statement}


def worker_breakdown(part: WorkerPart) -> WorkerBreakdown:
    """The worker's breakdown, its wait for the others counted as sync (breakdown.py, `across_workers`)."""
    phases = part.phases
    assert phases is not None, "a failed worker's part has no phases"
    result = replace(breakdown(phases.full, phases.on_device, phases.looped, phases.gradients, phases.reduced,
                               paired=True, waits=phases.input_wait, across_workers=True), separated=part.separated)
    if part.separated:  # the wait for the others: the calls' excess over the step replayed on every worker
        result = with_unsteady_reference(result, phases.on_device, "sync")
    return WorkerBreakdown(part, result, result.waiting or 0.0)


def find_straggler(workers: list[WorkerBreakdown]) -> Straggler | None:
    """The worker whose own work per step exceeds the others' median by STRAGGLER_SHARE of its step (none
    unless every worker's wait for the others was measured)."""
    if len(workers) < 2 or not all(worker.breakdown.separated for worker in workers):
        return None
    slowest = max(workers, key=lambda worker: worker.own_work)
    others = [worker for worker in workers if worker is not slowest]
    excess = slowest.own_work - statistics.median(worker.own_work for worker in others)
    if excess < STRAGGLER_SHARE * slowest.breakdown.step.median:
        return None
    excesses = {name: getattr(slowest.breakdown, name) - statistics.median(getattr(w.breakdown, name) for w in others)
                for name in OWN_PARTS}
    part = max(excesses, key=lambda name: excesses[name])
    return Straggler(slowest.part.task, excess, part, excesses[part])


def pacing_worker(workers: list[WorkerBreakdown]) -> WorkerBreakdown:
    """The worker the job waits for: the one with the most own work per step."""
    return max(workers, key=lambda worker: worker.own_work)


__all__ = ["NO_STRAGGLER", "UNKNOWN_STRAGGLER", "Straggler", "WorkerBreakdown", "find_straggler", "pacing_worker",
           "worker_breakdown"]
