"""Phases A/B/H/G/R: the same step timed with the real input, with the batch already on the devices, K steps
inside one graph call, and forward/backward without and with the all-reduce (B, G and R interleaved).

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
from typing import Any, Callable

import tensorflow as tf

from tfdoctor.profile.workload import StepFunctions

Progress = Callable[[str, int, int], None]


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


def _interleaved(functions: dict[str, Callable[[], Any]], steps: int, warmup: int, label: str,
                 progress: Progress) -> dict[str, list[float]]:
    """Time several functions in turn, one call each per round, so that drift of the machine (other work,
    clock changes) touches them alike: their differences are what the breakdown uses."""
    times: dict[str, list[float]] = {name: [] for name in functions}
    for index in range(warmup + steps):
        for name, function in functions.items():
            start = time.perf_counter()
            wait(function())
            if index >= warmup:
                times[name].append(time.perf_counter() - start)
        progress(label, index + 1, warmup + steps)
    return times


def measure_full(work: StepFunctions, steps: int, warmup: int, progress: Progress) -> tuple[list[float], list[float]]:
    """Phase A: the real input pipeline and the step, as a training loop runs them."""
    batches = work.batches()
    full, waits = [], []
    for index in range(warmup + steps):
        start = time.perf_counter()
        batch = next(batches)
        got = time.perf_counter()
        wait(work.step(batch))
        if index >= warmup:
            full.append(time.perf_counter() - start)
            waits.append(got - start)
        progress("A full step", index + 1, warmup + steps)
    return full, waits


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
    looped = in_one_graph(work.device_step())
    wait(looped(work.device_batch, tf.constant(2)))  # trace and warm up
    progress("H steps in one graph", 1, 2)
    start = time.perf_counter()
    wait(looped(work.device_batch, tf.constant(steps)))
    progress("H steps in one graph", 2, 2)
    return (time.perf_counter() - start) / steps


def measure(work: StepFunctions, steps: int, warmup: int, progress: Progress) -> PhaseTimes:
    full, waits = measure_full(work, steps, warmup, progress)
    device_step, batch = work.device_step(), work.device_batch
    rounds = _interleaved({
        "on_device": lambda: device_step(batch),
        "gradients": lambda: work.gradients(batch),
        "reduced": lambda: work.reduced_gradients(batch),
    }, steps, warmup, "B/G/R batch on devices", progress)
    looped = measure_looped(work, steps, progress)
    return PhaseTimes(full, waits, rounds["on_device"], looped, rounds["gradients"], rounds["reduced"])
