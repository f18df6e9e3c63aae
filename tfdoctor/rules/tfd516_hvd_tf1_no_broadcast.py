from __future__ import annotations

from typing import Iterator

import libcst as cst

from tfdoctor.lint.dataflow import (
    broadcast_calls, broadcasts_otherwise, call_list, calls_any, horovod_calls, horovod_init, horovod_member,
    horovod_scope, runs_training_op, same_start_everywhere, wraps_horovod_optimizer,
)
from tfdoctor.lint.facts import CallFact, ModuleFacts, Scope
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, dotted
from tfdoctor.lint.rule import Context, Rule

# Training that runs hooks or callbacks the module may not show (Keras, sessions made elsewhere, Estimators).
_HOOKED = ("fit", "fit_generator", "train_on_batch", "MonitoredTrainingSession", "MonitoredSession", "train",
           "train_and_evaluate", "SingularMonitoredSession")
_SESSIONS = frozenset({"tensorflow.Session", "tensorflow.InteractiveSession"})
_ESTIMATORS = ("tensorflow.estimator.", "tensorflow.contrib.learn.", "tensorflow.contrib.tpu.", "tensorflow_estimator.")


class HvdTf1NoBroadcast(Rule):
    """
    ## What it does
    In a TF 1 Horovod program (one that calls `hvd.init()` and wraps an optimizer in `hvd.DistributedOptimizer`,
    itself or in a project module it imports, up to two imports away),
    finds a `tf.train.MonitoredTrainingSession`, an `Estimator.train` or a `tf.estimator.train_and_evaluate`
    (through its `TrainSpec`) whose hooks hold no `hvd.BroadcastGlobalVariablesHook(0)`, or, in a module that
    trains only through plain sessions (no Keras training, no monitored session, no Estimator), the first
    `session.run` of a training op in a loop, when the `tf.Session` is made in the module and given to no function
    but TensorFlow's; both when the module broadcasts no other way (no `hvd.broadcast_global_variables`,
    `hvd.broadcast_variables`, `hvd.broadcast` or Keras broadcast callback). A `BroadcastGlobalVariablesHook`
    made only in a branch that never runs with a `train` (`if do_train and do_eval:`, then `elif do_train:`)
    does not reach that `train`. A monitored session given a cluster's server (`master=server.target`) is
    parameter-server training, whose variables the workers share on the parameter servers: it needs no
    broadcast.
    Hooks that come from an unknown function, a parameter, another module or a library other than TensorFlow
    (its hook may broadcast) leave it open and the rule stays silent, as it does when every rank may start
    from the same weights anyway (a global seed that does not depend on the rank, or a checkpoint restored
    outside any `if`).

    ## Why it is bad
    Every rank initialises its variables with its own random values. The distributed optimizer averages the
    gradients, but without a broadcast from rank 0 at the start the ranks apply them to W different models,
    which drift apart instead of training one.

    ## Example
    ```python
    import tensorflow as tf
    import horovod.tensorflow as hvd
    hvd.init()
    train_op = hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.001 * hvd.size())).minimize(loss)
    hooks = [tf.train.StopAtStepHook(last_step=1000)]
    with tf.train.MonitoredTrainingSession(hooks=hooks) as session:  # TFD516
        while not session.should_stop():
            session.run(train_op)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    import horovod.tensorflow as hvd
    hvd.init()
    train_op = hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.001 * hvd.size())).minimize(loss)
    hooks = [hvd.BroadcastGlobalVariablesHook(0), tf.train.StopAtStepHook(last_step=1000)]
    with tf.train.MonitoredTrainingSession(hooks=hooks) as session:
        while not session.should_stop():
            session.run(train_op)
    ```
    """

    code = "TFD516"
    name = "hvd-tf1-no-broadcast"
    severity = Severity.ERROR
    summary = "Horovod TF 1: no `BroadcastGlobalVariablesHook(0)` in the hooks of `MonitoredTrainingSession` or `Estimator.train`."
    MESSAGES = {
        "default": "the hooks of this `{call}` hold no `hvd.BroadcastGlobalVariablesHook(0)`, so the ranks start from different weights",
        "session": "no `hvd.broadcast_global_variables(0)` is run before this training loop, so the ranks start from different weights",
    }
    triggers = ("horovod",)
    INVALID = (
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
opt = hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.001 * hvd.size()))
train_op = opt.minimize(loss, global_step=tf.train.get_or_create_global_step())
hooks = [tf.train.StopAtStepHook(last_step=1000 // hvd.size())]
with tf.train.MonitoredTrainingSession(hooks=hooks) as session:  # TFD516
    while not session.should_stop():
        session.run(train_op)
""",
        # an Estimator whose model_fn wraps the optimizer
        """import tensorflow as tf
import horovod.tensorflow as hvd
def model_fn(features, labels, mode):
    opt = hvd.DistributedOptimizer(tf.train.MomentumOptimizer(0.01 * hvd.size(), 0.9))
    loss = tf.losses.sparse_softmax_cross_entropy(labels, features)
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=opt.minimize(loss))
hvd.init()
classifier = tf.estimator.Estimator(model_fn=model_fn, model_dir="/tmp/model" if hvd.rank() == 0 else None)
logging = tf.train.LoggingTensorHook(tensors={"loss": "loss"}, every_n_iter=100)
classifier.train(input_fn=train_input_fn, steps=1000, hooks=[logging])  # TFD516
""",
        # a plain session: nothing runs the broadcast op
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
opt = hvd.DistributedOptimizer(tf.train.GradientDescentOptimizer(0.01 * hvd.size()))
train_op = opt.minimize(loss)
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for step in range(1000):
        sess.run(train_op, feed_dict={x: batches[step][0], y: batches[step][1]})  # TFD516
""",
        # the broadcast hook is made only on the train-and-evaluate path; training alone runs without it
        """import tensorflow as tf
import horovod.tensorflow as hvd
def model_fn(features, labels, mode):
    opt = hvd.DistributedOptimizer(tf.train.AdamOptimizer(1e-4))
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=opt.minimize(loss))
hvd.init()
estimator = tf.estimator.Estimator(model_fn=model_fn)
if FLAGS.do_train and FLAGS.do_eval:
    hooks = [hvd.BroadcastGlobalVariablesHook(0)]
    estimator.train(input_fn=train_input_fn, steps=1000, hooks=hooks)
elif FLAGS.do_train:
    estimator.train(input_fn=train_input_fn, max_steps=FLAGS.num_train_steps)  # TFD516
""",
    )
    VALID = (
        # Horovod on one path, a parameter-server cluster on the other: its variables live on the ps tasks
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
train_op = hvd.DistributedOptimizer(tf.train.MomentumOptimizer(0.1, 0.9)).minimize(loss)
if FLAGS.job_name is None:
    with tf.train.MonitoredTrainingSession(hooks=[hvd.BroadcastGlobalVariablesHook(0)]) as sess:
        sess.run(train_op)
else:
    with tf.train.MonitoredTrainingSession(master=server.target, is_chief=FLAGS.task_index == 0,
                                           hooks=[tf.train.StopAtStepHook(last_step=1000)]) as sess:
        sess.run(train_op)
""",
        # one broadcast hook, made before the branches and given to every `train`
        """import tensorflow as tf
import horovod.tensorflow as hvd
def model_fn(features, labels, mode):
    opt = hvd.DistributedOptimizer(tf.train.AdamOptimizer(1e-4))
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=opt.minimize(loss))
hvd.init()
estimator = tf.estimator.Estimator(model_fn=model_fn)
hooks = [hvd.BroadcastGlobalVariablesHook(0)]
if FLAGS.do_eval:
    estimator.train(input_fn=train_input_fn, steps=1000, hooks=hooks)
