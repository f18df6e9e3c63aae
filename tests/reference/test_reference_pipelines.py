"""Naive and tuned pipelines: same structure, same numbers without augmentation, sane augmentation."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.tf, pytest.mark.untimed]

tf = pytest.importorskip("tensorflow")

from tfdoctor.reference.augment import augment_cv2, augment_tf  # noqa: E402
from tfdoctor.reference.pipelines import NaiveBatches, epoch_order, tuned_dataset  # noqa: E402
from tfdoctor.reference.spec import spec_for  # noqa: E402

SPEC = spec_for("yolov3-tiny", 160, 3)


def test_naive_batches_are_float64_numpy(examples):
    images, targets, boxes = next(NaiveBatches(examples, SPEC, batch_size=3, seed=0))
    assert images.dtype == np.float64 and images.shape == (3, 160, 160, 3)
    assert 0 <= images.min() and images.max() <= 1
    assert [t.shape for t in targets] == [(3, 5, 5, 3, 8), (3, 10, 10, 3, 8)]
    assert all(t.dtype == np.float64 for t in targets)
    assert boxes.dtype == np.float64 and boxes.shape[:1] == (3,) and boxes.shape[2] == 4


def test_without_augmentation_both_pipelines_yield_the_same_batches(examples):
    naive = NaiveBatches(examples, SPEC, batch_size=4, seed=5, augment=False)
    tuned = iter(tuned_dataset(examples, SPEC, batch_size=4, seed=5, augment=False))
    for _ in range(3):
        expected, got = next(naive), next(tuned)
        for a, b in zip(tf.nest.flatten(expected), tf.nest.flatten(got)):
            assert b.dtype == tf.float32
            np.testing.assert_allclose(a, b.numpy(), atol=1e-6)


def test_order_is_a_fresh_permutation_each_epoch():
    first, second = epoch_order(50, 1, 0), epoch_order(50, 1, 1)
    assert sorted(first) == list(range(50)) and sorted(second) == list(range(50))
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(first, epoch_order(50, 1, 0))


def test_tuned_pipeline_crosses_epochs(examples):
    # 64 images in batches of 48: the second batch spans two epochs.
    dataset = tuned_dataset(examples, SPEC, batch_size=48, seed=0, augment=True)
    batches = list(dataset.take(2))
    assert [int(b[0].shape[0]) for b in batches] == [48, 48]


def test_opencv_and_tensorflow_augmentations_agree_on_boxes(examples):
    rng = np.random.default_rng(3)
    for example in examples[:12]:
        uniforms = rng.random(6)
        image = tf.io.decode_jpeg(tf.io.read_file(str(example.image)), dct_method="INTEGER_ACCURATE").numpy()
        cv_image, cv_boxes, cv_classes = augment_cv2(image, example.boxes.astype(float), example.classes, uniforms)
        tf_image, tf_boxes, tf_classes = augment_tf(
            tf.constant(image, tf.float32) / 255, tf.constant(example.boxes), tf.constant(example.classes),
            tf.constant(uniforms, tf.float32),
        )
        kept = tf_classes.numpy() >= 0
        np.testing.assert_array_equal(tf_classes.numpy()[kept], cv_classes)
        np.testing.assert_allclose(tf_boxes.numpy()[kept], cv_boxes, atol=1e-3)
        assert ((cv_boxes >= 0) & (cv_boxes <= 160)).all()
        assert (cv_boxes[:, 2:] - cv_boxes[:, :2] >= 2).all()
        # colour maths differs (uint8 HSV vs float), geometry is the same: images stay close
        assert np.abs(cv_image / 255 - tf_image.numpy()).mean() < 0.03
