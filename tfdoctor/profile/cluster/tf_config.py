"""TF_CONFIG, the cluster description TensorFlow's multi-worker runtime reads: parsed, checked and written.

A job's tasks are its `chief` (if any) and its `worker`s; `ps` and `evaluator` tasks run no training step.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Mapping

TRAINING_TYPES = ("chief", "worker")
LOOPBACK = "127.0.0.1"


class ClusterConfigError(Exception):
    """TF_CONFIG is missing or malformed: the message is one line for the user."""


@dataclass(frozen=True)
class Task:
    type: str
    index: int

    @property
    def name(self) -> str:
        """`worker-1`: also the name of the task's part file."""
        return f"{self.type}-{self.index}"


@dataclass(frozen=True)
class ClusterConfig:
    """One process's view of the job: every task's address, and which task this process is."""

    cluster: dict[str, tuple[str, ...]]
    task: Task

    @property
    def training_tasks(self) -> list[Task]:
        """The tasks that run training steps, chief first."""
        return [Task(kind, index) for kind in TRAINING_TYPES for index in range(len(self.cluster.get(kind, ())))]

    @property
    def address(self) -> str:
        return self.cluster[self.task.type][self.task.index]

    def to_json(self) -> str:
        return json.dumps({"cluster": {kind: list(addresses) for kind, addresses in self.cluster.items()},
                           "task": {"type": self.task.type, "index": self.task.index}})


def from_environment(environ: Mapping[str, str]) -> ClusterConfig:
    """The TF_CONFIG of this process; ClusterConfigError when it is missing or is not a training task's."""
    text = environ.get("TF_CONFIG", "").strip()
    if not text:
        raise ClusterConfigError("TF_CONFIG is not set: --from-tf-config runs on each host of a job that sets it")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ClusterConfigError(f"TF_CONFIG is not JSON: {error.msg} at character {error.pos}") from None
    if not isinstance(document, dict) or not isinstance(document.get("cluster"), dict):
        raise ClusterConfigError('TF_CONFIG has no "cluster" object')
    cluster: dict[str, tuple[str, ...]] = {}
    for kind, addresses in document["cluster"].items():
        if not isinstance(addresses, list) or not all(isinstance(a, str) and ":" in a for a in addresses):
            raise ClusterConfigError(f'TF_CONFIG cluster "{kind}" must be a list of "host:port" addresses')
        cluster[str(kind)] = tuple(addresses)
    task = document.get("task")
    if not isinstance(task, dict) or not isinstance(task.get("type"), str) or not isinstance(task.get("index"), int):
        raise ClusterConfigError('TF_CONFIG "task" must be {"type": ..., "index": ...}')
    config = ClusterConfig(cluster, Task(task["type"], task["index"]))
    if config.task.type not in TRAINING_TYPES:
        raise ClusterConfigError(f"this task is a {config.task.type!r}, which runs no training step: run tfdoctor "
                                 "on the chief and worker tasks")
    if not 0 <= config.task.index < len(cluster.get(config.task.type, ())):
        raise ClusterConfigError(f"TF_CONFIG task {config.task.name} is not in its cluster")
    return config


def local_cluster(workers: int, ports: list[int]) -> list[ClusterConfig]:
    """One TF_CONFIG per local worker process, every address on loopback."""
    addresses = tuple(f"{LOOPBACK}:{port}" for port in ports[:workers])
    return [ClusterConfig({"worker": addresses}, Task("worker", index)) for index in range(workers)]


def free_ports(count: int) -> list[int]:
    """Ports on loopback that nothing listens on now (the workers bind them a moment later, so a rare clash is
    possible: the local launcher retries with others)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
