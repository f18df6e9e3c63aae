from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import (cheap_map, costly_map, fed_elsewhere, slices_of_memory, strategies_only,
                                    training_chains, when_distributed)
from tfdoctor.lint.facts import DATASET_METHODS, END_OF_SCOPE, DatasetChain, DatasetOp, ModuleFacts, Origin, Scope
from tfdoctor.lint.findings import Fix, Severity, Violation
from tfdoctor.lint.names import call_arg, literal_int
from tfdoctor.lint.rule import Context, Rule
from tfdoctor.lint.spelling import autotune, autotune_text

# Steps after a prefetch that keep it working: options, and ones that only count or restart batches (a loop's
# `ds.take(steps)`). A pipeline without prefetch is reported at the step before them, where it goes.
_TRAILING_OK = frozenset({"with_options", "take", "skip", "repeat"})
_PASS_ON = frozenset({"shuffle", "repeat"})  # steps that hand on the elements before them, each when it is asked
_PREFETCHES = frozenset({"prefetch_to_device", "copy_to_device"})  # given to `apply`, they prefetch too
# `tf.data.experimental` readers whose dataset ends in a prefetch of their own
_PREFETCHING_SOURCES = frozenset({f"tensorflow.data.experimental.{name}" for name in (
    "make_csv_dataset", "make_batched_features_dataset")})
INJECTS_PREFETCH = (2, 12)  # from this TF on, `inject_prefetch` defaults to on (2.10 had it off, 2.12's docs on)
# Options that stop the injection: `inject_prefetch` itself, or autotuning, which it works with
_INJECTION_SWITCHES = ("experimental_optimization.inject_prefetch", "autotune.enabled",
                       "experimental_optimization.autotune")
# Options that stop tf.data fusing `map(f, num_parallel_calls=n).batch(b)` into one step that runs ahead
_FUSION_SWITCHES = ("experimental_optimization.map_and_batch_fusion",
                    "experimental_optimization.apply_default_optimizations")


