"""The child process that sets up the replicas, builds the workload, measures it and prints the results as
JSON event lines (`TFDOCTOR_EVENT {...}`) on stdout. It is the only part of the profiler that imports
TensorFlow; the parent shows progress and turns any failure into one line.

    python -m tfdoctor.profile.worker '{"workload": "reference", "variant": "tuned", "replicas": 2, ...}'
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

EVENT_PREFIX = "TFDOCTOR_EVENT "
# Every input iterator stays referenced until the process ends without teardown (`os._exit`): deleting a
# tf.data iterator waits for its autotuning thread to wake, and after a minute of use that thread sleeps for
# up to a minute (stalls of 10-30 s were seen here, in the middle of a profile).
_ITERATORS: list[Any] = []


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(EVENT_PREFIX + json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def _progress(phase: str, done: int, total: int) -> None:
    emit("progress", phase=phase, done=done, total=total)


def load_workload(spec: str):
    """`reference` or `package.module:function`, a function (strategy, params) -> StepFunctions."""
    if spec == "reference":
        spec = "tfdoctor.profile.reference_workload:build"
    module_name, _, function = spec.partition(":")
    return getattr(importlib.import_module(module_name), function or "build")


def run(config: dict[str, Any]) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from tfdoctor.profile import phases, trace
    from tfdoctor.reference.devices import setup_replicas

    started = time.perf_counter()
    strategy, kind, names = setup_replicas(int(config["replicas"]))
    emit("devices", kind=kind, names=names)
    build = load_workload(config.get("workload", "reference"))
    try:
        work = build(strategy, config)
        emit("workload", name=work.name, global_batch=work.global_batch, per_replica_batch=work.per_replica_batch,
             notes=work.notes,
             causes=[list(cause) for cause in work.causes])
        if config.get("only_full"):
            full, waits = phases.measure_full(work, _iterator(work), int(config["steps"]), int(config["warmup"]),
                                              _progress)
            emit("result", full=full, input_wait=waits, elapsed_s=time.perf_counter() - started)
            return
        batches = _iterator(work)
        times = phases.measure(work, batches, int(config["steps"]), int(config["warmup"]), _progress,
                               kind == "cpu")
        summary = None
        if config.get("trace_dir"):
            _progress("trace", 0, 1)
            summary = trace.capture(work, batches, Path(config["trace_dir"]), int(config.get("trace_steps", 3)))
            _progress("trace", 1, 1)
        throughput = [_fewer_replicas(build, names[:count], config) for count in config.get("fewer_replicas", [])]
        emit("result", full=times.full, input_wait=times.input_wait, on_device=times.on_device,
             stored=times.stored, looped=times.looped, gradients=times.gradients, reduced=times.reduced,
             trace=summary, fewer_replicas=throughput, elapsed_s=time.perf_counter() - started)
    except tf.errors.ResourceExhaustedError as error:
        emit("oom", message=str(error.message).strip().splitlines()[0][:300])


def _fewer_replicas(build: Any, names: list[str], config: dict[str, Any]) -> dict[str, Any]:
    """Phase D: full steps of the same workload on the first `len(names)` devices. It runs in this process,
    which has set them up and imported TensorFlow already (a process of its own costs ~8 s more)."""
    import tensorflow as tf

    from tfdoctor.profile import phases

    work = build(tf.distribute.MirroredStrategy(names), {**config, "replicas": len(names)})
    label = f"D {len(names)} replica{'s' if len(names) > 1 else ''}"
    full, _ = phases.measure_full(work, _iterator(work), int(config["fewer_replicas_steps"]), int(config["warmup"]),
                                  _progress, label)
    return {"replicas": len(names), "global_batch": work.global_batch, "full": full}


def _iterator(work: Any) -> Any:
    batches = work.batches()
    _ITERATORS.append(batches)
    return batches


def main() -> int:
    try:
        run(json.loads(sys.argv[1]))
    except Exception as error:  # the parent shows this one line and the exit code
        emit("error", message=f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"[:500])
        raise
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # no teardown, which would destroy the iterators (see _ITERATORS); all is reported
