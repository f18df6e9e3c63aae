"""A worker's part of a multi-worker profile: what one task measured, written as one JSON file in a folder
the job shares (a shared file system on a real cluster), and read back by `tfdoctor report DIR`."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfdoctor.profile.protocol import PhaseTimes, ProtocolError, WhatIf, decode_config

PART_VERSION = 1
SUFFIX = ".part.json"


class PartError(Exception):
    """A part folder that cannot be merged: the message is one line for the user."""


@dataclass(frozen=True)
class WorkerPart:
    version: int
    task: str                 # `worker-1`
    job: str                  # the same for every task of one job (a digest of its cluster)
    job_tasks: int            # training tasks in the job
    address: str
    host: str
    replicas: int             # replicas in the whole job (num_replicas_in_sync)
    device_kind: str
    device_names: list[str]
    collective: str           # RING or NCCL
    workload: dict[str, Any]  # name, global_batch, per_replica_batch
    phases: PhaseTimes | None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    causes: list[list[Any]] = field(default_factory=list)  # the workload's known (rule, path, line) causes
    what_if: list[WhatIf] = field(default_factory=list)    # the changes this task tried, in step with the others
    separated: bool = True    # False: its step was not replayed, so only its input was measured apart
    trace_logdir: str | None = None  # where this task's TensorFlow profiler trace went, when it was written
    input_kind: str = ""      # a script's input, as its hooks saw it (suggest.Seen)
    precision: str = ""       # a script's mixed Keras dtype policy

    @property
    def index(self) -> int:
        return int(self.task.rpartition("-")[2])


def part_path(folder: Path, task: str) -> Path:
    return folder / f"{task}{SUFFIX}"


def write_part(folder: Path, part: WorkerPart) -> Path:
    """Write `part` atomically: a reader never sees half a file, and an old part is replaced whole."""
    folder.mkdir(parents=True, exist_ok=True)
    target = part_path(folder, part.task)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{part.task}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(dataclasses.asdict(part), stream)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def read_part(path: Path) -> WorkerPart:
    """The part in one file; PartError naming the file when it is not one."""
    try:
        part = decode_config(path.read_text(encoding="utf-8"), WorkerPart)
        if part.version != PART_VERSION or not part.task.rpartition("-")[2].isdigit():
            raise ProtocolError(f"version {part.version} part of task {part.task!r}")
    except OSError as error:
        raise PartError(f"{path}: cannot read: {error.strerror or error}") from None
    except (ProtocolError, UnicodeDecodeError) as error:
        raise PartError(f"{path}: not a tfdoctor worker part ({error})") from None
    return part


def read_parts(folder: Path) -> list[WorkerPart]:
    """Every part in `folder`, chief and workers in task order, all of one job; PartError otherwise."""
    if not folder.is_dir():
        raise PartError(f"{folder}: no such folder")
    parts = [read_part(path) for path in sorted(folder.glob(f"*{SUFFIX}"))]
    if not parts:
        raise PartError(f"{folder}: no worker parts (*{SUFFIX}); run `tfdoctor profile --from-tf-config "
                        f"--output-dir {folder}` on each host first")
    jobs = {part.job for part in parts}
    if len(jobs) > 1:
        raise PartError(f"{folder}: parts of {len(jobs)} different jobs; keep one job's parts in a folder")
    return sorted(parts, key=lambda part: (not part.task.startswith("chief"), part.index))
