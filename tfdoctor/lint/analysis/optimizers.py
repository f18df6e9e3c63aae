"""The optimizer a training step applies, when the code shows it: its class, whether it adapts the step to the
gradients' scale (Adam, RMSprop, Adagrad, ...: almost invariant to a constant factor on the loss) or not (SGD,
momentum), whether the gradients are clipped (`clipnorm`, `clipvalue`, `global_clipnorm`,
`tf.clip_by_global_norm`), and whether it keeps no per-weight state (plain SGD). The optimizer is the receiver
of `apply_gradients`/`minimize`/`apply` in the replica function or a function it calls, followed by the
semantic model's lookup (`self.optimizer`, a parameter, also one that `strategy.run(fn, args=(...,
optimizer))` fills, a module variable, a wrapper such as `LossScaleOptimizer(opt)`), or the optimizer given
to `compile` (also by a string, `optimizer="adam"`) for a Keras `train_step` override.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import libcst as cst

from tfdoctor.lint.analysis.losses import in_keras_model
from tfdoctor.lint.analysis.tensorflow import ModuleFacts
from tfdoctor.lint.names import call_arg, dotted, literal_str
from tfdoctor.lint.semantic.collector import CallFact, Scope

Family = Literal["adaptive", "sgd"]
# Class names, lower case and without an `Optimizer` suffix.
_ADAPTIVE = frozenset({
    "adam", "adamw", "adamweightdecay", "nadam", "adamax", "adagrad", "adagradda", "adadelta", "rmsprop", "lamb",
    "lazyadam", "yogi", "lion", "adafactor", "novograd", "rectifiedadam", "radam", "amsgrad",
})
_SGD = frozenset({"sgd", "gradientdescent", "momentum", "sgdw"})
_WRAPPERS = frozenset({
    "lossscale", "distributed", "mixedprecisionlossscale", "enable_mixed_precision_graph_rewrite", "movingaverage",
    "swa", "lookahead", "crossshard", "syncreplicas",
})
_STRINGS = {"adam": "Adam", "adamw": "AdamW", "nadam": "Nadam", "adamax": "Adamax", "adagrad": "Adagrad",
            "adadelta": "Adadelta", "rmsprop": "RMSprop", "lion": "Lion", "adafactor": "Adafactor", "sgd": "SGD"}
_CLIP_ARGS = ("clipnorm", "clipvalue", "global_clipnorm")
_CLIP_CALLS = frozenset({"tensorflow.clip_by_global_norm", "tensorflow.clip_by_norm", "tensorflow.clip_by_value"})
_APPLY = frozenset({"apply_gradients", "minimize"})
_MAX_DEPTH = 4


@dataclass(frozen=True)
class Optimizer:
    name: str             # the class as written (`Adam`, `AdamOptimizer`)
    family: Family
    clipping: str | None  # what clips its gradients (the `clipnorm` of `Adam`, `tf.clip_by_global_norm`), if anything
    stateless: bool = False  # plain SGD (no momentum, no moving average): it keeps no variable per weight


def applied_optimizer(facts: ModuleFacts, replica: Scope) -> Optimizer | None:
    """The one optimizer the training step of a replica function applies, or None when the code does not
    show it (or shows several)."""
    scopes = facts.transitive_callees([replica])
    applies = [c for s in scopes for c in s.calls if _applies(c)]
    found = {_optimizer_at(facts, call) for call in applies}
    if len(found) != 1 or None in found:
        return None
    optimizer = found.pop()
    assert optimizer is not None
    if optimizer.clipping is None:
        clip = next((c for s in scopes for c in s.calls if _clips_gradients(facts, c)), None)
        if clip is not None:
            return replace(optimizer, clipping=f"`{clip.func or clip.attr}`")
    return optimizer


def _applies(call: CallFact) -> bool:
    return call.attr in _APPLY or (call.attr == "apply" and any(c.attr == "gradient" for c in call.scope.calls))


def _optimizer_at(facts: ModuleFacts, call: CallFact) -> Optimizer | None:
    receiver = call.receiver
    if receiver is None:
        return None
    found = _optimizer_of(facts, receiver, call.scope, call.order, 0)
    if found is None and dotted(receiver) == "self.optimizer" and in_keras_model(facts, call.scope) \
            and not facts.definitions("self.optimizer", call.scope):
        return _compiled_optimizer(facts)
    return found


def _optimizer_of(facts: ModuleFacts, expr: cst.BaseExpression, scope: Scope, before: int,
                  depth: int) -> Optimizer | None:
    """What every value of `expr` agrees it is."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(expr, cst.Call):
        return _constructed(facts, expr, scope, before, depth)
    values = facts.values_of(expr, scope, before)
    if len(values) == 1 and values[0].kind == "parameter" and not values[0].path:  # a parameter no call fills
        return _run_argument(facts, values[0].expr, values[0].scope, depth)
    origins = [o for o in values  # a `None` default applies nothing
               if o.expr is not expr and not (isinstance(o.expr, cst.Name) and o.expr.value == "None")]
    if not origins or any(o.kind != "value" or o.path or not isinstance(o.expr, cst.Call) for o in origins):
        return None
    found = {_constructed(o.model, o.expr, o.scope, o.order, depth + 1) for o in origins}  # type: ignore[arg-type]
    return found.pop() if len(found) == 1 else _chosen_among(found)