class NoPrefetch(Rule):
    """
    ## What it does
    Finds a training pipeline that does not end in `prefetch` (or `apply(prefetch_to_device(...))`): one given to
    `model.fit` or iterated by the training loop, also a loader's pipeline that another project module trains on. A
    pipeline that a strategy distributes is not flagged: the iterators of `strategy.experimental_distribute_dataset`
    and `distribute_datasets_from_function`, and Keras' `fit` under a strategy, prefetch to the devices themselves.
    Nor is a bare `tfds.load` or Keras `image_dataset_from_directory` dataset (Keras' utilities end in `prefetch`),
    nor one of `tf.data.experimental.make_csv_dataset` or `make_batched_features_dataset` (they end in `prefetch`
    too) followed only by cheap or parallel `map`s. Steps after a `prefetch` that only count, skip or repeat batches
    (`ds.prefetch(1)`, then `ds.take(steps)` in the loop) keep it working, and so do parallel `map`s after it
    (`prefetch(n).map(f, num_parallel_calls=AUTOTUNE)`: a parallel map computes elements ahead into its own buffer)
    and serial ones that visibly do only cheap work (a slice, a cast; see TFD202 for what counts as costly), or
    whose function the module does not show; a pipeline without one is reported at its last step before them, where
    `prefetch` goes. Nor is a pipeline that ends in a parallel `map`, whose threads compute the next elements (and
    pull the steps before it) while the training step runs, or in a parallel `map` straight followed by `batch`
    (`map(parse, num_parallel_calls=AUTOTUNE).batch(64)`), which tf.data fuses into one step that builds the next
    batch ahead alike (its default `map_and_batch_fusion`, unless the module turns it off), or in
    `apply(map_and_batch(...))`, or in a parallel `map` followed only by `shuffle` and `repeat` (and then a
    `batch` of at most as many elements as the map has threads: `num_parallel_calls=5` and `batch(3)`), which
    pass on what the map's threads made ahead; nor a `Dataset.zip` of pipelines that each end so (or in
    `prefetch`), with nothing after it: zipping only pairs what the branches made ahead. A pipeline that only slices, shuffles
    and batches arrays already in memory (`from_tensor_slices`, `from_tensors`, `range`, or the file names of
    `list_files`, with no `interleave`
    or `filter`, an `apply` only of a batching,
    `unbatch` or `shuffle_and_repeat`, and only `map`s that visibly do cheap work: a cast, a reshape, a one-hot,
    arithmetic) is not reported: a batch of it costs little more than a copy, and overlapping that with the step
    saves next to nothing. Nor is one that caches in memory (`cache()` without a file name) and after it only
    shuffles, batches, repeats or does cheap `map`s: from its second epoch on, a batch is a copy out of memory too.

    From TensorFlow 2.12 on, with autotuning on (the default), TensorFlow injects an autotuned prefetch after
    a pipeline that ends in a synchronous step (`tf.data.Options().experimental_optimization.inject_prefetch`),
    so the rule reports only code that targets an older TensorFlow or turns the injection or autotuning off.
    A pipeline trained on for one step only (`fit(ds, epochs=1, steps_per_epoch=1)`, a timing) has nothing
    to overlap and is left alone.

    Only a program that trains on several devices or processes is checked: the module, or a project module
    next to it in the imports, builds a `tf.distribute` strategy, calls Horovod or `multi_gpu_model`, or builds
    TF 1 towers (not a notebook whose saved outputs show its strategy ran with one replica, nor a module
    whose only strategy is a `OneDeviceStrategy`), nor the pipeline of a `fit` whose Keras model the code
    shows made, compiled and fitted outside every strategy scope, in a module that spreads training only through
    its strategies (one given to an Estimator's `train_distribute`): Keras fits that model on one device. On one
    device, whether input that takes turns with the step costs much turns on what each costs, which the code does
    not show; `tfdoctor profile` measures it, and checks the script it runs whatever its devices.

    ## Why it is bad
    Without `prefetch` the pipeline produces the next batch only when the step asks for it: input and compute
    take turns instead of overlapping, and every step pays for both.

    ## Example
    ```python
    # tfdoctor: target-tensorflow=2.11
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    ds = tf.data.TFRecordDataset(files).map(parse).shuffle(1000).batch(64)  # TFD203
    model.fit(ds, epochs=5)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    ds = tf.data.TFRecordDataset(files).map(parse).shuffle(1000).batch(64).prefetch(tf.data.AUTOTUNE)
    model.fit(ds, epochs=5)
    ```

    Fix (safe): appends `.prefetch(tf.data.AUTOTUNE)`, spelled with your import alias.
    """

    code = "TFD203"
    name = "no-prefetch"
    severity = Severity.WARNING
    summary = "A training pipeline does not end in `prefetch` (before TF 2.12, input and compute do not overlap)."
    MESSAGES = {"default": ("this training pipeline does not end in `prefetch`, so input and compute do not overlap; "
                            "append `.prefetch({autotune})`")}
    triggers = ("data",)
    INVALID = (
        # built across assignments, consumed by a training loop
        """# tfdoctor: target-tensorflow=2.11
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.TFRecordDataset(files).map(parse)
ds = ds.batch(10)  # TFD203
@tf.function
def step(x):
    optimizer.apply_gradients(grads(x))
for x in ds:
    step(x)
""",
        # prefetch placed before batch does not count as ending in prefetch
        """# tfdoctor: target-tensorflow=2.11
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.Dataset.from_tensor_slices(paths).map(load_image).prefetch(4).batch(8)  # TFD203
model.fit(ds)
""",
        # reported where the prefetch goes, not at the loop's take()
        """# tfdoctor: target-tensorflow=2.11
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.TFRecordDataset(files).map(parse).repeat().shuffle(10000).batch(128)  # TFD203
@tf.function
def step(images, labels):
    optimizer.apply_gradients(grads(images, labels))
for images, labels in ds.take(steps):
    step(images, labels)
""",
        # a map after the prefetch that runs one element at a time: the step waits for it
        """# tfdoctor: target-tensorflow=2.11
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
def augment(images):
    return tf.image.resize(tf.image.random_crop(images, (64, 200, 200, 3)), (224, 224))
ds = tf.data.TFRecordDataset(files).batch(64).prefetch(2).map(augment)  # TFD203
model.fit(ds, epochs=5)
""",
        # the module turns autotuning off, so nothing injects a prefetch
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
options = tf.data.Options()
options.autotune.enabled = False
ds = tf.data.TFRecordDataset(files).map(parse).batch(64).with_options(options)  # TFD203
model.fit(ds, epochs=5)
""",
        # the module turns off the fusion that would make a parallel map and the batch after it run ahead
        """# tfdoctor: target-tensorflow=2.4
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
options = tf.data.Options()
options.experimental_optimization.map_and_batch_fusion = False
ds = tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=8).batch(64)  # TFD203
model.fit(ds.with_options(options), epochs=5)
""",
        # before TF 2.12 nothing injects a prefetch: input and compute take turns
        """# tfdoctor: target-tensorflow=2.4
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.Dataset.from_tensor_slices((x, y)).map(augment).shuffle(1000).batch(64)  # TFD203
model.fit(ds, epochs=5)
""",
    )
    VALID = (
        # one device: whether input taking turns with the step costs much turns on costs the code does not show
        """# tfdoctor: target-tensorflow=2.11
