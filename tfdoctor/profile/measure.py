"""One profile: run the workers, join the measurements with lint, and build the report (no TensorFlow here)."""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any, Callable

from tfdoctor.profile import protocol
from tfdoctor.profile.breakdown import breakdown
from tfdoctor.profile.protocol import Event, WorkerConfig
from tfdoctor.profile.report import Report, device_notes
from tfdoctor.profile.runner import OutOfMemory, run_worker, trace_of
from tfdoctor.profile.suggest import Cause, suggest
from tfdoctor.profile.verdict import judge, out_of_memory
from tfdoctor.profile.what_if import tried

OnEvent = Callable[[Event], None]
THROUGHPUT_STEPS = 10  # phase D needs only a median step time


@dataclass(frozen=True)
class Options:
    gpus: int = 2
    variant: str = "tuned"
    model: str = "yolov3-tiny"
    img_size: int = 128
    batch_per_replica: int = 4
    width: float | None = None  # None: the workload's default for the device
    steps: int = 20
    warmup: int = 2
    scaling: bool = False
    logdir: Path | None = None
    workload: str = "reference"
    params: dict[str, Any] | None = field(default=None)
    timeout_s: float = 900.0
    one_replica: bool = True  # phase D: also run one replica, for scaling efficiency
    what_if: tuple[str, ...] = ()  # changes to try and time after the phases (what_if.CHANGES)

    def worker_config(self, **changes: Any) -> WorkerConfig:
        config = WorkerConfig(
            replicas=self.gpus, steps=self.steps, warmup=self.warmup, workload=self.workload, variant=self.variant,
            model=self.model, img_size=self.img_size, batch_per_replica=self.batch_per_replica, width=self.width,
            trace_dir=str(self.logdir / self.variant) if self.logdir else None, params=dict(self.params or {}),
            what_if=list(self.what_if))
        return dataclasses.replace(config, **changes)


def profile(options: Options, on_event: OnEvent) -> Report:
    """Measure one workload variant on `options.gpus` replicas (and on one replica, for scaling)."""
    replica_counts = list(range(1, options.gpus)) if options.scaling else (
        [1] if options.gpus > 1 and options.one_replica else [])
    try:
        child = run_worker(options.worker_config(fewer_replicas=replica_counts,
                                                 fewer_replicas_steps=min(options.steps, THROUGHPUT_STEPS)),
                           on_event, options.timeout_s)
    except OutOfMemory as error:
        return _oom_report(options, error, on_event)
    devices, work, measured = child.last(protocol.Devices), child.last(protocol.WorkloadReady), \
        child.last(protocol.Measured)
    assert devices and work and measured  # run_worker returns only a child that sent its result
    trace, lost = trace_of(child, options.logdir is not None)
    times = measured.times
    result = breakdown(times.full, times.on_device, times.looped, times.gradients, times.reduced, paired=True,
                       waits=times.input_wait, stored=times.stored)
    examples_per_s = work.global_batch / result.step.median
    throughputs = {options.gpus: examples_per_s}
    for run in measured.fewer_replicas:
        throughputs[run.replicas] = run.global_batch / median(run.full)
    causes = [Cause(code, path, line) for code, path, line in work.causes]
    report = Report(
        mode="reference" if options.workload == "reference" else "workload",
        requested=options.gpus, device_kind=devices.kind, device_names=devices.names,
        workload=_workload(options, work), breakdown=result, verdict=judge(result),
        suggestions=suggest(result, causes, options.gpus), examples_per_s=examples_per_s,
        one_replica_examples_per_s=throughputs.get(1) if options.gpus > 1 else None,
        trace=trace or {"logdir": None, "xprof": None},
        notes=device_notes(devices.kind, [*work.notes, *settle_notes(times), *([lost] if lost else [])]),
        clock=measured.clock.with_trace(trace) if measured.clock else None,
        what_if=tried(child.events, causes, options.what_if),
    )
    if options.scaling:
        one = throughputs.get(1, examples_per_s)
        report.scaling = [{"replicas": n, "examples_per_s": throughputs[n], "efficiency": throughputs[n] / (n * one)}
                          for n in sorted(throughputs)]
    return report


def settle_notes(times: protocol.PhaseTimes) -> list[str]:
    """What the rounds did about a pipeline that buffers while the other phases run (phases.settle_steps)."""
    if times.settle <= 1:
        return []
    return [f"An input pipeline slower than the step buffers batches while the other phases run: each "
            f"round first took {times.settle} steps, so its timed step waited for input as steps in a row do."]


def _workload(options: Options, work: protocol.WorkloadReady) -> dict[str, Any]:
    return {"name": work.name, "variant": options.variant, "model": options.model, "img_size": options.img_size,
            "global_batch": work.global_batch, "per_replica_batch": work.per_replica_batch, "steps": options.steps}


def _oom_report(options: Options, error: OutOfMemory, on_event: OnEvent) -> Report:
    """Out of memory: find the largest per-replica batch (halving) that runs, and report both."""
    fits = None
    batch = options.batch_per_replica // 2
    while batch >= 1 and fits is None:
        try:
            run_worker(options.worker_config(batch_per_replica=batch, only_full=True, steps=1, warmup=1,
                                             trace_dir=None), on_event, options.timeout_s)
            fits = batch
        except OutOfMemory:
            batch //= 2
    verdict = out_of_memory(options.batch_per_replica, fits, error.message)
    return Report(mode="reference" if options.workload == "reference" else "workload", requested=options.gpus,
                  device_kind="unknown", device_names=[],
                  workload={"name": options.workload, "variant": options.variant,
                            "per_replica_batch": options.batch_per_replica, "fits_per_replica_batch": fits},
                  breakdown=None, verdict=verdict, suggestions=[])
