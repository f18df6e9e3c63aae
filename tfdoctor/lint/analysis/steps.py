"""Training steps and the loops that run them: which functions run one step, which loops run steps, what a
step returns (a device tensor, or a value already on the host) and which code in a loop is gated to run
every N steps only."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import libcst as cst

from tfdoctor.lint.analysis.tensorflow import ModuleFacts
from tfdoctor.lint.names import call_arg, dotted, literal_str
from tfdoctor.lint.semantic.collector import END_OF_SCOPE, CallFact, IfFact, LoopFact, Scope, reads

TRAINING_ATTRS = frozenset({"apply_gradients", "minimize", "train_on_batch"})
# Keras' `*_on_batch` methods return numpy values or Python floats: already on the host.
HOST_RESULTS = frozenset({"train_on_batch", "test_on_batch", "predict_on_batch", "fit", "evaluate", "predict"})


def _step_calls(facts: ModuleFacts) -> list[CallFact]:
    return [*_training_runs(facts), *(c for c in facts.calls if _applies_gradients(c))]


def _training_runs(facts: ModuleFacts) -> list[CallFact]:
    """The `strategy.run` calls whose replica function is not known to only evaluate (computed once)."""
    if "_training_runs" not in facts.__dict__:
        facts.__dict__["_training_runs"] = [r for r in facts.run_calls if not _evaluates_only(facts, r)]
    return facts.__dict__["_training_runs"]


def _applies_gradients(call: CallFact) -> bool:
    """`optimizer.apply_gradients(...)`, `minimize`, `train_on_batch`, or Keras 3's `optimizer.apply(grads, ...)`
    in a function that computes the gradients."""
    if call.attr in TRAINING_ATTRS:
        return True
    return call.attr == "apply" and any(c.attr == "gradient" for c in call.scope.calls)


_LEARNS = frozenset({"gradient", "apply_gradients", "minimize", "train_step", "train_on_batch"})


def _evaluates_only(facts: ModuleFacts, run: CallFact) -> bool:
    """A `strategy.run` whose replica function is known and never computes or applies gradients: an
    evaluation or prediction step, not a training step."""
    replicas = facts.callables_of(facts.replica_fn_expr(run), run.scope, before=run.order)
    if not replicas or any(r.owner is not facts for r in replicas):
        return False
    return not any(c.attr in _LEARNS or c.func in _LEARNS for s in facts.transitive_callees(replicas) for c in s.calls)


def training_step_scopes(facts: ModuleFacts) -> list[Scope]:
    """Functions that run one training step: they call `strategy.run`, apply gradients or `train_on_batch`
    outside any loop of their own, directly or through such a function. A function that loops over steps
    is a training loop, not a step."""
    cached = facts.__dict__.get("_training_steps")
    if cached is not None:
        return cached
    steps = {id(c.scope): c.scope for c in _step_calls(facts) if c.scope.is_function and not c.loops}
    steps.update((id(s), s) for s in facts.replica_functions if s.owner is facts and s.name == "train_step")
    changed = True
    while changed:
        changed = False
        for call in facts.calls:
            if (id(call.scope) not in steps and call.scope.is_function and not call.loops
                    and any(id(target) in steps for target in facts.callees(call))):
                steps[id(call.scope)] = call.scope
                changed = True
    facts.__dict__["_training_steps"] = list(steps.values())
    return facts.__dict__["_training_steps"]


def calls_training_step(facts: ModuleFacts, call: CallFact) -> bool:
    """A step call: `strategy.run` (of a replica function not known to only evaluate), an update, or a call of a
    step function, also one that the caller passes in as a parameter (`def train(step_fn): ... step_fn(batch)`,
    called as `train(step_fn=_train_step)`)."""
    if _applies_gradients(call) or any(call is run for run in _training_runs(facts)):
        return True
    steps = {id(s) for s in training_step_scopes(facts)}
    if any(id(target) in steps for target in facts.callees(call)):
        return True
    func = call.node.func
    return (isinstance(func, cst.Name) and func.value in call.scope.params
            and any(id(target) in steps for target in facts.callables_of(func, call.scope, before=call.order)))


def returns_host_values(facts: ModuleFacts, call: CallFact) -> bool:
    """A step call whose results are already Python or numpy values (`model.train_on_batch(...)`), directly
    or through a step function that returns one."""
    if call.attr in HOST_RESULTS:
        return True
    target = facts.callee(call)
    if target is None or not target.returns:
        return False
    return all(isinstance(r.value, cst.Call) and (c := facts.call_fact(r.value)) is not None and c.attr in HOST_RESULTS
               for r in target.returns)


def training_loops(facts: ModuleFacts) -> list[LoopFact]:
    """`for`/`while` loops whose body (not a nested loop's) runs a training step."""
    cached = facts.__dict__.get("_training_loops")
    if cached is None:
        cached = [
            loop for loop in facts.loops
            if any(c.loops and c.loops[-1] is loop and calls_training_step(facts, c) for c in loop.calls)
        ]
        facts.__dict__["_training_loops"] = cached
    return cached


def runs_many_steps(facts: ModuleFacts, loop: LoopFact) -> bool:
    """Whether one iteration of a training loop may run many steps: it calls a `tf.function` that runs a loop
    of steps itself (`for _ in tf.range(steps): strategy.run(...)`), or Keras' `train_function` of a model
    compiled with `steps_per_execution`. What the loop reads back then waits once per many steps."""
    cached = facts.__dict__.setdefault("_runs_many_steps", {})
    if id(loop) not in cached:
        inner = {id(other.scope) for other in training_loops(facts)
                 if other is not loop and facts.runs_in_graph(other.scope)}
        per_execution = any(any(a.keyword is not None and a.keyword.value == "steps_per_execution"
                                for a in c.node.args) for c in facts.method_calls("compile"))
        cached[id(loop)] = any(
            (per_execution and call.attr == "train_function")
            or any(id(target) in inner for target in facts.callees(call))
            for call in loop.calls if call.loops and call.loops[-1] is loop)
    return cached[id(loop)]


def gated_periodically(call: CallFact) -> bool:
    """Whether a call runs only every N steps or every so many seconds: under `if step % N == 0` (or any `if`
    testing a modulo), under `if now - last_log >= 120:` with a clock read on one side, or under `if flag:`
    where the flag was computed so (`do_log = (step + 1) % N == 0`)."""
    model: ModuleFacts = call.scope.owner  # type: ignore[assignment]
    return any(_gates(model, branch.test, call.scope, call.order, 0) for branch in call.ifs)


def _gates(facts: ModuleFacts, test: cst.BaseExpression, scope: Scope, before: int, depth: int) -> bool:
    if _has_modulo(test) or _seconds_elapsed(facts, test, scope, before):
        return True
    if isinstance(test, cst.Call) and depth <= 3:
        if (facts.resolve(test.func) or "").startswith("tensorflow."):  # `tf.equal(step % n, 0)`
            return any(_has_modulo(a.value) for a in test.args)
        functions = facts.callables_of(test.func, scope, before=before)  # `if should_log(step):`
        return bool(functions) and all(f.returns and all(
            _gates(f.owner, r.value, f, END_OF_SCOPE, depth + 1) for r in f.returns)  # type: ignore[arg-type]
            for f in functions)
    name = dotted(test.expression if isinstance(test, cst.UnaryOperation) else test)
    if name is None or depth > 3:
        if isinstance(test, cst.BooleanOperation):
            return _gates(facts, test.left, scope, before, depth + 1) or _gates(facts, test.right, scope, before, depth + 1)
        return False
    found = facts.definitions(name, scope, before)
    return bool(found) and found[-1].operator == "=" and _gates(facts, found[-1].value, found[-1].scope,
                                                                 found[-1].order, depth + 1)


def _has_modulo(test: cst.BaseExpression) -> bool:
    if isinstance(test, cst.Call) and isinstance(test.func, cst.Attribute) and test.func.attr.value == "numpy":
        return _has_modulo(test.func.value)
    if isinstance(test, cst.Comparison):
        return _has_modulo(test.left)
    if isinstance(test, cst.UnaryOperation):
        return _has_modulo(test.expression)
    if isinstance(test, cst.BooleanOperation):
        return _has_modulo(test.left) or _has_modulo(test.right)
    return isinstance(test, cst.BinaryOperation) and isinstance(test.operator, cst.Modulo)


_CLOCKS = frozenset({"time.time", "time.perf_counter", "time.monotonic", "timeit.default_timer"})


def _seconds_elapsed(facts: ModuleFacts, test: cst.BaseExpression, scope: Scope, before: int) -> bool:
    """`now - last_log >= 120` (or `time.time() - start > limit`): a test of the time elapsed, with a clock
    read on one side of the subtraction, directly or through a name bound to one."""
    if not (isinstance(test, cst.Comparison) and isinstance(test.left, cst.BinaryOperation)
            and isinstance(test.left.operator, cst.Subtract)):
        return False
    return any(_reads_clock(facts, side, scope, before) for side in (test.left.left, test.left.right))


def _reads_clock(facts: ModuleFacts, expr: cst.BaseExpression, scope: Scope, before: int) -> bool:
    name = dotted(expr)
    if name is not None:
        found = facts.definitions(name, scope, before)
        expr = found[-1].value if found and found[-1].operator == "=" else expr
    return isinstance(expr, cst.Call) and facts.resolve(expr.func) in _CLOCKS


def loop_ifs(facts: ModuleFacts, loop: LoopFact) -> list[IfFact]:
    """The `if` statements directly in a loop's body (not in a nested loop)."""
    return [fact for fact in facts.if_facts if fact.loops and fact.loops[-1] is loop]


def gated_if(fact: IfFact) -> bool:
    """Whether an `if` itself runs only every N steps (it is nested in a modulo-gated `if`)."""
    model: ModuleFacts = fact.scope.owner  # type: ignore[assignment]
    return any(_gates(model, outer.test, fact.scope, fact.order, 0) for outer in fact.ifs)


_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_EVALUATION_WORDS = frozenset({"val", "vali", "valid", "validate", "validation", "eval", "evaluate", "evaluation",
                               "evaluator", "test", "dev", "predict", "prediction", "predictor", "infer",
                               "inference"})


def evaluation_name(name: str) -> bool:
    """Whether a name, in snake_case or CamelCase, names evaluation, validation, testing or prediction
    (`ds_val`, `distributed_vali_step`, `DataParallelOfflinePredictor`), not training."""
    return any(word.lower() in _EVALUATION_WORDS for word in _WORDS.findall(name.rpartition(".")[2]))


_UNREAD_DEPTH = 2  # how many functions up a returned value is followed (`step` returns it to `train`)


def result_unread(facts: ModuleFacts, call: CallFact, depth: int = 0) -> bool:
    """Whether nothing reads what a call in a function returns: the call is a statement of its own, or it is
    bound to plain names that nothing reads after it (nor, in a loop, anywhere in the loop), or it is returned
    by a function that its module names only in calls, each of which leaves it unread alike (two functions up),
    and that is nested in another, or in a notebook, or in a module no other one imports. False wherever the
    module does not show it all."""
    scope = call.scope
    if not scope.is_function or depth > _UNREAD_DEPTH:
        return False
    if call.discarded:
        return True
    bound = [a for a in scope.assigns if a.value is call.node]
    names = [t for a in bound for t in a.targets]
    returned = any(r.value is call.node for r in scope.returns)
    if not (bound or returned) or not all(name.isidentifier() for name in names):
        return False
    after = call.loops[0].order if call.loops else call.order
    if any(facts.read_later(name, scope, after, returns=False, skip=call.statement) for name in names):
        return False
    if not returned and not any(reads(r.names, name) for r in scope.returns for name in names):
        return True
    callers = facts.callers_of(scope)
    if not callers or not facts.named_only_in_calls(scope.name):
        return False  # handed on as a value (`strategy.run(step)`), or not called here: its callers are out of sight
    nested = scope.parent is not None and scope.parent.is_function
    if not (nested or facts.notebook or (facts.loader is not None and not facts.loader.consumers(facts))):
        return False  # another module may import and call it
    return all(result_unread(facts, caller, depth + 1) for caller in callers)


def in_test_code(facts: ModuleFacts, scope: Scope) -> bool:
    """Code of a test: a `test*` function (or one nested in it) of a `test_*.py`/`*_test.py` module, or a
    method of a class derived from a `TestCase` (`tf.test.TestCase`, `unittest.TestCase`)."""
    module = Path(facts.path).name
    test_module = module.startswith("test_") or module.endswith("_test.py")
    current: Scope | None = scope
    while current is not None and current.is_function:
        if test_module and current.name.startswith("test"):
            return True
        class_fact = facts.class_named(current.class_name) if current.class_name else None
        if class_fact is not None and any((facts.resolve(b) or b).endswith("TestCase") for b in class_fact.bases):
            return True
        current = current.parent
    return False


def runs_once(facts: ModuleFacts, call: CallFact) -> bool:
    """A call that runs once: outside any loop, at module level or in a function that only module-level
    code outside loops calls (`out = strategy.run(forward, args=(x,))` to look at one value)."""
    if call.loops:
        return False
    if not call.scope.is_function:
        return True
    callers = facts.callers_of(call.scope)
    return bool(callers) and all(not c.loops and not c.scope.is_function for c in callers)


def runs_of(facts: ModuleFacts, replica: Scope) -> list[CallFact]:
    """The `strategy.run` calls of this module that run a replica function."""
    return [run for run in facts.run_calls
            if any(s is replica for s in facts.callables_of(facts.replica_fn_expr(run), run.scope))]


def reduce_op(node: cst.BaseExpression | None) -> str | None:
    """"MEAN" or "SUM" for the first argument of `strategy.reduce` (`tf.distribute.ReduceOp.SUM`, "sum")."""
    text = literal_str(node) or (dotted(node) or "").split(".")[-1]
    return text.upper() if text and text.upper() in ("MEAN", "SUM") else None


def summed_over_replicas(facts: ModuleFacts, replica: Scope) -> bool:
    """Whether the code sums what a replica function returns over the replicas: `strategy.reduce(SUM, r)` of
    a whole `r = strategy.run(replica, ...)` result (or of the run itself)."""
    runs = {id(run.node) for run in runs_of(facts, replica)}
    for call in facts.method_calls("reduce"):
        if not runs or not facts.is_strategy(call.receiver) or reduce_op(call_arg(call.node, 0, "reduce_op")) != "SUM":
            continue
        value = call_arg(call.node, 1, "value")
        name = dotted(value)
        if name is not None:
            found = facts.definitions(name, call.scope, call.order)
            value = found[-1].value if found and not found[-1].path_of(name) else None
        if isinstance(value, cst.Call) and id(value) in runs:
            return True
    return False


def applies_gradients(facts: ModuleFacts, replica: Scope) -> bool:
    """Whether a function, or one it calls, applies gradients (`apply_gradients`, `minimize`, ...)."""
    return any(_applies_gradients(c) for s in facts.transitive_callees([replica]) for c in s.calls)
_COUNTER_WORD = re.compile(r"step|iter", re.IGNORECASE)
_NOT_COUNTER = re.compile(r"size|rate|len|per_|steps", re.IGNORECASE)  # `step_size`, `steps_per_epoch`
_COUNTER_MAKERS = frozenset({"tensorflow.Variable", "tensorflow.train.get_or_create_global_step",
                             "tensorflow.train.get_global_step", "tensorflow.train.create_global_step"})


def step_counter(facts: ModuleFacts, expr: cst.BaseExpression, scope: Scope, before: int) -> str | None:
    """The name of a step counter that lives on the device, when `expr` is one: an optimizer's `iterations`,
    or a name for steps (`global_step`, `self.step`, `ckpt.step`) bound to a `tf.Variable`, to the global step
    (`tf.train.get_or_create_global_step()`), or given to a `tf.train.Checkpoint` as one, and a name bound
    only to an optimizer's `iterations` (`iterations = optimizer.iterations`). A Python counter of the same
    name is not one (`self.iterations = 0` in a trainer of its own)."""
    name = dotted(expr)
    if name is None:
        return None
    last = name.rsplit(".", 1)[-1]
    if last == "iterations" and "." in name:
        origins = facts.values_of(expr, scope, before)
        if any(o.kind == "value" and (isinstance(o.expr, cst.Integer) or isinstance(o.expr, cst.AugAssign)
                                      and isinstance(o.expr.value, cst.Integer)) for o in origins):
            return None  # `self.iterations = 0`, then `+= 1`: a Python count of the loop's own
        return name
    if "." not in name:
        bound = facts.definitions(name, scope, before)
        if bound and all((dotted(a.value) or "").endswith(".iterations") for a in bound):
            return name
    if not _COUNTER_WORD.search(last) or _NOT_COUNTER.search(last):
        return None
    origins = facts.values_of(expr, scope, before)
    if origins and all(o.kind == "value" and not o.path and _made_by(o.model, o.expr, _COUNTER_MAKERS)  # type: ignore[arg-type]
                       for o in origins):
        return name
    if isinstance(expr, cst.Attribute):  # `ckpt.step` of `tf.train.Checkpoint(step=tf.Variable(1), ...)`
        owners = facts.values_of(expr.value, scope, before)
        if owners and all(o.kind == "value" and _checkpointed_variable(o.model, o.expr, last)  # type: ignore[arg-type]
                          for o in owners):
            return name
    return None


def _made_by(facts: ModuleFacts, value: cst.BaseExpression | None, makers: frozenset[str]) -> bool:
    return isinstance(value, cst.Call) and facts.resolve(value.func) in makers


def _checkpointed_variable(facts: ModuleFacts, made: cst.BaseExpression | None, attr: str) -> bool:
    if not isinstance(made, cst.Call) or facts.resolve(made.func) != "tensorflow.train.Checkpoint":
        return False
    return _made_by(facts, call_arg(made, None, attr), frozenset({"tensorflow.Variable"}))


def counters_read(facts: ModuleFacts, expr: cst.BaseExpression | None, scope: Scope, before: int,
                  depth: int = 0) -> Iterator[str]:
    """The device step counters an expression turns into a Python value when it is evaluated as a bool (an
    `if` test, a conditional expression's test): compared (`global_step >= total`), given to a TensorFlow op
    (`tf.equal(global_step % n, 0)`) or computed on (`(opt.iterations + 1) % n`). Bounded to the expression."""
    if expr is None or depth > 8:
        return
    counter = step_counter(facts, expr, scope, before) if isinstance(expr, (cst.Name, cst.Attribute)) else None
    if counter is not None:
        yield counter
        return
    if isinstance(expr, cst.Call) and (facts.resolve(expr.func) or "").startswith("tensorflow."):
        parts: list[cst.BaseExpression] = [a.value for a in expr.args]
    elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "numpy":
        parts = [expr.func.value]
    elif isinstance(expr, cst.Comparison):
        parts = [expr.left, *(c.comparator for c in expr.comparisons)]
    elif isinstance(expr, cst.BinaryOperation):
        parts = [expr.left, expr.right]
    elif isinstance(expr, cst.UnaryOperation):
        parts = [expr.expression]
    elif isinstance(expr, cst.BooleanOperation):
        parts = [expr.left]  # the right operand may not be evaluated
    else:
        parts = []
    for part in parts:
        yield from counters_read(facts, part, scope, before, depth + 1)