else:
    estimator.train(input_fn=train_input_fn, max_steps=FLAGS.num_train_steps, hooks=hooks)
""",
        # the broadcast hook, as Horovod's examples give it
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
opt = hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.001 * hvd.size()))
train_op = opt.minimize(loss)
hooks = [hvd.BroadcastGlobalVariablesHook(0), tf.train.StopAtStepHook(last_step=1000)]
with tf.train.MonitoredTrainingSession(hooks=hooks) as session:
    while not session.should_stop():
        session.run(train_op)
""",
        # the hooks come from a function of another module
        """import tensorflow as tf
import horovod.tensorflow as hvd
from .hooks import training_hooks
hvd.init()
train_op = hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.001)).minimize(loss)
with tf.train.MonitoredTrainingSession(hooks=training_hooks()) as session:
    session.run(train_op)
""",
        # broadcast by hand once the session starts
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
train_op = hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.001)).minimize(loss)
bcast = hvd.broadcast_global_variables(0)
with tf.Session() as session:
    session.run(tf.global_variables_initializer())
    session.run(bcast)
    classifier.train(input_fn=train_input_fn)
""",
        # the session goes through a helper of the project, which may broadcast
        """import tensorflow as tf
import horovod.tensorflow as hvd
from .utils import initialize
hvd.init()
train_op = hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.001)).minimize(loss)
with tf.Session() as sess:
    initialize(sess)
    for step in range(1000):
        sess.run(train_op)
