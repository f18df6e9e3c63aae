"""Compute-bound: a convolutional model in a tf.function step over a prefetched distributed dataset."""

import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
GLOBAL_BATCH = 32 * strategy.num_replicas_in_sync

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((32, 32, 3))]
                                + [tf.keras.layers.Conv2D(48, 3, padding="same", activation="relu") for _ in range(4)]
                                + [tf.keras.layers.GlobalAveragePooling2D(), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(1e-3)
    optimizer.build(model.trainable_variables)

images = tf.data.Dataset.from_tensor_slices((tf.random.normal([256, 32, 32, 3]), tf.random.normal([256, 1])))
dataset = strategy.experimental_distribute_dataset(images.cache().repeat().batch(GLOBAL_BATCH).prefetch(4))


def replica_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(tf.square(model(x) - y)[:, 0], global_batch_size=GLOBAL_BATCH)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss


@tf.function
def train_step(batch):
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=batch), axis=None)


for step, batch in enumerate(dataset):
    loss = train_step(batch)
    if step == 200:
        break
