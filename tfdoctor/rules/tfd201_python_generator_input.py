from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import (
    GENERATOR_FUNCTION,
    ITERATOR_CLASS,
    definitions,
    distributes,
    expression_names,
    fed_elsewhere,
    hands_out_slices,
    in_test_code,
    iterable_provenance,
    keras_package_imported,
    made_by_workers,
    repeats_one_batch,
    session_feeds,
    slices_in_memory,
    spreads_without_strategy,
    training_inputs,
    when_distributed,
)
from tfdoctor.lint.facts import CallFact, DatasetChain, ModuleFacts, Scope, cached_before_repeat
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted, literal_int, literal_str
from tfdoctor.lint.rule import Context, Rule
from tfdoctor.lint.versions import Target

_FLOW = re.compile(r"^flow(_from_\w+)?$")
# ImageDataGenerator arguments that transform nothing per image (a split, the data format, a rescale is one multiply)
_NO_WORK = frozenset({"validation_split", "data_format", "dtype", "rescale"})
# Python feeds whose work runs in processes of their own: tensorpack's multiprocess dataflows (also under
# `from tensorpack import *`), a `multiprocessing` pool or process. Whether they keep up turns on the process
# count and the copies, which the code does not show.
_PROCESS_LOADERS = re.compile(r"^(?:MultiProcess\w*|\w*ZMQ|PrefetchData)$")
_PROCESS_MODULES = ("tensorpack", "multiprocessing")
_PLAIN_ITERATORS = (ITERATOR_CLASS, GENERATOR_FUNCTION)  # feeds that Keras's worker processes would each replay
_FEED_DICT = "`feed_dict` batches from Python"
_FIT_GENERATOR = "`fit_generator`"  # what feeds a `fit_generator` call whose input the code does not show


