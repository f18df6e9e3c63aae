"""Run a function over items, in worker processes when there is enough work, so that no item can take the run
down.

Results come back in the items' order, so a parallel run reports exactly what a serial one does. The
function must not raise (the engine's task function turns every error into a result). What it cannot turn
into a result is caught here, for the one item that caused it:

- a worker that dies (a native crash in libcst, a kill from outside) is replaced by a fresh one, which runs the
  item it was on once more (a kill or a fault of the machine's, not of the file, then costs nothing); a second
  death gives `failed(item, reason)` for that item. The rest of its share goes to a fresh worker too;
- a watchdog polls the memory the run adds (this process and its workers, proportional set sizes, beyond
  what this process held when the pool started: a caller that has imported TensorFlow already holds a
  gigabyte, which forked workers share) and each item's CPU time: over MEMORY_LIMIT the largest worker is
  stopped and its item is tried again alone at the end, with
  the whole budget, then fails if it still needs more; an item running past SECONDS_PER_ITEM fails;
- in a serial run, the items flagged `isolate` (the guard could not bound their depth, or they are large
  enough to need a lot of memory) run in a worker of their own, so this process never parses them.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Callable, Generic, Sequence, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

# Starting a pool and shipping the sources costs about 0.1 s; parsing and checking runs at roughly 1 MB/s
# per core, so below this much source a single process finishes first.
MIN_POOL_BYTES = 256 * 1024
MB = 1024 * 1024
# What a run adds stays under 2 GB: libcst needs 300-1,000 bytes of memory per byte of source, so one file
# at the default max-file-bytes (1 MiB) fits when it runs alone.
MEMORY_LIMIT = 1800 * MB
# CPU seconds (a loaded machine stretches wall time, not CPU time): a 760 KB file takes 5-40 s; nothing
# legitimate comes near this.
SECONDS_PER_ITEM = 300.0
_POLL_SECONDS = 0.2


def job_count(jobs: int | None) -> int:
    """`jobs`, or one per core for None or 0."""
    return jobs if jobs and jobs > 0 else (os.cpu_count() or 1)


@dataclass(frozen=True)
class Limits:
    """What one run may use."""

    memory_bytes: int = MEMORY_LIMIT
    seconds_per_item: float = SECONDS_PER_ITEM


def map_ordered(function: Callable[[Item], Result], items: Sequence[Item], jobs: int | None, sizes: Sequence[int],
                failed: Callable[[Item, str], Result], isolate: Callable[[Item], bool] | None = None,
                limits: Limits = Limits()) -> list[Result]:
    """`[function(item) for item in items]`, across `jobs` processes when the items' total size is at least
    MIN_POOL_BYTES; `failed(item, reason)` for an item whose worker died or ran out of memory or time. In a
    serial run, `isolate(item)` (asked just before the item would run) sends it to a worker of its own."""
    workers = min(job_count(jobs), len(items))
    if workers >= 2 and sum(sizes) >= MIN_POOL_BYTES:
        return _Pool(function, items, failed, workers, limits).run()
    results: list[Result | None] = [None] * len(items)
    apart: list[int] = []
    for index, item in enumerate(items):
        if isolate is not None and isolate(item):
            apart.append(index)
        else:
            results[index] = function(item)
    if apart:
        separate = _Pool(function, [items[index] for index in apart], failed, 1, limits).run()
        for index, result in zip(apart, separate):
            results[index] = result
    return results  # type: ignore[return-value]


@dataclass(eq=False)  # compared by identity: a key of the watchdog's table
class _Worker:
    process: multiprocessing.process.BaseProcess
    connection: Connection
    share: deque[int] = field(default_factory=deque)  # indices sent and not answered, in the order run
    started: float = 0.0  # the worker's CPU seconds when the item at share[0] began
    stopped_for: str | None = None  # why the watchdog stopped it
    retry_alone: bool = False  # stopped for the run's memory while others ran


class _Pool(Generic[Item, Result]):
    """Forked workers that each run one share of the items at a time and answer item by item."""

    def __init__(self, function: Callable[[Item], Result], items: Sequence[Item], failed: Callable[[Item, str], Result],
                 workers: int, limits: Limits) -> None:
        self.function, self.items, self.failed, self.size, self.limits = function, items, failed, workers, limits
        self.results: list[Result | None] = [None] * len(items)
        self.pending: deque[int] = deque(range(len(items)))
        self.retry_alone: list[int] = []  # stopped for the run's memory while others ran
        self.died_on: set[int] = set()  # items a worker died on once already
        self.workers: list[_Worker] = []
        self.polled = 0.0  # when the watchdog last read the memory
        self.baseline = process_memory(os.getpid())  # what this process held before the run
        self.chunk = max(1, len(items) // (workers * 8))  # small shares: one big file must not hold up others

    def run(self) -> list[Result]:
        try:
            self._drain()
            while self.retry_alone:  # each alone, with the whole budget: no other worker keeps its memory
                for worker in self.workers:
                    _stop(worker)
                self.workers = []
                self.pending.append(self.retry_alone.pop(0))
                self.size, self.chunk = 1, 1
                self._drain(last_chance=True)
        finally:
            for worker in self.workers:
                _stop(worker)
        return self.results  # type: ignore[return-value]

    def _drain(self, last_chance: bool = False) -> None:
        while self.pending or any(worker.share for worker in self.workers):
            self._hand_out()
            busy = [worker for worker in self.workers if worker.share]
            ready = wait([w.connection for w in busy] + [w.process.sentinel for w in busy], timeout=_POLL_SECONDS)
            for worker in busy:
                if worker.connection in ready or worker.process.sentinel in ready:
                    self._collect(worker)
            self._watch(last_chance)

    def _hand_out(self) -> None:
        self.workers = [worker for worker in self.workers if worker.process.is_alive() or worker.share]
        while self.pending and len(self.workers) < self.size:
            self.workers.append(self._start())
        for worker in list(self.workers):
            if not worker.share and self.pending:
                share = [self.pending.popleft() for _ in range(min(self.chunk, len(self.pending)))]
                try:
                    worker.connection.send([(index, self.items[index]) for index in share])
                except OSError:  # it died idle (killed from outside): nothing of it was run, all goes back
                    self.pending.extendleft(reversed(share))
                    worker.connection.close()
                    self.workers.remove(worker)
                    continue
                worker.share.extend(share)
                worker.started = cpu_seconds(worker.process.pid)

    def _start(self) -> _Worker:
        ours, theirs = _context().Pipe()
        process = _context().Process(target=_serve, args=(self.function, theirs), daemon=True)
        process.start()
        theirs.close()
        return _Worker(process, ours)

    def _collect(self, worker: _Worker) -> None:
        try:
            while worker.share and worker.connection.poll():
                index, result = worker.connection.recv()
                self.results[index] = result
                worker.share.popleft()
                worker.started = cpu_seconds(worker.process.pid)
        except (EOFError, OSError):
            pass
        if worker.share and not worker.process.is_alive():
            self._lost(worker)

    def _lost(self, worker: _Worker) -> None:
        """The worker is gone: its current item runs again once, waits to run alone, or fails; the rest of its
        share goes back."""
        current, *rest = worker.share
        worker.share.clear()
        self.pending.extendleft(reversed(rest))
        if worker.retry_alone:
            self.retry_alone.append(current)
        elif worker.stopped_for is None and current not in self.died_on:
            self.died_on.add(current)
            self.pending.appendleft(current)
            worker.process.join(timeout=1)
        else:
            reason = worker.stopped_for or _death(worker.process)
            self.results[current] = self.failed(self.items[current], reason)
        worker.connection.close()
        self.workers.remove(worker)

    def _watch(self, last_chance: bool) -> None:
        now = time.monotonic()
        if now - self.polled < _POLL_SECONDS:
            return
        self.polled = now
        for worker in [w for w in self.workers if w.share]:
            if cpu_seconds(worker.process.pid) - worker.started > self.limits.seconds_per_item:
                worker.stopped_for = f"linting this file took more than {self.limits.seconds_per_item:.0f} s of CPU time"
                _kill(worker)
        sizes = {worker: process_memory(worker.process.pid) for worker in self.workers
                 if worker.share and worker.process.is_alive()}
        if not sizes or process_memory(os.getpid()) + sum(sizes.values()) - self.baseline <= self.limits.memory_bytes:
            return
        largest = max(sizes, key=sizes.__getitem__)
        if len(sizes) > 1 and not last_chance:
            largest.retry_alone = True  # others were running too: it gets the whole budget later
        else:
            largest.stopped_for = f"linting this file needed more than {self.limits.memory_bytes // MB} MB of memory"
        _kill(largest)


def _serve(function: Callable[[Item], Result], connection: Connection) -> None:
    """A worker's loop: receive a share, answer each item as soon as it is done."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    parent = os.getppid()

    while True:
        try:
            share = connection.recv()
        except EOFError:
            return
        for index, item in share:
            if os.getppid() != parent:  # the run was killed: nobody wants the rest
                return
            connection.send((index, function(item)))


def process_memory(pid: int) -> int:
    """A process's proportional set size (shared pages split among the processes sharing them), else its
    resident size; 0 where neither can be read (not Linux)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as stream:
            for line in stream:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/statm", "rb") as stream:
            return int(stream.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def cpu_seconds(pid: int) -> float:
    """A process's CPU time (user + system); 0 where it cannot be read (not Linux: no time limit)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stream:
            fields = stream.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _death(process: multiprocessing.process.BaseProcess) -> str:
    process.join(timeout=1)
    code = process.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the process linting this file crashed ({name})"
    return f"the process linting this file exited unexpectedly (status {code})"


def _kill(worker: _Worker) -> None:
    if worker.process.is_alive():
        worker.process.kill()


def _stop(worker: _Worker) -> None:
    try:
        worker.connection.close()
    except OSError:
        pass
    worker.process.join(timeout=1)
    if worker.process.is_alive():
        worker.process.kill()
        worker.process.join()


def _context() -> multiprocessing.context.BaseContext:
    # fork starts a worker in milliseconds with the rules already imported; macOS and Windows lack a safe one.
    if sys.platform == "linux":
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")
