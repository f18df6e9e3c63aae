"""Phases B, H and C re-run on the arguments captured from a real step call (tensors or distributed values
already on the devices):

    B  the step again on the same batch (no input work)
    H  LOOP steps inside one tf.function call
    C  the same Python step traced again with the cross-replica all-reduce passed through

and the breakdown's G/R become C/B, so sync = B - C (PROFILER.md's phase C). Other work on the machine
changes between the window and the replays, so B is taken from the window itself (the step calls, timed
alongside A) and H and C keep their ratios to a B replayed right beside them. Replays update the weights; the
script is stopped after them.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import keras
import tensorflow as tf

from tfdoctor.profile.phases import in_one_graph, timed, wait

Batch = tuple[tuple[Any, ...], dict[str, Any]]  # a step's (args, kwargs)
Progress = Callable[[str, int, int], None]
PASSTHROUGH = {"on": False}  # read by the all-reduce hook
EAGER = "eager strategy.run"
COMPILED = {"on": False}  # read by the strategy.run hook: each replica function is compiled with XLA
LOOP = 4  # steps per graph call in phase H
SETTLE_S = 10.0  # the longest wait for the script's own input threads to go idle before the replays
IDLE_CORES = 0.1  # the process's CPU use, in cores, while nothing of tfdoctor's runs, that counts as idle


@contextlib.contextmanager
def without_all_reduce() -> Iterator[None]:
    """While tracing and running phase C, `ReplicaContext.all_reduce` returns its input."""
    PASSTHROUGH["on"] = True
    try:
        yield
    finally:
        PASSTHROUGH["on"] = False


@contextlib.contextmanager
def replicas_compiled() -> Iterator[None]:
    """While a replay is traced inside, each function that `strategy.run` gets is compiled with XLA."""
    COMPILED["on"] = True
    try:
        yield
    finally:
        COMPILED["on"] = False


@dataclass
class Replay:
    """A captured step: `step(batch)` runs it, `unreduced(batch)` runs it without the all-reduce, and each
    `fresh()` is the same step traced anew when first called (under whatever is patched then)."""

    kind: str
    batch: Batch
    step: Callable[[Batch], Any]
    unreduced: Callable[[Batch], Any]
    replicas: int               # in the whole job (num_replicas_in_sync)
    input_inside: bool = False  # the real step calls fetch their input (Model.fit): B is the replay itself
    fresh: Callable[[], Callable[[Batch], Any]] | None = None
    workers: int = 1  # the workers whose replicas make up `replicas`: the batch here is 1/workers of the global one


def of_function(function: Any, args: tuple, kwargs: dict, strategy: Any) -> Replay | None:
    """A `tf.function` step whose trace ran `strategy`; None when its arguments are not a batch (an
    iterator, say)."""
    if not _is_batch(args, kwargs):
        return None
    def fresh() -> Callable[[Batch], Any]:  # the same Python function as a new tf.function
        traced = tf.function(function.python_function)
        return lambda batch: traced(*batch[0], **batch[1])

    return Replay("tf.function", (args, kwargs), lambda b: function(*b[0], **b[1]), _traced_once(fresh),
                  **_replicas(strategy), fresh=fresh)


def of_eager_run(strategy: Any, fn: Callable, args: tuple, kwargs: dict) -> Replay | None:
    """An eager `strategy.run(fn, args, kwargs)` step."""
    if not _is_batch(args, kwargs):
        return None

    def run(batch: Batch) -> Any:
        return strategy.run(fn, args=batch[0], kwargs=batch[1])

    return Replay(EAGER, (args, kwargs), run, run, **_replicas(strategy), fresh=lambda: run)


def of_fit(model: Any, data: Any, targets: Any, batch_size: int | None) -> Replay | None:
    """`Model.fit`'s train_step under the model's strategy, on one batch of fit's own data (arrays, tensors,
    a tf.data.Dataset or a keras PyDataset); None for other inputs."""
    strategy = model.distribute_strategy
    if _is_keras_dataset(data) and len(data):
        first = data[0]
        data, targets, batch_size = first[0], first[1], len(first[0])
    if isinstance(data, tf.data.Dataset):
        dataset = data.take(1)
    elif hasattr(data, "shape") and hasattr(targets, "shape"):
        size = batch_size or 32
        dataset = tf.data.Dataset.from_tensor_slices((data[:size], targets[:size])).batch(size)
    else:
        return None
    batch = next(iter(strategy.experimental_distribute_dataset(dataset)))

    def fresh() -> Callable[[Batch], Any]:
        graph = tf.function(lambda b: strategy.run(model.train_step, args=(b,)))
        return lambda replayed: graph(*replayed[0])

    return Replay("Model.fit train_step", ((batch,), {}), _traced_once(fresh), _traced_once(fresh),
                  **_replicas(strategy), input_inside=True, fresh=fresh)


def _replicas(strategy: Any) -> dict[str, int]:
    """The replicas of the whole job, and how many workers hold them (this worker's share of the batch)."""
    replicas = strategy.num_replicas_in_sync if strategy is not None else 1
    try:
        local = len(strategy.extended.worker_devices)
    except (AttributeError, RuntimeError):  # the default strategy has none
        local = replicas
    return {"replicas": replicas, "workers": max(replicas // max(local, 1), 1)}


def _is_keras_dataset(data: Any) -> bool:
    """A Keras 3 PyDataset, or a Keras 2 (`tf_keras`) Sequence: indexable batches."""
    legacy = sys.modules.get("tf_keras")
    return isinstance(data, keras.utils.PyDataset) or bool(legacy and isinstance(data, legacy.utils.Sequence))


def _traced_once(fresh: Callable[[], Callable[[Batch], Any]]) -> Callable[[Batch], Any]:
    """A step made by `fresh()` when first called (traced then, under whatever is patched at that moment)."""
    made: list[Callable[[Batch], Any]] = []

    def run(batch: Batch) -> Any:
        if not made:
            made.append(fresh())
        return made[0](batch)
    return run


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


@dataclass(frozen=True)
class Replayed:
    """The replays as the breakdown's inputs: B per window step, H per call, and G/R of each turn (paired)."""

    on_device: list[float]
    looped: list[float]
    gradients: list[float]
    reduced: list[float]
    global_batch: int
    replicas: int
    replay_steps: list[float]  # B itself, per window step


def settle() -> float:
    """Wait until the process's other threads (a prefetching tf.data pipeline refilling its buffers, Keras'
    batch workers filling their queue) stop using the CPU, so they do not slow the replays by an amount that
    changes from run to run. Returns 0 once they are idle, else the cores they still used at SETTLE_S."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        cpu, wall = time.process_time(), time.monotonic()
        time.sleep(0.2)
        busy = (time.process_time() - cpu) / (time.monotonic() - wall)
        if busy < IDLE_CORES:
            return 0.0
        if time.monotonic() > deadline:
            return busy


def measure(replay: Replay, intervals: list[float], calls: list[float], progress: Progress,
            notes: list[str], across_workers: bool = False) -> Replayed | None:
    """B, C and H in turns on the captured batch, as the breakdown's inputs scaled to the window's step
    `calls`: each turn's C/B and H/B ratios are paired, so load that comes and goes cancels; None if the
    step cannot be run again. When the calls fetch their own input (Model.fit), B is each step-to-step
    interval less the call's excess over the replayed step, so fit's Python between batches stays host time.
    `across_workers`: a worker of a multi-worker job, whose step calls also wait for the other workers; the
    replays run in step on every worker, so they scale the ratios instead of the calls."""
    looped = in_one_graph(replay.step)
    try:
        wait(replay.step(replay.batch))
        with without_all_reduce():
            wait(replay.unreduced(replay.batch))
    except Exception as error:  # noqa: BLE001 - a step that cannot be replayed is reported, not fatal
        notes.append(f"the {replay.kind} step could not be replayed ({type(error).__name__}: {error})"[:300])
        return None
    try:
        wait(looped(replay.batch, tf.constant(2)))
    except Exception as error:  # noqa: BLE001 - e.g. Python-only code in an eager step
        notes.append(f"the step could not run inside one tf.function ({type(error).__name__}); host overhead "
                     "is not separated from compute")
        looped = None
    busy = settle()
    if busy:
        notes.append(f"the script's own threads (its input pipeline) still kept {busy:.1f} cores busy after "
                     f"{SETTLE_S:.0f} s, while the step was replayed: the replays may be slowed and input "
                     "under-counted")
    replayed, unreduced_ratio, looped_ratio = [], [], []
    alone = replay.replicas <= 1  # one replica: there is no all-reduce to take out, only noise to measure
    for index in range(len(intervals)):
        on_device = timed(lambda: replay.step(replay.batch))
        replayed.append(on_device)
        with without_all_reduce():
            unreduced_ratio.append(1.0 if alone else timed(lambda: replay.unreduced(replay.batch)) / on_device)
        looped_ratio.append(timed(lambda: looped(replay.batch, tf.constant(LOOP))) / LOOP / on_device
                            if looped else 1.0)
        progress("replays", index + 1, len(intervals))
    step = statistics.median(replayed if replay.input_inside or across_workers else calls)
    on_device = ([a - max(c - step, 0.0) for a, c in zip(intervals, calls)] if replay.input_inside else calls)
    sync, inside = statistics.median(unreduced_ratio), statistics.median(looped_ratio)
    without = "one replica, no all-reduce" if alone else f"without the all-reduce {sync:.0%}"
    notes.append(f"replays of the {replay.kind} step on a captured batch, as shares of the replayed step: "
                 f"{without}, {LOOP} steps inside one graph call {inside:.0%} per step")
    return Replayed(on_device, [step * ratio for ratio in looped_ratio], [step * ratio for ratio in unreduced_ratio],
                    [step] * len(unreduced_ratio), examples(replay.batch) * replay.workers, replay.replicas, replayed)
