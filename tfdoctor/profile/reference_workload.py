"""The built-in workload: the reference YOLOv3 training, naive or tuned, as StepFunctions."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import tensorflow as tf

from tfdoctor.profile.workload import StepFunctions
from tfdoctor.reference import pipelines
from tfdoctor.reference.pipelines import tuned_dataset
from tfdoctor.reference.annotations import read_annotations
from tfdoctor.reference.data import ensure_dataset
from tfdoctor.reference.train import TrainConfig, Trainer

NUM_IMAGES = 128
SOURCE_SIZE = 1024  # the synthetic photos are drawn at 1024 x 1024, like camera images, then resized
# Without a GPU a thinner model keeps a step's compute near what a GPU spends on the full one. Not thinner
# than 0.75: on 2 cores the tuned pipeline's `next()` waits 3-4 ms while its threads refill the buffers, a
# fixed cost that was 3-4% of a 100 ms step at width 0.5, and with a step's ~5% noise some runs crossed the
# 5% moderately-input-bound line (at 0.75: about 2% of 200 ms). Host overhead is fixed per call as well.
CPU_WIDTH = 0.75

NAIVE_TUNED = ("the Python iterator replaced by the tuned variant's tf.data pipeline over the same files "
               "(parallel decode and augmentation, batch, prefetch); the step is unchanged")
TUNED_TUNED = ("tf.data.Options with autotune and map parallelization on the tuned pipeline, which already maps in "
               "parallel and prefetches")

# Where the naive variant does what the lint rules look for: (rule, function, a line of its source).
_NAIVE_CAUSES = (
    ("TFD201", pipelines.NaiveBatches.__next__, "def __next__"),
    ("TFD206", pipelines.NaiveBatches._example, "float64"),
    ("TFD103", Trainer._naive_step, "self.strategy.run"),
    ("TFD102", Trainer._naive_loss_and_gradients, "tf.split"),
)


def build(strategy: tf.distribute.Strategy, params: dict[str, Any]) -> StepFunctions:
    on_gpu = bool(tf.config.list_logical_devices("GPU"))
    width = params.get("width") or (1.0 if on_gpu else CPU_WIDTH)
    config = TrainConfig(model=params.get("model", "yolov3-tiny"), img_size=int(params.get("img_size", 128)),
                         batch_per_replica=int(params.get("batch_per_replica", 4)), width=float(width),
                         mixed_precision=bool(params.get("mixed_precision", False)))
    source_size = max(SOURCE_SIZE, config.img_size)
    examples = read_annotations(ensure_dataset(NUM_IMAGES, source_size, config.seed, config.num_classes),
                                config.num_classes)
    notes = [f"{NUM_IMAGES} synthetic {source_size} x {source_size} JPEG photos resized to {config.img_size} px; "
             f"model width {config.width:g}" + ("" if on_gpu else " (thinner on CPU so compute stays GPU-like)")]
    trainer = Trainer(strategy, config)
    variant = params.get("variant", "tuned")
    if variant == "naive":
        def batches() -> Any:
            return iter(trainer.naive_batches(examples))

        def tuned() -> Any:  # the same global batches from tf.data, for the same step
            return iter(tuned_dataset(examples, trainer.spec, trainer.global_batch, config.seed, config.augment))

        device_batch = tf.nest.map_structure(tf.constant, next(batches()))
        step, gradients, reduced = trainer.naive_step, trainer.naive_gradients, trainer.naive_reduced_gradients
        causes = [_locate(code, function, text) for code, function, text in _NAIVE_CAUSES]
        what_if = dict(tuned_batches=tuned, tuned_note=NAIVE_TUNED, xla_step=trainer.naive_xla_step,
                       tuned_missing="")
    elif variant == "tuned":
        # As a custom loop takes them: `step(next(iterator))`, each batch already split onto the replicas.
        # A, B and H then share one traced step (tracing YOLOv3 costs seconds).
        def batches() -> Any:
            return trainer.tuned_batches(examples)

        def tuned() -> Any:
            return trainer.tuned_batches(examples, tuned_options())

        device_batch = next(trainer.tuned_batches(examples))
        step, gradients, reduced = trainer.tuned_step, trainer.tuned_gradients, trainer.tuned_reduced_gradients
        causes = []
        what_if = dict(tuned_batches=tuned, tuned_note=TUNED_TUNED, xla_step=trainer.tuned_xla_step,
                       looped_steps=trainer.tuned_looped_steps)
    else:
        raise ValueError(f"unknown variant {variant!r}")
    return StepFunctions(
        name=f"{config.model} {config.img_size}px, {variant} pipeline", replicas=trainer.replicas,
        global_batch=trainer.global_batch, batches=batches, step=step, device_batch=device_batch,
        gradients=gradients, reduced_gradients=reduced, per_replica_batch=config.batch_per_replica,
        causes=causes, notes=notes,  # known locations: both variants share their files, so findings alone cannot tell
        **what_if,
    )


def tuned_options() -> tf.data.Options:
    """The `tf.data.Options` the linter's input rules ask for: autotuning, and stateless maps run in parallel."""
    options = tf.data.Options()
    options.autotune.enabled = True
    options.experimental_optimization.map_parallelization = True
    return options


def _locate(code: str, function: Any, text: str) -> tuple[str, str, int]:
    """The line of `function`'s source that contains `text` (the known location of a cause)."""
    lines, first = inspect.getsourcelines(function)
    offset = next((i for i, line in enumerate(lines) if text in line), 0)
    return code, str(Path(inspect.getsourcefile(function) or "")), first + offset
