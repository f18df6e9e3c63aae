"""Sync-heavy: wide dense layers (about 21M parameters, 84 MB of gradients to all-reduce each step) on a small
per-replica batch, in a tf.function step over a prefetched distributed dataset."""

import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH = 8 * strategy.num_replicas_in_sync

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((1024,)), tf.keras.layers.Dense(4096, activation="relu"),
                                 tf.keras.layers.Dense(4096, activation="relu"), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(1e-3)
    optimizer.build(model.trainable_variables)

data = tf.data.Dataset.from_tensor_slices((tf.random.normal([256, 1024]), tf.random.normal([256, 1])))
dataset = strategy.experimental_distribute_dataset(data.cache().repeat().batch(GLOBAL_BATCH).prefetch(4))


def replica_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(tf.square(model(x) - y)[:, 0], global_batch_size=GLOBAL_BATCH)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss


@tf.function
def train_step(batch):
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=batch), axis=None)


for step, batch in enumerate(dataset):
    train_step(batch)
    if step == 300:
        break