import tensorflow as tf
ds = tf.data.TFRecordDataset(files).map(parse).shuffle(1000).batch(64)
model.fit(ds, epochs=5)
""",
        # from TF 2.12, TensorFlow appends an autotuned prefetch itself
        """# tfdoctor: target-tensorflow=2.15
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.TFRecordDataset(files).map(parse).shuffle(1000).batch(64)
model.fit(ds, epochs=5)
""",
        # a parallel map after the prefetch computes batches ahead itself
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.TFRecordDataset(files).batch(64).prefetch(2).map(augment, num_parallel_calls=tf.data.AUTOTUNE)
model.fit(ds, epochs=5)
""",
        # a parallel map straight before `batch`: tf.data fuses them into one step that builds the next batch ahead
        """# tfdoctor: target-tensorflow=2.3
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.TFRecordDataset(files).repeat().shuffle(10000)
ds = ds.map(parse, num_parallel_calls=tf.data.experimental.AUTOTUNE)
ds = ds.batch(64, drop_remainder=True)
model.fit(ds, epochs=5, steps_per_epoch=100)
""",
        # a parallel map at the end computes the next batches on its own threads; so does an explicit map_and_batch
        """# tfdoctor: target-tensorflow=2.3
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.TFRecordDataset(files).batch(64).map(parse_batch, num_parallel_calls=tf.data.AUTOTUNE)
model.fit(ds, epochs=5)
""",
        """# tfdoctor: target-tensorflow=1.15
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.TFRecordDataset(files).repeat().apply(tf.data.experimental.map_and_batch(parse, 64, num_parallel_calls=8))
@tf.function
def step(images, labels):
    optimizer.apply_gradients(grads(images, labels))
for images, labels in ds:
    step(images, labels)
""",
        # a parallel map, then only shuffle, repeat and a batch no larger than its threads: they take what the
        # map's threads made ahead (both counts are defaults of the loader's parameters)
        """# tfdoctor: target-tensorflow=2.4
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
BATCH = 3
def load(files, threads=5, batch_size=BATCH, shuffle=True):
    ds = tf.data.TFRecordDataset(files).map(decode_and_augment, num_parallel_calls=threads)
    if shuffle:
        ds = ds.shuffle(1000)
    return ds.repeat().batch(batch_size)
model.fit(load(files), epochs=5, steps_per_epoch=100)
""",
        # a zip of two pipelines whose parallel map and batch build their next batches ahead
        """# tfdoctor: target-tensorflow=2.11
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
def load(files):
    return tf.data.TFRecordDataset(files).map(read, num_parallel_calls=tf.data.AUTOTUNE).batch(1)
model.fit(tf.data.Dataset.zip((load(PHOTO_FILES), load(MONET_FILES))), epochs=25)
""",
        # a single step, timed: there is no next batch to overlap with it
        """# tfdoctor: target-tensorflow=2.11
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.TFRecordDataset(files).map(parse).shuffle(1000).batch(64)
start = time.time()
model.fit(ds, epochs=1, steps_per_epoch=1)
""",
        # prefetched to the GPU
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.TFRecordDataset(files).batch(64).apply(tf.data.experimental.prefetch_to_device("/gpu:0"))
model.fit(ds, epochs=5)
""",
        # experimental_distribute_dataset prefetches itself
        """import tensorflow as tf
