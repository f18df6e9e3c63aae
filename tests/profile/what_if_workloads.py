"""Workloads whose what-if effects are known by construction, for the measured what-if's ground-truth tests
(`workload="tests.profile.what_if_workloads:build"`). Their costs are sleeps, which a loaded machine does not
stretch, so the truths hold on a busy CI machine too. Each notes the speed-up it measured itself, outside the
profiler, as `ground-truth speedup <change> <ratio>`:

- `serial_map`: a `map` with a fixed cost per element, run serially; the tuned pipeline maps in parallel and
  prefetches.
- `no_prefetch`: a pipeline with a fixed cost per batch (tf.data's own sleep transformation) and no prefetch,
  behind a slower step (a sleep in a `numpy_function` on each replica); the tuned pipeline prefetches, so
  input and step overlap. (TensorFlow 2.21 injects a prefetch into such a pipeline itself unless its
  options turn `inject_prefetch` off, as this one's do.) (Only one side runs Python: a `numpy_function` in the step while another runs in the pipeline
  has deadlocked.)
- `sync_tiny`: one example per replica and a large extra all-reduce each step (tests/profile/workloads.py's
  payload): twice the batch serves twice the examples with the same all-reduce.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Iterator

import tensorflow as tf
from tensorflow.python.data.experimental.ops import testing

from tests.profile import workloads
from tfdoctor.profile.phases import timed
from tfdoctor.profile.workload import StepFunctions

FEATURES = 64
ELEMENT_S = 0.004  # serial_map: seconds per element
BATCH_S = 0.040    # no_prefetch: seconds of step per replica (the replicas' sleeps run one after the other), and
                   # of input per batch for each replica
TRUTH_ROUNDS = 12
PACE_SKIPPED, PACE_STEPS = 16, 24
# The kinds whose ground truth this process has timed: the batch-x2 trial builds the workload again at twice the
# batch, in the same process, and the notes of that build are not read (timing them again cost 28 s a test).
_truth_timed: set[str] = set()


def _sleep(seconds: float) -> Callable[[tf.Tensor], tf.Tensor]:
    def slow(value: tf.Tensor) -> tf.Tensor:
        def python(array: Any) -> Any:
            time.sleep(seconds)
            return array
        return tf.ensure_shape(tf.numpy_function(python, [value], value.dtype), value.shape)
    return slow


def build(strategy: tf.distribute.Strategy, params: dict[str, Any]) -> StepFunctions:
    kind = params["kind"]
    params = {**params, "truth": params.get("truth") and kind not in _truth_timed}
    if params["truth"]:
        _truth_timed.add(kind)
    if kind == "sync_tiny":
        return _sync_tiny(strategy, params)
    replicas = strategy.num_replicas_in_sync
    global_batch = int(params.get("batch_per_replica", 8)) * replicas
    with strategy.scope():
        weights = tf.Variable(tf.zeros([FEATURES, 1]))
    source = tf.data.Dataset.from_tensor_slices(tf.random.normal([global_batch * 8, FEATURES], seed=1)).repeat()
    slow_step = _sleep(BATCH_S) if kind == "no_prefetch" else tf.identity

    def replica(x: tf.Tensor) -> tf.Tensor:
        loss = tf.reduce_mean(tf.matmul(slow_step(x), weights))
        weights.assign_sub(tf.fill(weights.shape, 1e-6))
        return loss

    @tf.function
    def step(batch: tf.Tensor) -> tf.Tensor:
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica, args=(batch,)), axis=None)

    def pipeline(tuned: bool) -> tf.data.Dataset:
        parallel = tf.data.AUTOTUNE if tuned else None
        if kind == "serial_map":
            dataset = source.map(_sleep(ELEMENT_S), num_parallel_calls=parallel).batch(global_batch)
        else:
            dataset = source.batch(global_batch).apply(testing.sleep(int(BATCH_S * replicas * 1e6)))
            if not tuned:  # TensorFlow injects a prefetch into such a pipeline by default; this one has none
                options = tf.data.Options()
                options.experimental_optimization.inject_prefetch = False
                dataset = dataset.with_options(options)
        return dataset.prefetch(tf.data.AUTOTUNE) if tuned else dataset

    def batches() -> Iterator[Any]:
        return iter(pipeline(False))

    def tuned_batches() -> Iterator[Any]:
        return iter(pipeline(True))

    device_batch = tf.random.normal([global_batch, FEATURES], seed=3)
    notes = []
    if params.get("truth"):
        ratio = _pace(step, batches()) / _pace(step, tuned_batches())
        notes.append(f"ground-truth speedup tf-data-tuned {ratio}")
    return StepFunctions(name=f"what-if {kind}", replicas=replicas, global_batch=global_batch, batches=batches,
                         step=step, device_batch=device_batch, gradients=step, reduced_gradients=step,
                         per_replica_batch=global_batch // replicas, notes=notes, tuned_batches=tuned_batches,
                         tuned_note="parallel map and a final prefetch")


def _pace(step: Callable[[Any], Any], batches: Iterator[Any]) -> float:
    """Seconds per step of a long run of consecutive steps, once the first ones have emptied any buffer."""
    for _ in range(PACE_SKIPPED):
        timed(lambda: step(next(batches)))
    started = time.perf_counter()
    for _ in range(PACE_STEPS):
        timed(lambda: step(next(batches)))
    return (time.perf_counter() - started) / PACE_STEPS


def _truth(today: Callable[[], float], changed: Callable[[], float]) -> float:
    """The ratio of median step times, today over changed, in alternating calls after a warm-up."""
    for _ in range(4):
        today()
        changed()
    pairs = [(today(), changed()) for _ in range(TRUTH_ROUNDS)]
    return statistics.median(t for t, _ in pairs) / statistics.median(c for _, c in pairs)


def _sync_tiny(strategy: tf.distribute.Strategy, params: dict[str, Any]) -> StepFunctions:
    """tests/profile/workloads.py's MLP with its extra all-reduce; with `truth`, the examples/s at twice the
    batch over today's, timed here on two copies in alternating calls."""
    base = {**params, "inject": "payload", "batch_per_replica": int(params.get("batch_per_replica", 1)),
            "sync_truth": False}
    work = workloads.build(strategy, base)
    notes = list(work.notes)
    if params.get("truth"):
        doubled = workloads.build(strategy, {**base, "batch_per_replica": base["batch_per_replica"] * 2})
        ratio = _truth(lambda: timed(lambda: work.step(work.device_batch)),
                       lambda: timed(lambda: doubled.step(doubled.device_batch)))
        notes.append(f"ground-truth speedup batch-x2 {2 * ratio}")
    work.notes[:] = notes
    return work
