"""The child process that sets up the replicas, builds the workload, measures it and sends the results as
protocol events on its event channel (protocol.py). It is the only part of the profiler that imports
TensorFlow; the parent shows progress and turns any failure into one line.

    python -m tfdoctor.profile.worker '{"replicas": 2, "workload": "reference", "variant": "tuned", ...}'
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from tfdoctor.profile import protocol
from tfdoctor.profile.protocol import WorkerConfig

# Every input iterator stays referenced until the process ends without teardown (`os._exit`): deleting a
# tf.data iterator waits for its autotuning thread to wake, and after a minute of use that thread sleeps for
# up to a minute (stalls of 10-30 s were seen here, in the middle of a profile).
_ITERATORS: list[Any] = []
CHANNEL = protocol.Channel()


def load_workload(spec: str):
    """`reference` or `package.module:function`, a function (strategy, params) -> StepFunctions."""
    if spec == "reference":
        spec = "tfdoctor.profile.reference_workload:build"
    module_name, _, function = spec.partition(":")
    return getattr(importlib.import_module(module_name), function or "build")


def run(config: WorkerConfig) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from tfdoctor.profile import phases, trace
    from tfdoctor.reference.devices import setup_replicas

    started = time.perf_counter()
    agree = None
    if config.multi_worker:
        from tfdoctor.profile.cluster.strategy import agreed_largest, multi_worker_strategy

        strategy, kind, names, collective = multi_worker_strategy(config.replicas)
        agree = agreed_largest(strategy, phases.SETTLE_MAX)
        CHANNEL.emit(protocol.Devices(kind, names, collective, strategy.num_replicas_in_sync))
    else:
        strategy, kind, names = setup_replicas(config.replicas)
        CHANNEL.emit(protocol.Devices(kind, names))
    build = load_workload(config.workload)
    progress = CHANNEL.progress
    try:
        work = build(strategy, config.workload_params())
        CHANNEL.emit(protocol.WorkloadReady(work.name, work.global_batch, work.per_replica_batch, work.notes,
                                            [list(cause) for cause in work.causes]))
        if config.only_full:
            full, waits = phases.measure_full(work, _iterator(work), config.steps, config.warmup, progress)
            CHANNEL.emit(protocol.Measured(protocol.PhaseTimes(full, waits), time.perf_counter() - started))
            return
        batches = _iterator(work)
        # Phase S needs a pipeline that can sit idle while this worker alone steps: in a job, every step waits
        # for all workers, so it is not run there.
        times = phases.measure(work, batches, config.steps, config.warmup, progress,
                               kind == "cpu" and not config.multi_worker, agree)
        clock = phases.check_clock(work, batches, progress, synchronise=not config.multi_worker)
        throughput = [_fewer_replicas(build, names[:count], config) for count in config.fewer_replicas]
        CHANNEL.emit(protocol.Measured(times, time.perf_counter() - started, throughput, clock))
        if config.what_if:
            from tfdoctor.profile.trials import Trials

            trials = Trials(work, batches, build, strategy, config, kind, progress, _keep, times, agree)
            for result in trials.run(config.what_if):
                CHANNEL.emit(result)
        if config.trace_dir:  # last: TensorFlow's profiler may crash the process (protocol.Traced)
            progress("trace", 0, 1)
            CHANNEL.emit(protocol.Traced(trace.capture(work, batches, Path(config.trace_dir), config.trace_steps)))
            progress("trace", 1, 1)
    except tf.errors.ResourceExhaustedError as error:
        CHANNEL.emit(protocol.OutOfMemory(str(error.message).strip().splitlines()[0][:300]))


def _fewer_replicas(build: Any, names: list[str], config: WorkerConfig) -> protocol.FewerReplicas:
    """Phase D: full steps of the same workload on the first `len(names)` devices. It runs in this process,
    which has set them up and imported TensorFlow already (a process of its own costs ~8 s more)."""
    import tensorflow as tf

    from tfdoctor.profile import phases

    work = build(tf.distribute.MirroredStrategy(names), config.workload_params())
    label = f"D {len(names)} replica{'s' if len(names) > 1 else ''}"
    full, _ = phases.measure_full(work, _iterator(work), config.fewer_replicas_steps, config.warmup,
                                  CHANNEL.progress, label)
    return protocol.FewerReplicas(len(names), work.global_batch, full)


def _iterator(work: Any) -> Any:
    return _keep(work.batches())


def _keep(batches: Any) -> Any:
    _ITERATORS.append(batches)
    return batches


def _die_with_parent() -> None:
    """Linux: this process is killed when the process that started it dies, however that dies (a killed
    multi-worker wrapper must not leave its measurement running, blocked in a collective)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def main() -> int:
    _die_with_parent()
    try:
        run(protocol.decode_config(sys.argv[1], WorkerConfig))
    except Exception as error:  # the parent shows this one line and the exit code
        text = str(error).strip()
        CHANNEL.emit(protocol.Failed(f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"[:500]))
        raise
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # no teardown, which would destroy the iterators (see _ITERATORS); all is reported