class PythonGeneratorInput(Rule):
    """
    ## What it does
    Finds training fed by Python code: `Dataset.from_generator`, a `keras.utils.Sequence`/`PyDataset`,
    `ImageDataGenerator.flow*`, `fit_generator`, `fit(generator)`, or a class with `__next__` (or a
    generator function) whose batches reach a training step: `model.fit`, a distributed dataset, or a loop
    that runs a training step (a `from_generator` pipeline also when a module importing this one trains on
    it). In TF1 code, a loop that runs a training op with `session.run(..., feed_dict=...)` and feeds it the
    batches it iterates over, or that a `next(...)`/`next_batch(...)` call in the loop returns. Never batches
    that are slices of arrays already in memory (`x[i * n:(i + 1) * n]` in the loop, `mnist.train.next_batch(n)`
    of the tutorials' `read_data_sets`, a generator, a `from_generator` source or a `Sequence` whose
    `__getitem__` hands out only `x[i:i + n]` or an element of what the object built before (`self.pool[i]`),
    tuples or dicts of them, or names bound only to such slices; a
    loop over `zip` of numpy arrays the script builds), whose feed costs a copy, nor batches such a generator or
    `__getitem__` builds with nothing but cheap array work (Python's builtins, `random`, a clock, numpy's building,
    stacking, padding and reshaping of arrays but not its readers, `to_categorical`, `pad_sequences`, and the
    project's functions and methods that do only that, three calls deep: padding token lists in memory, one-hot
    labels); nor batches of a method that
    the project's class of the object does not define (a base from elsewhere, or nothing, hands them out), nor
    batches that a pool of workers made (the `get()` of a Keras `OrderedEnqueuer` or `GeneratorEnqueuer`, or of
    a project's copy; a generator that starts one, a `ThreadPoolExecutor` or a `multiprocessing.Pool` and yields
    what they made; an iterator class whose methods start one; a call of code out of sight given a count of
    workers, `get_batch(num_workers=8)`: the code sets their threads or processes, as
    with `fit(workers=...)`). Likewise
    `ImageDataGenerator().flow(x, y)` with no augmentation (only `rescale`, `validation_split`, `data_format`,
    `dtype`): it slices arrays in memory. Only in a program that distributes training: the module, or a
    project module that imports it, builds a `tf.distribute` strategy or uses one (`scope`, `run`, a
    distributed dataset), or calls Horovod or `multi_gpu_model` (outside a branch that never runs: `if n_gpu > 1:`
    after `n_gpu = 1`); not a notebook whose saved outputs show its
    strategy ran with one replica (TensorFlow's log of a MirroredStrategy over one GPU, a printed `REPLICAS:
    1`), nor a module whose only strategy is a `OneDeviceStrategy`. On one device, whether a Python feed keeps
    up turns on costs the code does not show; `tfdoctor profile` measures it (and checks the script it runs
    whatever its devices). Nor in a module that makes its
    batches in worker processes of their own (tensorpack's `MultiProcessRunnerZMQ`, `PrefetchDataZMQ`,
    `MultiProcessMapData`, or a `multiprocessing` pool or process), outside `fit`: whether they keep up turns
    on the process count and the copies, which the code does not show; nor is a `fit` that runs a `Sequence` in
    worker processes (`use_multiprocessing=True`), for the same reason. A plain generator or iterator class
    run in two or more worker processes is reported for another reason: each process replays it from its
    start, so the same batches come several times (Keras warns of it; a `Sequence` hands each process
    other indices). The `fit` of standalone multi-backend Keras (`import keras`) where the project pins Keras
    before 2.4 (or a TensorFlow whose Keras that is) takes no `tf.data` dataset: there the message asks for
    worker processes instead, and a plain iterator class or generator function, whose every worker process
    would yield the same batches, is not reported, nor is a `fit_generator` input the code does not show to be
    a `Sequence`, nor a `fit` whose worker count is a setting of the code that processes follow (`workers=n,
    use_multiprocessing=True if n > 1 else False`), nor one whose `use_multiprocessing` is a value the code
    does not show: its user already has the one advice there; nor such a `fit` in a program spread only by a
    `tf.distribute` strategy, which distributes `tf.keras` models only: it runs on one device. Nor is a
    `feed_dict` feed in code for TensorFlow
    before 1.4 (`tf.mul`, which 1.0 renamed `tf.multiply`), which has no `tf.data` to offer, nor a
    `fit_generator(data)` of a helper that calls it when `isinstance(data, ...)` says so: its callers choose
    the feed. Nor is a `from_generator` pipeline that caches what the generator made (`cache()` or
    `snapshot()`, with no `repeat()` before it), unless the generator visibly never ends (`while True:`, which
    never fills the cache): its Python runs in the first epoch only.

    ## Why it is bad
    Every batch is decoded, augmented and assembled by one Python thread holding the GIL. It cannot be
    parallelised like `tf.data`'s `map`, overlapped with the step by `prefetch`, or sharded across workers,
    so the devices wait for it; the more GPUs, the longer they wait. Keras 2's `fit(workers=N)` runs it in N
    threads, which still share the GIL. With `use_multiprocessing=True` it runs in worker processes instead:
    they no longer share the GIL, and whether they keep up turns on their count and the copy of every batch
    back to the training process, which the code does not show. Whether the code asks for
    processes is read from `fit`'s arguments (also a `**params` dict literal's keys); when it depends on a value
    the code does not show (`use_multiprocessing=args.mp`, a caller's `**kwargs`), the message says either may
    run it. The message names the call that
    makes the feed (`ImageDataGenerator.flow_from_directory`).

    ## Example
    ```python
    import numpy as np
    import tensorflow as tf

    class Batches:
        def __iter__(self):
            return self

        def __next__(self):
            return load_and_augment_next_batch()

    for images, labels in Batches():  # TFD201
        train_step(images, labels)

    @tf.function
    def train_step(images, labels):
        strategy.run(replica_step, args=(images, labels))
    ```

    ## Use instead
    ```python
    import tensorflow as tf

    ds = (tf.data.Dataset.list_files(PATTERN)
          .map(load_and_augment, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(GLOBAL_BATCH)
          .prefetch(tf.data.AUTOTUNE))
    for images, labels in strategy.experimental_distribute_dataset(ds):
        train_step(images, labels)

    @tf.function
    def train_step(images, labels):
        strategy.run(replica_step, args=(images, labels))
    ```
    """

    code = "TFD201"
    name = "python-generator-input"
    severity = Severity.WARNING
    summary = "Training is fed by Python (generator, Sequence, iterator class, `from_generator`, `fit_generator`)."
    OUTRANKS = ("TFD201",)  # a `fit_generator(...)` call and its generator argument: the argument says more
    MESSAGES = {
        "default": "training is fed by {what}, one Python thread under the GIL; use a `tf.data` pipeline",
        "threads": "training is fed by {what}, {workers} under the GIL; use a `tf.data` pipeline",
        "replayed": ("training is fed by {what} in {workers}, each replaying it, so batches repeat; make it a "
                     "`keras.utils.Sequence`"),
        "multi-backend": ("training is fed by {what}, {workers} under the GIL; this Keras's `fit` takes no "
                          "`tf.data`, so try `use_multiprocessing=True`"),
        "threads-or-processes": ("training is fed by {what} in Python threads or worker processes, as "
                                 "`use_multiprocessing` says; use a `tf.data` pipeline"),
    }
    triggers = ("from_generator", "fit", "__next__", "yield", "Sequence", "PyDataset", "flow", "run", "train_on_batch",
                "apply_gradients", "feed_dict")
    INVALID = (
        # from_generator feeding a distributed dataset
        """import tensorflow as tf
def gen():
    for path in paths:
        yield load(path)
ds = tf.data.Dataset.from_generator(gen, output_signature=SIG)  # TFD201
ds = ds.batch(64)
dist = strategy.experimental_distribute_dataset(ds)
""",
        # a keras Sequence given to fit, and fit_generator
        """from tensorflow import keras
class Loader(keras.utils.Sequence):
    def __len__(self):
        return 10
    def __getitem__(self, i):
        return load_batch(i)
with strategy.scope():
    model = build_model()
model.fit(Loader(), epochs=3)  # TFD201
model.fit_generator(Loader(), steps_per_epoch=10)  # TFD201
""",
        # ImageDataGenerator.flow and a generator function
        """from keras.preprocessing.image import ImageDataGenerator
import keras
aug = ImageDataGenerator(rotation_range=10)
def batches():
    while True:
        yield next_batch()
model = keras.utils.multi_gpu_model(build_model(), gpus=2)
model.fit(aug.flow(x, y, batch_size=32), epochs=2)  # TFD201
model.fit(batches(), steps_per_epoch=100)  # TFD201
""",
        # an iterator class driven by next() in a while loop of a class-based trainer
        """import tensorflow as tf
class Reader:
    def __next__(self):
        return read()
class Trainer:
    def run(self):
        it = Reader()
        while True:
            batch = next(it)  # TFD201
            self.step(batch)
    @tf.function
    def step(self, batch):
        self.optimizer.apply_gradients(grads(batch))
with tf.distribute.MirroredStrategy().scope():
    trainer = Trainer()
""",
        # TF1: a session runs the train op on batches a Python generator yields, through feed_dict
        """import horovod.tensorflow as hvd
import tensorflow as tf
hvd.init()
train_op = hvd.DistributedOptimizer(tf.compat.v1.train.AdamOptimizer()).minimize(loss)
with tf.compat.v1.Session() as sess:
    for images, labels in batches(files):  # TFD201
        sess.run(train_op, feed_dict={x: images, y: labels})
    while True:
        bx, by = mnist.train.next_batch(128)  # TFD201
        sess.run([train_op, loss], feed_dict={x: bx, y: by})
""",
        # a Sequence run by Keras 2 in worker threads, or in threads or processes as a flag says
        """import keras
class Tiles(keras.utils.Sequence):
    def __len__(self):
        return 100
    def __getitem__(self, i):
        return read_tiles(i)
with strategy.scope():
    model = build_model()
model.fit(Tiles(), epochs=5, workers=4)  # TFD201
model.fit(Tiles(), epochs=5, workers=8, use_multiprocessing=args.processes)  # TFD201
def train(**options):
    model.fit(Tiles(), epochs=5, **options)  # TFD201
params = {"epochs": 5, "verbose": 2}
model.fit(Tiles(), **params)  # TFD201
""",
        # the iterator that flow_from_directory returns, given to fit by name
        """import tensorflow as tf
images = tf.keras.preprocessing.image.ImageDataGenerator(rescale=1 / 255.0)
train_gen = images.flow_from_directory("train", target_size=(224, 224), batch_size=32)
with tf.distribute.MirroredStrategy().scope():
    model = build_model()
model.fit(train_gen, epochs=20)  # TFD201
""",
        # a batch dict of slices with one entry loaded from disk per batch: Python work, reported
        """import tensorflow as tf
def batches(data, size):
    for start in range(0, len(data["x"]), size):
        batch = {"x": data["x"][start:start + size]}
        batch["image"] = load_images(data["paths"][start:start + size])
        yield batch
strategy = tf.distribute.MirroredStrategy()
dist = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_generator(lambda: batches(data, 64), output_signature=SIGNATURE))  # TFD201
""",
        # a tensorpack dataflow made in this process (no multiprocess runner)
        """import horovod.tensorflow as hvd
import tensorflow as tf
from tensorpack import *
hvd.init()
df = BatchData(ImageFiles(files), 32)
df.reset_state()
with tf.Session() as sess:
    for images, labels in df:  # TFD201
        sess.run(train_op, feed_dict={x: images, y: labels})
""",
        # a generator in several worker processes: each replays it
        """import multiprocessing
import keras
def batches(paths):
    while True:
        yield load_and_augment(paths)
with strategy.scope():
    model = build_model()
workers = multiprocessing.cpu_count()
model.fit_generator(batches(paths), steps_per_epoch=100, workers=workers, use_multiprocessing=True)  # TFD201
""",
        # standalone Keras 2.2, whose `fit` takes no tf.data dataset: worker processes are what it offers
        """# tfdoctor: target-keras=2.2.4
import keras
from keras.utils import multi_gpu_model
class Tiles(keras.utils.Sequence):
    def __len__(self):
        return 100
    def __getitem__(self, i):
        return load_and_augment(i)
parallel = multi_gpu_model(build_model(), gpus=2)
parallel.fit_generator(Tiles(), steps_per_epoch=100, workers=4)  # TFD201
""",
        # ... with processes only when a worker count it sets to 1 is above 1: one thread
        # tf.keras: processes follow the worker count the code sets, but tf.data is the advice here
        """import tensorflow as tf
class Tiles(tf.keras.utils.Sequence):
    def __len__(self):
        return 100
    def __getitem__(self, i):
        return load_and_augment(i)
num_workers = 1
with tf.distribute.MirroredStrategy().scope():
    model = build_model()
model.fit(Tiles(), epochs=5, use_multiprocessing=True if num_workers > 1 else False, workers=num_workers)  # TFD201
""",
        # a generator whose helper reads an image from disk for every example: Python work per batch
        """import cv2
import numpy as np
import tensorflow as tf
def load(paths, size):
    out = np.zeros((len(paths), size, size, 3), dtype=np.uint8)
    for i, path in enumerate(paths):
        out[i] = cv2.resize(cv2.imread(path), (size, size))
    return out
def batches(paths, labels, n):
    while True:
        for start in range(0, len(paths), n):
            yield load(paths[start:start + n], 224), np.asarray(labels[start:start + n])
strategy = tf.distribute.MirroredStrategy()
ds = tf.data.Dataset.from_generator(lambda: batches(paths, labels, 32), output_signature=SIG)  # TFD201
with strategy.scope():
    model = build_model()
model.fit(ds, epochs=3)
""",
        # the generators a helper returns as a pair, unpacked in the function that trains
        """import tensorflow as tf
from tensorflow.keras.preprocessing.image import ImageDataGenerator
def get_generators(batch_size):
    augment = ImageDataGenerator(rescale=1. / 255, shear_range=0.2, horizontal_flip=True)
    train = augment.flow_from_directory("data/train", target_size=(224, 224), batch_size=batch_size)
    return train, ImageDataGenerator(rescale=1. / 255).flow_from_directory("data/test", batch_size=batch_size)
def train_model(model, generators):
    train_generator, validation_generator = generators
    model.fit(train_generator, validation_data=validation_generator, epochs=10)  # TFD201
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = build_model()
train_model(model, get_generators(512))
""",
        # the generator of either branch of an augmentation flag reads and decodes images from disk
        """import tensorflow as tf
strategy = tf.distribute.TPUStrategy(resolver)
valid_datagen = tf.keras.preprocessing.image.ImageDataGenerator(rescale=1. / 255, validation_split=.2)
if do_data_augmentation:
    train_datagen = tf.keras.preprocessing.image.ImageDataGenerator(rotation_range=40, horizontal_flip=True)
else:
    train_datagen = valid_datagen
train_generator = train_datagen.flow_from_directory(data_dir, subset="training", batch_size=64)
with strategy.scope():
    model = build_model()
model.fit(train_generator, epochs=3)  # TFD201
""",
        # cached, but the generator never ends, so the cache never fills and its Python runs every step
        """import tensorflow as tf
def gen():
    while True:
        for path in paths:
            yield load(path)
ds = tf.data.Dataset.from_generator(gen, output_signature=SIG).cache().batch(64)  # TFD201
dist = strategy.experimental_distribute_dataset(ds)
""",
    )
    VALID = (
        # `flow` over arrays in memory, with augmentation only in one branch of a flag: the other slices them
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
plain = tf.keras.preprocessing.image.ImageDataGenerator(rescale=1. / 255)
if augment:
    datagen = tf.keras.preprocessing.image.ImageDataGenerator(rotation_range=40, horizontal_flip=True)
else:
    datagen = plain
with strategy.scope():
    model = build_model()
model.fit(datagen.flow(x_train, y_train, batch_size=64), epochs=3)
""",
        # batches from a loader out of sight that is given its worker count (EAST's `icdar.get_batch`)
        """import tensorflow.compat.v1 as tf
import icdar
strategy = tf.distribute.MirroredStrategy()
data_generator = icdar.get_batch(num_workers=FLAGS.num_readers, batch_size=32)
with tf.Session() as sess:
    for step in range(FLAGS.max_steps):
        data = next(data_generator)
        sess.run(train_op, feed_dict={images: data[0], labels: data[1]})
""",
        # batches padded and stacked from token lists in memory, and a Sequence that one-hot encodes slices:
        # cheap array work, a copy's cost
        """import numpy as np
import tensorflow as tf
def pad(rows, width):
    out = np.zeros((len(rows), width), dtype=np.int32)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row[:width]
    return out
def batches(tokens, labels, n):
    while True:
        for start in range(0, len(tokens), n):
            yield pad(tokens[start:start + n], 128), np.asarray(labels[start:start + n])
class Labelled(tf.keras.utils.Sequence):
    def __getitem__(self, i):
        x = self.x[i * self.n:(i + 1) * self.n].toarray()
        return x, tf.keras.utils.to_categorical(self.y[i * self.n:(i + 1) * self.n], self.classes)
strategy = tf.distribute.MirroredStrategy()
ds = tf.data.Dataset.from_generator(lambda: batches(tokens, labels, 32), output_signature=SIG)
with strategy.scope():
    model = build_model()
model.fit(ds, epochs=3)
model.fit(Labelled(), epochs=3)
""",
        # an iterator class whose `__next__` builds each batch on a pool of worker threads
        """import tensorflow as tf
import horovod.tensorflow as hvd
from concurrent.futures import ThreadPoolExecutor
hvd.init()
class Batches:
    def __iter__(self):
        return self
    def __next__(self):
        pool = ThreadPoolExecutor(max_workers=8)
        return collate([pool.submit(load, i).result() for i in range(8)])
with tf.Session() as sess:
    for images, labels in Batches():
        sess.run(train_op, feed_dict={x: images, y: labels})
""",
        # standalone Keras before 2.4 takes no tf.data, and worker processes would each replay a generator
        """# tfdoctor: target-keras=2.2.4
import keras
from keras.utils import multi_gpu_model
def gen(paths):
    while True:
        for path in paths:
            yield load_and_augment(path)
model = multi_gpu_model(build(), gpus=2)
model.fit_generator(gen(paths), steps_per_epoch=10)
""",
        # a generator handing out batches that a pool of worker processes decoded
        """import tensorflow as tf
from multiprocessing import Pool, cpu_count
def gen(items, batch_size):
    p = Pool(cpu_count() - 2)
    while True:
        for start in range(0, len(items), batch_size):
            yield collate(p.map(load_and_augment, items[start:start + batch_size]))
with tf.distribute.MirroredStrategy().scope():
    model = build_model()
model.fit(gen(ids, 32), steps_per_epoch=100, epochs=10)
""",
        # standalone Keras before 2.4 (no tf.data): the worker count is the code's own setting and processes follow
        # it, so the one advice there, processes, is already in its user's hands
        """# tfdoctor: target-keras=2.1.5
import keras
from keras.utils import multi_gpu_model
class Tiles(keras.utils.Sequence):
    def __len__(self):
        return 100
    def __getitem__(self, i):
        return load_and_augment(i)
num_workers = 1
parallel = multi_gpu_model(build_model(), gpus=2)
parallel.fit_generator(Tiles(), steps_per_epoch=100,
                       use_multiprocessing=True if num_workers > 1 else False, workers=num_workers)
""",
        # batches from a copy of Keras' enqueuer, whose threads or processes the code sets (as `fit(workers=...)`)
        """import keras
import horovod.keras as hvd
class OrderedEnqueuer:
    def __init__(self, sequence, use_multiprocessing=False):
        self.sequence, self.use_multiprocessing = sequence, use_multiprocessing
    def get(self):
        while True:
            yield self.queue.get()
hvd.init()
enqueuer = OrderedEnqueuer(Tiles(), use_multiprocessing=num_workers > 1)
enqueuer.start(workers=num_workers)
for x, y in enqueuer.get():
    model.train_on_batch(x, y)
""",
        # standalone Keras before 2.4 (`keras.engine.topology`), processes as a setting says: no tf.data to offer
        """# tfdoctor: target-keras=2.3
from keras.engine.topology import Layer
from keras.utils import multi_gpu_model
parallel = multi_gpu_model(build_model(), gpus=4)
parallel.fit_generator(batches(args), steps_per_epoch=100, use_multiprocessing=args.dense, workers=32)
""",
        # TensorFlow 0.x (`tf.mul`, renamed `tf.multiply` in 1.0) towers fed through feed_dict: no tf.data yet
        """# tfdoctor: target-tensorflow=0.12
import tensorflow as tf
for i in range(num_gpus):
    with tf.device("/gpu:%d" % i):
        tower_loss = tf.mul(weight, loss_of(images[i]))
train_op = opt.apply_gradients(average_gradients(tower_grads))
with tf.Session() as sess:
    for images, labels in batches(files):
        sess.run(train_op, feed_dict={x: images, y: labels})
""",
        # a Sequence that slices arrays in memory and times itself: a copy per batch, and a clock read
        """import time
import numpy as np
import tensorflow as tf
class Batches(tf.keras.utils.Sequence):
    def __getitem__(self, i):
        start = time.time()
        x, y = self.x[i * 64:(i + 1) * 64], self.y[i * 64:(i + 1) * 64]
        print("input time (us)", (time.time() - start) * 1e6)
        return np.array(x), np.array(y)
with tf.distribute.MultiWorkerMirroredStrategy().scope():
    model = build()
model.fit(Batches(), epochs=3)
""",
        # a `from_generator` over a generator that yields what a Keras `OrderedEnqueuer`'s workers made
        """import tensorflow as tf
def batches(sequence, use_multiprocessing=False):
    enqueuer = tf.keras.utils.OrderedEnqueuer(sequence, use_multiprocessing=use_multiprocessing)
    enqueuer.start(workers=4, max_queue_size=10)
    for _ in range(len(sequence)):
        yield next(enqueuer.get())
strategy = tf.distribute.MirroredStrategy()
ds = tf.data.Dataset.from_generator(lambda: batches(Tiles()), output_signature=SIG)
for x, y in strategy.experimental_distribute_dataset(ds):
    strategy.run(step, args=(x, y))
""",
        # TF 1 `feed_dict` batches of a generator that yields what a `GeneratorEnqueuer`'s processes made
        """import horovod.tensorflow as hvd
import tensorflow as tf
from keras.utils import GeneratorEnqueuer
def get_batch(num_workers):
    enqueuer = GeneratorEnqueuer(generator(), use_multiprocessing=True)
    enqueuer.start(workers=num_workers)
    while True:
        yield enqueuer.queue.get()
hvd.init()
train_op = hvd.DistributedOptimizer(tf.compat.v1.train.AdamOptimizer()).minimize(loss)
batches = get_batch(16)
while True:
    images, labels = next(batches)
    sess.run(train_op, feed_dict={x: images, y: labels})
""",
        # a Sequence that hands out batches it made once
        """import tensorflow as tf
class Pool(tf.keras.utils.Sequence):
    def __init__(self, n):
        self.pool = [tf.random.uniform((64, 10)) for _ in range(n)]
    def __len__(self):
        return len(self.pool)
    def __getitem__(self, i):
        return self.pool[i]
with tf.distribute.MirroredStrategy().scope():
    model = build_model()
model.fit(Pool(8), epochs=3)
""",
        # `fit_generator` over a Sequence that slices arrays in memory, two inputs in a list (Keras 2)
        """import horovod.tensorflow.keras as hvd
import tensorflow as tf
hvd.init()
class Batches(tf.keras.utils.Sequence):
    def __init__(self, target, context, y, n):
        self.target, self.context, self.y, self.n = target, context, y, n
    def __len__(self):
        return len(self.y) // self.n
    def __getitem__(self, i):
        target = self.target[i * self.n:(i + 1) * self.n]
        context = self.context[i * self.n:(i + 1) * self.n]
        return [target, context], self.y[i * self.n:(i + 1) * self.n]
model.compile(optimizer=hvd.DistributedOptimizer(opt), loss="binary_crossentropy", experimental_run_tf_function=False)
model.fit_generator(generator=Batches(t, c, y, 64), epochs=5)
""",
        # a Sequence run by Keras 2 in worker processes: whether they keep up, the code does not show
        """import keras
class Tiles(keras.utils.Sequence):
    def __len__(self):
        return 100
    def __getitem__(self, i):
        return read_tiles(i)
with strategy.scope():
    model = build_model()
WORKERS = 8
model.fit_generator(Tiles(), epochs=5, workers=WORKERS, use_multiprocessing=True)
model.fit(Tiles(), epochs=5, workers=1, use_multiprocessing=True)
""",
        # standalone Keras 2.2 fed by an iterator class: worker processes would each yield the same batches
        """# tfdoctor: target-keras=2.2.4
import keras
from keras.utils import multi_gpu_model
class Batches:
    def __next__(self):
        return load_and_augment(self.paths)
parallel = multi_gpu_model(build_model(), gpus=2)
parallel.fit_generator(Batches(), steps_per_epoch=100, workers=4)
""",
        # a helper that fits a generator or a dataset, whichever it is given
        """import types
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def time_fit(model, data, steps):
    if isinstance(data, types.GeneratorType):
        model.fit_generator(data, steps_per_epoch=steps)
    else:
        model.fit(data, steps_per_epoch=steps)
""",
        # standalone Keras 2.2 under a `tf.distribute` strategy, which distributes `tf.keras` models only: one device
        """# tfdoctor: target-keras=2.2.4
import keras
import tensorflow as tf
class Tiles(keras.utils.Sequence):
    def __len__(self):
        return 100
    def __getitem__(self, i):
        return load_and_augment(i)
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = build_model()
model.fit_generator(Tiles(), steps_per_epoch=100, workers=4)
""",
        # a distributed validation pipeline: its loop runs a step that computes no gradients
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
datasetv = tf.data.Dataset.from_generator(parser.generator, output_signature=signature).batch(8)
dist_datasetv = strategy.experimental_distribute_dataset(datasetv)
@tf.function
def test_step(inputs):
    def test_fn(batch):
        x, y = batch
        return metric(y, model(x, training=False))
    return strategy.run(test_fn, args=(inputs,))
bar = tqdm(dist_datasetv)
for s in bar:
    accuracy = test_step(s)
""",
        # a distributed dataset that nothing reads: the generator feeds only `evaluate` and a prediction loop
        """import tensorflow as tf
if __name__ == "__main__":
    strategy = tf.distribute.MirroredStrategy()
    datasetv = tf.data.Dataset.from_generator(parser.generator, output_signature=signature).batch(8)
    with strategy.scope():
        model = build_model()
        dist_datasetv = strategy.experimental_distribute_dataset(datasetv)
    model.evaluate(datasetv)
    for x, y in datasetv:
        save(model(x, training=False))
""",
        # a generator that only slices arrays already in memory: each batch costs a copy
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def batches(xs, ys, n):
    rest_x, rest_y = xs.copy(), ys.copy()
    while rest_x.shape[0] > 0:
        x = rest_x[:n]
        rest_x = rest_x[n:]
        y = rest_y[:n]
        rest_y = rest_y[n:]
        yield (x, y)
gen = batches(train_x, train_y, 64)
for step in range(steps):
    x, y = next(gen)
    loss = model.train_on_batch(x, y)
""",
        # a benchmark's synthetic input: the same arrays, made once, handed back each step
        """import numpy as np
import tensorflow as tf
X = np.random.random((64, 224, 224, 3)).astype("float32")
Y = np.random.random((64, 1000)).astype("float32")
def gen():
    while True:
        yield (X, Y)
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = build_model()
    model.compile(optimizer="sgd", loss="categorical_crossentropy")
model.fit(gen(), epochs=100, steps_per_epoch=50)
model.fit_generator(gen(), epochs=100, steps_per_epoch=50)
""",
        # a wrapper of the same name: its callers' `fit_generator` calls say how they run the generator
        """import tensorflow as tf
class Net:
    def fit_generator(self, generator, **kwargs):
        self.model.fit_generator(generator, **kwargs)
strategy = tf.distribute.MirroredStrategy()
""",
        # a flag picks a TFRecord reader or the generator: the file path is already there
        """import tensorflow as tf
def make_dataset(from_tfrecords):
    if from_tfrecords:
        ds = tf.data.TFRecordDataset(files).map(parse)
    else:
        ds = tf.data.Dataset.from_generator(read_audio, output_signature=signature)
    return ds.batch(64)
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = build_model()
    model.compile(optimizer="adam", loss="mse")
model.fit(make_dataset(args.from_tfrecords), epochs=3)
""",
        # TF1: slices of arrays in memory, cut in a loop that counts steps (through a progress bar)
        """import tensorflow.compat.v1 as tf
strategy = tf.distribute.MirroredStrategy()
pbar = tqdm(range(batch_num))
for i in pbar:
    batch_x = model_input[batch_size * i: batch_size * (i + 1)]
    batch_y = label[batch_size * i: batch_size * (i + 1)]
    sess.run([train_op, loss_op], {x: batch_x, y: batch_y})
""",
        # one device: no strategy, Horovod or multi_gpu_model, so no replicas wait for the feed
        """import tensorflow as tf
aug = tf.keras.preprocessing.image.ImageDataGenerator(rotation_range=10)
model = build_model()
model.fit(aug.flow_from_directory("train", batch_size=32), epochs=20)
""",
        # an ImageDataGenerator that transforms nothing: `flow` slices arrays in memory, a copy per batch
        """import tensorflow as tf
plain = tf.keras.preprocessing.image.ImageDataGenerator(validation_split=0.1)
model.fit(plain.flow(x_train, y_train, batch_size=64), epochs=2)
""",
        # TF1: feed_dict batches that are slices of arrays in memory (a copy each, nothing made in Python)
        """import tensorflow as tf
def iter_data(xs, ys, n_batch):
    for i in range(0, len(xs), n_batch):
        yield xs[i:i + n_batch], ys[i:i + n_batch]
train = adam(params, tf.gradients(loss, params), lr)
for epoch in range(10):
    for xmb, ymb in iter_data(trX, trY, n_batch=64):
        cost, _ = sess.run([loss, train], {X: xmb, Y: ymb})
mnist = input_data.read_data_sets("MNIST_data")
while True:
    bx, by = mnist.train.next_batch(100)
    sess.run(train, feed_dict={X: bx, Y: by})
""",
    """
from keras.preprocessing.image import ImageDataGenerator
from keras.utils import multi_gpu_model
n_gpu = 1
train = ImageDataGenerator(rotation_range=30, horizontal_flip=True).flow(x, y, batch_size=32)
model = build_model()
if n_gpu > 1:
    model = multi_gpu_model(model, gpus=n_gpu)
model.compile(optimizer="adam", loss="categorical_crossentropy")
model.fit_generator(train, steps_per_epoch=100, epochs=10)
""",
    """
import tensorflow as tf
from tensorflow.examples.tutorials.mnist import input_data
def train(mnist, batch_size):
    with tf.Session() as sess:
        for i in range(mnist.train.num_examples // batch_size):
            xs, ys = mnist.train.next_batch(batch_size)
            sess.run(train_op, feed_dict={X: xs, Y: ys})
train(input_data.read_data_sets("MNIST_data"), 128)
""",
        # TF1: batches from a method the project's class does not define: what it hands out is not shown
        """import horovod.tensorflow as hvd
import tensorflow as tf
class Batches:
    def __init__(self, inputs, labels):
        self.inputs, self.labels = inputs, labels
hvd.init()
train_op = hvd.DistributedOptimizer(tf.compat.v1.train.AdamOptimizer()).minimize(loss)
batches = Batches(train_in, train_label)
for epoch in range(10):
    for bx, by in batches.iter_batches(64):
        sess.run([train_op, loss], feed_dict={x: bx, y: by})
""",
        # TF1: one example at a time from numpy arrays the script builds: a copy each, no Python work to move
        """import numpy as np
import tensorflow as tf
train_X = np.linspace(-1, 1, 100)
train_Y = 2 * train_X + np.random.randn(*train_X.shape) * 0.33
for epoch in range(10):
    for x, y in zip(train_X, train_Y):
        sess.run(train_op, feed_dict={X: np.array([[x]]), Y: np.array([[y]])})
""",
        # a Sequence and a `from_generator` source that hand out dicts of slices of arrays in memory
        """import tensorflow as tf
class Batches(tf.keras.utils.Sequence):
    def __getitem__(self, index):
        start, end = index * self.size, (index + 1) * self.size
        return {"covariates": self.data["covariates"][start:end]}, self.data["labels"][start:end]
def batches(data, size):
    def generator():
        for start in range(0, len(data["x"]), size):
            batch = {"x": data["x"][start:start + size]}
            batch["w"] = data["w"][start:start + size].astype("float32")
            yield batch
    return generator
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = build_model()
model.fit(Batches(data, 64), epochs=5)
dist = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_generator(batches(data, 64), output_signature=SIGNATURE))
""",
        # a unit test's dummy generator: nothing is trained for real
        """import numpy as np
import tensorflow as tf
with tf.distribute.MirroredStrategy().scope():
    model = build_model()
class KerasTests(tf.test.TestCase):
    def test_fit_does_not_hang(self):
        def generator():
            while True:
                yield np.ones([1, 3], np.float32), np.ones([1, 1], np.float32)
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(generator(), steps_per_epoch=1, epochs=1)
""",
        # a generator that only groups the batches of the dataset it is handed (gradient accumulation)
        """import tensorflow as tf
class Trainer:
    def _apply_gradients(self):
        self._optimizer.apply_gradients(zip(self._gradients, self._variables))
    def _steps(self, dataset, accum_steps):
        apply_gradients = tf.function(self._apply_gradients)
        for batches in _group_batches(dataset, accum_steps):
            for batch in batches:
                self._accumulate(batch)
            apply_gradients()
def _group_batches(dataset, group_size):
    group = []
    for batch in dataset:
        group.append(batch)
        if len(group) == group_size:
            yield group
            group = []
""",
        # a generator used only for evaluation
        """import tensorflow as tf
ds = tf.data.Dataset.from_generator(gen, output_signature=SIG).batch(8)
model.evaluate(ds)
""",
        # a generator that feeds a distributed prediction step (no gradients): decoding, not training
        """import tensorflow as tf
def input_generator():
    for lines in chunks:
        yield encode(lines)
def step_fn(inputs):
    return model(inputs, training=False)
for text in input_generator():
    outputs.append(strategy.run(step_fn, args=(text,)))
""",
        # tf.data from files, parallel map, prefetch
        """import tensorflow as tf
ds = tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=tf.data.AUTOTUNE).batch(64).prefetch(2)
model.fit(ds, epochs=5)
""",
        # a Python iterator that never reaches a training step
        """import tensorflow as tf
