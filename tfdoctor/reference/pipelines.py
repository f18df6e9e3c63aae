"""Input pipelines over one annotation file: the seeds' naive Python iterator and a tuned tf.data pipeline.

Both visit images in the same order (a fresh permutation per epoch from ``seed``), draw augmentation
uniforms from ``(seed, position in the stream)`` and yield the same structure per global batch:
``(images (B, S, S, 3) in [0, 1], targets per scale (B, G, G, A, 5 + C), true boxes (B, M, 4))``.
With augmentation off they yield the same numbers (the naive one in float64).
"""

from __future__ import annotations

from typing import Sequence

import cv2
import numpy as np
import tensorflow as tf

from tfdoctor.reference.annotations import Example
from tfdoctor.reference.augment import NUM_UNIFORMS, augment_cv2, augment_tf, resize_cv2, resize_tf
from tfdoctor.reference.spec import YoloSpec
from tfdoctor.reference.targets import assign_targets_np, assign_targets_tf, normalized_boxes_np, normalized_boxes_tf

Batch = tuple  # (images, tuple of per-scale targets, true boxes)


def epoch_order(num_examples: int, seed: int, epoch: int) -> np.ndarray:
    """The order images are visited in during ``epoch``."""
    return np.random.default_rng([seed, epoch]).permutation(num_examples).astype(np.int64)


def max_boxes(examples: Sequence[Example]) -> int:
    """Boxes per image after padding: the most any image has (at least one)."""
    return max(1, max(len(e.classes) for e in examples))


def _padded(boxes: np.ndarray, classes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    out_boxes = np.zeros((size, 4), boxes.dtype)
    out_classes = np.full(size, -1, np.int64)
    out_boxes[: len(boxes)], out_classes[: len(classes)] = boxes, classes
    return out_boxes, out_classes


class NaiveBatches:
    """The seeds' loader: decodes and augments with OpenCV in the calling thread, yields float64 NumPy batches."""

    def __init__(
        self, examples: Sequence[Example], spec: YoloSpec, batch_size: int, seed: int = 0, augment: bool = True
    ) -> None:
        self.examples, self.spec, self.batch_size = list(examples), spec, batch_size
        self.seed, self.augment = seed, augment
        self.max_boxes = max_boxes(self.examples)
        self._position = 0
        self._order = np.empty(0, np.int64)

    def __iter__(self) -> NaiveBatches:
        return self

    def _example(self, position: int) -> tuple[np.ndarray, tuple[np.ndarray, ...], np.ndarray]:
        epoch, offset = divmod(position, len(self.examples))
        if offset == 0 or not len(self._order):
            self._order = epoch_order(len(self.examples), self.seed, epoch)
        example = self.examples[self._order[offset]]
        image = cv2.imread(str(example.image), cv2.IMREAD_COLOR)
        if image is None:
            raise OSError(f"cannot decode image {example.image}")
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
        image, boxes = resize_cv2(image, example.boxes.astype(np.float64), self.spec.img_size)
        classes = example.classes
        if self.augment:
            uniforms = np.random.default_rng([self.seed, position]).random(NUM_UNIFORMS)
            image, boxes, classes = augment_cv2(image, boxes, classes, uniforms)
        boxes, classes = _padded(boxes, classes, self.max_boxes)
        targets = assign_targets_np(boxes, classes, self.spec)
        return image.astype(np.float64) / 255.0, targets, normalized_boxes_np(boxes, classes, self.spec)

    def __next__(self) -> Batch:
        items = []
        for _ in range(self.batch_size):
            items.append(self._example(self._position))
            self._position += 1
        images, targets, boxes = zip(*items)
        return np.stack(images), tuple(np.stack(level) for level in zip(*targets)), np.stack(boxes)


def _decode(raw: tf.Tensor) -> tf.Tensor:
    # INTEGER_ACCURATE is the IDCT OpenCV uses, so both pipelines decode to identical pixels.
    return tf.cond(
        tf.io.is_jpeg(raw),
        lambda: tf.io.decode_jpeg(raw, channels=3, dct_method="INTEGER_ACCURATE"),
        lambda: tf.io.decode_png(raw, channels=3),
    )


_decoded_cache: dict[tuple, tuple[tf.Tensor, tf.Tensor]] = {}


def decoded(paths: tuple[str, ...], boxes: np.ndarray, size: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Every image read, decoded and resized to size x size, in parallel, with its padded boxes (N, M, 4)
    scaled: the equivalent of `.cache()` before the random steps (TFD204), with the random access an epoch
    order needs. The reference set is small (a few hundred images); a large one would use `.cache(filename)`.

    The last result is kept for the process: the profiler builds the pipeline up to five times (a batch on
    the devices, the phases, the trace, one replica), and decoding 128 photos of 1024 px takes 1-2 s."""
    key = (paths, boxes.tobytes(), boxes.shape, size)
    if key not in _decoded_cache:
        path_tensor, box_tensor = tf.constant(paths), tf.constant(boxes, tf.float32)

        def decode(index: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            image = tf.cast(_decode(tf.io.read_file(path_tensor[index])), tf.float32) / 255.0
            return resize_tf(image, box_tensor[index], size)

        _decoded_cache.clear()
        _decoded_cache[key] = tf.data.Dataset.range(len(paths)).map(
            decode, num_parallel_calls=tf.data.AUTOTUNE).batch(len(paths)).get_single_element()
    return _decoded_cache[key]


def tuned_dataset(
    examples: Sequence[Example], spec: YoloSpec, batch_size: int, seed: int = 0, augment: bool = True
) -> tf.data.Dataset:
    """Endless tf.data pipeline of global batches: files read and decoded once in parallel (`decoded`),
    then parallel augmentation and targets, then prefetch."""
    count, padded_size = len(examples), max_boxes(examples)
    padded = [_padded(e.boxes, e.classes, padded_size) for e in examples]
    all_classes = tf.constant(np.stack([c for _, c in padded]), tf.int64)
    decoded_images, decoded_boxes = decoded(
        tuple(str(e.image) for e in examples), np.stack([b for b, _ in padded]), spec.img_size)

    def order(epoch: tf.Tensor) -> tf.data.Dataset:
        indices = tf.numpy_function(lambda e: epoch_order(count, seed, int(e)), [epoch], tf.int64)
        return tf.data.Dataset.from_tensor_slices(tf.ensure_shape(indices, (count,)))

    def load(position: tf.Tensor, index: tf.Tensor) -> Batch:
        image, boxes, classes = decoded_images[index], decoded_boxes[index], all_classes[index]
        if augment:
            stream_seed = tf.stack([tf.constant(seed, tf.int64), position])
            uniforms = tf.random.stateless_uniform((NUM_UNIFORMS,), seed=stream_seed)
            image, boxes, classes = augment_tf(image, boxes, classes, uniforms)
        return image, assign_targets_tf(boxes, classes, spec), normalized_boxes_tf(boxes, classes, spec)

    dataset = tf.data.Dataset.counter().flat_map(order).enumerate()
    dataset = dataset.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
