"""YOLOv3 training targets: assign each ground-truth box to anchors over all output scales.

A box goes to every anchor whose shape IoU with it exceeds ``spec.iou_threshold`` and always to its
best anchor, in the grid cell holding its centre at that anchor's scale. When boxes compete for one
cell and anchor, the later box wins. Per scale the target is (grid, grid, anchors, 5 + classes):
centre x, y and width, height as fractions of the image, objectness 1, smoothed one-hot class.

The same algorithm exists twice, in NumPy (``assign_targets_np``, for the naive pipeline) and in
TensorFlow (``assign_targets_tf``, usable inside ``tf.data`` map); tests check they agree.
Inputs are padded: ``boxes`` (M, 4) x1,y1,x2,y2 in pixels, ``classes`` (M,) with -1 for padding.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfdoctor.reference.spec import YoloSpec


def _layout(spec: YoloSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per flattened anchor k (scale-major): (w, h), stride, grid size, offset of its scale's first cell."""
    a = spec.anchors_per_scale
    wh = np.array([anchor for level in spec.anchors for anchor in level], np.float64)
    stride = np.repeat(spec.strides, a)
    grid = np.repeat(spec.grids, a)
    sizes = [g * g * a for g in spec.grids]
    offset = np.repeat(np.cumsum([0, *sizes[:-1]]), a)
    return wh, stride, grid, offset


def _split(flat, spec: YoloSpec, reshape) -> tuple:
    out, start = [], 0
    for g in spec.grids:
        end = start + g * g * spec.anchors_per_scale
        out.append(reshape(flat[start:end], (g, g, spec.anchors_per_scale, 5 + spec.num_classes)))
        start = end
    return tuple(out)


def assign_targets_np(boxes: np.ndarray, classes: np.ndarray, spec: YoloSpec) -> tuple[np.ndarray, ...]:
    """NumPy targets (float64), one array per scale, for one image's padded boxes."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    classes = np.asarray(classes, np.int64).reshape(-1)
    anchor_wh, stride, grid, offset = _layout(spec)
    num_boxes, num_anchors, a = len(boxes), len(anchor_wh), spec.anchors_per_scale
    total = int(sum(g * g * a for g in spec.grids))

    wh = boxes[:, 2:] - boxes[:, :2]
    centre = (boxes[:, :2] + boxes[:, 2:]) / 2
    inter = np.prod(np.minimum(wh[:, None, :], anchor_wh[None]), axis=-1)
    iou = inter / (np.prod(wh, -1)[:, None] + np.prod(anchor_wh, -1)[None] - inter)
    best = np.arange(num_anchors)[None] == np.argmax(iou, axis=1)[:, None]
    assigned = ((iou > spec.iou_threshold) | best) & (classes >= 0)[:, None]

    cell = np.minimum(np.floor(centre[:, None, :] / stride[None, :, None]), grid[None, :, None] - 1).astype(np.int64)
    slot = offset[None] + (cell[..., 1] * grid[None] + cell[..., 0]) * a + np.arange(num_anchors)[None] % a
    pair = np.arange(num_boxes * num_anchors).reshape(num_boxes, num_anchors)
    owner = np.full(total + 1, -1, np.int64)  # last slot collects unassigned pairs
    np.maximum.at(owner, np.where(assigned, slot, total).ravel(), pair.ravel())
    owner = owner[:total]

    smooth = spec.label_smoothing
    one_hot = np.eye(spec.num_classes)[np.clip(classes, 0, None)] * (1 - smooth) + smooth / spec.num_classes
    rows = np.concatenate([centre / spec.img_size, wh / spec.img_size, np.ones((num_boxes, 1)), one_hot], axis=1)
    rows = np.concatenate([rows, np.zeros((1, rows.shape[1]))])  # row for empty slots
    flat = rows[np.where(owner >= 0, owner // num_anchors, num_boxes)]
    return _split(flat, spec, np.reshape)


def assign_targets_tf(boxes: tf.Tensor, classes: tf.Tensor, spec: YoloSpec) -> tuple[tf.Tensor, ...]:
    """TensorFlow targets (float32), one tensor per scale, for one image's padded boxes."""
    boxes = tf.reshape(tf.cast(boxes, tf.float32), (-1, 4))
    classes = tf.reshape(tf.cast(classes, tf.int64), (-1,))
    layout = _layout(spec)
    anchor_wh = tf.constant(layout[0], tf.float32)
    stride, grid, offset = (tf.constant(v, tf.int64) for v in layout[1:])
    num_boxes, num_anchors, a = tf.shape(boxes, tf.int64)[0], len(layout[0]), spec.anchors_per_scale
    total = int(sum(g * g * a for g in spec.grids))

    wh = boxes[:, 2:] - boxes[:, :2]
    centre = (boxes[:, :2] + boxes[:, 2:]) / 2
    inter = tf.reduce_prod(tf.minimum(wh[:, None, :], anchor_wh[None]), axis=-1)
    iou = inter / (tf.reduce_prod(wh, -1)[:, None] + tf.reduce_prod(anchor_wh, -1)[None] - inter)
    best = tf.one_hot(tf.argmax(iou, axis=1), num_anchors, on_value=True, off_value=False)
    assigned = ((iou > spec.iou_threshold) | best) & (classes >= 0)[:, None]

    cell = tf.floor(centre[:, None, :] / tf.cast(stride, tf.float32)[None, :, None])
    cell = tf.minimum(tf.cast(cell, tf.int64), grid[None, :, None] - 1)
    anchor_in_scale = tf.range(num_anchors, dtype=tf.int64)[None] % a
    slot = offset[None] + (cell[..., 1] * grid[None] + cell[..., 0]) * a + anchor_in_scale
    pair = tf.reshape(tf.range(num_boxes * num_anchors), (-1, num_anchors))
    owner = tf.math.unsorted_segment_max(
        tf.reshape(pair, [-1]), tf.reshape(tf.where(assigned, slot, total), [-1]), total + 1
    )[:total]  # empty slots get the dtype's minimum

    smooth = spec.label_smoothing
    one_hot = tf.one_hot(tf.maximum(classes, 0), spec.num_classes) * (1 - smooth) + smooth / spec.num_classes
    ones = tf.ones_like(wh[:, :1])
    rows = tf.concat([centre / spec.img_size, wh / spec.img_size, ones, one_hot], axis=1)
    rows = tf.concat([rows, tf.zeros((1, 5 + spec.num_classes))], axis=0)
    flat = tf.gather(rows, tf.where(owner >= 0, owner // num_anchors, num_boxes))
    return _split(flat, spec, tf.reshape)


def normalized_boxes_np(boxes: np.ndarray, classes: np.ndarray, spec: YoloSpec) -> np.ndarray:
    """Padded boxes as fractions of the image with padding rows zeroed (for the loss's ignore mask)."""
    return np.where((np.asarray(classes) >= 0)[:, None], np.asarray(boxes, np.float64) / spec.img_size, 0.0)


def normalized_boxes_tf(boxes: tf.Tensor, classes: tf.Tensor, spec: YoloSpec) -> tf.Tensor:
    """TensorFlow twin of ``normalized_boxes_np`` (float32)."""
    return tf.where((classes >= 0)[:, None], tf.cast(boxes, tf.float32) / spec.img_size, 0.0)