def _chosen_among(found: set[Optimizer | None]) -> Optimizer | None:
    """Optimizers a flag chooses between (`Adam` if `opt == "adam"`, else `Adamax`): one adaptive optimizer named
    `Adam/Adamax` when every choice adapts and all or none clip their gradients; None when that is not so."""
    choices = sorted((o for o in found if o is not None), key=lambda o: o.name)
    if (len(choices) < len(found) or any(o.family != "adaptive" for o in choices)
            or len({o.clipping is None for o in choices}) > 1):
        return None
    return Optimizer("/".join(o.name for o in choices), "adaptive", choices[0].clipping)


def _run_argument(facts: ModuleFacts, parameter: cst.CSTNode, function: Scope, depth: int) -> Optimizer | None:
    """The optimizer a replica function's parameter is given by every `strategy.run(fn, args=(..., opt))`
    that runs it; None when a run does not show it, or when nothing runs the function that way."""
    name = dotted(parameter)  # type: ignore[arg-type]
    params = function.value_params()
    if name not in params or function.owner is not facts:
        return None
    index = params.index(name)
    found = set()
    for run in facts.run_calls:
        if not any(s is function for s in facts.callables_of(facts.replica_fn_expr(run), run.scope)):
            continue
        given = facts.replica_args(run)
        if index >= len(given) or len(given) != len(facts.replica_args(run, starred=True)):
            return None  # fewer inputs than parameters, or a `*args` in front of it
        found.add(_optimizer_of(facts, given[index], run.scope, run.order, depth + 1))
    return found.pop() if len(found) == 1 else None


def _constructed(facts: ModuleFacts, call: cst.Call, scope: Scope, before: int, depth: int) -> Optimizer | None:
    """An optimizer built by a constructor call, `optimizers.get("adam")` or a wrapper around one."""
    name = dotted(call.func) or ""
    resolved = facts.resolve(call.func) or name
    short = resolved.rsplit(".", 1)[-1]
    key = _key(short)
    if key in _WRAPPERS:
        inner = call_arg(call, 0, "optimizer") or call_arg(call, None, "opt")
        return _optimizer_of(facts, inner, scope, before, depth + 1) if inner is not None else None
    if key == "get" and resolved.startswith("keras.optimizers"):
        return _by_string(literal_str(call_arg(call, 0, "identifier")))
    family: Family | None = "adaptive" if key in _ADAPTIVE else "sgd" if key in _SGD else None
    if family is None:
        return None
    clipping = _clip_argument(call)
    return Optimizer(short, family, f"the `{clipping}` of `{short}`" if clipping else None,
                     key == "sgd" and _zero(call_arg(call, 1, "momentum")) and _zero(call_arg(call, None, "use_ema")))


def _zero(value: cst.BaseExpression | None) -> bool:
    """An argument left out, or given as 0, 0.0, False or None."""
    return value is None or (isinstance(value, (cst.Integer, cst.Float)) and value.evaluated_value == 0) or (
        isinstance(value, cst.Name) and value.value in ("False", "None"))


def _key(name: str) -> str:
    lowered = name.lower()
    return lowered[:-len("optimizer")] if lowered.endswith("optimizer") and lowered != "optimizer" else lowered


def _by_string(text: str | None) -> Optimizer | None:
    name = _STRINGS.get((text or "").lower())
    if name is None:
        return None
    return Optimizer(name, "sgd" if name == "SGD" else "adaptive", None, name == "SGD")


def _clip_argument(call: cst.Call) -> str | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in _CLIP_ARGS:
            if isinstance(arg.value, cst.Name) and arg.value.value == "None":
                continue
            return arg.keyword.value
    return None


def _compiled_optimizer(facts: ModuleFacts) -> Optimizer | None:
    """The optimizer every `compile` call of the module is given (`optimizer="adam"` or an instance)."""
    compiles = list(facts.method_calls("compile"))
    found = set()
    for call in compiles:
        given = call_arg(call.node, 0, "optimizer")
        if given is None:
            return None
        text = literal_str(given)
        found.add(_by_string(text) if text is not None else _optimizer_of(facts, given, call.scope, call.order, 1))
    return found.pop() if len(found) == 1 else None


def _clips_gradients(facts: ModuleFacts, call: CallFact) -> bool:
    """`tf.clip_by_global_norm(grads, ...)`, or `tf.clip_by_norm`/`clip_by_value` in a statement about
    gradients (`[tf.clip_by_norm(g, 1.0) for g in grads]`)."""
    resolved = facts.resolve(call.node.func)
    if resolved not in _CLIP_CALLS:
        return False
    if resolved == "tensorflow.clip_by_global_norm":
        return True
    first = dotted(call_arg(call.node, 0, "t")) or ""
    targets = [t for a in call.scope.assigns if a.statement is call.statement for t in a.targets]
    return any("grad" in name.lower() for name in (first, *targets))
