from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.dataflow import second_pulls
from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule


class IteratorPulledTwice(Rule):
    """
    ## What it does
    In a TF 1 training loop, finds a second `session.run` that, on every iteration, evaluates something computed
    from the `get_next()` of the iterator the training run consumes (or from a TF 1 queue batch such as
    `tf.train.shuffle_batch`): a loss or an accuracy printed after the step, or a "validation" on the training
    iterator's handle. Both runs must be of the same session in the same loop, the second must not itself train
    (nor fetch anything named like an update, such as a GAN's `g_optim`), and whatever it feeds on the way to the
    batch (an iterator handle, the batch tensors) must be what the training run feeds. A run under an `if` of the
    loop (every N steps), one that feeds another iterator's handle, and fetches the module cannot follow to an
    iterator are left alone.

    ## Why it is bad
    Each `session.run` that evaluates `get_next()` takes a new batch. The second run throws away the batch it
    evaluates (only the first run trains), so the model trains on every other batch, an epoch covers half the
    data, and the printed loss or accuracy is not that of the step that just ran.

    ## Example
    ```python
    import tensorflow as tf
    iterator = dataset.make_one_shot_iterator()
    images, labels = iterator.get_next()
    loss = model_loss(images, labels)
    train_op = tf.train.AdamOptimizer(1e-3).minimize(loss)
    with tf.Session() as session:
        for step in range(1000):
            session.run(train_op)
            print(session.run(loss))  # TFD209
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    iterator = dataset.make_one_shot_iterator()
    images, labels = iterator.get_next()
    loss = model_loss(images, labels)
    train_op = tf.train.AdamOptimizer(1e-3).minimize(loss)
    with tf.Session() as session:
        for step in range(1000):
            _, value = session.run([train_op, loss])
            print(value)
    ```
    """

    code = "TFD209"
    name = "iterator-pulled-twice"
    severity = Severity.ERROR
    summary = "TF 1: a second `session.run` in the training loop takes another batch from the iterator the step consumes."
    MESSAGES = {
        "default": "this `run` takes another batch from `{source}` on every step, besides the one the training run uses",
    }
    INVALID = (
        """import tensorflow as tf
dataset = tf.data.TFRecordDataset(files).map(parse).batch(32).repeat()
iterator = dataset.make_one_shot_iterator()
images, labels = iterator.get_next()
logits = build_model(images)
loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), labels), tf.float32))
train_op = tf.train.AdamOptimizer(1e-3).minimize(loss)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for step in range(10000):
        _, loss_value = sess.run([train_op, loss])
        acc = sess.run(accuracy)  # TFD209
        print(step, loss_value, acc)
""",
        # "validation" on the training handle of a feedable iterator
        """import tensorflow as tf
handle = tf.placeholder(tf.string, shape=[])
iterator = tf.data.Iterator.from_string_handle(handle, train_ds.output_types, train_ds.output_shapes)
x, y = iterator.get_next()
loss = tf.reduce_mean(tf.square(model(x) - y))
train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
with tf.Session() as sess:
    train_handle = sess.run(train_ds.make_one_shot_iterator().string_handle())
    while True:
        sess.run(train_op, feed_dict={handle: train_handle})
        print(sess.run(loss, feed_dict={handle: train_handle}))  # TFD209
""",
    )
    VALID = (
        # the loss fetched in the training run itself
        """import tensorflow as tf
images, labels = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
loss = tf.reduce_mean(model(images, labels))
train_op = tf.compat.v1.train.AdamOptimizer().minimize(loss)
with tf.compat.v1.Session() as sess:
    for step in range(100):
        _, value = sess.run([train_op, loss])
""",
        # every 100 steps, under an if
        """import tensorflow as tf
images, labels = dataset.make_one_shot_iterator().get_next()
loss = tf.reduce_mean(model(images, labels))
train_op = tf.train.AdamOptimizer().minimize(loss)
with tf.Session() as sess:
    for step in range(10000):
        sess.run(train_op)
        if step % 100 == 0:
            print(sess.run(loss))
""",
        # validation on the validation iterator's handle
        """import tensorflow as tf
handle = tf.placeholder(tf.string, shape=[])
iterator = tf.data.Iterator.from_string_handle(handle, types, shapes)
x, y = iterator.get_next()
loss = tf.reduce_mean(tf.square(model(x) - y))
train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
with tf.Session() as sess:
    for step in range(1000):
        sess.run(train_op, feed_dict={handle: train_handle})
        sess.run(loss, feed_dict={handle: val_handle})
""",
        # a GAN: the second run trains the generator (with an update built elsewhere) on its own batch
        """import tensorflow as tf
real, _ = dataset.make_one_shot_iterator().get_next()
d_loss = discriminator_loss(real, generator(noise))
g_loss = generator_loss(real, generator(noise))
d_train = tf.train.AdamOptimizer(2e-4).minimize(d_loss)
g_optim = build_update(g_loss)
with tf.Session() as sess:
    for step in range(10000):
        sess.run(d_train)
        sess.run(g_optim)
""",
        # fed with numpy batches: no iterator is pulled
        """import tensorflow as tf
x = tf.placeholder(tf.float32, [None, 784])
loss = tf.reduce_mean(model(x))
train_op = tf.train.AdamOptimizer().minimize(loss)
with tf.Session() as sess:
    for batch in batches:
        sess.run(train_op, feed_dict={x: batch})
        print(sess.run(loss, feed_dict={x: batch}))
""",
        # a step counter, not a batch
        """import tensorflow as tf
iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
images, labels = iterator.get_next()
global_step = tf.train.get_or_create_global_step()
train_op = tf.train.AdamOptimizer().minimize(model_loss(images, labels), global_step=global_step)
with tf.Session() as sess:
    while True:
        sess.run(train_op)
        step = sess.run(global_step)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for pull in second_pulls(facts):
            yield self.report(pull.run, source=pull.source)
