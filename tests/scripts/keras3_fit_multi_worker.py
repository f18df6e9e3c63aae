"""Keras 3's `model.fit` under MultiWorkerMirroredStrategy (TF_CONFIG from its launcher): with TensorFlow 2.21
it fails on every worker at the first batch, where Keras reduces per-replica values."""

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
features, labels = rng.normal(size=(512, 8)).astype("float32"), rng.normal(size=(512, 1)).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(32)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(dataset, epochs=2, steps_per_epoch=20, verbose=0)
