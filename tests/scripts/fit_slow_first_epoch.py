"""Model.fit for several epochs on a cached tf.data pipeline whose first epoch reads each batch slowly (a
cache fills once): the later epochs are the steady state. Each epoch after the first starts 1 s late (a
callback's work), which no step holds."""

import time

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()


def read(index):
    time.sleep(0.1)  # stands in for reading and decoding the batch the first time
    rng = np.random.default_rng(int(index))
    return rng.normal(size=(256, 256)).astype("float32"), rng.normal(size=(256, 1)).astype("float32")


def load(index):
    features, targets = tf.numpy_function(read, [index], (tf.float32, tf.float32))
    return tf.ensure_shape(features, (256, 256)), tf.ensure_shape(targets, (256, 1))


dataset = tf.data.Dataset.range(20).map(load).cache()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((256,)), tf.keras.layers.Dense(512), tf.keras.layers.Dense(512),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
class SlowEpochStart(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if epoch:
            time.sleep(1.0)


model.fit(dataset, epochs=4, verbose=0, callbacks=[SlowEpochStart()])
