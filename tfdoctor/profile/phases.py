"""Phases A/B/H/G/R: the same step timed with the real input, with the batch already on the devices, K steps
inside one graph call, and forward/backward without and with the all-reduce (A, B, G and R in rounds).

    input   = A - B     (waiting for the input pipeline, host-to-device copies)
    host    = B - H     (Python and dispatch overhead that disappears when steps run inside one graph)
    sync    = R - G     (the cross-replica gradient all-reduce)
    compute = H - sync  (the rest of the step on the devices)

so the four parts add up to A's median step time. The timing itself is two `perf_counter` calls and one
`numpy()` per step (benchmarks/profile_overhead.py measures its cost).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import tensorflow as tf

from tfdoctor.profile.workload import StepFunctions

Progress = Callable[[str, int, int], None]
SETTLE = 1  # untimed A steps at the start of each round
PIPELINE_WARMUP = 10  # untimed A steps before the rounds


@dataclass
class PhaseTimes:
    full: list[float]         # A: seconds per step, real input
    input_wait: list[float]   # A: seconds per step spent in next(batches)
    on_device: list[float]    # B
    looped: float             # H: seconds per step, K steps inside one tf.function call
    gradients: list[float]    # G
    reduced: list[float]      # R


def wait(value: Any) -> None:
    """Block until a step's outputs exist on the host (a value of each output, so no work is pending)."""
    for tensor in tf.nest.flatten(value, expand_composites=True):
        if hasattr(tensor, "numpy"):
            tensor.numpy()
            return


def _one_round(functions: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """Time each function once, one after the other: neighbouring calls share the machine's drift."""
    times = {}
    for name, function in functions.items():
        start = time.perf_counter()
        wait(function())
        times[name] = time.perf_counter() - start
    return times


def _full_steps(work: StepFunctions, batches: Iterator[Any], count: int, skip: int,
                tick: Callable[[], None]) -> tuple[list[float], list[float]]:
    """`count` steps on the real input, as a training loop runs them: seconds per step and seconds spent in
    `next(batches)`, both without the first `skip` steps."""
    full, waits = [], []
    for index in range(count):
        start = time.perf_counter()
        batch = next(batches)
        got = time.perf_counter()
        wait(work.step(batch))
        if index >= skip:
            full.append(time.perf_counter() - start)
            waits.append(got - start)
        tick()
    return full, waits


def _counter(progress: Progress, label: str, total: int) -> Callable[[], None]:
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        progress(label, done, total)
    return tick


def measure_full(work: StepFunctions, steps: int, warmup: int, progress: Progress) -> tuple[list[float], list[float]]:
    """Phase A alone, in one run of steps."""
    return _full_steps(work, work.batches(), warmup + steps, warmup,
                       _counter(progress, "A full step", warmup + steps))


def in_one_graph(step: Callable[[Any], Any]) -> Callable[[Any, tf.Tensor], Any]:
    """Phase H's graph: `looped(batch, count)` runs `count` steps in one tf.function call."""
    @tf.function
    def looped(batch: Any, count: tf.Tensor) -> Any:
        out = step(batch)
        for _ in tf.range(count - 1):
            out = step(batch)
        return out
    return looped


def measure_looped(work: StepFunctions, steps: int, progress: Progress) -> float:
    """Phase H: `steps` steps in one graph call on the device batch; seconds per step."""
    looped = in_one_graph(work.step)
    wait(looped(work.device_batch, tf.constant(2)))  # trace and warm up
    progress("H steps in one graph", 1, 2)
    start = time.perf_counter()
    wait(looped(work.device_batch, tf.constant(steps)))
    progress("H steps in one graph", 2, 2)
    return (time.perf_counter() - start) / steps


def measure(work: StepFunctions, steps: int, warmup: int, progress: Progress) -> PhaseTimes:
    """`steps` rounds of A, B, G and R. On a shared host a step's time wanders by 10% from second to second,
    but neighbouring calls share most of that drift, so the breakdown takes each round's differences
    (A - B, R - G): `input = A - B` is often a few percent of the step. Each round first runs `SETTLE`
    untimed A steps, which take what a prefetching pipeline buffered while B/G/R ran; before the rounds,
    `PIPELINE_WARMUP` more let a tf.data pipeline fill its buffers and tune its parallelism."""
    batches, batch = work.batches(), work.device_batch
    others = {
        "on_device": lambda: work.step(batch),
        "gradients": lambda: work.gradients(batch),
        "reduced": lambda: work.reduced_gradients(batch),
    }
    rounds = warmup + steps
    tick = _counter(progress, "A/B/G/R in rounds", PIPELINE_WARMUP + rounds)
    _full_steps(work, batches, PIPELINE_WARMUP, PIPELINE_WARMUP, tick)
    times: dict[str, list[float]] = {"full": [], "waits": [], **{name: [] for name in others}}
    for index in range(rounds):
        full, waits = _full_steps(work, batches, SETTLE + 1, SETTLE, lambda: None)
        measured = _one_round(others)
        tick()
        if index >= warmup:
            times["full"] += full
            times["waits"] += waits
            for name, seconds in measured.items():
                times[name].append(seconds)
    looped = measure_looped(work, steps, progress)
    return PhaseTimes(times["full"], times["waits"], times["on_device"], looped, times["gradients"],
                      times["reduced"])
