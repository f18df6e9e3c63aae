"""YOLOv3 loss: box regression, objectness with an ignore threshold, class binary cross-entropy."""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from tfdoctor.reference.spec import YoloSpec


def _corners(centre: tf.Tensor, wh: tf.Tensor) -> tf.Tensor:
    return tf.concat([centre - wh / 2, centre + wh / 2], axis=-1)


def _best_iou(pred: tf.Tensor, truth: tf.Tensor) -> tf.Tensor:
    """For (B, G, G, A, 4) predicted and (B, M, 4) true corner boxes, each prediction's best IoU: (B, G, G, A)."""
    pred = pred[..., None, :]
    truth = truth[:, None, None, None, :, :]
    inter_wh = tf.maximum(tf.minimum(pred[..., 2:], truth[..., 2:]) - tf.maximum(pred[..., :2], truth[..., :2]), 0.0)
    inter = inter_wh[..., 0] * inter_wh[..., 1]
    area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # noqa: E731
    iou = inter / tf.maximum(area(pred) + area(truth) - inter, 1e-9)
    return tf.reduce_max(iou, axis=-1)


def scale_loss(output: tf.Tensor, target: tf.Tensor, gt_boxes: tf.Tensor, anchors, spec: YoloSpec) -> tf.Tensor:
    """Per-example loss (B,) of one output scale.

    ``output`` holds raw logits and ``target`` the assigned targets, both (B, G, G, A, 5 + C);
    ``gt_boxes`` (B, M, 4) are every true box as image fractions x1, y1, x2, y2 (zeros for padding);
    ``anchors`` are this scale's (w, h) in pixels.
    """
    grid_size = output.shape[1]
    cols, rows = tf.meshgrid(tf.range(grid_size, dtype=tf.float32), tf.range(grid_size, dtype=tf.float32))
    grid = tf.stack([cols, rows], axis=-1)[:, :, None, :]  # (G, G, 1, 2) as x, y
    anchors = tf.constant(anchors, tf.float32) / spec.img_size

    pred_xy = tf.sigmoid(output[..., 0:2])
    pred_twh = output[..., 2:4]
    pred_box = _corners((pred_xy + grid) / grid_size, tf.exp(tf.minimum(pred_twh, 10.0)) * anchors)

    obj = target[..., 4]
    true_xy = target[..., 0:2] * grid_size - grid
    true_twh = tf.math.log(tf.maximum(target[..., 2:4] / anchors, 1e-9)) * obj[..., None]
    box_weight = obj * (2.0 - target[..., 2] * target[..., 3])  # small boxes count more

    xy_loss = box_weight * tf.reduce_sum(tf.square(true_xy - pred_xy), axis=-1)
    wh_loss = box_weight * tf.reduce_sum(tf.square(true_twh - pred_twh), axis=-1)
    ignore = tf.cast(_best_iou(tf.stop_gradient(pred_box), gt_boxes) < spec.ignore_threshold, tf.float32)
    obj_bce = tf.nn.sigmoid_cross_entropy_with_logits(labels=obj, logits=output[..., 4])
    obj_loss = obj * obj_bce + (1.0 - obj) * ignore * obj_bce
    cls_bce = tf.nn.sigmoid_cross_entropy_with_logits(labels=target[..., 5:], logits=output[..., 5:])
    cls_loss = obj * tf.reduce_sum(cls_bce, axis=-1)
    return tf.reduce_sum(xy_loss + wh_loss + obj_loss + cls_loss, axis=[1, 2, 3])


def yolo_loss(
    outputs: Sequence[tf.Tensor], targets: Sequence[tf.Tensor], gt_boxes: tf.Tensor, spec: YoloSpec
) -> tf.Tensor:
    """Per-example YOLOv3 loss (B,), summed over cells, anchors and scales (float32 throughout)."""
    gt_boxes = tf.cast(gt_boxes, tf.float32)
    per_scale = [
        scale_loss(tf.cast(output, tf.float32), tf.cast(target, tf.float32), gt_boxes, anchors, spec)
        for output, target, anchors in zip(outputs, targets, spec.anchors)
    ]
    return tf.add_n(per_scale)
