"""One task of a multi-worker job, as `tfdoctor profile --from-tf-config` runs it on each host: measure this
worker's phases in a child process (in step with the other workers) and make its part."""

from __future__ import annotations

import hashlib
import json
import socket
import statistics
from typing import Callable

from tfdoctor.profile import protocol
from tfdoctor.profile.cluster.parts import PART_VERSION, WorkerPart
from tfdoctor.profile.cluster.tf_config import ClusterConfig
from tfdoctor.profile.measure import Options, settle_notes
from tfdoctor.profile.protocol import Event
from tfdoctor.profile.protocol import PhaseTimes
from tfdoctor.profile.runner import OutOfMemory, ProfileError, run_worker, trace_of
from tfdoctor.profile.script.parent import ScriptOptions, run_script

PEER_NOTE_S = 0.001  # a median wait for the other workers inside next() worth a note


def job_id(cluster: ClusterConfig) -> str:
    """The same on every task of one job: a digest of the job's addresses."""
    text = json.dumps({kind: sorted(addresses) for kind, addresses in sorted(cluster.cluster.items())})
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _failed(base: dict, error: str) -> WorkerPart:
    return WorkerPart(**base, replicas=0, device_kind="unknown", device_names=[], collective="", workload={},
                      phases=None, error=error)


def _named(cluster: ClusterConfig, note: str | None) -> list[str]:
    """A note of this task's, for the merged report: its task name first."""
    return [f"{cluster.task.name}: {note}"] if note else []


def _base(cluster: ClusterConfig) -> dict:
    return dict(version=PART_VERSION, task=cluster.task.name, job=job_id(cluster),
                job_tasks=len(cluster.training_tasks), address=cluster.address, host=socket.gethostname())


def measure_task(cluster: ClusterConfig, options: Options, on_event: Callable[[Event], None]) -> WorkerPart:
    """This task's part of a reference (or --workload) job; a failure (crash, hang, out of memory) becomes a
    part whose `error` says why."""
    base = _base(cluster)
    try:
        child = run_worker(options.worker_config(multi_worker=True, fewer_replicas=[]), on_event, options.timeout_s)
    except OutOfMemory as error:
        return _failed(base, f"out of memory: {error.message}")
    except ProfileError as error:
        return _failed(base, str(error))
    devices, work, measured = (child.last(protocol.Devices), child.last(protocol.WorkloadReady),
                               child.last(protocol.Measured))
    assert devices and work and measured  # run_worker returns only a child that sent its result
    traced, lost = trace_of(child, options.logdir is not None)
    return WorkerPart(**base, replicas=devices.replicas or len(devices.names), device_kind=devices.kind,
                      device_names=devices.names, collective=devices.collective or "",
                      workload={"name": work.name, "global_batch": work.global_batch,
                                "per_replica_batch": work.per_replica_batch},
                      phases=measured.times, causes=work.causes,
                      notes=[*work.notes, *settle_notes(measured.times), *_named(cluster, lost)],
                      trace_logdir=traced.get("logdir") if traced else None,
                      what_if=[event for event in child.events if isinstance(event, protocol.WhatIf)])


def measure_script_task(cluster: ClusterConfig, options: ScriptOptions,
                        on_event: Callable[[Event], None]) -> WorkerPart:
    """This task's part of a job that runs the user's script on every worker: its step window, with the
    step call's time beyond the replayed step (run in step on every worker) and the input calls' waits for
    the other workers (a distributed iterator's `next()`) as waiting for the others, and the script's lint
    findings as causes."""
    from tfdoctor.profile.script.join import lint_findings

    base = _base(cluster)
    try:
        child, target = run_script(options, on_event)
    except OutOfMemory as error:
        return _failed(base, f"out of memory: {error.message}")
    except ProfileError as error:
        return _failed(base, str(error))
    devices, result = child.last(protocol.Devices), child.last(protocol.ScriptMeasured)
    assert result is not None  # run_script returns only a child that sent its result
    times = result.times
    traced, lost = trace_of(child, options.logdir is not None and options.trace_steps > 0)
    notes = [*result.notes, *_named(cluster, lost)]
    if not result.replay_steps:
        notes.append(f"{cluster.task.name}: the step was not replayed, so waiting for other workers is not "
                     "separated from compute")
    peers = result.peer_waits or [0.0] * len(times.full)
    if statistics.median(peers) >= PEER_NOTE_S:
        notes.append(f"{cluster.task.name}: {statistics.median(peers) * 1000:.0f} ms per step inside next() waiting for "
                     "the other workers (a distributed dataset not known to be endless agrees with them on every "
                     "batch): counted as sync, not input")
    own_input = [full - call - peer for full, call, peer in zip(times.full, result.step_calls, peers)]
    phases = PhaseTimes(times.full, own_input,
                        result.replay_steps or result.step_calls[:len(times.full)], times.looped, times.gradients,
                        times.reduced)
    replicas = result.replicas  # 0: not known (the step was not replayed)
    findings = lint_findings(target.path, target.package)
    return WorkerPart(**base, replicas=replicas, device_kind=devices.kind if devices else "unknown",
                      device_names=[], collective="", notes=notes, phases=phases,
                      workload={"name": target.name, "global_batch": result.global_batch or None,
                                "per_replica_batch": result.global_batch // replicas if replicas else None},
                      trace_logdir=traced.get("logdir") if traced else None,
                      causes=[[f.code, f.path, f.line] for f in findings], separated=bool(result.replay_steps),
                      input_kind=result.input_kind, precision=result.precision,
                      what_if=[event for event in child.events if isinstance(event, protocol.WhatIf)])
