"""Phases A/B/H/G/R: the same step timed with the real input, with the batch already on the devices, K steps
inside one graph call, and forward/backward without and with the all-reduce (A, B, G and R in rounds).
Where the replicas share the host's cores (logical CPU devices), phase S adds the step on batches the
pipeline made earlier, while the pipeline is idle: A's step call minus S is the pipeline's threads slowing
the replicas down, which breakdown.py counts as compute (on GPUs that work runs beside the devices).

    input   = A - B     (waiting for the input pipeline, host-to-device copies)
    host    = B - H     (Python and dispatch overhead that disappears when steps run inside one graph)
    sync    = R - G     (the cross-replica gradient all-reduce)
    compute = H - sync  (the rest of the step on the devices)

so the four parts add up to A's median step time. Every timed call waits for every output of the step on
every replica (`wait`): on a GPU a call returns before its kernels have run. The timing itself is two
`perf_counter` calls and a read of each output per step (benchmarks/profile_overhead.py measures its cost).
After the rounds, `check_clock` times the same step against an independent clock, where one exists.
"""

from __future__ import annotations

import itertools
import statistics
import time
from functools import partial
from typing import Any, Callable, Iterator

import tensorflow as tf

from tfdoctor.profile import distributed_next
from tfdoctor.profile.protocol import ClockCheck, PhaseTimes
from tfdoctor.profile.workload import StepFunctions

Progress = Callable[[str, int, int], None]
SETTLE = 1  # untimed A steps at the start of each round, for a pipeline that keeps up with the step
SETTLE_MAX = 8  # at most this many, for one that does not (`settle_steps`)
PIPELINE_WARMUP = 10  # untimed A steps before the rounds
STEADY_TAIL = 4  # the last of them tell whether the pipeline keeps up
KEEPS_UP_SHARE = 0.10  # it does while they wait in `next()` less than this share of the step (a distributed
# iterator's own next() took 1 ms of an 18 ms step here); below it, a buffer left full hides at most that much
STORED_BATCHES = 4  # phase S cycles through this many batches taken from the pipeline before the rounds
H_CALLS = 2  # phase H runs `steps` steps in this many calls, spread among the rounds


WHOLE = 16  # outputs of at most this many elements are read back whole; of larger ones, one element
CLOCK_STEPS = 4  # steps timed each way by the clock check


def wait(value: Any) -> None:
    """Block until every output of a step exists, on every replica: each tensor of `value`, and each
    replica's component of a per-replica value, is read back to the host (a large one through one of its
    elements, an op that runs on its device after the op that made it)."""
    for tensor in tf.nest.flatten(value, expand_composites=True):
        if not hasattr(tensor, "numpy") or tensor.dtype in (tf.resource, tf.variant):
            continue
        size = tensor.shape.num_elements()
        if size is None or size > WHOLE:
            with tf.device(tensor.device):
                tensor = tf.reshape(tensor, [-1])[:1]
        tensor.numpy()


def timed(function: Callable[[], Any]) -> float:
    """Seconds from calling `function` until its outputs exist (`wait`)."""
    start = time.perf_counter()
    wait(function())
    return time.perf_counter() - start


