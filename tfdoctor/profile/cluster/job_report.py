"""One report for a multi-worker job, from its workers' parts: a row per worker, the straggler, and the whole
job's verdict, which is the breakdown of the worker the job waits for."""

from __future__ import annotations

import os

from tfdoctor.profile.cluster.job import find_straggler, pacing_worker, worker_breakdown
from tfdoctor.profile.cluster.parts import PartError, WorkerPart
from tfdoctor.profile.report import DEVICE_NOTES, Report
from tfdoctor.profile.suggest import Cause, Seen, suggest
from tfdoctor.profile.verdict import judge
from tfdoctor.profile.what_if import judge as judge_change
from tfdoctor.profile.what_if import ranked

CPU_WORKER_NOTE = ("On CPU, MultiWorkerMirroredStrategy takes one CPU device per worker, so each worker runs one "
                   "replica whatever --gpus says; several replicas per worker need GPUs.")


def job_report(parts: list[WorkerPart]) -> Report:
    """The job's report; PartError when a worker failed (its error, one line)."""
    failed = [part for part in parts if part.error is not None or part.phases is None]
    if failed:
        raise PartError(f"{failed[0].task} failed: {failed[0].error or 'no measurement'}")
    workers = [worker_breakdown(part) for part in parts]
    pacing = pacing_worker(workers)
    straggler = find_straggler(workers)
    first = pacing.part
    missing = first.job_tasks - len(parts)
    hosts = sorted({part.host for part in parts})
    per_worker = first.replicas // max(first.job_tasks, 1)
    each = (f"x {per_worker} replica{'s' if per_worker > 1 else ''} each" if per_worker >= 1
            else "(replicas per worker not known: the step was not replayed)")
    notes = [
        f"{len(parts)} workers {each} "
        f"(MultiWorkerMirroredStrategy{f', {first.collective} collectives' if first.collective else ''}); "
        "the job runs at the pace of "
        f"{pacing.part.task}, so the verdict is its breakdown",
        *([f"{missing} of the job's {first.job_tasks} workers wrote no part: their rows are missing"] if missing > 0 else []),
        *([f"All workers ran on one host ({hosts[0]}) and shared its cores: times are not those of a cluster"]
          if len(hosts) == 1 and len(parts) > 1 else []),
        *dict.fromkeys([*first.notes, *(note for part in parts for note in part.notes)]),  # a worker's own too
        *([CPU_WORKER_NOTE] if first.device_kind == "cpu" else filter(None, [DEVICE_NOTES.get(first.device_kind)])),
    ]
    result = pacing.breakdown
    causes = [Cause(*cause) for cause in first.causes]
    traces = [part.trace_logdir for part in parts if part.trace_logdir]
    global_batch = first.workload.get("global_batch")  # None: not known (the step was not replayed)
    return Report(
        mode="multi-worker", requested=first.replicas, device_kind=first.device_kind,
        device_names=[name for part in parts for name in part.device_names],
        workload={**first.workload, "workers": len(parts)}, breakdown=result, verdict=judge(result),
        suggestions=suggest(result, causes, first.replicas, Seen(first.input_kind, first.precision)),
        examples_per_s=global_batch / result.step.median if global_batch else None, notes=notes,
        trace={"logdir": os.path.commonpath(traces) if traces else None, "xprof": None},
        workers=[worker.to_json() for worker in workers],
        straggler=straggler.to_json() if straggler else None,
        what_if=ranked([judge_change(times, causes) for times in first.what_if]) if first.what_if else None,
    )


def with_scaling(report: Report, one_worker: Report) -> Report:
    """`report` with its job set beside a one-worker job at the same per-replica batch: throughput, and how
    much of the step the all-reduce takes within one worker and across workers."""
    rows = []
    for each in (one_worker, report):
        assert each.breakdown is not None and each.examples_per_s is not None and each.workers is not None
        rows.append({"workers": len(each.workers), "replicas": each.requested, "examples_per_s": each.examples_per_s,
                     "sync_share": each.breakdown.shares()["sync"]})
    for row in rows:
        row["efficiency"] = row["examples_per_s"] / (row["replicas"] / rows[0]["replicas"] * rows[0]["examples_per_s"])
    report.scaling = rows
    return report
