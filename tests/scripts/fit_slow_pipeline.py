"""Model.fit on a tf.data pipeline, without prefetch, whose map takes 50 ms a batch (a wait outside Python, as
reading a file is): fit's step calls fetch each batch inside themselves."""

import time

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()


def read(index):
    time.sleep(0.05)  # stands in for reading and decoding the batch
    rng = np.random.default_rng(int(index))
    return rng.normal(size=(32, 8)).astype("float32"), rng.normal(size=(32, 1)).astype("float32")


def load(index):
    features, targets = tf.numpy_function(read, [index], (tf.float32, tf.float32))
    return tf.ensure_shape(features, (32, 8)), tf.ensure_shape(targets, (32, 1))


dataset = tf.data.Dataset.range(400).map(load)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(64), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(dataset, epochs=1, verbose=0)
