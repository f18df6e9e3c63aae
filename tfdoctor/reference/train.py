"""Training the reference workload under MirroredStrategy, the seeds' naive way and the tuned way.

``Trainer`` owns the model and optimizer (built in the strategy scope) and exposes step functions the
profiler can call separately: ``naive_step`` on a raw batch, ``tuned_step`` on a distributed batch
(``tuned_iterator_step`` takes the next one from a distributed iterator inside the graph), and
for each variant ``*_gradients`` (forward and backward only) and ``*_reduced_gradients`` (plus the
all-reduce, no update); the all-reduce costs the difference between the last two.
``run_training`` is the whole loop behind ``tfdoctor reference``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Iterator, Literal, Sequence

import keras
import tensorflow as tf

from tfdoctor.reference.annotations import Example, read_annotations
from tfdoctor.reference.data import ensure_dataset
from tfdoctor.reference.devices import setup_replicas
from tfdoctor.reference.loss import yolo_loss
from tfdoctor.reference.model import MODELS
from tfdoctor.reference.pipelines import Batch, NaiveBatches, tuned_dataset
from tfdoctor.reference.spec import spec_for

Variant = Literal["naive", "tuned"]
VARIANTS: tuple[Variant, ...] = ("naive", "tuned")


@dataclass(frozen=True)
class TrainConfig:
    """What to train; the defaults suit a small CPU machine."""

    model: str = "yolov3-tiny"
    img_size: int = 160
    batch_per_replica: int = 4
    num_classes: int = 3
    width: float = 1.0
    learning_rate: float = 1e-3
    seed: int = 0
    augment: bool = True
    mixed_precision: bool = False  # mixed_float16 compute, the loss scaled by a LossScaleOptimizer


@dataclass(frozen=True)
class TrainResult:
    """One run: throughput over the timed steps and the loss of every step (global batch mean)."""

    variant: Variant
    replicas: int
    steps: int
    images_per_s: float
    loss_first: float
    loss_last: float
    device_kind: str
    losses: tuple[float, ...]


class Trainer:
    """Model, optimizer and compiled step functions for one strategy and config.

    To time steps with the data already on the devices, take one batch from ``tuned_batches`` and
    pass it to ``tuned_step`` (or ``tuned_gradients``) repeatedly.
    """

    def __init__(self, strategy: tf.distribute.Strategy, config: TrainConfig) -> None:
        self.strategy, self.config = strategy, config
        self.spec = spec_for(config.model, config.img_size, config.num_classes)
        self.replicas = strategy.num_replicas_in_sync
        self.global_batch = config.batch_per_replica * self.replicas
        keras.utils.set_random_seed(config.seed)
        policy = keras.mixed_precision.global_policy()
        if config.mixed_precision:
            keras.mixed_precision.set_global_policy("mixed_float16")
        try:
            with strategy.scope():
                self.model = MODELS[config.model](
                    config.img_size, config.num_classes, config.width, self.spec.anchors_per_scale
                )
                self.optimizer = keras.optimizers.Adam(config.learning_rate)
                if config.mixed_precision:
                    self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
                self.optimizer.build(self.model.trainable_variables)
        finally:
            keras.mixed_precision.set_global_policy(policy)  # other models of the process keep theirs
        self.naive_step = tf.function(self._naive_step)
        self.tuned_step = tf.function(self._tuned_step)
        self.tuned_iterator_step = tf.function(lambda iterator: self._tuned_step(next(iterator)))
        self.tuned_gradients = tf.function(partial(self._gradients, self._loss_and_gradients, all_reduce=False))
        self.tuned_reduced_gradients = tf.function(partial(self._gradients, self._loss_and_gradients, all_reduce=True))
        self.naive_gradients = tf.function(partial(self._gradients, self._naive_loss_and_gradients, all_reduce=False))
        self.naive_reduced_gradients = tf.function(
            partial(self._gradients, self._naive_loss_and_gradients, all_reduce=True))
        # The measured what-if: each replica's forward and backward compiled by XLA (the all-reduce and the
        # update stay outside, as they hold cross-replica calls), and several tuned steps in one call.
        self.naive_xla_step = tf.function(partial(
            self._xla_step, tf.function(self._naive_loss_and_gradients, jit_compile=True), tf.distribute.ReduceOp.MEAN))
        self.tuned_xla_step = tf.function(partial(
            self._xla_step, tf.function(self._loss_and_gradients, jit_compile=True), tf.distribute.ReduceOp.SUM))
        self.tuned_looped_steps = tf.function(self._tuned_looped)

    # Input pipelines.

    def naive_batches(self, examples: Sequence[Example]) -> NaiveBatches:
        """The seeds' iterator of float64 NumPy global batches."""
        return NaiveBatches(examples, self.spec, self.global_batch, self.config.seed, self.config.augment)

    def tuned_batches(self, examples: Sequence[Example], options: tf.data.Options | None = None) -> Iterator:
        """An iterator of distributed batches: each replica gets its own slice, already on its device."""
        dataset = tuned_dataset(examples, self.spec, self.global_batch, self.config.seed, self.config.augment)
        if options is not None:
            dataset = dataset.with_options(options)
        # A few batches wait on each device, so the step never waits for the split-and-copy of the next one.
        options = tf.distribute.InputOptions(experimental_per_replica_buffer_size=4)
        return iter(self.strategy.experimental_distribute_dataset(dataset, options))

    # Shared maths.

    def _per_example_loss(self, images, targets, gt_boxes) -> tf.Tensor:
        outputs = self.model(tf.cast(images, tf.float32), training=True)
        outputs = tf.nest.map_structure(lambda output: tf.cast(output, tf.float32), outputs)  # float16 ones too
        return yolo_loss(outputs, targets, gt_boxes, self.spec)

    def _differentiated(self, loss: tf.Tensor) -> tf.Tensor:
        """What the tape differentiates: the loss, scaled under mixed precision (`apply` unscales)."""
        return self.optimizer.scale_loss(loss) if self.config.mixed_precision else loss

    def _apply(self, grads) -> None:
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))

    # Naive: every replica receives the whole global batch and loops the model over all its pieces.

    def _naive_loss_and_gradients(self, images, targets, gt_boxes) -> tuple[tf.Tensor, list[tf.Tensor]]:
        n = self.replicas
        pieces = zip(tf.split(images, n), zip(*(tf.split(t, n) for t in targets)), tf.split(gt_boxes, n))
        with tf.GradientTape() as tape:
            losses = [tf.reduce_mean(self._per_example_loss(i, t, g)) for i, t, g in pieces]
            loss = tf.add_n(losses) / n
            scaled = self._differentiated(loss)
        return loss, tape.gradient(scaled, self.model.trainable_variables)

    def _naive_replica(self, images, targets, gt_boxes) -> tf.Tensor:
        loss, grads = self._naive_loss_and_gradients(images, targets, gt_boxes)
        self._apply(grads)
        return loss

    def _naive_step(self, batch: Batch) -> tf.Tensor:
        """One naive training step on a raw (NumPy) global batch; returns the mean loss."""
        per_replica = self.strategy.run(self._naive_replica, args=batch)
        return self.strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)

    # Tuned: each replica gets its slice; loss scaled by the global batch so summed gradients average.

    def _loss_and_gradients(self, images, targets, gt_boxes) -> tuple[tf.Tensor, list[tf.Tensor]]:
        with tf.GradientTape() as tape:
            per_example = self._per_example_loss(images, targets, gt_boxes)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=self.global_batch)
            scaled = self._differentiated(loss)
        return loss, tape.gradient(scaled, self.model.trainable_variables)

    def _tuned_replica(self, images, targets, gt_boxes) -> tf.Tensor:
        loss, grads = self._loss_and_gradients(images, targets, gt_boxes)
        self._apply(grads)  # the optimizer sums gradients over replicas before updating
        return loss

    def _tuned_step(self, batch: Batch) -> tf.Tensor:
        """One tuned training step on a distributed batch; returns the global mean loss."""
        per_replica = self.strategy.run(self._tuned_replica, args=batch)
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    def _tuned_looped(self, iterator: Iterator, count: tf.Tensor) -> tf.Tensor:
        """`count` tuned steps in one call, each on the next batch of a distributed iterator."""
        loss = self._tuned_step(next(iterator))
        for _ in tf.range(count - 1):
            loss = self._tuned_step(next(iterator))
        return loss

    # The measured what-if's XLA step: a replica's forward and backward compiled, its update outside.

    def _xla_step(self, loss_and_gradients, reduce_op: tf.distribute.ReduceOp, batch: Batch) -> tf.Tensor:
        def replica(images, targets, gt_boxes) -> tf.Tensor:
            loss, grads = loss_and_gradients(images, targets, gt_boxes)
            self._apply(grads)
            return loss

        per_replica = self.strategy.run(replica, args=batch)
        return self.strategy.reduce(reduce_op, per_replica, axis=None)

    # Forward and backward without the update, for the profiler: the all-reduce costs the difference.

    def _gradients(self, loss_and_gradients, batch: Batch, all_reduce: bool):
        """(summed loss, one value per replica that depends on every gradient) of one batch, with or without
        the all-reduce a step does: waiting for both waits for the backward pass and the all-reduce on every
        replica, without copying the gradients back to the host."""

        def replica(images, targets, gt_boxes):
            loss, grads = loss_and_gradients(images, targets, gt_boxes)
            if all_reduce:
                grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
            return loss, touch(grads)

        loss, touched = self.strategy.run(replica, args=batch)
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None), touched

