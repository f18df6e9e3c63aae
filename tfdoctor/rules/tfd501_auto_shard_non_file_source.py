from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.dataflow import multi_worker_mirrored, slices_of_memory, training_chains
from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule

_IN_MEMORY_SOURCES = frozenset({"from_tensor_slices", "from_tensors", "from_generator", "range"})
# Ops after which a file reader may appear (FILE sharding can then work), or that set the policy or shard.
_LEAVES_IT_OPEN = frozenset({"interleave", "flat_map", "parallel_interleave", "with_options", "shard", "apply"})


class AutoShardNonFileSource(Rule):
    """
    ## What it does
    In a module that creates a `MultiWorkerMirroredStrategy`, finds a training pipeline whose source is
    in memory (`from_tensor_slices`, `from_tensors`, `from_generator`, `range`), given to `model.fit` or
    `strategy.experimental_distribute_dataset` with the default `AutoShardPolicy.AUTO`. A pipeline that
    shards, sets options (`with_options`) or interleaves (a file reader may follow) is left alone; options
    set but given only to another dataset do not count. `distribute_datasets_from_function` is never
    auto-sharded. Nor is a pipeline that only slices, shuffles and batches arrays already in memory (no `map`,
    `interleave` or `filter`): every worker holds the arrays anyway, and going through N times their slices
    costs next to nothing beside a step.

    When sharding is turned off instead (`AutoShardPolicy.OFF`), TFD502 reports it and this rule is silent.

    ## Why it is bad
    `AUTO` looks for file readers to shard by file. An in-memory source has none, so tf.data falls back to
    DATA sharding: every worker produces every element, then keeps each N-th one. Each worker does N times
    the input work: every `map` runs on every element on every worker (and a Python `from_generator` runs in
    full on every host); the log only says "falling back to DATA".

    ## Example
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    ds = tf.data.Dataset.from_tensor_slices(paths).map(load_image).batch(64)  # TFD501
    dist = strategy.experimental_distribute_dataset(ds)
    ```

    ## Use instead
    Shard the source yourself, so that each worker builds only its part, or build the pipeline per worker
    with `distribute_datasets_from_function`. Setting `AutoShardPolicy.DATA` is not a fix: it keeps the same
    cost and only silences the log. `AutoShardPolicy.OFF` is right only for a feed that is already split per
    worker (each worker's generator yields its own part).
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    def dataset_fn(context):
        ds = tf.data.Dataset.from_tensor_slices(paths)
        ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
        return ds.map(load_image).batch(context.get_per_replica_batch_size(64))
    dist = strategy.distribute_datasets_from_function(dataset_fn)
    ```
    """

    code = "TFD501"
    name = "auto-shard-non-file-source"
    severity = Severity.WARNING
    summary = "Multi-worker: an in-memory dataset auto-sharded with `AUTO` falls back to DATA (every worker builds it all)."
    MESSAGES = {"default": "every worker builds this whole `{source}` dataset to keep 1/N of it; shard the source or "
                           "use `distribute_datasets_from_function`"}
    triggers = ("MultiWorkerMirroredStrategy", "CollectiveAllReduceStrategy")
    INVALID = (
        """import tensorflow as tf
strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = build_and_compile_model()
train = tf.data.Dataset.from_generator(gen, output_types=(tf.float32, tf.int64))  # TFD501
train = train.batch(64)
model.fit(train, epochs=3, steps_per_epoch=70)
""",
        """import tensorflow as tf
def main():
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    ds = tf.data.Dataset.range(1000).map(make_example).batch(32)  # TFD501
    model.fit(ds)
""",
        # options made, but given to a dataset that never reaches training
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
ds = tf.data.Dataset.from_tensor_slices((x, y)).map(augment).batch(64)  # TFD501
model.fit(ds)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
unused = ds.with_options(options)
""",
    )
    VALID = (
        # a policy chosen on purpose (DATA keeps the cost; the choice is the user's)
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).with_options(options)
model.fit(ds)
""",
        # file names interleaved into a reader: FILE sharding works
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
ds = tf.data.Dataset.from_tensor_slices(files).interleave(tf.data.TFRecordDataset).batch(64)
model.fit(ds)
""",
        # arrays in memory, only shuffled and batched: each worker's extra work is slicing them
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(60000).batch(64)
model.fit(ds)
""",
        # one host: MirroredStrategy does not shard across workers
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
model.fit(ds)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if not multi_worker_mirrored(facts):
            return
        seen: set[int] = set()
        for chain, use in training_chains(facts):
            source = chain.source.split(".")[-1]
            if (use.via not in ("fit", "distribute") or source not in _IN_MEMORY_SOURCES
                    or _LEAVES_IT_OPEN.intersection(chain.methods()) or slices_of_memory(chain.source, chain.ops)
                    or id(chain.source_call) in seen):
                continue
            seen.add(id(chain.source_call))
            placed = chain.place(chain.source_call, None)  # in another module: at the call that brings it in
            if placed is None:
                continue
            node, evidence = placed
            call = facts.call_fact(node)
            yield self.report(node, statement=call.statement if call else None, evidence=evidence, source=source)
