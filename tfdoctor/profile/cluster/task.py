"""One task of a multi-worker job, as `tfdoctor profile --from-tf-config` runs it on each host: measure this
worker's phases in a child process (in step with the other workers) and make its part."""

from __future__ import annotations

import hashlib
import json
import socket
from typing import Callable

from tfdoctor.profile import protocol
from tfdoctor.profile.cluster.parts import PART_VERSION, WorkerPart
from tfdoctor.profile.cluster.tf_config import ClusterConfig
from tfdoctor.profile.measure import Options
from tfdoctor.profile.protocol import Event
from tfdoctor.profile.runner import OutOfMemory, ProfileError, run_worker


def job_id(cluster: ClusterConfig) -> str:
    """The same on every task of one job: a digest of the job's addresses."""
    text = json.dumps({kind: sorted(addresses) for kind, addresses in sorted(cluster.cluster.items())})
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def measure_task(cluster: ClusterConfig, options: Options, on_event: Callable[[Event], None]) -> WorkerPart:
    """This task's part; a failure (crash, hang, out of memory) becomes a part whose `error` says why."""
    base = dict(version=PART_VERSION, task=cluster.task.name, job=job_id(cluster),
                job_tasks=len(cluster.training_tasks), address=cluster.address, host=socket.gethostname())
    try:
        child = run_worker(options.worker_config(multi_worker=True, fewer_replicas=[]), on_event, options.timeout_s)
    except OutOfMemory as error:
        return WorkerPart(**base, replicas=0, device_kind="unknown", device_names=[], collective="", workload={},
                          phases=None, error=f"out of memory: {error.message}")
    except ProfileError as error:
        return WorkerPart(**base, replicas=0, device_kind="unknown", device_names=[], collective="", workload={},
                          phases=None, error=str(error))
    devices, work, measured = (child.last(protocol.Devices), child.last(protocol.WorkloadReady),
                               child.last(protocol.Measured))
    assert devices and work and measured  # run_worker returns only a child that sent its result
    return WorkerPart(**base, replicas=devices.replicas or len(devices.names), device_kind=devices.kind,
                      device_names=devices.names, collective=devices.collective or "",
                      workload={"name": work.name, "global_batch": work.global_batch,
                                "per_replica_batch": work.per_replica_batch},
                      phases=measured.times, notes=work.notes, causes=work.causes)
