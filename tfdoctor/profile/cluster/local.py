"""`tfdoctor profile --workers W`: a multi-worker job on this host. It runs W copies of the per-host wrapper
(`tfdoctor profile --from-tf-config --output-dir DIR`, exactly what runs on each host of a real cluster),
each with its own TF_CONFIG on free loopback ports, and leaves their parts in DIR for the merge."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable

from tfdoctor.profile.cluster.parts import SUFFIX
from tfdoctor.profile.cluster.tf_config import free_ports, local_cluster
from tfdoctor.profile.machine_load import JOB_ROOT_ENV
from tfdoctor.profile.protocol import Event
from tfdoctor.profile.runner import Child, ProfileError, follow

ATTEMPTS = 3  # a port taken between choosing it and binding it is retried with fresh ports
PORT_TAKEN = ("address already in use", "could not start grpc server", "failed to add port")


def run_local_job(workers: int, wrapper_args: list[str], folder: Path, timeout_s: float,
                  on_event: Callable[[str, Event], None]) -> None:
    """Run the job's W wrappers until each has written its part in `folder`. One that fails or hangs ends
    them all (their process groups are killed) with ProfileError naming it and its last error."""
    for attempt in range(1, ATTEMPTS + 1):
        for old in folder.glob(f"*{SUFFIX}"):
            old.unlink()
        configs = local_cluster(workers, free_ports(workers))
        children: list[Child] = []
        try:
            for config in configs:
                children.append(Child([sys.executable, "-m", "tfdoctor", "profile", "--from-tf-config",
                                       "--output-dir", str(folder), *wrapper_args],
                                      env={"TF_CONFIG": config.to_json(), JOB_ROOT_ENV: str(os.getpid())},
                                      name=config.task.name))
            follow(children, time.monotonic() + timeout_s, lambda child, event: on_event(child.name, event),
                   fail_fast=True)
            return
        except ProfileError as error:
            for child in children:
                child.kill()
            if attempt == ATTEMPTS or not any(text in str(error).lower() for text in PORT_TAKEN):
                raise
