"""Run a function over items in worker processes when there is enough work to pay for them.

Results come back in the items' order, so a parallel run reports exactly what a serial one does. The
function must not raise (the engine's task function turns every error into a result); a worker process
that dies (killed, out of memory) gives `died(item)` for each item it had not finished.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Sequence, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

# Starting a pool and shipping the sources costs about 0.1 s; parsing and checking runs at roughly 1 MB/s
# per core, so below this much source a single process finishes first.
MIN_POOL_BYTES = 256 * 1024


def job_count(jobs: int | None) -> int:
    """`jobs`, or one per core for None or 0."""
    return jobs if jobs and jobs > 0 else (os.cpu_count() or 1)


def map_ordered(function: Callable[[Item], Result], items: Sequence[Item], jobs: int | None, sizes: Sequence[int],
                died: Callable[[Item], Result]) -> list[Result]:
    """`[function(item) for item in items]`, across `jobs` processes when the items' total size is at least
    MIN_POOL_BYTES."""
    workers = min(job_count(jobs), len(items))
    if workers < 2 or sum(sizes) < MIN_POOL_BYTES:
        return [function(item) for item in items]
    results: list[Result] = []
    chunk = max(1, len(items) // (workers * 8))  # small chunks: one big file must not hold up a whole share
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=_context()) as pool:
            for result in pool.map(function, items, chunksize=chunk):
                results.append(result)
    except BrokenProcessPool:
        results.extend(died(item) for item in items[len(results):])
    return results


def _context() -> multiprocessing.context.BaseContext:
    # fork starts a worker in milliseconds with the rules already imported; macOS and Windows lack a safe one.
    if sys.platform == "linux":
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")
