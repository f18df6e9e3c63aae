from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import definitions
from tfdoctor.lint.facts import DISTRIBUTE_DATASET_METHODS, CallFact, ModuleFacts, Scope
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted
from tfdoctor.lint.rule import Context, Rule



class PsDatasetNotPerWorker(Rule):
    """
    ## What it does
    Finds `coordinator.schedule(fn, args=...)` on a `ClusterCoordinator` whose arguments, or the iterators
    the scheduled function reads from the enclosing module, come from a plain `tf.data.Dataset` or a
    strategy-distributed dataset instead of `coordinator.create_per_worker_dataset(...)`.

    ## Why it is bad
    `schedule` runs the function on whichever worker is free. A dataset made on the coordinator lives on
    the coordinator: every scheduled step pulls its batch across the network from one host, or fails to
    place the iterator on the worker. `create_per_worker_dataset` builds one copy of the pipeline on each
    worker and gives `schedule` the per-worker iterator it needs.

    ## Example
    ```python
    import tensorflow as tf
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    dataset = tf.data.Dataset.from_tensor_slices(x).batch(64).repeat()
    iterator = iter(dataset)
    coordinator.schedule(train_step, args=(iterator,))  # TFD505
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    def dataset_fn():
        return tf.data.Dataset.from_tensor_slices(x).batch(64).repeat()
    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    coordinator.schedule(train_step, args=(iterator,))
    ```
    """

    code = "TFD505"
    name = "ps-dataset-not-per-worker"
    severity = Severity.ERROR
    summary = "`ClusterCoordinator.schedule` gets a dataset not made with `create_per_worker_dataset`."
    MESSAGES = {"default": "this scheduled function reads {what}, not one made by `create_per_worker_dataset`"}
    triggers = ("ClusterCoordinator",)
    INVALID = (
        """import tensorflow as tf
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
dist = strategy.experimental_distribute_dataset(make_dataset())
@tf.function
def step(iterator):
    return strategy.run(replica_fn, args=(next(iterator),))
for _ in range(10):
    coordinator.schedule(step, args=(iter(dist),))  # TFD505
""",
        # the scheduled function reads a module-level iterator
        """import tensorflow as tf
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
train_iter = iter(tf.data.Dataset.range(100).batch(4))
@tf.function
def step():
    return strategy.run(replica_fn, args=(next(train_iter),))
coordinator.schedule(step)  # TFD505
""",
    )
    VALID = (
        """import tensorflow as tf
coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
per_worker = coordinator.create_per_worker_dataset(dataset_fn)
per_worker_iterator = iter(per_worker)
coordinator.schedule(step, args=(per_worker_iterator,))
""",
        # arguments the module cannot trace
        """import tensorflow as tf
def run(coordinator, iterator):
    coordinator.schedule(step, args=(iterator,))
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        coordinators = {t for a in facts.assigns if self._is_coordinator(facts, a.value) for t in a.targets}
        for call in facts.method_calls("schedule"):
            if dotted(call.receiver) not in coordinators:
                continue
            what = self._first_plain_dataset(facts, call)
            if what is not None:
                yield self.report(call, what=what)

    @staticmethod
    def _is_coordinator(facts: ModuleFacts, value: cst.BaseExpression) -> bool:
        return isinstance(value, cst.Call) and (facts.resolve(value.func) or "").endswith("coordinator.ClusterCoordinator")

    def _first_plain_dataset(self, facts: ModuleFacts, schedule: CallFact) -> str | None:
        args = call_arg(schedule.node, 1, "args")
        inputs: list[tuple[cst.BaseExpression, Scope, int]] = []
        if isinstance(args, (cst.Tuple, cst.List)):
            inputs += [(e.value, schedule.scope, schedule.order) for e in args.elements]
        for function in facts.callables_of(call_arg(schedule.node, 0, "fn"), schedule.scope):
            for call in function.calls:  # `next(name)` / `iter(name)` on a name of an enclosing scope
                name = dotted(call_arg(call.node, 0, None)) if call.func in ("next", "iter") else None
                if name is not None and name not in function.params and not function.assignments_of(name):
                    inputs.append((call.node.args[0].value, function.parent or function, schedule.order))
        for expr, scope, before in inputs:
            what = self._plain_dataset(facts, expr, scope, before, 0)
            if what is not None:
                return what
        return None

    def _plain_dataset(self, facts: ModuleFacts, expr: cst.BaseExpression, scope: Scope, before: int,
                       depth: int) -> str | None:
        if depth > 4:
            return None
        if isinstance(expr, cst.Call):
            if expr.func is not None and dotted(expr.func) == "iter" and expr.args:
                return self._plain_dataset(facts, expr.args[0].value, scope, before, depth + 1)
            if isinstance(expr.func, cst.Attribute):
                if expr.func.attr.value == "create_per_worker_dataset":
                    return None
                if expr.func.attr.value in DISTRIBUTE_DATASET_METHODS:
                    return "a dataset distributed on the coordinator"
        if facts.dataset_chain(expr, scope, before) is not None:
            return "a `tf.data.Dataset` made on the coordinator"
        name = dotted(expr)
        if name is None:
            return None
        found = definitions(facts, name, scope, before)
        if not found or found[-1].operator != "=":
            return None
        return self._plain_dataset(facts, found[-1].value, found[-1].scope, found[-1].order, depth + 1)
