"""Model.fit fed by a keras PyDataset that builds each batch slowly in Python."""

import time

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()


class Batches(tf.keras.utils.PyDataset):
    def __len__(self):
        return 400

    def __getitem__(self, index):
        time.sleep(0.05)  # stands in for decoding images in Python
        rng = np.random.default_rng(index)
        return rng.normal(size=(32, 8)).astype("float32"), rng.normal(size=(32, 1)).astype("float32")


with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(64), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(Batches(), epochs=1, verbose=0)