""",
        # a hook of the project, which may broadcast
        """import tensorflow as tf
import horovod.tensorflow as hvd
from .hooks import SyncHook
hvd.init()
train_op = hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.001)).minimize(loss)
with tf.train.MonitoredTrainingSession(hooks=[SyncHook(), tf.train.StopAtStepHook(last_step=100)]) as session:
    session.run(train_op)
""",
        # the same graph seed on every rank: the variables start equal
        """import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
tf.set_random_seed(1234)
train_op = hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.001)).minimize(loss)
with tf.train.MonitoredTrainingSession(hooks=[tf.train.StopAtStepHook(last_step=100)]) as session:
    session.run(train_op)
""",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        if not horovod_init(facts) or not wraps_horovod_optimizer(facts):
            return
        if horovod_calls(facts, "BroadcastGlobalVariablesCallback"):
            return
        found = [(call, hooks) for call in facts.calls if (hooks := _hooks(facts, call)) is not None]
        broadcasting = broadcasts_otherwise(facts)
        if broadcasting:  # only a call that no broadcast can reach is still open
            found = [(call, hooks) for call, hooks in found if _out_of_reach(facts, call)]
            if not found:
                return
        loop = None if found or broadcasting or calls_any(facts, *_HOOKED) else _session_loop(facts)
        if not (found or loop) or same_start_everywhere(facts):
            return
        for call, hooks in found:
            if horovod_scope(facts, call.scope) and all(_plain_hook(facts, h, call.scope) for h in hooks):
                yield self.report(call, call=_name(facts, call))
        if loop is not None:
            yield self.report(loop, "session")


def _out_of_reach(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether every broadcast of the module is a `BroadcastGlobalVariablesHook` made in a branch that never
    runs with the training call (`if do_train and do_eval:` makes the hook, `elif do_train:` trains without it)."""
    return all(horovod_member(facts, broadcast.func) == "BroadcastGlobalVariablesHook"
               and facts.exclusive_branches(broadcast.node, call.node) for broadcast in broadcast_calls(facts))


