"""Training steps and the loops that run them: which functions run one step, which loops run steps, what a
step returns (a device tensor, or a value already on the host) and which code in a loop is gated to run
every N steps only."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from tfdoctor.lint.analysis.tensorflow import ModuleFacts
from tfdoctor.lint.names import dotted
from tfdoctor.lint.semantic.collector import CallFact, IfFact, LoopFact, Scope

TRAINING_ATTRS = frozenset({"apply_gradients", "minimize", "train_on_batch"})
# Keras' `*_on_batch` methods return numpy values or Python floats: already on the host.
HOST_RESULTS = frozenset({"train_on_batch", "test_on_batch", "predict_on_batch", "fit", "evaluate", "predict"})


def _step_calls(facts: ModuleFacts) -> list[CallFact]:
    return [*(r for r in facts.run_calls if not _evaluates_only(facts, r)),
            *(c for c in facts.calls if _applies_gradients(c))]


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
    """A step call: `strategy.run`, an update, or a call of a step function, also one that the caller passes
    in as a parameter (`def train(step_fn): ... step_fn(batch)`, called as `train(step_fn=_train_step)`)."""
    if _applies_gradients(call) or any(call is run for run in facts.run_calls):
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


def gated_by_step_modulo(call: CallFact) -> bool:
    """Whether a call runs only every N steps: under `if step % N == 0` (or any `if` testing a modulo), or
    under `if flag:` where the flag was computed so (`do_log = (step + 1) % N == 0`)."""
    model: ModuleFacts = call.scope.owner  # type: ignore[assignment]
    return any(_gates(model, branch.test, call.scope, call.order, 0) for branch in call.ifs)


def _gates(facts: ModuleFacts, test: cst.BaseExpression, scope: Scope, before: int, depth: int) -> bool:
    if _has_modulo(test):
        return True
    name = dotted(test.expression if isinstance(test, cst.UnaryOperation) else test)
    if name is None or depth > 3:
        if isinstance(test, cst.BooleanOperation):
            return _gates(facts, test.left, scope, before, depth + 1) or _gates(facts, test.right, scope, before, depth + 1)
        return False
    found = facts.definitions(name, scope, before)
    return bool(found) and found[-1].operator == "=" and _gates(facts, found[-1].value, found[-1].scope,
                                                                 found[-1].order, depth + 1)


def _has_modulo(test: cst.BaseExpression) -> bool:
    if isinstance(test, cst.Comparison):
        return _has_modulo(test.left)
    if isinstance(test, cst.UnaryOperation):
        return _has_modulo(test.expression)
    if isinstance(test, cst.BooleanOperation):
        return _has_modulo(test.left) or _has_modulo(test.right)
    return isinstance(test, cst.BinaryOperation) and isinstance(test.operator, cst.Modulo)


def loop_ifs(facts: ModuleFacts, loop: LoopFact) -> list[IfFact]:
    """The `if` statements directly in a loop's body (not in a nested loop)."""
    return [fact for fact in facts.if_facts if fact.loops and fact.loops[-1] is loop]


def gated_if(fact: IfFact) -> bool:
    """Whether an `if` itself runs only every N steps (it is nested in a modulo-gated `if`)."""
    model: ModuleFacts = fact.scope.owner  # type: ignore[assignment]
    return any(_gates(model, outer.test, fact.scope, fact.order, 0) for outer in fact.ifs)


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


def applies_gradients(facts: ModuleFacts, replica: Scope) -> bool:
    """Whether a function, or one it calls, applies gradients (`apply_gradients`, `minimize`, ...)."""
    return any(_applies_gradients(c) for s in facts.transitive_callees([replica]) for c in s.calls)
