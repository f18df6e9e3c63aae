"""Phases B, H and C re-run on the arguments captured from a real step call (tensors or distributed values
already on the devices):

    B  the step again on the same batch (no input work)
    H  K steps inside one tf.function call
    C  the same Python step traced again with the cross-replica all-reduce passed through

and the breakdown's G/R become C/B, so sync = B - C (PROFILER.md's phase C). Replays update the weights;
the script is stopped after them.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import tensorflow as tf

from tfdoctor.profile.phases import measure_looped, wait
from tfdoctor.profile.workload import StepFunctions

Batch = tuple[tuple[Any, ...], dict[str, Any]]  # a step's (args, kwargs)
Progress = Callable[[str, int, int], None]
PASSTHROUGH = {"on": False}  # read by the all-reduce hook


@contextlib.contextmanager
def without_all_reduce() -> Iterator[None]:
    """While tracing and running phase C, `ReplicaContext.all_reduce` returns its input."""
    PASSTHROUGH["on"] = True
    try:
        yield
    finally:
        PASSTHROUGH["on"] = False


@dataclass
class Replay:
    """A captured step: `step(batch)` runs it, `unreduced(batch)` runs it without the all-reduce."""

    kind: str
    batch: Batch
    step: Callable[[Batch], Any]
    unreduced: Callable[[Batch], Any]
    replicas: int


def of_function(function: Any, args: tuple, kwargs: dict, replicas: int) -> Replay | None:
    """A `tf.function` step; None when its arguments are not a batch (an iterator, say)."""
    if not _is_batch(args, kwargs):
        return None
    plain = tf.function(function.python_function)
    return Replay("tf.function", (args, kwargs), lambda b: function(*b[0], **b[1]),
                  lambda b: plain(*b[0], **b[1]), replicas)


def of_eager_run(strategy: Any, fn: Callable, args: tuple, kwargs: dict) -> Replay | None:
    """An eager `strategy.run(fn, args, kwargs)` step."""
    if not _is_batch(args, kwargs):
        return None

    def run(batch: Batch) -> Any:
        return strategy.run(fn, args=batch[0], kwargs=batch[1])

    return Replay("eager strategy.run", (args, kwargs), run, run, strategy.num_replicas_in_sync)


def _is_batch(args: tuple, kwargs: dict) -> bool:
    values = tf.nest.flatten((args, kwargs))
    return not any(hasattr(v, "get_next") or isinstance(v, Iterator) for v in values)


def examples(batch: Batch) -> int:
    """The global batch: the leading dimension of the step's first array argument, over all replicas."""
    for value in tf.nest.flatten(batch):
        parts = getattr(value, "values", None) if not hasattr(value, "shape") else (value,)
        shapes = [getattr(p, "shape", None) for p in parts or ()]
        if shapes and all(s is not None and len(s) for s in shapes):
            return int(sum(s[0] for s in shapes))
    return 0


def measure(replay: Replay, steps: int, progress: Progress, notes: list[str]) -> dict[str, Any] | None:
    """B and C interleaved (so drift hits both alike) and H; None if the step cannot be run again."""
    try:
        wait(replay.step(replay.batch))
        with without_all_reduce():
            wait(replay.unreduced(replay.batch))
    except Exception as error:  # noqa: BLE001 - a step that cannot be replayed is reported, not fatal
        notes.append(f"the {replay.kind} step could not be replayed ({type(error).__name__}: {error})"[:300])
        return None
    on_device, unreduced = [], []
    for index in range(steps):
        on_device.append(_time(lambda: replay.step(replay.batch)))
        with without_all_reduce():
            unreduced.append(_time(lambda: replay.unreduced(replay.batch)))
        progress("B/C replays", index + 1, steps)
    global_batch = examples(replay.batch)
    work = StepFunctions(name=replay.kind, replicas=replay.replicas, global_batch=global_batch,
                         batches=lambda: iter(()), step=replay.step, device_batch=replay.batch,
                         gradients=replay.unreduced, reduced_gradients=replay.step)
    try:
        looped = measure_looped(work, steps, progress)
    except Exception as error:  # noqa: BLE001 - e.g. Python-only code in an eager step
        notes.append(f"the step could not run inside one tf.function ({type(error).__name__}); host overhead "
                     "is not separated from compute")
        looped = statistics.median(on_device)
    notes.append(f"replays on a captured batch of the {replay.kind} step: B {statistics.median(on_device) * 1e3:.1f}"
                 f" ms, without the all-reduce {statistics.median(unreduced) * 1e3:.1f} ms, inside one graph "
                 f"{looped * 1e3:.1f} ms per step")
    return {"on_device": on_device, "looped": looped, "gradients": unreduced, "reduced": on_device,
            "global_batch": global_batch, "replicas": replay.replicas}


def _time(function: Callable[[], Any]) -> float:
    start = time.perf_counter()
    wait(function())
    return time.perf_counter() - start
