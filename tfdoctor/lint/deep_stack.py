"""Run a call on a deep stack: parsing and walking a tree recurse once per level of nesting.

At Python's default recursion limit, libcst and the facts walk give up (RecursionError) at about 300 levels.
CPython itself accepts trees about 3,000 levels deep (the guard refuses deeper ones); linting one of every
kind (unary, lambda, ternary, sum, `or`, call, attribute, power, `not` chains) takes a recursion limit of
15,000 and about 8 MB of stack. So each file is linted in a thread with four times that stack (reserved
address space: pages are touched only as deep as the recursion goes). A deeper stack would only let a
tree the guard could not bound grow for longer (libcst builds 100,000 levels of `-` in 20 GB) instead of
ending in a crash that the isolation reports. Starting the thread costs about 0.1 ms per file.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from typing import Callable, TypeVar

STACK_BYTES = 32 * 1024 * 1024
RECURSION_LIMIT = 15_000
_NAME = "tfdoctor-deep-stack"
Value = TypeVar("Value")


def _gone(before: int, limit_s: float = 0.1) -> None:
    """Wait (at most `limit_s`) until the kernel counts no more threads than `before`. A thread Python has
    joined goes on for about a millisecond in the C library, freeing the stack it touched; a worker forked
    meanwhile (`parallel.py`) would start from a process with a thread half gone (Python 3.12 warns of it).
    Linux only: elsewhere the count reads 0 and nothing waits."""
    give_up = time.monotonic() + limit_s
    while os_threads() > before and time.monotonic() < give_up:
        time.sleep(0.0002)


def os_threads() -> int:
    """The threads the kernel counts in this process (0 where it cannot be read)."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def deep_stack(function: Callable[..., Value]) -> Callable[..., Value]:
    """Decorate a function so that each call runs on a deep stack (directly when already on one)."""

    @functools.wraps(function)
    def wrapper(*args: object, **kwargs: object) -> Value:
        return run_deep(lambda: function(*args, **kwargs))

    return wrapper


def run_deep(call: Callable[[], Value]) -> Value:
    """`call()` in a thread with a deep stack and a raised recursion limit; its result or its exception."""
    if threading.current_thread().name == _NAME:
        return call()
    outcome: list[Value] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            outcome.append(call())
        except BaseException as error:  # re-raised in the caller's thread
            failure.append(error)

    previous_limit = sys.getrecursionlimit()
    before = os_threads()
    try:
        previous_stack = threading.stack_size(STACK_BYTES)
    except (ValueError, RuntimeError):  # a platform without settable thread stacks: the default, as before
        return call()
    sys.setrecursionlimit(max(previous_limit, RECURSION_LIMIT))
    try:
        thread = threading.Thread(target=target, name=_NAME, daemon=True)
        thread.start()
    except RuntimeError:  # the stack could not be reserved (a low `ulimit -v`)
        sys.setrecursionlimit(previous_limit)
        return call()
    finally:
        threading.stack_size(previous_stack)
    try:
        thread.join()
        _gone(before)
    finally:
        sys.setrecursionlimit(previous_limit)
    if failure:
        raise failure[0]
    return outcome[0]
