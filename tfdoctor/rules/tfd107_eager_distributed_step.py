from __future__ import annotations

import builtins
from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import applies_gradients, evaluation_name, graph_mode, in_test_code, runs_once
from tfdoctor.lint.facts import CallFact, ModuleFacts, Scope
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import dotted
from tfdoctor.lint.rule import Context, Rule


_SESSIONS = (".Session", ".InteractiveSession", ".MonitoredTrainingSession", ".MonitoredSession",
             ".SingularMonitoredSession")


class EagerDistributedStep(Rule):
    """
    ## What it does
    Finds `strategy.run` called from Python code that is not a `tf.function`: a function neither decorated
    with nor wrapped by `tf.function` (and not only called from one) that the module calls or that loops
    over steps itself, or module-level code. A replica function that is itself a `tf.function` (decorated,
    or wrapped as `self.step = tf.function(self.step)`) is not flagged: each replica then runs a graph.
    Nor is code that does not train: test code (a `test*` function of a test module, a `TestCase` method), an
    evaluation step (a function named for validation or evaluation, or a metric's `update_state`, whose replica
    functions apply no gradients as far as the code shows, or come from its caller), a replica function that is a
    metric's own method (`strategy.run(metrics["loss"].update_state, args=(loss,))`),
    or a replica function that returns what it is given (`lambda x: x`, to see what each replica holds),
    or one `strategy.run` outside any loop whose replica function applies no gradients (a look at one
    forward value or gradient, or a Python builtin such as `print`), or one before or after its function's own loop whose function applies none
    as far as the code shows (`strategy.run(hook.profiling_end)` once training is done). Code that builds a
    TF 1 graph (in `with tf.Graph().as_default():`, or in the graph of `get_default_graph()` or Keras'
    `backend.get_graph()`, or in the `else` of `if context.executing_eagerly():`, or only called from there)
    runs nothing eagerly either. A
    replica function given as a parameter of a function the module never calls (a benchmark harness's
    `run_test(target_call, ...)`) may be a `tf.function`: the rule cannot tell, and stays silent; so may a
    `train_step` the module never calls, of a class derived from one the project does not define (Keras'
    `Model`, Orbit's `StandardTrainer`, which call it inside a `tf.function` by default); so may a function
    whose decorator comes from a project module out of sight (`from pkg.train_util import mode_decor`, where
    `pkg` is not in the project), while one bound to `tf.function` in any branch of a module in sight
    (`mode_decor = tf.function if graph else do_nothing`) is taken for one. A program
    that turns eager execution off (`tf.compat.v1.disable_eager_execution()`, here or in a project module it
    imports), or a module that opens a TF 1 session (`tf.compat.v1.Session()`, which runs only graphs), builds
    graphs only; and a `run()` with no function to run is another kind of strategy's.

    The rule is off by default: in seven blind reviews of findings on real repositories (19 to 25), 1 of its
    20 findings was judged worth reading; the others were in branches no script takes, on purpose (layers timed
    with `time.time()`), or a metric updated once per log. `tfdoctor profile` measures the host's share of the
    step and checks this rule on the script it runs, so a host-bound verdict cites it.

    ## Why it is bad
    Outside a `tf.function`, every step dispatches each replica's operations one by one from Python, in
    the order Python visits them. The replicas do not overlap and the host becomes the bottleneck: users
    report steps 10 to 25 times slower than the same step in a `tf.function`.

    ## Example
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MirroredStrategy()

    def distributed_step(batch):
        return strategy.run(replica_step, args=(batch,))  # TFD107

    for batch in dist_ds:
        distributed_step(batch)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MirroredStrategy()

    @tf.function
    def distributed_step(batch):
        return strategy.run(replica_step, args=(batch,))

    for batch in dist_ds:
        distributed_step(batch)
    ```
    """

    code = "TFD107"
    name = "eager-distributed-step"
    severity = Severity.WARNING
    OPT_IN = True  # reviews 19-25 judged 1 of 20 findings on real code useful; `tfdoctor profile` measures the host
    summary = "`strategy.run` is called eagerly, outside any `tf.function` (often 10-25x slower steps)."
    MESSAGES = {
        "function": ("`{call}` is called eagerly from `{function}`, which is not a `tf.function` (nor only called from "
                     "one)"),
        "module": "`{call}` is called eagerly from module-level code, outside any `tf.function`",
    }
    triggers = ("run", "call_for_each_replica")
    INVALID = (
        # a method of a trainer, looping itself
        """import tensorflow as tf
class Trainer:
    def __init__(self, strategy):
        self.strategy = strategy
    def fit(self, dist_ds):
        for batch in dist_ds:
            self.strategy.run(self.train_step, args=(batch,))  # TFD107
""",
        # module-level loop
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
for batch in dist_ds:
    strategy.run(step_fn, args=(batch,))  # TFD107
""",
        # called from a tf.function once but also eagerly from the loop
        """from tensorflow import distribute, function
strategy = distribute.MirroredStrategy()
def dist_step(b):
    return strategy.experimental_run_v2(step_fn, args=(b,))  # TFD107
@function
def warmup(b):
    return dist_step(b)
for b in dist_ds:
    dist_step(b)
""",
        # a decorator of the module's own, which is not a tf.function
        """import functools
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def timed(fn):
    @functools.wraps(fn)
    def inner(*args):
        return fn(*args)
    return inner
@timed
def dist_step(b):
    return strategy.run(step_fn, args=(b,))  # TFD107
for b in dist_ds:
    dist_step(b)
""",
    )
    VALID = (
        # TensorFlow 1.15 (a pin, or `# tfdoctor: target-tensorflow=1.15`): graph mode is the default
        """# tfdoctor: target-tensorflow=1.15
import tensorflow.compat.v1 as tf
strategy = tf.distribute.experimental.TPUStrategy(resolver)
def distributed(fn, args):
    return strategy.experimental_run_v2(fn, args=args)
for _ in range(10):
    outputs = distributed(sample_fn, (noise,))
""",
        # a SavedModel's signature is a concrete function: each replica runs its graph
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    inference = tf.saved_model.load(path).signatures["serving_default"]
for batch in strategy.experimental_distribute_dataset(dataset):
    outputs = strategy.run(inference, args=(batch,))
""",
        # eager execution turned off: the loop builds a TF 1 graph
        """import tensorflow as tf
tf.compat.v1.disable_eager_execution()
def train(strategy, batches):
    for images, labels in batches:
        strategy.run(step, args=(images, labels))
""",
        # replicas that only hand back what they hold: nothing computed, nothing trained
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
for x in strategy.experimental_distribute_dataset(dataset).take(4):
    print(strategy.run(lambda x: x, args=(x,)))
""",
        # a TF 1 session runs the step: the function built a graph once
        """import tensorflow.compat.v1 as tf
def train_step(inputs):
    return strategy.run(step_fn, args=(inputs,))
loss = train_step(next(iterator))
with tf.Session() as sess:
    for _ in range(1000):
        sess.run(loss)
""",
        # another kind of strategy (an architecture search's), run with no function
        """import tensorflow as tf
class Experiment:
    def start(self, steps):
        for _ in range(steps):
            self.strategy.run()
""",
        # the replica function is a parameter, given by callers in other modules: it may be a tf.function
        """import tensorflow as tf
def run_test(target_call, num_steps, strategy, iterator):
    for _ in range(num_steps):
        strategy.run(target_call, args=(next(iterator),))
""",
        # one look at a value on each replica, with a Python builtin as the replica function
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    v = tf.Variable(tf.zeros((2, 2)))
strategy.run(print, args=(v,))
""",
        # a metric that updates itself on every replica: it applies no gradients
        """import tensorflow as tf
class DiscriminatorLoss(tf.keras.metrics.Metric):
    def update_state(self, context):
        for real, fake in context.dataset:
            loss = context.loss(real, fake)
            self._strategy.run(updater(loss))
""",
        # a validation step left eager: it applies no gradients
        """import tensorflow as tf
def vali_step(batch):
    return model(batch, training=False)
def distributed_vali_step(batch):
    return strategy.run(vali_step, args=(batch,))
for batch in val_ds:
    distributed_vali_step(batch)
""",
        # TF 1 graph building: the replicas' ops go into the graph a session runs
        """import tensorflow.compat.v1 as tf
def train(strategy, input_fn):
    with tf.Graph().as_default() as g:
        features = input_fn()
        grads = strategy.extended.call_for_each_replica(tower_fn, args=(features,))
        with tf.train.MonitoredTrainingSession() as sess:
            while not sess.should_stop():
                sess.run(train_op)
""",
        # an evaluation loop whose replica function its caller hands in
        """import tensorflow as tf
def _evaluate_dataset(dataset, eval_step_fn, strategy):
    for images, labels in strategy.experimental_distribute_dataset(dataset):
        logits = strategy.run(eval_step_fn, args=(images, labels))
""",
        # Keras 2's graph-mode cloning: a model copy per replica, built into Keras' graph
        """from tf_keras import backend
def clone_model_on_replicas(model, strategy, mode):
    with backend.get_graph().as_default(), strategy.scope():
        replicas = strategy.extended.call_for_each_replica(clone_and_build, args=(model, mode))
    for step in range(steps):
        run_graph(replicas)
""",
        # Keras 2's graph-mode path: called only where eager execution is off
        """import tensorflow as tf
from tensorflow.python.eager import context
def _make_graph_execution_function(model, mode):
    with model._distribution_strategy.scope():
        outputs = model._distribution_strategy.extended.call_for_each_replica(_per_replica_function, args=(model,))
    return backend.function(outputs)
def _make_execution_function_with_cloning(model, mode):
    if context.executing_eagerly():
        return _make_eager_execution_function(model, mode)
    else:
        return _make_graph_execution_function(model, mode)
def fit_loop(model, mode, steps):
    for step in range(steps):
        _make_execution_function_with_cloning(model, mode)(inputs)
""",
        # once after the training loop, to stop a profiler: not a step
        """import tensorflow as tf
def train(strategy, dataset, hook):
    for batch in dataset:
        train_step(batch)
    strategy.run(hook.profiling_end)
""",
        # one forward pass through the replicas, to look at its output
        """import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def forward(x):
    return model(x, training=False)
print(strategy.run(forward, args=(x,)))
""",
        # a test comparing the outputs of the replicas
        """import tensorflow as tf
class ReplicaTest(tf.test.TestCase):
    def test_replicas_agree(self):
        strategy = tf.distribute.MirroredStrategy()
        for batch in dataset:
            outputs = strategy.run(model, args=(batch,))
            self.assertAllClose(outputs.values[0], outputs.values[1])
""",
        # each replica updates a metric, once per logging round: no training step runs eagerly
        """import tensorflow as tf
def train(strategy, dist_ds, metrics, rounds):
    for _ in range(rounds):
        loss = train_steps(iter(dist_ds), tf.constant(100))
        strategy.run(metrics["loss"].update_state, args=(loss,))
""",
        # an Orbit trainer's `train_step`: Orbit calls it inside a tf.function
        """import orbit
import tensorflow as tf
class TaskTrainer(orbit.StandardTrainer):
    def train_step(self, iterators):
        for name, step in self.steps.items():
            self.strategy.run(step, args=(next(iterators[name]),))
""",
        # wrapped by assignment
        """import tensorflow as tf
def dist_step(b):
    return strategy.run(step_fn, args=(b,))
dist_step = tf.function(dist_step)
for b in dist_ds:
    dist_step(b)
""",
        # decorated with arguments, the loop inside the tf.function
        """import tensorflow as tf
@tf.function(jit_compile=False)
def train_epoch(it, steps):
    for _ in tf.range(steps):
        strategy.run(step_fn, args=(next(it),))
""",
        # only called from a tf.function
        """import tensorflow as tf
def dist_step(b):
    return strategy.run(step_fn, args=(b,))
@tf.function
def train(b):
    return dist_step(b)
for b in dist_ds:
    train(b)
""",
        # a tf.function wrapping a method in __init__
        """import tensorflow as tf
class Trainer:
    def __init__(self, strategy):
        self.strategy = strategy
        self.step = tf.function(self._step)
    def _step(self, b):
        return self.strategy.run(self.replica, args=(b,))
    def fit(self, ds):
        for b in ds:
            self.step(b)
""",
        # a decorator bound to tf.function in one branch of the configuration
        """import tensorflow as tf
import config
mode_decor = tf.function if config.MODE == "graph" else (lambda fn: fn)
strategy = tf.distribute.MirroredStrategy()
@mode_decor
def dist_step(b):
    return strategy.run(step_fn, args=(b,))
for b in dist_ds:
    dist_step(b)
""",
        # a decorator from a project module out of sight: it may make a tf.function
        """import tensorflow as tf
from mypkg.train_util import mode_decor
strategy = tf.distribute.MirroredStrategy()
class Trainer:
    @mode_decor
    def run_batch(self, b):
        return strategy.run(self.step, args=(b,))
    def fit(self, ds):
        for b in ds:
            self.run_batch(b)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if facts.run_calls and (graph_mode(facts) or context.targets.tensorflow.below(2) or _runs_a_session(facts)):
            return  # eager execution is off (or TF 1's default): Python builds a graph, and nothing runs eagerly
        for run in facts.run_calls:
            scope = run.scope
            if (in_test_code(facts, scope) or _one_look(facts, run) or _evaluates(facts, run)
                    or _hands_back(facts, run) or _updates_a_metric(facts, run)):
                continue  # not training: a test, a look at what the replicas hold or compute, or evaluation
            if _framework_step(facts, scope):
                continue  # Keras or Orbit calls it, in a `tf.function` unless told otherwise
            if facts.building_graph(run):
                continue  # inside `with tf.Graph().as_default():`, it builds a TF 1 graph
            replicas = facts.callables_of(facts.replica_fn_expr(run), scope, before=run.order)
            if replicas and all(facts.runs_in_graph(r) for r in replicas if r.owner is facts) and all(
                    r.owner is facts for r in replicas):
                continue  # the replica function is itself a tf.function: each replica runs a graph
            if _saved_signature(facts, run):
                continue  # a SavedModel's signature is a concrete function: a graph
            if scope.is_function:
                if facts.runs_in_graph(scope) or facts.decorated_out_of_sight(scope):
                    continue  # a tf.function, or maybe one: its decorator comes from a module out of sight
                callers = facts.callers_of(scope)
                eager_callers = [c for c in callers if not facts.runs_in_graph(c.scope)]
                if not eager_callers and not run.loops:
                    continue  # never called here, and not a loop itself: cannot decide
                if not callers and dotted(facts.replica_fn_expr(run)) in scope.value_params():
                    continue  # the replica function comes from a caller not in sight: it may be a tf.function
                yield self.report(run, "function", call=run.func or run.attr, function=scope.name)
            else:
                yield self.report(run, "module", call=run.func or run.attr)


def _runs_a_session(facts: ModuleFacts) -> bool:
    """Whether the module opens a TF 1 session (`tf.compat.v1.Session()`, a monitored one): a session runs only
    graphs, so this program runs with eager execution off (TF 1's default, or turned off where it starts)."""
    return any((facts.resolve(c.func) or "").startswith("tensorflow.") and (facts.resolve(c.func) or "").endswith(
        _SESSIONS) for c in facts.calls)


def _saved_signature(facts: ModuleFacts, run: CallFact) -> bool:
    """Whether the replica function is a signature of a loaded SavedModel (`loaded.signatures[key]`), by every
    value it may hold."""
    origins = facts.values_of(facts.replica_fn_expr(run), run.scope, run.order)
    return bool(origins) and all(isinstance(o.expr, cst.Subscript) and isinstance(o.expr.value, cst.Attribute)
                                 and o.expr.value.attr.value == "signatures" for o in origins)


_METRIC_METHODS = frozenset({"update_state", "result", "reset_state", "reset_states"})  # a Keras metric's API


def _evaluates(facts: ModuleFacts, run: CallFact) -> bool:
    """A `strategy.run` in a function named for validation or evaluation (`distributed_vali_step`,
    `eval_step`, `_evaluate_dataset`), or in a metric's `update_state`, whose replica functions apply no
    gradients as far as the code shows (one handed in by a caller included: the name says what it runs)."""
    metric = run.scope.is_function and run.scope.name in _METRIC_METHODS
    if not (metric or run.scope.is_function and evaluation_name(run.scope.name)):
        return False
    replicas = facts.callables_of(facts.replica_fn_expr(run), run.scope, before=run.order)
    return not any(applies_gradients(facts, r) for r in replicas)


def _updates_a_metric(facts: ModuleFacts, run: CallFact) -> bool:
    """`strategy.run(metrics["loss"].update_state, args=(value,))`: each replica updates a metric, once per
    logging round; no training step runs eagerly."""
    replica = facts.replica_fn_expr(run)
    return isinstance(replica, cst.Attribute) and replica.attr.value in _METRIC_METHODS


_FRAMEWORK_STEPS = frozenset({"train_step", "test_step", "predict_step"})  # what Keras' `Model.fit` and Orbit call


def _framework_step(facts: ModuleFacts, scope: Scope) -> bool:
    """A `train_step` method that this module never calls, of a class derived (through project classes) from one
    the project does not define, such as Keras' `Model` or Orbit's `StandardTrainer`: the framework calls it,
    inside a `tf.function` unless told otherwise, and the rule cannot see which."""
    if not (scope.is_function and scope.class_name and scope.name in _FRAMEWORK_STEPS) or facts.callers_of(scope):
        return False
    return _derives_from_outside(facts, scope.class_name)


def _derives_from_outside(model: ModuleFacts, class_name: str, depth: int = 0) -> bool:
    """Whether a class has a base, or a base's base, that no project module defines (`object` aside)."""
    found = model.class_and_module(class_name)
    if found is None or depth > 4:
        return False
    class_fact, owner = found
    return any(base != "object" and (owner.class_and_module(base) is None
                                     or _derives_from_outside(owner, base, depth + 1)) for base in class_fact.bases)


def _one_look(facts: ModuleFacts, run: CallFact) -> bool:
    """One `strategy.run`, outside any loop, of replica functions the code shows, none of which applies
    gradients; or one before or after the loop of its own function (`strategy.run(hook.profiling_end)` once
    the training loop is done), of a function that applies no gradients as far as the code shows."""
    replica = facts.replica_fn_expr(run)
    replicas = facts.callables_of(replica, run.scope, before=run.order)
    if any(applies_gradients(facts, r) for r in replicas):
        return False
    beside_loop = not run.loops and any(loop.scope is run.scope for loop in facts.loops)
    return beside_loop or (runs_once(facts, run) and (bool(replicas) or _python_builtin(facts, replica, run)))


def _hands_back(facts: ModuleFacts, run: CallFact) -> bool:
    """A replica function that returns what it is given (`strategy.run(lambda x: x, args=(batch,))`, to see
    what each replica holds): it computes nothing, and trains nothing."""
    replica = facts.replica_fn_expr(run)
    if not isinstance(replica, cst.Lambda):
        return False
    given = {param.name.value for param in replica.params.params}
    body = replica.body.elements if isinstance(replica.body, cst.Tuple) else [replica.body]
    return all(isinstance(part, cst.Name) and part.value in given
               for part in (e.value if isinstance(e, cst.BaseElement) else e for e in body))


def _python_builtin(facts: ModuleFacts, replica: cst.BaseExpression | None, run: CallFact) -> bool:
    """`strategy.run(print, args=(v,))`: a Python builtin, which applies no gradients, as the replica function."""
    name = dotted(replica) if replica is not None else None
    return (name is not None and hasattr(builtins, name) and facts.resolve(name) is None
            and not facts.definitions(name, run.scope, run.order))
