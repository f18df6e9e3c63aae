"""What the profiler needs from a training workload: its input pipeline and step functions, built under
its strategy. The reference YOLOv3 variants and the tests' small models both provide one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator


@dataclass
class StepFunctions:
    """A workload ready to measure.

    `step` is one full training step on an item of `batches()` (phase A) and on `device_batch`, a batch
    already on the devices (phases B and H);
    `gradients` runs forward and backward with no cross-replica reduction and no update, and
    `reduced_gradients` adds the all-reduce a step does: the all-reduce costs the difference. Each returns
    a value whose `numpy()` (after `tf.nest.flatten`) waits for the work to finish.

    For the measured what-if (trials.py), where the workload can: `tuned_batches` is its input with the
    linter's changes applied, for the same `step` (`tuned_note` says what changed, `tuned_missing` what could
    not be); `xla_step` is `step` with the replica work compiled by XLA; `looped_steps(iterator, count)` runs
    `count` steps inside one call, each on the next batch of an iterator of `batches()`.
    """

    name: str
    replicas: int
    global_batch: int
    batches: Callable[[], Iterator[Any]]
    step: Callable[[Any], Any]
    device_batch: Any
    gradients: Callable[[Any], Any]
    reduced_gradients: Callable[[Any], Any]
    per_replica_batch: int = 0
    causes: list[tuple[str, str, int]] = field(default_factory=list)  # known (rule, path, line) causes
    notes: list[str] = field(default_factory=list)
    tuned_batches: Callable[[], Iterator[Any]] | None = None
    tuned_note: str = ""
    tuned_missing: str = ""
    xla_step: Callable[[Any], Any] | None = None
    looped_steps: Callable[[Iterator[Any], Any], Any] | None = None
