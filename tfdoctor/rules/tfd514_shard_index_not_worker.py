from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import (
    calls_any, derived_names, expression_names, horovod_init, horovod_member, multi_worker_mirrored, parameter_server,
)
from tfdoctor.lint.facts import CallFact, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, literal_int
from tfdoctor.lint.rule import Context, Rule

# What a shard count split by worker is made from (the number of workers or input pipelines, Horovod's size).
_WORKER_COUNT = re.compile(r"num_workers?$|^n_?workers$|^workers?_num$|^worker_num$|num_input_pipelines|world_size|"
                           r"^workers?$|num_hosts|num_tasks|num_processes|^hvd\.size$|^hvd\.local_size$", re.IGNORECASE)
_TASK_ID = re.compile(r"task_id|task_index|task_idx|worker_index|worker_id|^index$", re.IGNORECASE)


class ShardIndexNotWorker(Rule):
    """
    ## What it does
    Finds `dataset.shard(count, index)` where `count` is the number of workers (or input pipelines, or
    `hvd.size()`) and `index` is the same on several workers, as the code shows it:
    - an integer constant (`shard(num_workers, 0)`), or a name only ever bound to one;
    - Horovod's `hvd.local_rank()`, which starts again at 0 on every host;
    - under `ParameterServerStrategy` with a `ClusterCoordinator`, a task id or task index (the
      coordinator's own, read when it builds the dataset function that every worker then runs).

    Under `ParameterServerStrategy` the input context gives every worker `num_input_pipelines=1` and
    `input_pipeline_id=0`, so a count from it shards nothing there and is not reported.

    An index read from anything else (`input_context.input_pipeline_id`, `hvd.rank()`, a task index of a
    program that each worker runs itself) is left alone, and so is a count that is not a number of workers
    (`shard(5, 0)` keeps one fifth, for a held-out split).

    ## Why it is bad
    `shard(n, i)` keeps every n-th element starting at `i`. With the same `i` on several workers, they all
    read the same 1/n of the data: the rest is never trained on, and the gradients averaged across
    workers come from copies of the same examples. Use `hvd.rank()` under Horovod and the input context's
    `input_pipeline_id` under `MultiWorkerMirroredStrategy`; under `ParameterServerStrategy`, whose workers
    run the coordinator's dataset function, shuffle on each worker instead (or use the tf.data service).

    ## Example
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    ds = tf.data.TFRecordDataset(files).shard(hvd.size(), hvd.local_rank())  # TFD514
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd
    hvd.init()
    ds = tf.data.TFRecordDataset(files).shard(hvd.size(), hvd.rank())
    ```
    """

    code = "TFD514"
    name = "shard-index-not-worker"
    severity = Severity.ERROR
    summary = "Multi-worker: `shard(workers, index)` with an index that is the same on several workers."
    MESSAGES = {
        "constant": "`shard` takes the index `{index}` on every worker, so every worker reads the same shard",
        "local": "`shard` takes `hvd.local_rank()`, which repeats on every host, so ranks on different hosts read the "
                 "same shard; use `hvd.rank()`",
        "coordinator": "`shard` takes the coordinator's `{index}`, so every worker reads the same shard",
    }
    triggers = ("shard",)
    INVALID = (
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
num_workers = len(tf_config["cluster"]["worker"])
ds = tf.data.TFRecordDataset(files).shard(num_workers, 0)  # TFD514
model.fit(ds.batch(64))
""",
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
local_rank = hvd.local_rank()
ds = tf.data.TFRecordDataset(files)
ds = ds.shard(hvd.size(), local_rank)  # TFD514
""",
        """import tensorflow as tf
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
NUM_WORKERS = len(resolver.cluster_spec().as_dict()["worker"])
def dataset_fn():
    ds = tf.data.TFRecordDataset(files)
    return ds.shard(NUM_WORKERS, resolver.task_id).batch(64)  # TFD514
per_worker = coordinator.create_per_worker_dataset(dataset_fn)
""",
    )
    VALID = (
        # the input context's pipeline id
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
def dataset_fn(context):
    ds = tf.data.TFRecordDataset(files)
    return ds.shard(context.num_input_pipelines, context.input_pipeline_id)
dist = strategy.distribute_datasets_from_function(dataset_fn)
""",
        # a held-out fifth, not a split by worker
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
validation = tf.data.TFRecordDataset(files).shard(5, 0)
""",
        # each worker runs this program with its own task index
        """import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
task_index = tf_config["task"]["index"]
ds = tf.data.TFRecordDataset(files).shard(num_workers, task_index)
""",
        # Horovod's global rank
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
ds = tf.data.TFRecordDataset(files).shard(hvd.size(), hvd.rank())
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        distributed = bool(multi_worker_mirrored(facts)) or bool(horovod_init(facts)) or bool(parameter_server(facts))
        if not distributed:
            return
        coordinated = bool(parameter_server(facts)) and calls_any(
            facts, "create_per_worker_dataset", "ClusterCoordinator")
        for call in facts.method_calls("shard"):
            count, index = call_arg(call.node, 0, "num_shards"), call_arg(call.node, 1, "index")
            if count is None or index is None or any(a.star for a in call.node.args):
                continue
            made_from = derived_names(facts, expression_names(count), call.scope)
            if not any(_WORKER_COUNT.search(n) for n in made_from) or (
                    coordinated and any("num_input_pipelines" in n for n in made_from)):
                continue
            found = _same_index(facts, call, index, coordinated)
            if found is not None:
                template, shown = found
                yield self.report(call, template, index=shown)


def _same_index(facts: ModuleFacts, call: CallFact, index: cst.BaseExpression,
                coordinated: bool) -> tuple[str, str] | None:
    """Why a shard index is the same on several workers (a template and what to show), or None."""
    origins = facts.values_of(index, call.scope, call.order)
    values = [literal_int(o.expr) if o.kind == "value" else None for o in origins]
    if origins and all(v is not None for v in values) and len(set(values)) == 1:
        return "constant", str(values[0])
    if origins and all(o.kind == "value" and isinstance(o.expr, cst.Call)
                       and horovod_member(facts, o.expr.func) == "local_rank" for o in origins):
        return "local", ""
    if coordinated:
        names = derived_names(facts, expression_names(index, strings=False), call.scope, strings=False)
        task = next((n for n in sorted(names) if _TASK_ID.search(n.split(".")[-1])), None)
        if task is not None:
            return "coordinator", task.split(".")[-1]
    return None