class Lines:
    def __next__(self):
        return read_line()
for line in Lines():
    print(line)
""",
        # from_generator as validation data
        """import tensorflow as tf
val = tf.data.Dataset.from_generator(gen, output_signature=SIG).batch(8)
model.fit(train_ds, validation_data=val)
""",
        # TF1: the data comes from a tf.data iterator; feed_dict carries a learning rate and a recurrent state
        """import tensorflow as tf
train_op = optimizer.minimize(loss)
state = initial
for step in range(num_steps):
    lr = schedule(step)
    _, state = sess.run([train_op, final_state], feed_dict={lr_ph: lr, state_ph: state})
for images, labels in batches(files):
    sess.run(accuracy, feed_dict={x: images, y: labels})
""",
        # tensorpack's dataflow in worker processes of its own
        """import horovod.tensorflow as hvd
import tensorflow as tf
from tensorpack import *
hvd.init()
df = MultiProcessRunnerZMQ(BatchData(ImageFiles(files), 32), num_proc=8)
df.reset_state()
with tf.Session() as sess:
    for images, labels in df:
        sess.run(train_op, feed_dict={x: images, y: labels})
""",
        # what the generator made is cached: its Python runs in the first epoch only
        """import tensorflow as tf
def gen():
    for path in paths:
        yield load(path)
