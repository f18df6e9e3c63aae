"""Anchor assignment on hand-worked cases; the NumPy and TensorFlow versions agree."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.tf, pytest.mark.untimed]

tf = pytest.importorskip("tensorflow")

from tfdoctor.reference.spec import YoloSpec, spec_for  # noqa: E402
from tfdoctor.reference.targets import assign_targets_np, assign_targets_tf  # noqa: E402

# 64 px image; coarse scale: 2x2 cells of 32 px, fine scale: 4x4 cells of 16 px; two anchors each.
TWO_SCALES = YoloSpec(
    img_size=64, num_classes=2, strides=(32, 16), anchors=(((48, 48), (64, 32)), ((16, 16), (24, 24))),
    iou_threshold=0.3, label_smoothing=0.05,
)


def both(boxes, classes, spec):
    """Targets from both implementations, checked to agree, as NumPy."""
    from_np = assign_targets_np(np.array(boxes, float), np.array(classes), spec)
    from_tf = [t.numpy() for t in assign_targets_tf(tf.constant(boxes, tf.float32), tf.constant(classes), spec)]
    for a, b in zip(from_np, from_tf):
        np.testing.assert_allclose(a, b, atol=1e-6)
    return from_np


def positives(targets):
    return [tuple(map(int, index)) for index in np.argwhere(targets[..., 4] > 0)]


def test_one_box_one_anchor_single_scale():
    spec = YoloSpec(img_size=64, num_classes=2, strides=(32,), anchors=(((32, 32),),), label_smoothing=0.1)
    (target,) = both([[0, 0, 32, 32]], [1], spec)
    assert target.shape == (2, 2, 1, 7)
    np.testing.assert_allclose(target[0, 0, 0], [0.25, 0.25, 0.5, 0.5, 1.0, 0.05, 0.95])
    target[0, 0, 0] = 0
    assert not target.any()


def test_every_anchor_over_the_threshold_gets_the_box():
    # 24x24 box centred at (20, 20). Shape IoUs: 48x48 0.25, 64x32 0.28, 16x16 0.44, 24x24 1.0.
    coarse, fine = both([[8, 8, 32, 32]], [0], TWO_SCALES)
    assert positives(coarse) == []
    assert positives(fine) == [(1, 1, 0), (1, 1, 1)]  # row 1, column 1 of 16 px cells
    for anchor in (0, 1):
        np.testing.assert_allclose(fine[1, 1, anchor], [20 / 64, 20 / 64, 24 / 64, 24 / 64, 1, 0.975, 0.025])


def test_best_anchor_when_none_is_over_the_threshold():
    # 64x8 box centred at (32, 32). Shape IoUs: 48x48 0.16, 64x32 0.25, 16x16 0.2, 24x24 0.21: all under 0.3.
    coarse, fine = both([[0, 28, 64, 36]], [1], TWO_SCALES)
    assert positives(fine) == []
    assert positives(coarse) == [(1, 1, 1)]
    np.testing.assert_allclose(coarse[1, 1, 1], [0.5, 0.5, 1.0, 0.125, 1, 0.025, 0.975])


def test_later_box_wins_a_shared_cell_and_padding_is_ignored():
    boxes = [[8, 8, 32, 32], [9, 9, 31, 31], [0, 28, 64, 36]]
    coarse, fine = both(boxes, [0, 1, -1], TWO_SCALES)
    assert positives(coarse) == []
    assert positives(fine) == [(1, 1, 0), (1, 1, 1)]
    np.testing.assert_allclose(fine[1, 1, :, 2], [22 / 64, 22 / 64])  # the second box
    np.testing.assert_allclose(fine[1, 1, :, 5:], [[0.025, 0.975]] * 2)


def test_no_boxes_gives_empty_targets():
    targets = both(np.zeros((0, 4)), np.zeros(0, int), spec_for("yolov3", 160, 3))
    assert [t.shape for t in targets] == [(5, 5, 3, 8), (10, 10, 3, 8), (20, 20, 3, 8)]
    assert not any(t.any() for t in targets)


def test_numpy_and_tensorflow_agree_on_random_boxes():
    spec = spec_for("yolov3", 160, 4)
    rng = np.random.default_rng(0)
    for _ in range(60):
        count = int(rng.integers(1, 9))
        corner = rng.integers(0, 150, (count, 2))
        boxes = np.concatenate([corner, np.minimum(corner + rng.integers(2, 160, (count, 2)), 160)], axis=1)
        classes = rng.integers(-1, 4, count)
        targets = both(boxes.astype(float), classes, spec)
        assert (sum(t[..., 4].sum() for t in targets) > 0) == (classes >= 0).any()


def test_tf_version_runs_inside_a_dataset_map():
    spec = spec_for("yolov3-tiny", 160, 3)
    boxes = tf.constant([[[10, 10, 50, 60], [0, 0, 0, 0]]], tf.float32)
    classes = tf.constant([[2, -1]], tf.int64)
    dataset = tf.data.Dataset.from_tensor_slices((boxes, classes)).map(lambda b, c: assign_targets_tf(b, c, spec))
    coarse, fine = next(iter(dataset))
    assert coarse.shape == (5, 5, 3, 8) and fine.shape == (10, 10, 3, 8)
    assert float(tf.reduce_sum(coarse[..., 4]) + tf.reduce_sum(fine[..., 4])) >= 1
