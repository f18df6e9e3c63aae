"""The Python API in a user's own process: a custom loop in a session with markers, then Model.fit with the
Keras callback. Prints `LOOP <step source> <verdict>` and `FIT <step source> <verdict>`."""

import tensorflow as tf

import tfdoctor.profile
import tfdoctor.profile.measure  # importing the profiler modules must not hide the API's session()

strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(8), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(1e-3)
    optimizer.build(model.trainable_variables)
data = tf.data.Dataset.from_tensor_slices((tf.random.normal([64, 8]), tf.random.normal([64, 1])))
dataset = strategy.experimental_distribute_dataset(data.repeat().batch(16))


def replica_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(tf.square(model(x) - y)[:, 0], global_batch_size=16)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss


@tf.function
def train_step(batch):
    return strategy.run(replica_step, args=batch)


with tfdoctor.profile.session(steps=5, warmup=1) as prof:
    for step, batch in enumerate(dataset):
        train_step(batch)
        prof.step()
        if step == 20:
            break
print("LOOP", prof.report.workload["step_source"], prof.report.verdict.primary)

with strategy.scope():
    model.compile(optimizer="sgd", loss="mse")
callback = tfdoctor.profile.KerasCallback(steps=5, warmup=1)
model.fit(tf.random.normal([320, 8]), tf.random.normal([320, 1]), batch_size=16, epochs=1, verbose=0,
          callbacks=[callback])
print("FIT", callback.session.report.workload["step_source"], callback.session.report.verdict.primary)
