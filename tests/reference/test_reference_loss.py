"""YOLOv3 loss on hand-worked cases (ln 2 is the BCE of a zero logit for any target)."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytestmark = [pytest.mark.tf, pytest.mark.untimed]

tf = pytest.importorskip("tensorflow")

from tfdoctor.reference.loss import yolo_loss  # noqa: E402
from tfdoctor.reference.spec import YoloSpec  # noqa: E402
from tfdoctor.reference.targets import assign_targets_np, normalized_boxes_np  # noqa: E402

LN2 = math.log(2)


def loss_of(outputs: np.ndarray, boxes, classes, spec: YoloSpec) -> np.ndarray:
    """Loss of one-scale ``outputs`` (B, 2, 2, A, 7) for the same boxes in every example."""
    boxes, classes = np.array(boxes, float), np.array(classes)
    (target,) = assign_targets_np(boxes, classes, spec)
    batch = len(outputs)
    targets = np.repeat(target[None], batch, axis=0)
    gt = np.repeat(normalized_boxes_np(boxes, classes, spec)[None], batch, axis=0)
    return yolo_loss([tf.constant(outputs, tf.float32)], [targets], gt, spec).numpy()


def test_zero_logits_one_box():
    # 4 cells: objectness BCE ln 2 each (none ignored: other cells' 32 px predictions miss the box),
    # class BCE 2 ln 2 at the box's cell, box terms 0 (sigmoid 0 = 0.5 = true offset, log(32/32) = 0).
    spec = YoloSpec(img_size=64, num_classes=2, strides=(32,), anchors=(((32, 32),),))
    loss = loss_of(np.zeros((1, 2, 2, 1, 7)), [[0, 0, 32, 32]], [1], spec)
    np.testing.assert_allclose(loss, [6 * LN2], rtol=1e-6)


def test_box_terms_ignore_mask_and_objectness_logit():
    # Two anchors; 24x24 has shape IoU 0.5625 with the box, under this spec's 0.6 assignment threshold,
    # so only the 32x32 anchor of cell (0, 0) is positive. Its 24x24 prediction overlaps the box with
    # IoU 0.5625 >= 0.5, so that anchor is ignored (no objectness loss).
    spec = YoloSpec(
        img_size=64, num_classes=2, strides=(32,), anchors=(((32, 32), (24, 24)),), iou_threshold=0.6
    )
    outputs = np.zeros((2, 2, 2, 2, 7))
    outputs[0, 0, 0, 0, 0] = 1.0  # tx: predicted offset sigmoid(1) against the true 0.5
    outputs[0, 0, 0, 0, 2] = LN2  # tw: predicted width 64 px against the true 32 px
    outputs[0, 1, 1, 0, 4] = 2.0  # objectness logit of an empty cell
    sigmoid1 = 1 / (1 + math.exp(-1))
    box_weight = 2 - 0.5 * 0.5
    expected_first = box_weight * ((0.5 - sigmoid1) ** 2 + LN2**2) + 6 * LN2 + math.log1p(math.exp(2)) + 2 * LN2
    expected_second = 7 * LN2 + 2 * LN2  # zero logits: 8 anchors less the ignored one, plus the class terms
    loss = loss_of(outputs, [[0, 0, 32, 32]], [0], spec)
    np.testing.assert_allclose(loss, [expected_first, expected_second], rtol=1e-6)


def test_image_without_boxes_penalises_every_anchor():
    spec = YoloSpec(img_size=64, num_classes=2, strides=(32,), anchors=(((32, 32), (24, 24)),))
    loss = loss_of(np.zeros((1, 2, 2, 2, 7)), [[0, 0, 0, 0]], [-1], spec)
    np.testing.assert_allclose(loss, [8 * LN2], rtol=1e-6)


def test_ignore_mask_passes_no_gradient_and_loss_is_differentiable():
    spec = YoloSpec(
        img_size=64, num_classes=2, strides=(32,), anchors=(((32, 32), (24, 24)),), iou_threshold=0.6
    )
    (target,) = assign_targets_np(np.array([[0, 0, 32, 32.0]]), np.array([1]), spec)
    outputs = tf.Variable(np.random.default_rng(0).normal(size=(1, 2, 2, 2, 7)), dtype=tf.float32)
    with tf.GradientTape() as tape:
        loss = yolo_loss([outputs], [target[None]], np.array([[[0, 0, 0.5, 0.5]]]), spec)
    grad = tape.gradient(loss, outputs).numpy()
    assert np.isfinite(grad).all()
    # box logits get gradient only where there is an object (cell 0, 0, anchor 0), not through the ignore mask
    mask = np.zeros((2, 2, 2), bool)
    mask[0, 0, 0] = True
    assert not grad[0][~mask][:, :4].any()
    assert grad[0][mask][:, :4].all()