ds = tf.data.Dataset.from_tensor_slices(arr).batch(64)
dist = strategy.experimental_distribute_dataset(ds)
""",
        # so do the iterators of distribute_datasets_from_function, and a `fit` under a strategy
        """from tensorflow import data as tfdata
def dataset_fn(ctx):
    return tfdata.Dataset.from_tensor_slices(arr).batch(ctx.get_per_replica_batch_size(64))
dist = strategy.distribute_datasets_from_function(dataset_fn)
""",
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = build_model()
model.fit(tf.data.Dataset.from_tensor_slices(arr).batch(64))
""",
        # also when the scope is entered through a name that holds it
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
scope = strategy.scope()
with scope:
    model = build_model()
    model.fit(tf.data.TFRecordDataset(files).map(parse).batch(64))
""",
        # a CSV reader ends in a prefetch of its own; a cheap map after it keeps it
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.experimental.make_csv_dataset("iris.csv", 32, label_name="species", num_epochs=1)
ds = ds.map(lambda features, label: (tf.stack(list(features.values()), axis=1), label))
model.fit(ds, epochs=200)
""",
        # prefetch then options
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.Dataset.from_tensor_slices(arr).batch(8).prefetch(1).with_options(opts)
model.fit(ds)
""",
        # prediction only
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.Dataset.from_tensor_slices(arr).batch(8)
model.predict(ds)
""",
        # cached in memory, then only shuffled and batched: from the second epoch, a copy out of memory
        """# tfdoctor: target-tensorflow=2.4
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.TFRecordDataset(files).map(parse).cache().shuffle(1000).batch(64)
model.fit(ds, epochs=20)
""",
        # arrays in memory, batched through `apply`: still a copy
        """# tfdoctor: target-tensorflow=1.10
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.Dataset.from_tensor_slices((inputs, targets)).shuffle(10000)
ds = ds.apply(tf.contrib.data.batch_and_drop_remainder(64))
for x, y in ds:
    step(x, y)
""",
        # arrays in memory, sliced and batched: a batch costs a copy
        """# tfdoctor: target-tensorflow=2.4
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1000).batch(64)
model.fit(ds, epochs=5)
""",
        # in-memory MNIST whose map only casts, scales and one-hots: waiting for it costs next to nothing
        """# tfdoctor: target-tensorflow=2.0
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
def preprocess(x, y):
    x = tf.cast(x, tf.float32) / 255.
    x = tf.reshape(x, [28 * 28])
    return x, tf.one_hot(tf.cast(y, tf.int32), depth=10)
db = tf.data.Dataset.from_tensor_slices((x_train, y_train)).map(preprocess).shuffle(60000).batch(128)
model.fit(db, epochs=5)
""",
        # take() after the prefetch keeps it
        """import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().shuffle(5000).batch(64).prefetch(1)
@tf.function
def step(images, labels):
    optimizer.apply_gradients(grads(images, labels))
for images, labels in ds.take(steps):
    step(images, labels)
""",
        # batches of file names that `list_files` globbed where it was made: each is a copy
        """# tfdoctor: target-tensorflow=2.11
import tensorflow as tf
import horovod.tensorflow.keras as hvd
hvd.init()
names = tf.data.Dataset.list_files("data/*.npy").shuffle(1000).batch(32)
@tf.function
def step(x):
    optimizer.apply_gradients(grads(x))
for batch in names:
    step(batch)
""",
        # the strategy trains an Estimator; the Keras model is made and fitted outside its scope, on one device
        """# tfdoctor: target-tensorflow=2.5
import tensorflow as tf
import tensorflow_datasets as tfds
def input_fn():
    train = tfds.load("mnist", split="train", as_supervised=True)
    return train.map(scale).shuffle(10000).batch(64).repeat()
def make_model():
    return tf.keras.Sequential([tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)])
config = tf.estimator.RunConfig(train_distribute=tf.distribute.MirroredStrategy())
estimator = tf.keras.estimator.model_to_estimator(keras_model=make_model(), config=config)
tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
model = make_model()
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
model.fit(input_fn(), steps_per_epoch=5, epochs=10)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        return when_distributed(facts, self._findings(facts, context), context.run_code)

    def _findings(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if _injects_prefetch(facts, context):
            return  # TensorFlow appends an autotuned prefetch itself
        value = autotune(facts, context.targets)
        seen: set[int] = set()
        for chain, use in training_chains(facts):
            if use.distributed or use.one_step:  # the distributed iterator prefetches; one step overlaps nothing
                continue
            if use.unscoped_model and strategies_only(facts):
                continue  # Keras fits a model made outside every strategy scope on one device
            steps = chain.own_ops  # after a `zip`, its own steps: the joined pipelines' do not end it
            methods = [_step(op) for op in steps]
            while methods and methods[-1] in _TRAILING_OK:
                methods.pop()
            if _prefetched(facts, steps) or (not methods and _branches_prefetched(facts, chain)):
                continue
            if chain.source in _PREFETCHING_SOURCES and _maps_keep_up(facts, steps[:len(methods)]):
                continue  # `make_csv_dataset` ends in a prefetch of its own, which cheap maps after it keep
            if _read_from_memory_later(facts, steps):
                continue
            if not methods and not chain.source.startswith("tensorflow.data."):
                continue  # Keras' dataset utilities prefetch; what tfds returns is not shown here
            if _memory_cheaply(facts, chain.source, steps):
                continue
            end = steps[len(methods) - 1] if methods else None  # the last step that is not a trailing one
            last = end.call if end is not None else chain.source_call
            if id(last) in seen:
                continue
            seen.add(id(last))
            node = last.func.attr if isinstance(last.func, cst.Attribute) else last
            placed = chain.place(node, end)
            if placed is None:
                continue
            node, evidence = placed
            fix = None
            if value is not None and "prefetch" not in methods and not evidence:  # a misplaced prefetch is TFD204's
                prefetched = _append_prefetch(last, value)
                fix = Fix(last, prefetched, "append .prefetch(AUTOTUNE)")
            call = facts.call_fact(last if not evidence else node)
            yield self.report(node, statement=call.statement if call else None, fix=fix, evidence=evidence,
                              assumed=self.assumed(context, "tensorflow", facts, node),
                              autotune=autotune_text(value, context.targets))
        if not any(_returns_unprefetched(facts, scope, seen) for scope in facts.scopes):
            return  # asking the importers costs their analysis: only for a loader that returns such a pipeline
        for feed in fed_elsewhere(facts):  # a loader's pipeline, trained on undistributed in another module
            if (feed.use.distributed or feed.use.one_step or not feed.ends_here or not feed.steps
                    or _prefetched(facts, feed.steps) or _memory_cheaply(facts, feed.source, feed.steps)):
                continue
            last = feed.ops[-1].call
            if id(last) in seen:
                continue
            seen.add(id(last))
            call = facts.call_fact(last)  # no fix: one that rests on another file is never applied
            node = last.func.attr  # type: ignore[attr-defined]
            yield self.report(node, statement=call.statement if call else None, evidence=(feed.evidence,),
                              assumed=self.assumed(context, "tensorflow", facts, node),
                              autotune=autotune_text(value, context.targets))


def _injects_prefetch(facts: ModuleFacts, context: Context) -> bool:
    """Whether TensorFlow itself appends a prefetch to a pipeline that ends without one: from TF 2.12 on, unless
    the module turns the injection or autotuning off (`options.autotune.enabled = False`)."""
    if context.targets.tensorflow.below(*INJECTS_PREFETCH):
        return False
    return not _switched_off(facts, _INJECTION_SWITCHES)


def _switched_off(facts: ModuleFacts, switches: tuple[str, ...]) -> bool:
    """Whether the module sets one of these `tf.data.Options` to False (`options.autotune.enabled = False`)."""
    return any(isinstance(a.value, cst.Name) and a.value.value == "False" and t.endswith(switches)
               for a in facts.assigns for t in a.targets)


def _runs_ahead(facts: ModuleFacts, steps: tuple[DatasetOp, ...]) -> bool:
    """The pipeline's last step (before trailing ones) computes ahead on threads of its own while the training
    step runs: a parallel `map`, a parallel `map` and the `batch` that tf.data fuses it with, or an explicit
    `apply(map_and_batch(...))`; or a parallel `map` followed only by `shuffle` and `repeat` (and a `batch` no
    larger than the map's count of threads), which hand on the elements its threads made ahead."""
    if steps and (steps[-1].applied is not None and steps[-1].applied[0] == "map_and_batch"
                  or steps[-1].method == "map" and _parallel(steps[-1].call)):
        return True
    if (len(steps) >= 2 and steps[-1].method == "batch" and steps[-2].method == "map"
            and _parallel(steps[-2].call) and not _switched_off(facts, _FUSION_SWITCHES)):
        return True
    batch = steps[-1] if steps and steps[-1].method == "batch" else None
    ahead = list(steps[:-1] if batch is not None else steps)
    if not ahead or ahead[-1].method not in _PASS_ON:
        return False
    while ahead and ahead[-1].method in _PASS_ON:
        ahead.pop()
    if not ahead or ahead[-1].method != "map" or not _parallel(ahead[-1].call):
        return False
    if batch is None:
        return True
    batched, mapped = facts.call_fact(batch.call), facts.call_fact(ahead[-1].call)
    if batched is None or mapped is None:
        return False
    sizes = _ints(facts, call_arg(batch.call, 0, "batch_size"), batched.scope, batched.order)
    threads = _ints(facts, call_arg(ahead[-1].call, 1, "num_parallel_calls"), mapped.scope, mapped.order)
    return bool(sizes and threads) and max(sizes) <= min(threads)  # the map's threads made the next batch ahead


def _ints(facts: ModuleFacts, expr: cst.BaseExpression | None, scope: Scope, order: int, depth: int = 0) -> list[int]:
    """Every integer `expr` may hold in `scope` at `order` (a parameter no call sets: its default's), or [] when
    one of them is not a literal."""
    found: list[int] = []
    for origin in facts.values_of(expr, scope, order) if expr is not None and depth < 3 else ():
        default = _default(origin) if origin.kind == "parameter" else None
        if default is not None and origin.scope.parent is not None:
            values = _ints(facts, default, origin.scope.parent, END_OF_SCOPE, depth + 1)
        else:
            value = literal_int(origin.expr) if origin.kind == "value" else None
            values = [value] if value is not None else []
        if not values:
            return []
        found.extend(values)
    return found


def _default(origin: Origin) -> cst.BaseExpression | None:
    """The default of the parameter an origin names, in the function that declares it."""
    node = origin.scope.node
    if not isinstance(origin.expr, cst.Name) or not isinstance(node, (cst.FunctionDef, cst.Lambda)):
        return None
    return next((p.default for p in (*node.params.params, *node.params.kwonly_params)
                 if p.name.value == origin.expr.value), None)


def _branches_prefetched(facts: ModuleFacts, chain: DatasetChain) -> bool:
    """`Dataset.zip((a, b))` with nothing after it, where every pipeline it joins ends in `prefetch` or in a step
    that computes ahead: zipping only pairs elements the branches already made."""
    if not chain.joined:
        return False
    call = facts.call_fact(chain.source_call)
    given = call_arg(chain.source_call, 0, "datasets")
    branches = ([e.value for e in given.elements] if isinstance(given, (cst.Tuple, cst.List))
                else [a.value for a in chain.source_call.args if a.keyword is None])
    if call is None or not branches:
        return False
    chains = [facts.dataset_chain(branch, call.scope, call.order, any_source=True) for branch in branches]
    return all(found is not None and _prefetched(facts, found.own_ops) for found in chains)


def _returns_unprefetched(facts: ModuleFacts, scope: Scope, seen: set[int]) -> bool:
    """Whether a function returns a pipeline it builds that does not end in `prefetch` (not yet reported)."""
    if not scope.is_function or not any(c.attr in DATASET_METHODS for c in scope.calls):
        return False  # the last step must be called here: a function calling no dataset method cannot end one
    for returned in scope.returns:
        chain = facts.dataset_chain(returned.value, scope, END_OF_SCOPE, any_source=True)
        steps = chain.own_ops if chain is not None else ()
        if steps and steps[-1].scope is scope and id(steps[-1].call) not in seen and not _prefetched(facts, steps):
            return True
    return False


def _step(op: DatasetOp) -> str:
    """A step's method, with `apply(prefetch_to_device(...))` counted as the prefetch it is."""
    applied = op.applied
    return "prefetch" if applied is not None and applied[0] in _PREFETCHES else op.method


def _prefetched(facts: ModuleFacts, steps: tuple[DatasetOp, ...]) -> bool:
    """Whether a pipeline ends in `prefetch`, after only steps that keep it (`with_options`), in parallel
    or cheap `map`s after a `prefetch`, or in a step that computes ahead itself."""
    kept = [_step(op) for op in steps]
    while kept and kept[-1] in _TRAILING_OK:
        kept.pop()
    return bool(kept) and (kept[-1] == "prefetch" or _maps_keep_prefetch(facts, steps[:len(kept)])
                           or _runs_ahead(facts, steps[:len(kept)]))


def _memory_cheaply(facts: ModuleFacts, source: str, steps: tuple[DatasetOp, ...]) -> bool:
    """A pipeline over arrays already in memory whose only work on elements is `map`s that visibly do cheap
    work (`x / 255`, a cast, a one-hot): its batches cost little more than a copy."""
    return slices_of_memory(source, tuple(op for op in steps if not (op.method == "map" and cheap_map(facts, op))))


_REGROUPING = _TRAILING_OK | {"shuffle", "batch", "padded_batch", "unbatch", "rebatch", "prefetch"}  # no element work


def _read_from_memory_later(facts: ModuleFacts, steps: tuple[DatasetOp, ...]) -> bool:
    """`...cache()` in memory (no file name), then only steps that regroup elements or do cheap work: from the
    second epoch on, each batch is a copy out of memory."""
    cached = [index for index, op in enumerate(steps) if op.method == "cache" and not op.call.args]
    return bool(cached) and all(
        op.method in _REGROUPING or op.regroups_only or op.method == "map" and cheap_map(facts, op)
        for op in steps[cached[-1] + 1:])


def _maps_keep_prefetch(facts: ModuleFacts, steps: tuple[DatasetOp, ...]) -> bool:
    """`...prefetch(n).map(f, num_parallel_calls=...)`: a parallel `map` computes elements ahead into its own
    buffer, so the pipeline still overlaps with the step; a serial one that only slices or casts
    (`map(lambda x: x[:, :n])`) costs next to nothing to wait for."""
    methods = [_step(op) for op in steps]
    if "prefetch" not in methods:
        return False
    after = steps[len(methods) - methods[::-1].index("prefetch"):]
    return bool(after) and _maps_keep_up(facts, after)


def _maps_keep_up(facts: ModuleFacts, steps: tuple[DatasetOp, ...]) -> bool:
    """Every step is a `map` that is parallel, or does only cheap work (see TFD202): after a prefetch, they keep
    it working."""
    return all(op.method == "map" and (_parallel(op.call) or not costly_map(facts, op)) for op in steps)


def _parallel(call: cst.Call) -> bool:
    given = call_arg(call, 1, "num_parallel_calls")
    return given is not None and not (isinstance(given, cst.Name) and given.value == "None")


def _append_prefetch(last: cst.Call, value: cst.BaseExpression) -> cst.Call:
    """`<chain>.prefetch(value)`, inside the chain's parentheses and on its own line if the chain has one
    method per line."""
    dot = last.func.dot if isinstance(last.func, cst.Attribute) else cst.Dot()
    if isinstance(dot.whitespace_before, cst.ParenthesizedWhitespace):  # same layout, without the line's comment
        dot = dot.with_changes(whitespace_before=dot.whitespace_before.with_changes(
            first_line=cst.TrailingWhitespace(), empty_lines=[]))
    return cst.Call(
        func=cst.Attribute(value=last.with_changes(lpar=[], rpar=[]), attr=cst.Name("prefetch"), dot=dot),
        args=[cst.Arg(value)], lpar=last.lpar, rpar=last.rpar,
    )
