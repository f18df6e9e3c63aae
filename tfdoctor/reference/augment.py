"""Resize and augmentation of one image and its boxes, in OpenCV (naive pipeline) and TensorFlow (tuned).

Both draw six uniforms per image and apply the same steps: a random square crop of 70-100 % of the
side resized back, a horizontal flip half of the time, and saturation and brightness scaled by
0.7-1.3. Boxes are shifted, scaled, clipped; a box keeps at least a quarter of its area and 2 px a
side or is dropped (TensorFlow marks dropped and padding boxes with class -1 and zero corners).
"""

from __future__ import annotations

import cv2
import numpy as np
import tensorflow as tf

NUM_UNIFORMS = 6
MIN_CROP, MIN_SIDE_PX, MIN_KEPT_AREA = 0.7, 2.0, 0.25


def _crop_window(u, size: int, floor, round_):
    """Side and top-left corner of the square crop, as whole numbers in floats (half-to-even rounding)."""
    side = round_((MIN_CROP + (1 - MIN_CROP) * u[0]) * size)
    return side, floor(u[1] * (size - side + 1)), floor(u[2] * (size - side + 1))


def resize_cv2(image: np.ndarray, boxes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Resize an RGB uint8 image to size x size (no-op when it already is) and scale its boxes."""
    height, width = image.shape[:2]
    if (height, width) == (size, size):
        return image, boxes
    scale = np.array([size / width, size / height] * 2)
    return cv2.resize(image, (size, size), interpolation=cv2.INTER_LINEAR), boxes * scale


def augment_cv2(
    image: np.ndarray, boxes: np.ndarray, classes: np.ndarray, u: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Augment a square RGB uint8 image with boxes (k, 4) and classes (k,), given six uniforms ``u``."""
    size = image.shape[0]
    side, x0, y0 = (int(v) for v in _crop_window(u, size, np.floor, np.round))
    image = cv2.resize(image[y0 : y0 + side, x0 : x0 + side], (size, size), interpolation=cv2.INTER_LINEAR)
    moved = (boxes - np.array([x0, y0, x0, y0])) * (size / side)
    clipped = np.clip(moved, 0, size)
    wh, wh_before = clipped[:, 2:] - clipped[:, :2], moved[:, 2:] - moved[:, :2]
    keep = (wh.min(axis=1) >= MIN_SIDE_PX) & (wh.prod(axis=1) >= MIN_KEPT_AREA * wh_before.prod(axis=1))
    boxes, classes = clipped[keep], classes[keep]
    if u[3] < 0.5:
        image = image[:, ::-1]
        boxes = np.stack([size - boxes[:, 2], boxes[:, 1], size - boxes[:, 0], boxes[:, 3]], axis=1)
    hsv = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2HSV).astype(np.float32)
    hsv[..., 1] *= 0.7 + 0.6 * u[4]
    hsv[..., 2] *= 0.7 + 0.6 * u[5]
    image = cv2.cvtColor(np.clip(hsv, 0, 255).round().astype(np.uint8), cv2.COLOR_HSV2RGB)
    return image, boxes, classes


def resize_tf(image: tf.Tensor, boxes: tf.Tensor, size: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Resize a float image to size x size (no-op when it already is) and scale its padded boxes."""
    shape = tf.shape(image)
    scale = tf.cast(tf.stack([size / shape[1], size / shape[0]] * 2), tf.float32)
    same = tf.logical_and(tf.equal(shape[0], size), tf.equal(shape[1], size))
    image = tf.cond(same, lambda: image, lambda: tf.image.resize(image, (size, size)))
    return tf.ensure_shape(image, (size, size, 3)), boxes * scale


def augment_tf(
    image: tf.Tensor, boxes: tf.Tensor, classes: tf.Tensor, u: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Augment a square float32 image in [0, 1] with padded boxes (M, 4) and classes (M,), given six uniforms."""
    size = image.shape[0]
    side, x0, y0 = (tf.cast(v, tf.int32) for v in _crop_window(u, size, tf.floor, tf.round))
    image = tf.image.resize(image[y0 : y0 + side, x0 : x0 + side], (size, size))
    origin = tf.cast(tf.stack([x0, y0, x0, y0]), tf.float32)
    moved = (boxes - origin) * (size / tf.cast(side, tf.float32))
    clipped = tf.clip_by_value(moved, 0.0, float(size))
    wh, wh_before = clipped[:, 2:] - clipped[:, :2], moved[:, 2:] - moved[:, :2]
    keep = (tf.reduce_min(wh, axis=1) >= MIN_SIDE_PX) & (
        tf.reduce_prod(wh, axis=1) >= MIN_KEPT_AREA * tf.reduce_prod(wh_before, axis=1)
    )
    keep &= classes >= 0
    boxes = tf.where(keep[:, None], clipped, 0.0)
    classes = tf.where(keep, classes, -1)
    flipped = tf.stack([size - boxes[:, 2], boxes[:, 1], size - boxes[:, 0], boxes[:, 3]], axis=1)
    flip = u[3] < 0.5
    image = tf.cond(flip, lambda: tf.reverse(image, [1]), lambda: image)
    boxes = tf.where(flip & keep[:, None], flipped, boxes)
    image = tf.image.adjust_saturation(image, 0.7 + 0.6 * u[4])
    image = tf.clip_by_value(image * (0.7 + 0.6 * u[5]), 0.0, 1.0)
    return image, boxes, classes