ds = tf.data.Dataset.from_generator(gen, output_signature=SIG).cache().shuffle(64).batch(64)
dist = strategy.experimental_distribute_dataset(ds)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        return when_distributed(facts, self._findings(facts, context), context.run_code)

    def _findings(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        seen: set[int] = set()
        feeds = list(self._python_feeds(facts))
        replayed = {id(fit.node) for _, _, what, fit in feeds
                    if fit is not None and what.startswith(_PLAIN_ITERATORS)}  # plain iterators fed to this `fit`
        for node, statement, what, fit in feeds:
            if id(node) in seen:
                continue
            seen.add(id(node))
            if fit is None and _process_loaders(facts):
                return
            if what == _FIT_GENERATOR and fit is not None and _dispatched_on_type(fit):
                continue  # a helper that picks the call by its input's type: the caller chooses the feed
            if what == _FEED_DICT and not context.targets.tensorflow.guessed and context.targets.tensorflow.below(1, 4):
                continue  # TensorFlow before 1.4 (`tf.mul`: 0.x) has no `tf.data` to offer
            template, workers = _workers(facts, fit) if fit is not None else ("default", "")
            if template == "processes":
                if id(fit.node) in replayed and _several_processes(facts, fit):  # type: ignore[union-attr]
                    yield self.report(node, "replayed", statement=statement, what=what, workers=workers)
                continue  # whether a `Sequence`'s worker processes keep up turns on their count and copies
            if template == "threads-or-processes" and _multi_backend_keras(facts, context.targets.keras):
                continue  # this Keras takes no tf.data: processes are the one advice, and the code sets them
            if template in ("default", "threads") and fit is not None \
                    and _multi_backend_keras(facts, context.targets.keras):
                if not any(spreads_without_strategy(facts, c) for c in facts.calls):
                    continue  # a `tf.distribute` strategy does not spread this Keras's `fit`: it runs on one device
                if id(fit.node) in replayed or what == _FIT_GENERATOR:
                    continue  # processes would each replay a generator (and this one may be): no advice fits this Keras
                if _processes_follow_count(fit):  # type: ignore[arg-type]
                    continue  # processes, the one advice here, come when the user raises the count the code exposes
                template, workers = "multi-backend", workers or "one Python thread"
            yield self.report(node, template, statement=statement, what=what, workers=workers)
        if not any(c.attr == "from_generator" and id(c.node) not in seen for c in facts.calls):
            return  # asking the importers costs their analysis: only for a generator source it has not reported
        for feed in fed_elsewhere(facts):  # a loader's `from_generator` pipeline, trained on in another module
            call = facts.call_fact(feed.source_call) if feed.source_call is not None else None
            if (call is not None and _generators(feed.source, *feed.other_sources)
                    and id(call.node) not in seen and distributes(feed.use.scope.owner)  # type: ignore[arg-type]
                    and not _slices_or_pooled(facts, call.node, call.scope)):
                seen.add(id(call.node))
                yield self.report(call.node, statement=call.statement, what="`Dataset.from_generator`",
                                  evidence=(feed.evidence,))

    def _python_feeds(self, facts: ModuleFacts) -> Iterator[tuple[cst.CSTNode, cst.CSTNode, str, CallFact | None]]:
        """(node, statement, what feeds it, the `fit`/`fit_generator` call that it feeds, if one does)."""
        for call in facts.method_calls("fit_generator"):
            generator = call_arg(call.node, 0, "generator")
            if in_test_code(facts, call.scope) or _forwarding_wrapper(call) or repeats_one_batch(
                    facts, generator, call.scope, call.order):
                continue  # a unit test trains nothing; a benchmark's one batch costs no Python per step
            if made_by_workers(facts, generator, call.scope, call.order):
                continue  # their count and the copies decide whether they keep up, which the code does not show
            if generator is not None and slices_in_memory(facts, generator, call.scope, call.order):
                continue  # a copy per batch, no Python work
            yield call.node, call.statement, _FIT_GENERATOR, call
        for use in training_inputs(facts):
            scope, order, expr, statement = use.scope, use.order, use.expr, use.statement
            if in_test_code(facts, scope):
                continue
            fit = _fit_of(facts, use.expr, statement) if use.via == "fit" else None
            chain = facts.dataset_chain(expr, scope, order)
            if chain is not None:
                pipelines = (chain, *chain.alternatives)
                if _generators(*(c.source for c in pipelines)) and not all(
                        _slices_or_pooled(facts, c.source_call, c.source_scope or c.scope) or _cached(c)
                        for c in pipelines):
                    source = facts.call_fact(chain.source_call)
                    yield chain.source_call, source.statement if source else statement, "`Dataset.from_generator`", None
                continue
            origins = [(o.model, o.expr, o.scope) for o in facts.values_of(expr, scope, order)] if dotted(expr) \
                else [(facts, expr, scope)]
            flows = {self._flow(model, origin, home) for model, origin, home in origins}  # type: ignore[arg-type]
            if origins and None not in flows and len(flows) == 1:
                yield expr, statement, f"`ImageDataGenerator.{flows.pop()}`", fit
                continue
            origin = iterable_provenance(facts, expr, scope, order)
            if (origin is not None and origin.kind == "undistributed" and "Python" in origin.reason
                    and not slices_in_memory(facts, expr, scope, order)):  # a copy per batch, no Python work
                yield expr, statement, origin.reason, fit
        for feed in session_feeds(facts):
            yield feed.source, feed.statement, _FEED_DICT, None

    @staticmethod
    def _flow(facts: ModuleFacts, expr: cst.CSTNode, scope: Scope) -> str | None:
        """For `ImageDataGenerator(...).flow*(...)`, its generator directly or through a variable: the method
        called (`flow_from_directory`)."""
        if not (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)
                and _FLOW.match(expr.func.attr.value)):
            return None
        makers = _values(facts, expr.func.value, scope)
        if not all(isinstance(made, cst.Call) and (facts.resolve(made.func) or "").endswith("ImageDataGenerator")
                   for made in makers):
            return None
        if expr.func.attr.value == "flow" and not all(
                any(arg.keyword is None or arg.keyword.value not in _NO_WORK for arg in made.args)  # type: ignore[attr-defined]
                for made in makers):
            return None  # `ImageDataGenerator().flow(x, y)`: batches of arrays in memory, a copy each
        return expr.func.attr.value


