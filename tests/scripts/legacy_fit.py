"""Keras 2 through tf_keras (TF_USE_LEGACY_KERAS=1): `model.fit` on a tf.data pipeline under
MultiWorkerMirroredStrategy when TF_CONFIG is set (RING collectives), else MirroredStrategy."""

import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
multi_worker = "TF_CONFIG" in os.environ
strategy = tf.distribute.MultiWorkerMirroredStrategy() if multi_worker else tf.distribute.MirroredStrategy()
GLOBAL_BATCH = 64 * strategy.num_replicas_in_sync

rng = np.random.default_rng(0)
features = rng.normal(size=(GLOBAL_BATCH * 40, 64)).astype("float32")
labels = rng.integers(0, 10, size=(GLOBAL_BATCH * 40,))
dataset = tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(GLOBAL_BATCH).prefetch(2)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1024, activation="relu", input_shape=(64,)),
                                 tf.keras.layers.Dense(1024, activation="relu"), tf.keras.layers.Dense(10)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
assert type(model).__module__.startswith("tf_keras"), type(model).__module__
model.fit(dataset, epochs=EPOCHS, steps_per_epoch=40, verbose=0)
