"""A custom loop that runs each epoch inside one tf.function (AutoGraph turns `for x in dataset` into a loop in
the graph), then a test epoch of half its length the same way: a "step call" is a whole training epoch, and the
test epoch between two of them is neither input nor the training step."""

import sys
import time

import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 else 400
train = strategy.experimental_distribute_dataset(tf.data.Dataset.range(64).map(lambda i: tf.cast(i, tf.float32)).batch(8))
test = strategy.experimental_distribute_dataset(tf.data.Dataset.range(32).map(lambda i: tf.cast(i, tf.float32)).batch(8))

with strategy.scope():
    weight = tf.Variable(1.0)


def slow(x):
    def python(array):
        time.sleep(0.005)  # stands in for the device's work on one batch
        return array
    return tf.ensure_shape(tf.numpy_function(python, [x], x.dtype), x.shape)


def replica_step(x):
    loss = tf.reduce_mean(slow(x) * weight)
    weight.assign_sub(1e-6)
    return loss


@tf.function
def train_epoch():
    total = tf.constant(0.0)
    for batch in train:
        total += strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(batch,)), axis=None)
    return total


@tf.function
def test_epoch():
    total = tf.constant(0.0)
    for batch in test:
        total += strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda x: tf.reduce_mean(slow(x)),
                                                                         args=(batch,)), axis=None)
    return total


for epoch in range(EPOCHS):
    train_epoch()
    test_epoch()
