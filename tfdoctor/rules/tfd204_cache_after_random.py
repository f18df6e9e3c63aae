from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import DATASET_ONLY_METHODS, evaluation_step, random_data, training_chains
from tfdoctor.lint.facts import DatasetChain, DatasetOp, ModuleFacts
from tfdoctor.lint.findings import Fix, Severity, Violation
from tfdoctor.lint.names import call_arg
from tfdoctor.lint.rule import Context, Rule

_RANDOM_OP = re.compile(r"^(tensorflow\.(image\.(stateless_)?random_\w+|random\.\w+)|keras\.layers\.Random\w+)$")
_ALWAYS_RANDOM = frozenset({"shuffle", "prefetch", "repeat"})


class CacheAfterRandom(Rule):
    """
    ## What it does
    Finds `cache()` placed after `shuffle`, a random augmentation (`map` with `tf.image.random_*`,
    `tf.random.*` or a Keras `Random*` layer, also in a helper the mapped function calls), `prefetch` or
    an endless `repeat` in a `tf.data` pipeline (`repeat(n)` ends, and the cache after it completes). A
    `shuffle` before a cache that a later `shuffle` reads (a shuffle of the file names, then `if cache: ds =
    ds.cache()` and `ds.shuffle(n)`, or `apply(tf.data.experimental.shuffle_and_repeat(n))`) is not frozen: the
    records are shuffled again every epoch. Behind an endless `repeat` the cache never replays anything, so the
    finding names the `repeat`, not the steps before it. Nor is
    `shuffle(..., reshuffle_each_iteration=False)`, whose order is the same every epoch anyway. A step under
    `if not cache:` never runs before a cache under `if cache:`, and one under another flag's `if` than the
    cache's (`if repeat_sample:`, then `if use_cache:`) may never run with it: neither is reported. A cache
    in an evaluation pipeline (under `if validation:`, in the `else` of `if is_training:`, on a dataset
    named `ds_val`) is left alone: what it freezes does not train; so is one over tensors drawn at random
    where the pipeline is made (a demo's synthetic data).

    ## Why it is bad
    `cache()` stores what it receives during the first epoch and replays it afterwards. After `shuffle` or
    a random augmentation, the first epoch's order or augmentation is frozen for every later epoch; after
    `prefetch` the cache holds the prefetch buffer's output and the prefetching no longer overlaps the
    step after the first epoch (nothing breaks: a `prefetch` after the cache makes the early one only
    redundant, and is not reported); after `repeat` it never finishes the first pass.

    ## Example
    ```python
    import tensorflow as tf
    ds = tf.data.Dataset.from_tensor_slices(data).shuffle(1000).batch(32).prefetch(1).cache()  # TFD204
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    ds = tf.data.Dataset.from_tensor_slices(data).cache().shuffle(1000).batch(32).prefetch(1)
    ```

    Fix (unsafe, `--unsafe-fixes`): moves `cache()` to just before the first random step. It is unsafe
    because the cache then holds the data before those steps, which can change memory use.
    """

    code = "TFD204"
    name = "cache-after-random"
    severity = Severity.WARNING
    summary = "`cache()` after `shuffle`, a random augmentation, `prefetch` or `repeat` freezes or breaks it."
    OUTRANKS = ("TFD203",)  # a misplaced `cache()` at the end of a chain: moving it is the fix
    MESSAGES = {"default": "`cache()` after `{step}` freezes or breaks it; move `cache()` before `{step}`",
                "prefetch": "`prefetch` before `cache()` overlaps input and step in the first epoch only; move it "
                            "after `cache()`"}
    triggers = ("cache",)
    INVALID = (
        """import tensorflow as tf
def augment(image):
    return tf.image.random_flip_left_right(image)
ds = tf.data.Dataset.from_tensor_slices(images).map(augment).cache()  # TFD204
""",
        """from tensorflow import data
ds = data.TFRecordDataset(files).map(parse)
ds = ds.repeat()
ds = ds.cache()  # TFD204
""",
        """import tensorflow as tf
ds = tf.data.Dataset.from_tensor_slices(x).map(lambda v: v + tf.random.normal([3])).cache()  # TFD204
""",
        # a dataset handed in by the caller, cached only when asked to
        """import tensorflow as tf
class Pipeline:
    def build(self, dataset, cache):
        dataset = dataset.shuffle(1000).batch(32)
        if cache:
            dataset = dataset.cache()  # TFD204
        return dataset.repeat()
""",
        # a prefetch before the cache, and none after it
        """import tensorflow as tf
ds = tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=8).batch(8)
model.fit(ds.prefetch(2).cache(), epochs=3)  # TFD204
""",
        # a shuffle, then an endless repeat: the cache never completes a pass, so it is the repeat that breaks it
        """import tensorflow as tf
ds = tf.data.Dataset.from_tensor_slices(examples).shuffle(n).repeat()
ds = ds.batch(32).map(preprocess).cache()  # TFD204
""",
    )
    VALID = (
        # an endless repeat and a cache under two separate flags: no run need take both
        """import tensorflow as tf
ds = tf.data.TFRecordDataset(files).map(parse)
if repeat_cached_sample:
    ds = ds.take(1).cache().repeat()
ds = ds.prefetch(64)
if use_caching:
    ds = ds.cache()
ds = ds.shuffle(10000).repeat().batch(64)
""",
        # the file names shuffled, the records cached, then shuffled again every epoch by shuffle_and_repeat
        """import tensorflow as tf
ds = tf.data.Dataset.from_tensor_slices(files).shuffle(len(files)).interleave(tf.data.TFRecordDataset)
ds = ds.cache().apply(tf.data.experimental.shuffle_and_repeat(16384))
""",
        # a benchmark's fake-data switch loops over one batch on purpose
        """import tensorflow as tf
class Loader:
    def __call__(self, files):
        ds = tf.data.TFRecordDataset(files).shuffle(1024).map(parse).batch(64)
        if self._use_fake_data:
            ds = ds.take(1).cache().repeat()
        return ds.prefetch(tf.data.AUTOTUNE)
model.fit(Loader()(files), epochs=3)
""",
        # the cache is in the validation branch: augmentation, when it runs, belongs to training
        """import tensorflow as tf
def get_dataset(files, augmentation=True, validation=False):
    ds = tf.data.TFRecordDataset(files).map(parse)
    if augmentation:
        ds = ds.map(lambda x, y: (tf.image.random_flip_left_right(x), y))
    if validation:
        ds = ds.batch(64).cache()
    else:
        ds = ds.repeat().shuffle(2048).batch(64)
    return ds.prefetch(tf.data.AUTOTUNE)
""",
        # a shuffle that keeps one order for every epoch: the cache keeps it, as asked
        """import tensorflow as tf
ds = tf.data.TFRecordDataset(files).map(parse).shuffle(10000, seed=42, reshuffle_each_iteration=False).cache()
model.fit(ds.batch(64), epochs=5)
""",
        # the distributed iterator prefetches to the devices after the cache
        """import tensorflow as tf
ds = tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=8).prefetch(2).cache()
for batch in strategy.experimental_distribute_dataset(ds.shuffle(64).batch(8)):
    strategy.run(step, args=(batch,))
""",
        # the repeats and the cache sit under tests that exclude each other (`x in y` and `x not in y`)
        """import tensorflow as tf
def load(builder, model):
    ds = tf.data.TFRecordDataset(builder.files).map(parse, num_parallel_calls=8)
    if builder.is_training:
        ds = ds.repeat()
    if builder.name in DRD and not builder.is_training:
        ds = ds.repeat()
    if not builder.is_training and builder.name not in DRD:
        ds = ds.cache()
    model.fit(ds.batch(8).prefetch(2))
""",
        # a prefetch after the cache overlaps every epoch: the one before it is only redundant
        """import tensorflow as tf
ds = tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=8)
ds = ds.prefetch(64).cache().repeat()
ds = ds.batch(8).prefetch(2)
model.fit(ds, steps_per_epoch=10, epochs=3)
""",
        """import tensorflow as tf
ds = tf.data.Dataset.from_tensor_slices(x).map(decode).cache().shuffle(100).batch(8).prefetch(1)
""",
        # the file names shuffled, the records cached when asked to and shuffled again every epoch
        """import tensorflow as tf
ds = tf.data.Dataset.from_tensor_slices(files).shuffle(len(files)).interleave(tf.data.TFRecordDataset)
if cache:
    ds = ds.cache()
ds = ds.shuffle(10_000).batch(64)
""",
        # `repeat` on something that need not be a dataset (a numpy array has one)
        """import tensorflow as tf
def tile(values):
    return values.repeat(4).cache()
""",
        """import tensorflow as tf
ds = tf.data.TFRecordDataset(files).cache("/tmp/cache").map(augment_randomly)
""",
        # one batch of zeros, built by a finite repeat and cached whole: a benchmark's null input
        """import tensorflow as tf
def null_input_fn(batch_size):
    ds = tf.data.Dataset.from_tensors((tf.zeros([224, 224, 3]), tf.constant(0)))
    ds = ds.repeat(batch_size).batch(batch_size, drop_remainder=True)
    return ds.take(1).cache().repeat()
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        seen: set[int] = set()
        reshuffled = _reshuffled_caches(facts)
        for chain in self._chains(facts):
            cache = chain.last("cache")
            if cache is None or id(cache.call) in seen:
                continue
            seen.add(id(cache.call))
            cached = facts.call_fact(cache.call)
            if (cached is not None and evaluation_step(facts, cached)) or random_data(facts, chain):
                continue  # an evaluation pipeline, or random demo data: what it freezes, no one learns from
            index = next(i for i, op in enumerate(chain.ops) if op.call is cache.call)
            random_steps = [op for op in chain.ops[:index] if self._is_random(facts, op, chain)
                            and not (op.method == "shuffle" and (id(cache.call) in reshuffled or _fixed_order(op)))
                            and not facts.exclusive_branches(op.call, cache.call)
                            and not facts.separate_branches(op.call, cache.call)]
            endless = [i for i, op in enumerate(random_steps) if op.method == "repeat"]
            random_steps = random_steps[endless[-1]:] if endless else random_steps  # the cache never replays them
            if not random_steps:
                continue
            first = random_steps[0]
            only_prefetch = all(op.method == "prefetch" for op in random_steps)
            if only_prefetch and not _overlap_lost(facts, cache.call):
                continue  # a prefetch after the cache overlaps every epoch: the early one is only redundant
            call = facts.call_fact(cache.call)
            yield self.report(cache.call.func.attr, "prefetch" if only_prefetch else "default",
                              statement=call.statement if call else None, fix=self._fix(chain, first, cache),
                              construct=cache.call, step=first.method)

    @staticmethod
    def _chains(facts: ModuleFacts) -> Iterator[DatasetChain]:
        """Pipelines ending in `cache()`; also on a dataset the code does not show (a parameter, another
        module's), when a method only `tf.data` has says it is one (as `training_chains` decides)."""
        for call in facts.method_calls("cache"):
            chain = facts.dataset_chain(call.node, call.scope, call.order + 1, any_source=True)
            if chain is not None and (chain.source or DATASET_ONLY_METHODS.intersection(chain.methods())):
                yield chain

    @staticmethod
    def _is_random(facts: ModuleFacts, op: DatasetOp, chain: DatasetChain) -> bool:
        if op.method == "repeat":
            return _endless(op)
        if op.method in _ALWAYS_RANDOM:
            return True
        if op.method != "map":
            return False
        mapped = facts.callables_of(call_arg(op.call, 0, "map_func"), chain.scope)
        return any(_RANDOM_OP.match(fn.owner.resolve(c.func) or "")  # type: ignore[union-attr]
                   for fn in facts.transitive_callees(mapped) for c in fn.calls)  # also in the helpers it calls

    @staticmethod
    def _fix(chain: DatasetChain, first: DatasetOp, cache: DatasetOp) -> Fix | None:
        """Rebuild a single-expression chain with `cache()` just before the first random step."""
        calls = [op.call for op in chain.ops]
        if not _single_expression(calls):
            return None
        order = [op for op in chain.ops if op.call is not cache.call]
        order.insert(order.index(first), cache)
        node: cst.BaseExpression = _base(chain.ops[0].call)
        for op in order:
            node = op.call.with_changes(func=op.call.func.with_changes(value=node), lpar=[], rpar=[])
        # Parentheses around the whole chain stay around the whole chain.
        node = node.with_changes(lpar=calls[-1].lpar, rpar=calls[-1].rpar)
        return Fix(calls[-1], node, "move cache() before the first random step", safe=False)


_SHUFFLES_AS_APPLIED = ("data.experimental.shuffle_and_repeat",)


def _reshuffled_caches(facts: ModuleFacts) -> set[int]:
    """The `cache()` calls (by id) that a later `shuffle` in the flow reads (or `apply(shuffle_and_repeat(n))`):
    the order a shuffle before such a cache froze is shuffled again every epoch (`if cache: ds = ds.cache()`
    ... `ds = ds.shuffle(n)`)."""
    found: set[int] = set()
    for call in facts.method_calls("shuffle", "apply"):
        applied = call_arg(call.node, 0, "transformation_func") if call.attr == "apply" else None
        if call.attr == "apply" and not (isinstance(applied, cst.Call) and (facts.resolve(applied.func) or "").endswith(
                _SHUFFLES_AS_APPLIED)):
            continue
        chain = facts.dataset_chain(call.node, call.scope, call.order + 1, any_source=True)
        for pipeline in (chain, *chain.alternatives) if chain is not None else ():
            found.update(id(op.call) for op in pipeline.ops if op.method == "cache")  # the chain ends in this shuffle
    return found


def _base(call: cst.Call) -> cst.BaseExpression:
    return call.func.value  # type: ignore[attr-defined]


def _single_expression(calls: list[cst.Call]) -> bool:
    """Whether each call is the receiver of the next (the chain is one expression, not split by assignments)."""
    return all(_base(outer) is inner for inner, outer in zip(calls, calls[1:]))


def _overlap_lost(facts: ModuleFacts, cache: cst.Call) -> bool:
    """Whether a training pipeline the module shows holds `cache` and prefetches nowhere after it: neither
    itself nor through a distributed iterator (which prefetches to the devices). Unknown: False."""
    lost = False
    for chain, use in training_chains(facts):
        calls = [op.call for op in chain.ops]
        if any(c is cache for c in calls):
            index = next(i for i, c in enumerate(calls) if c is cache)
            if use.distributed or any(op.method == "prefetch" for op in chain.ops[index + 1:]):
                return False
            lost = True
    return lost


def _endless(repeat: DatasetOp) -> bool:
    """Whether a `repeat` never ends: no count, or `None` or `-1` (`repeat(batch_size)` ends, and a cache after it
    completes its first pass)."""
    count = call_arg(repeat.call, 0, "count")
    if count is None or (isinstance(count, cst.Name) and count.value == "None"):
        return True
    return isinstance(count, cst.UnaryOperation) and isinstance(count.operator, cst.Minus) \
        and isinstance(count.expression, cst.Integer) and count.expression.value == "1"


def _fixed_order(shuffle: DatasetOp) -> bool:
    """`shuffle(n, reshuffle_each_iteration=False)`: one order for every epoch, which a cache keeps as it is."""
    given = call_arg(shuffle.call, 2, "reshuffle_each_iteration")
    return isinstance(given, cst.Name) and given.value == "False"