def _session_loop(facts: ModuleFacts) -> CallFact | None:
    """The first `session.run` of a training op in a loop of the Horovod program, in a module that trains
    through plain sessions only, when the session is made here and given to no function but TensorFlow's
    (a helper of the project may broadcast through it)."""
    run = next((c for c in facts.calls if c.attr == "run" and c.loops and dotted(c.receiver) is not None
                and horovod_scope(facts, c.scope) and runs_training_op(facts, c)), None)
    if run is None or not _session_made_here(facts, run):
        return None
    name = dotted(run.receiver) or ""
    given = any(name in names and not (facts.resolve(c.func) or "").startswith("tensorflow.")
                for c in facts.calls for names in c.arg_names)
    return None if given else run


def _session_made_here(facts: ModuleFacts, run: CallFact) -> bool:
    """Whether the session a run is called on is a `tf.Session` made in this module (`with tf.Session() as
    sess`, or assigned)."""
    made = [item.item for fact in run.withs for item in fact.node.items
            if item.asname is not None and dotted(item.asname.name) == dotted(run.receiver)]
    if not made:
        made = [o.expr for o in facts.values_of(run.receiver, run.scope, run.order) if o.kind == "value" and not o.via]
    return bool(made) and all(isinstance(m, cst.Call) and facts.resolve(m.func) in _SESSIONS for m in made)


def _plain_hook(facts: ModuleFacts, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> bool:
    """Whether a hook certainly broadcasts nothing: one of TensorFlow's hooks, or a class of this module (which
    broadcasts nothing, since the module calls no broadcast), directly or through the assignments of a name.
    A hook of another module or library may broadcast."""
    if isinstance(expr, cst.Call):
        resolved = facts.resolve(expr.func)
        if resolved is not None:
            return resolved.startswith(("tensorflow.", "keras."))
        return facts.class_named(dotted(expr.func) or "") is not None
    name = dotted(expr)
    if name is None or depth > 3:
        return False
    assigned = facts.definitions(name, scope)
    return bool(assigned) and all(a.operator == "=" and _plain_hook(facts, a.value, a.scope, depth + 1)
                                  for a in assigned)


def _name(facts: ModuleFacts, call: CallFact) -> str:
    resolved = facts.resolve(call.func)
    return resolved.split(".")[-1] if resolved is not None else "train"


def _hooks(facts: ModuleFacts, call: CallFact) -> list[cst.BaseExpression] | None:
    """The hooks a training session, an Estimator's `train` or `train_and_evaluate`'s `TrainSpec` gets on every
    worker, when the module shows them all; None for other calls and unknown hooks."""
    resolved = facts.resolve(call.func)
    if resolved == "tensorflow.train.MonitoredTrainingSession":
        if call_arg(call.node, 0, "master") is not None:
            return None  # a session on a cluster's server: parameter-server training, its variables shared there
        return call_list(facts, call, "hooks", 4, 4)
    if resolved == "tensorflow.estimator.train_and_evaluate":
        spec = _only_value(facts, call_arg(call.node, 1, "train_spec"), call)
        fact = facts.call_fact(spec) if isinstance(spec, cst.Call) else None
        if fact is None or facts.resolve(fact.func) != "tensorflow.estimator.TrainSpec":
            return None
        return call_list(facts, fact, "hooks", 2, 2)
    if resolved is None and call.attr == "train" and _estimator(facts, call):
        return call_list(facts, call, "hooks", 1, 1)
    return None


def _only_value(facts: ModuleFacts, expr: cst.BaseExpression | None, call: CallFact) -> cst.CSTNode | None:
    """The one expression a name or argument holds, when the module shows exactly one."""
    if expr is None:
        return None
    origins = facts.values_of(expr, call.scope, call.order)
    return origins[0].expr if len(origins) == 1 and origins[0].kind == "value" and not origins[0].via else None


def _estimator(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether `x.train(...)` is called on a TensorFlow Estimator made in this module."""
    origins = facts.values_of(call.receiver, call.scope, call.order)
    return bool(origins) and all(
        o.kind == "value" and not o.via and isinstance(o.expr, cst.Call)
        and (facts.resolve(o.expr.func) or "").startswith(_ESTIMATORS) for o in origins)
