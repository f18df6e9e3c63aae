"""Input-bound: a small model fed by a slow Python generator (decoding in the training thread)."""

import time

import numpy as np
import tensorflow as tf


def batches(global_batch):
    rng = np.random.default_rng(0)
    while True:
        time.sleep(0.05)  # stands in for decoding and augmenting images in Python
        yield rng.normal(size=(global_batch, 32)).astype("float32"), rng.normal(size=(global_batch, 1)).astype("float32")


def train(last_step):
    strategy = tf.distribute.MirroredStrategy()
    global_batch = 16 * strategy.num_replicas_in_sync
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(64, activation="relu"),
                                     tf.keras.layers.Dense(1)])
        optimizer = tf.keras.optimizers.SGD(1e-3)
        optimizer.build(model.trainable_variables)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(tf.square(model(x) - y)[:, 0], global_batch_size=global_batch)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    @tf.function
    def train_step(x, y):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(x, y)), axis=None)

    for step, (x, y) in enumerate(batches(global_batch)):
        train_step(x, y)
        if step == last_step:
            break