def _values(facts: ModuleFacts, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> list[cst.BaseExpression]:
    """What a name can hold, through every assignment of it and names assigned from names (`train_datagen =
    valid_datagen` in the `else` of an augmentation flag); the expression itself when it is no name."""
    name = dotted(expr)
    found = definitions(facts, name, scope) if name is not None and depth < 3 else []
    return [value for assign in found for value in _values(facts, assign.value, scope, depth + 1)] or [expr]


def _slices_or_pooled(facts: ModuleFacts, source: cst.Call | None, scope: Scope) -> bool:
    """Whether a `from_generator` source hands out slices of arrays in memory (a copy per batch, no Python work),
    or batches that a pool of workers made (a generator yielding a Keras `OrderedEnqueuer`'s `get()`): their
    count decides whether they keep up, which the code sets."""
    generator = call_arg(source, 0, "generator") if source is not None else None
    fact = facts.call_fact(source) if source is not None else None
    return hands_out_slices(facts, generator, scope) or made_by_workers(facts, generator, scope,
                                                                        fact.order if fact is not None else 0)


def _cached(chain: DatasetChain) -> bool:
    """Whether a `from_generator` pipeline caches what its generator made (`cache()`, `snapshot()`) before any
    `repeat()`, and the generator does not visibly loop forever: from the second epoch on, no Python runs."""
    scope = chain.source_scope or chain.scope
    owner: ModuleFacts = scope.owner  # type: ignore[assignment]
    return cached_before_repeat(chain.ops) and not _endless(owner, chain.source_call, scope)


def _endless(facts: ModuleFacts, source: cst.Call, scope: Scope) -> bool:
    """Whether the generator of `from_generator(...)`, or a function it calls, loops with `while True:`."""
    found = facts.callables_of(call_arg(source, 0, "generator"), scope)
    found += [inner for outer in found for call in outer.calls for inner in facts.callables_of(call.node.func, outer)]
    return any(isinstance(loop.node, cst.While) and _always(loop.node.test) for f in found for loop in f.loops)


def _always(test: cst.BaseExpression) -> bool:
    return (isinstance(test, cst.Name) and test.value == "True") or literal_int(test) == 1


def _process_loaders(facts: ModuleFacts) -> bool:
    """Whether the module makes its batches in worker processes: a call of tensorpack's multiprocess dataflows
    (`MultiProcessRunnerZMQ`, `PrefetchDataZMQ`, `MultiProcessMapData`, ...) or of `multiprocessing.Pool` /
    `Process`, in a module that imports those libraries."""
    modules = [fact.module for fact in facts.imports if fact.level == 0] + [
        name for name, level in facts.star_imports if not level]
    if not any(module.partition(".")[0] in _PROCESS_MODULES for module in modules):
        return False
    for call in facts.calls:
        name = facts.resolve(call.func) or call.func or ""
        last = name.rpartition(".")[2]
        if (name.startswith("multiprocessing.") and last in ("Pool", "Process")) or (
                not name.startswith("multiprocessing.") and _PROCESS_LOADERS.match(last)):
            return True
    return False


def _generators(*sources: str) -> bool:
    """Whether every pipeline the input may be starts at `from_generator`: where a flag picks a file reader
    instead (`if not from_tfrecords: ... from_generator ... else: TFRecordDataset`), the fast path is there."""
    return all(source.endswith(".from_generator") for source in sources)


def _forwarding_wrapper(call: CallFact) -> bool:
    """`def fit_generator(self, generator, **kwargs): self.model.fit_generator(generator, **kwargs)`: a wrapper
    of the same name, whose callers' own `fit_generator` calls are reported, with the arguments they pass."""
    node = call.scope.node
    if not isinstance(node, cst.FunctionDef) or node.name.value != call.attr:
        return False
    star = node.params.star_kwarg
    return star is not None and any(a.star == "**" and dotted(a.value) == star.name.value for a in call.node.args)


def _fit_of(facts: ModuleFacts, expr: cst.BaseExpression, statement: cst.CSTNode) -> CallFact | None:
    """The `fit`/`fit_generator` call that `expr` is the input of."""
    return next((c for c in facts.method_calls("fit", "fit_generator") if c.statement is statement
                 and call_arg(c.node, 0, "x" if c.attr == "fit" else "generator") is expr), None)


def _dispatched_on_type(fit: CallFact) -> bool:
    """A `fit_generator(data)` in the branch of `if isinstance(data, ...)`: a helper that takes a generator or a
    dataset and calls the method that fits it (a benchmark timing both)."""
    data = dotted(call_arg(fit.node, 0, "generator"))
    return data is not None and any(
        isinstance(test, cst.Call) and dotted(test.func) == "isinstance" and dotted(call_arg(test, 0, None)) == data
        for test in (branch.test for branch in fit.ifs))


def _multi_backend_keras(facts: ModuleFacts, keras: Target) -> bool:
    """Whether the module's `fit` is the standalone multi-backend Keras (`import keras`) of a project that pins
    it, or a TensorFlow, before Keras 2.4: its `fit` takes no `tf.data` dataset."""
    return not keras.guessed and keras.below(2, 4) and keras_package_imported(facts)


def _workers(facts: ModuleFacts, fit: CallFact) -> tuple[str, str]:
    """How Keras 2 runs the Python feed of a `fit` call: one thread ("default"), several threads (`workers=4`),
    processes (`use_multiprocessing=True`), with how many, or whichever a value the code does not show says."""
    given = call_arg(fit.node, None, "workers")
    workers = _literal(facts, given, fit) if given is not None else 1
    multiprocessing = call_arg(fit.node, None, "use_multiprocessing")
    if multiprocessing is None and any(a.star == "**" and not _keys_without_workers(facts, a.value, fit)
                                       for a in fit.node.args):
        return "threads-or-processes", ""  # `fit_generator(gen, **kwargs)`: the caller's arguments say which
    processes = _literal(facts, multiprocessing, fit) if multiprocessing is not None else False
    if not isinstance(processes, bool):
        return "threads-or-processes", ""  # `use_multiprocessing=args.mp`: the code does not say which
    if workers == 0:
        return "default", ""  # Keras runs it on the main thread
    count = workers if isinstance(workers, int) and not isinstance(workers, bool) else None
    if processes:
        return "processes", ("a worker process" if count == 1 else f"{count} worker processes" if count
                             else "worker processes")
    if count == 1:
        return "default", ""
    return "threads", f"{count} Python threads" if count else "Python threads"


def _keys_without_workers(facts: ModuleFacts, expr: cst.BaseExpression, fit: CallFact) -> bool:
    """`**params` where `params` is only ever a dict literal that sets neither `workers` nor
    `use_multiprocessing` (`params = {"epochs": 5, "callbacks": [...]}`): the defaults hold."""
    origins = facts.values_of(expr, fit.scope, fit.order)
    return bool(origins) and all(
        o.kind == "value" and not o.path and isinstance(o.expr, cst.Dict) and all(
            isinstance(e, cst.DictElement) and literal_str(e.key) not in (None, "workers", "use_multiprocessing")
            for e in o.expr.elements) for o in origins)


def _processes_follow_count(fit: CallFact) -> bool:
    """`fit(seq, workers=n, use_multiprocessing=True if n > 1 else False)` (or `n > 1`): processes once the
    count, a setting of the code, is raised."""
    count = dotted(call_arg(fit.node, None, "workers"))
    processes = call_arg(fit.node, None, "use_multiprocessing")
    return count is not None and processes is not None and dotted(processes) is None and count in expression_names(
        processes, strings=False)


def _several_processes(facts: ModuleFacts, fit: CallFact) -> bool:
    """Whether `fit(workers=...)` may start two or more processes: a count of 2 or more, or the machine's
    (`multiprocessing.cpu_count()`), among the values `workers` may hold."""
    given = call_arg(fit.node, None, "workers")
    if given is None:
        return False
    values = [o.expr for o in facts.values_of(given, fit.scope, fit.order)] if dotted(given) else [given]
    return any(isinstance(v, cst.Integer) and v.evaluated_value >= 2
               or isinstance(v, cst.Call) and (facts.resolve(v.func) or dotted(v.func) or "").endswith("cpu_count")
               for v in values)


def _literal(facts: ModuleFacts, expr: cst.BaseExpression, call: CallFact) -> int | bool | None:
    """The integer or boolean every value of `expr` is (a literal, or a name assigned one)."""
    written = _constant(expr)
    if written is not None:
        return written
    if isinstance(expr, cst.IfExp):  # `True if num_workers > 1 else False`
        test = _comparison(facts, expr.test, call)
        return None if test is None else _literal(facts, expr.body if test else expr.orelse, call)
    values = [o.expr for o in facts.values_of(expr, call.scope, call.order)] if dotted(expr) else [expr]
    found = {_constant(v) for v in values}
    return found.pop() if len(found) == 1 else None


_COMPARE = {cst.GreaterThan: int.__gt__, cst.GreaterThanEqual: int.__ge__, cst.LessThan: int.__lt__,
            cst.LessThanEqual: int.__le__, cst.Equal: int.__eq__, cst.NotEqual: int.__ne__}


def _comparison(facts: ModuleFacts, test: cst.BaseExpression, call: CallFact) -> bool | None:
    """The value of `a > b` (one comparison of two integers the code shows), else None."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    compare = _COMPARE.get(type(target.operator))
    left, right = _literal(facts, test.left, call), _literal(facts, target.comparator, call)
    if compare is None or not all(isinstance(v, int) and not isinstance(v, bool) for v in (left, right)):
        return None
    return compare(left, right)


def _constant(expr: cst.CSTNode) -> int | bool | None:
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return expr.value == "True"
    return int(expr.value, 0) if isinstance(expr, cst.Integer) else None
