from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.multiworker import calls_any, multi_worker_mirrored
from tfdoctor.lint.names import dotted
from tfdoctor.lint.rule import Context, Rule



class ShardingOff(Rule):
    """
    ## What it does
    In a module that creates a `MultiWorkerMirroredStrategy` (or TF 1's `CollectiveAllReduceStrategy`), finds
    `auto_shard_policy = AutoShardPolicy.OFF` (or TF 2.0's `experimental_distribute.auto_shard = False`) when
    the module never shards by hand: no `shard(...)` call and no use of the input context's
    `input_pipeline_id`. On one host (`MirroredStrategy`) turning sharding off is harmless and not flagged.

    ## Why it is bad
    With sharding off, every worker iterates over the whole dataset in the same order (unless each shuffles
    differently). The global batch holds the same examples N times: N workers do the work of one, and the
    gradients of each step come from 1/N of the data you meant.

    ## Example
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF  # TFD502
    ds = make_dataset().with_options(options)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    def dataset_fn(context):
        ds = make_dataset()
        return ds.shard(context.num_input_pipelines, context.input_pipeline_id)
    dist = strategy.distribute_datasets_from_function(dataset_fn)
    ```
    """

    code = "TFD502"
    name = "sharding-off"
    severity = Severity.ERROR
    summary = "Multi-worker: `AutoShardPolicy.OFF` with no manual `shard(...)` (every worker trains on the same data)."
    MESSAGES = {"default": "sharding is turned off and nothing calls `shard(...)`, so every worker trains on the same examples"}
    triggers = ("AutoShardPolicy", "auto_shard")
    INVALID = (
        """import tensorflow as tf
from tensorflow.data.experimental import AutoShardPolicy
strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
opts = tf.data.Options()
opts.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF  # TFD502
""",
        """import tensorflow as tf
strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
options = tf.data.Options()
options.experimental_distribute.auto_shard = False  # TFD502
""",
    )
    VALID = (
        # sharded by hand
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
ds = tf.data.TFRecordDataset(files).shard(num_workers, worker_index).with_options(options)
""",
        # one host
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if (not multi_worker_mirrored(facts) or calls_any(facts, "shard")
                or any("input_pipeline_id" in line for line in facts.source_lines)):
            return
        for assign in facts.assigns:
            if assign.operator != "=":
                continue
            value = dotted(assign.value) or ""
            policy_off = value.endswith("AutoShardPolicy.OFF")
            auto_shard_false = (any(t.endswith(".auto_shard") for t in assign.targets)
                                and isinstance(assign.value, cst.Name) and assign.value.value == "False")
            if policy_off or auto_shard_false:
                yield self.report(assign.value, statement=assign.statement)