def touch(tensors: list[tf.Tensor]) -> tf.Tensor:
    """A scalar that exists only once every tensor does: the sum of one element of each."""
    return tf.add_n([tf.cast(tf.reshape(t, [-1])[0], tf.float32) for t in tensors])


def run_training(
    variant: Variant,
    replicas: int,
    steps: int,
    config: TrainConfig = TrainConfig(),
    examples: Sequence[Example] | None = None,
    num_images: int = 256,
) -> TrainResult:
    """Set up replicas and model, train ``steps`` steps; images/s leaves out the first (tracing) step.

    Trains on ``examples``, or on ``num_images`` synthetic images drawn for the config when not given.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}")
    if steps < 1:
        raise ValueError("steps must be at least 1")
    if examples is None:
        path = ensure_dataset(num_images, config.img_size, config.seed, config.num_classes)
        examples = read_annotations(path, config.num_classes)
    strategy, kind, _ = setup_replicas(replicas)
    trainer = Trainer(strategy, config)
    if variant == "naive":
        batches = trainer.naive_batches(examples)

        def train_step() -> tf.Tensor:
            return trainer.naive_step(next(batches))
    else:
        iterator = trainer.tuned_batches(examples)

        def train_step() -> tf.Tensor:  # the batch is taken from the iterator inside the graph
            return trainer.tuned_iterator_step(iterator)

    losses = []
    started = time.perf_counter()
    for index in range(steps):
        losses.append(float(train_step()))
        if index == 0:
            after_first = time.perf_counter()
    finished = time.perf_counter()
    timed_steps, elapsed = (steps - 1, finished - after_first) if steps > 1 else (1, finished - started)
    images_per_s = trainer.global_batch * timed_steps / elapsed
    return TrainResult(variant, replicas, steps, images_per_s, losses[0], losses[-1], kind, tuple(losses))
