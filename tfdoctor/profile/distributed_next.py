"""`next()` on a distributed iterator of a multi-worker job, split into this worker's own input and its wait for
the other workers.

When a distributed dataset's cardinality is not known to be infinite, each `next()` also agrees with the other
workers on whether each still has data (an all-reduce of a flag, `input_lib._calculate_replicas_with_values`).
A worker whose batch is ready then waits there for a slower worker: timed as a whole, that wait looks like
its own input. The time inside the worker's own iterators (`_SingleWorkerDatasetIteratorBase`) is its input;
the rest of the call is waiting for the others.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from tensorflow.python.distribute import input_lib

_LOCAL = threading.local()  # .own: the seconds collected for the `next()` in progress on this thread, or None
_INSTALLED = {"done": False}


def spans_workers(iterator: Any) -> bool:
    """Whether `iterator` is a distributed iterator whose strategy spans several workers."""
    try:
        return isinstance(iterator, input_lib.DistributedIteratorBase) and bool(
            iterator._strategy.extended._in_multi_worker_mode())
    except AttributeError:
        return False


def split(fetch: Callable[[], Any]) -> tuple[Any, float, float]:
    """`fetch()` (a `next()` on a distributed iterator that spans workers), with the seconds it spent in this
    worker's own iterators and the seconds it spent waiting for the other workers."""
    _install()
    _LOCAL.own = own = []
    start = time.perf_counter()
    try:
        item = fetch()
    finally:
        _LOCAL.own = None
    total = time.perf_counter() - start
    return item, min(sum(own), total), max(total - sum(own), 0.0)


def _install() -> None:
    if _INSTALLED["done"]:
        return
    _INSTALLED["done"] = True
    worker = input_lib._SingleWorkerDatasetIteratorBase
    for name in ("get_next_as_list", "get_next_as_optional_list"):
        setattr(worker, name, _counted(getattr(worker, name)))


def _counted(original: Callable) -> Callable:
    def counted(*args: Any, **kwargs: Any) -> Any:
        own = getattr(_LOCAL, "own", None)
        if own is None:
            return original(*args, **kwargs)
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            own.append(time.perf_counter() - start)
    return counted
