"""Training: naive and tuned steps do the same maths on one replica; the model learns (slow)."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytestmark = [pytest.mark.tf, pytest.mark.untimed]

tf = pytest.importorskip("tensorflow")

from tfdoctor.reference.devices import ReplicaSetupError, setup_replicas  # noqa: E402
from tfdoctor.reference.train import Trainer, TrainConfig, run_training  # noqa: E402

CONFIG = TrainConfig(model="yolov3-tiny", img_size=160, batch_per_replica=4, width=0.5, augment=False, seed=1)


@pytest.fixture(scope="module")
def strategy():
    strategy, kind, names = setup_replicas(1)
    assert kind in ("cpu", "gpu", "virtual-gpu") and len(names) == 1
    return strategy


def test_same_loss_on_the_same_first_batches(strategy, examples):
    naive, tuned = Trainer(strategy, CONFIG), Trainer(strategy, CONFIG)
    for a, b in zip(naive.model.weights, tuned.model.weights):  # same seed, same initial weights
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    naive_batches, tuned_batches = naive.naive_batches(examples), tuned.tuned_batches(examples)
    first = [float(naive.naive_step(next(naive_batches))), float(tuned.tuned_step(next(tuned_batches)))]
    second = [float(naive.naive_step(next(naive_batches))), float(tuned.tuned_step(next(tuned_batches)))]
    assert first[0] == pytest.approx(first[1], rel=1e-5)
    assert second[0] == pytest.approx(second[1], rel=1e-4)  # after one identical Adam update
    assert second[0] != pytest.approx(first[0], rel=1e-3)


def test_gradients_without_update(strategy, examples):
    trainer = Trainer(strategy, CONFIG)
    batch = next(trainer.tuned_batches(examples))
    before = [w.numpy() for w in trainer.model.trainable_weights]
    loss, touched = trainer.tuned_gradients(batch)  # touched: a value per replica that needs every gradient
    reduced_loss, reduced = trainer.tuned_reduced_gradients(batch)
    assert math.isfinite(float(loss)) and float(loss) == pytest.approx(float(reduced_loss), rel=1e-5)
    plain, summed = ([float(v) for v in strategy.experimental_local_results(t)] for t in (touched, reduced))
    assert len(plain) == strategy.num_replicas_in_sync and all(math.isfinite(v) for v in plain)
    np.testing.assert_allclose(plain, summed, rtol=1e-4, atol=1e-6)  # one replica: all-reduced = its own
    for old, weight in zip(before, trainer.model.trainable_weights):
        np.testing.assert_array_equal(old, weight.numpy())


def test_more_replicas_than_the_started_runtime_has(strategy):
    with pytest.raises(ReplicaSetupError, match="before any other TensorFlow work"):
        setup_replicas(64)


@pytest.mark.slow
def test_it_learns(cache_home):
    """The tuned pipeline only: the naive one yields the same batches without augmentation and the same boxes
    with it (test_reference_pipelines.py), and its step gives the same loss on the same first batches, before and
    after one update (above), so a second training would test nothing more. At half width, 200 steps took 25 s on a
    slow 2-core machine (full width: 88-147 s) and the loss fell from a mean of 245 over the first 20 to 39 over the
    last 20."""
    variant = "tuned"
    result = run_training(variant, 1, 200, TrainConfig(model="yolov3-tiny", img_size=160, width=0.5), num_images=256)
    print(f"{variant}: loss {result.loss_first:.2f} -> {result.loss_last:.2f}, {result.images_per_s:.1f} images/s")
    assert result.loss_last <= result.loss_first / 2
    assert np.mean(result.losses[-20:]) <= np.mean(result.losses[:20]) / 2