def _one_round(functions: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """Time each function once, one after the other: neighbouring calls share the machine's drift."""
    return {name: timed(function) for name, function in functions.items()}


def _full_steps(work: StepFunctions, batches: Iterator[Any], count: int, skip: int,
                tick: Callable[[], None]) -> tuple[list[float], list[float]]:
    """`count` steps on the real input, as a training loop runs them: seconds per step and seconds spent in
    `next(batches)` (in a multi-worker job, only in this worker's own input: distributed_next.py), both
    without the first `skip` steps."""
    full, waits = [], []
    across = distributed_next.spans_workers(batches)
    for index in range(count):
        start = time.perf_counter()
        if across:
            batch, own, _ = distributed_next.split(lambda: next(batches))
        else:
            batch = next(batches)
            own = time.perf_counter() - start
        wait(work.step(batch))
        if index >= skip:
            full.append(time.perf_counter() - start)
            waits.append(own)
        tick()
    return full, waits


def _counter(progress: Progress, label: str, total: int) -> Callable[[], None]:
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        progress(label, done, total)
    return tick


def measure_full(work: StepFunctions, batches: Iterator[Any], steps: int, warmup: int, progress: Progress,
                 label: str = "A full step") -> tuple[list[float], list[float]]:
    """Phase A alone, in one run of steps on `batches` (an iterator of `work.batches()`)."""
    return _full_steps(work, batches, warmup + steps, warmup, _counter(progress, label, warmup + steps))


def in_one_graph(step: Callable[[Any], Any]) -> Callable[[Any, tf.Tensor], Any]:
    """Phase H's graph: `looped(batch, count)` runs `count` steps in one tf.function call."""
    @tf.function
    def looped(batch: Any, count: tf.Tensor) -> Any:
        out = step(batch)
        for _ in tf.range(count - 1):
            out = step(batch)
        return out
    return looped


def lags(waits: list[float], steps: list[float]) -> bool:
    """Whether a pipeline does not keep up with the step, from consecutive steps' waits in `next()` and their
    seconds."""
    return statistics.median(waits) > KEEPS_UP_SHARE * statistics.median(steps)


def settle_steps(waits: list[float], backlog: float) -> int:
    """Untimed A steps a round needs before its timed one, from the `waits` in `next()` of consecutive A steps
    right after a round of the other phases, against the wait of steps in a row (`backlog`). The steps before
    the first that waits half as long took batches the pipeline buffered while the others ran, and the one
    after it waits as a training loop's does; one more step is kept for rounds whose others take longer
    (SETTLE_MAX when none waited, SETTLE when the first did: the pipeline buffers nothing)."""
    first = next((index for index, seconds in enumerate(waits) if seconds >= backlog / 2), None)
    if first is None:
        return SETTLE_MAX
    return SETTLE if first == 0 else min(SETTLE_MAX, first + 2)


def measure(work: StepFunctions, batches: Iterator[Any], steps: int, warmup: int, progress: Progress,
            shared_cores: bool = False, agree: Callable[[int], int] | None = None) -> PhaseTimes:
    """`steps` rounds of A, B, G and R (and S when `shared_cores`), and H. On a shared host a step's time
    wanders by 10% from second to second, but neighbouring calls share most of that drift, so the breakdown
    takes each round's differences (A - B, R - G): `input = A - B` is often a few percent of the step. H's
    calls run at even intervals among the rounds, so its median and B's cover the same stretch of time (run
    after the rounds, H once met a machine 15% faster, which looked like host overhead). Before the rounds,
    `PIPELINE_WARMUP` untimed A steps let a tf.data pipeline fill its buffers and tune its parallelism; each
    round then first runs untimed A steps that take what a prefetching pipeline buffered while the others ran:
    one for a pipeline that keeps up, else as many as a round of the others followed by steps in a row shows
    (`settle_steps`), the most any worker of a job needs (`agree`: every step is a collective there).
    `batches` is an iterator of `work.batches()`."""
    batch = work.device_batch
    progress("tracing H", 0, 1)
    looped = in_one_graph(work.step)
    wait(looped(batch, tf.constant(2)))
    per_call = max(1, steps // H_CALLS)
    h_after = {warmup + steps * (number + 1) // (H_CALLS + 1) for number in range(H_CALLS)}
    stored = itertools.cycle([next(batches) for _ in range(STORED_BATCHES)]) if shared_cores else None
    others = {
        "on_device": lambda: work.step(batch),
        **({"stored": lambda: work.step(next(stored))} if shared_cores else {}),
        "gradients": lambda: work.gradients(batch),
        "reduced": lambda: work.reduced_gradients(batch),
    }
    _one_round(others)  # traces them
    agreed = agree or (lambda count: count)
    tick = _counter(progress, "A/B/G/R in rounds", PIPELINE_WARMUP + warmup + steps)
    consecutive, waits = _full_steps(work, batches, PIPELINE_WARMUP, PIPELINE_WARMUP - STEADY_TAIL, tick)
    backlog = statistics.median(waits)
    lagging = lags(waits, consecutive)
    settle = SETTLE
    if agreed(int(lagging)):  # this worker's input, or another's, does not keep up
        _one_round(others)
        _, after = _full_steps(work, batches, SETTLE_MAX + 1, 0, lambda: None)
        settle = agreed(settle_steps(after, backlog) if lagging else SETTLE)
    times: dict[str, list[float]] = {"full": [], "waits": [], "stored": [], "looped": [],
                                     **{name: [] for name in others}}
    for index in range(warmup + steps):
        full, waits = _full_steps(work, batches, settle + 1, settle, lambda: None)
        measured = _one_round(others)
        if index in h_after:
            measured["looped"] = timed(partial(looped, batch, tf.constant(per_call))) / per_call
        tick()
        if index >= warmup:
            times["full"] += full
            times["waits"] += waits
            for name, seconds in measured.items():
                times[name].append(seconds)
    return PhaseTimes(times["full"], times["waits"], times["on_device"], times["looped"], times["gradients"],
                      times["reduced"], times["stored"], settle)


def _sync_devices() -> Callable[[], None] | None:
    """`tf.test.experimental.sync_devices` (TF >= 2.14): returns once every device has run all its work."""
    return getattr(getattr(tf.test, "experimental", None), "sync_devices", None)


def check_clock(work: StepFunctions, batches: Iterator[Any], progress: Progress,
                synchronise: bool = True) -> ClockCheck:
    """The full step timed as the phases time it, and in turns the same step followed by a synchronisation
    of every device, which also waits for work that outlives the step's outputs (an optimizer update).
    `synchronise=False`: no synchronisation (a multi-worker task, where `sync_devices` needs a remote eager
    context that MultiWorkerMirroredStrategy does not set up)."""
    sync = _sync_devices() if synchronise else None
    waited, synced = [], []
    progress("clock check", 0, CLOCK_STEPS)
    for number in range(CLOCK_STEPS):
        waited.append(timed(lambda: work.step(next(batches))))
        if sync is not None:
            sync()
            start = time.perf_counter()
            wait(work.step(next(batches)))
            sync()
            synced.append(time.perf_counter() - start)
        progress("clock check", number + 1, CLOCK_STEPS)
    return ClockCheck(CLOCK_STEPS, statistics.median(waited), statistics.median(synced) if synced else None,
                      "tf.test.experimental.sync_devices" if sync is not None else None)

