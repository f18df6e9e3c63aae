"""How many cores the machine's other processes kept busy while a window was measured (Linux `/proc`; elsewhere
nothing is known and nothing is said). A profiled step that shares its cores with someone else's work runs
slower by an amount that changes from run to run, so the report says when it happened.

The measured process counts with its descendants (Keras process workers), read from `/proc/<pid>/stat`, so
that only the rest of the machine is called load. A local job's workers count the whole job: the process that
started them names itself in JOB_ROOT_ENV, and the tree is taken from there."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
JOB_ROOT_ENV = "TFDOCTOR_JOB_ROOT_PID"  # set for a local job's workers: the pid of the process that started them
LOADED_CORES = 0.5  # other processes using half a core or more, on average, make the times unsteady


@dataclass(frozen=True)
class CpuSample:
    """Cumulative CPU seconds: all cores busy (`machine`) and this process tree (`own`), at `wall`."""

    machine: float
    own: float
    wall: float


def sample(pid: int | None = None) -> CpuSample | None:
    """Now's counters for the process `pid` (by default the local job's root, or else this one) and its
    descendants; None without `/proc`."""
    try:
        fields = (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    values = [int(value) for value in fields]
    busy = sum(values) - values[3] - (values[4] if len(values) > 4 else 0)  # all but idle and iowait
    root = pid or int(os.environ.get(JOB_ROOT_ENV) or 0) or os.getpid()
    return CpuSample(busy / ticks, _tree_seconds(root, ticks), time.monotonic())


def others_cores(start: CpuSample, end: CpuSample) -> float:
    """Cores that other processes kept busy, on average, between two samples."""
    wall = end.wall - start.wall
    if wall <= 0:
        return 0.0
    return max(0.0, (end.machine - start.machine) - (end.own - start.own)) / wall


def load_note(start: CpuSample | None, end: CpuSample | None, during: str = "the steps were measured") -> str | None:
    """A note when other processes took cores between the two samples (`during` says what ran), else None."""
    if start is None or end is None:
        return None
    cores = others_cores(start, end)
    if cores < LOADED_CORES:
        return None
    return (f"other processes kept {cores:.1f} of the machine's {os.cpu_count()} cores busy while {during}: times "
            "and shares can differ from run to run; profile again on a quiet machine")


def _tree_seconds(root: int, ticks: int) -> float:
    """CPU seconds of `root` and every live descendant (utime + stime, and what each has reaped)."""
    parents: dict[int, int] = {}
    seconds: dict[int, float] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        parents[int(entry.name)] = int(fields[1])
        seconds[int(entry.name)] = sum(int(value) for value in fields[11:15]) / ticks  # utime stime cutime cstime
    tree, todo = {root}, [root]
    while todo:
        parent = todo.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        todo.extend(children)
    return sum(seconds.get(pid, 0.0) for pid in tree)
