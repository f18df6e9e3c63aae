"""Where batches come from and which pipelines feed training.

`value_provenance` says whether a value given to `strategy.run` comes from a distributed dataset, from a
plain `tf.data.Dataset`, numpy, a Python iterator class (`__next__`, a generator `__iter__`, a
`keras.utils.Sequence`/`PyDataset` subclass, here or in another project module) or a generator. It follows
the value with the semantic model's lookup: `for` targets, `next(it)`, unpacking, parameters bound at every
call site, and return values. `training_inputs` lists the expressions whose batches reach training (`fit`,
`experimental_distribute_dataset`, the loop that runs a step, `next(it)` in it) and `training_chains` the
`tf.data` pipelines among them; `fed_elsewhere`, the pipelines built here that another project module trains
on (a loader's `return ds`, fitted in train.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, Literal

import libcst as cst

from tfdoctor.lint.analysis.steps import evaluation_name, in_test_code, training_loops
from tfdoctor.lint.analysis.tensorflow import DISTRIBUTE_DATASET_METHODS, DatasetChain, DatasetOp, ModuleFacts, runs_once
from tfdoctor.lint.findings import Evidence
from tfdoctor.lint.names import call_arg, dotted, in_part, literal_int, literal_str, main_guard
from tfdoctor.lint.semantic.collector import END_OF_SCOPE, CallFact, LoopFact, Scope
from tfdoctor.lint.semantic.model import Origin, SemanticModel, Step

_MAX_DEPTH = 8
_PYTHON_BASES = ("utils.Sequence", "utils.PyDataset", "utils.data_utils.Sequence")
# TensorFlow ops that reshape or convert one tensor: their result comes from where their first argument does (a
# distributed value cannot be given to them outside `strategy.run`, so only an undistributed one gets here).
_SAME_ORIGIN_OPS = frozenset({"tensorflow.expand_dims", "tensorflow.squeeze", "tensorflow.reshape",
                              "tensorflow.cast", "tensorflow.identity", "tensorflow.image.resize"})


PLAIN_TENSOR = "a plain tensor"


ITERATOR_CLASS = "the Python iterator class"  # how a reason names a plain iterator class (`__next__`)
GENERATOR_FUNCTION = "the Python generator"  # ... and a generator function


@dataclass(frozen=True)
class Provenance:
    kind: Literal["distributed", "undistributed"]
    reason: str
    node: cst.CSTNode | None = None
    evidence: tuple[Evidence, ...] = ()  # where it was found, when that is in another module


def is_python_iterator_class(facts: ModuleFacts, name: str | None) -> str | None:
    """A class (of this module or another project module) whose instances yield batches from Python
    (`__next__`, generator `__iter__`, or a `keras.utils.Sequence`/`PyDataset` subclass): how to describe it."""
    found = facts.class_and_module(name)
    if found is None:
        return None
    class_fact, owner = found
    if "__next__" in class_fact.methods or (
        "__iter__" in class_fact.methods and class_fact.methods["__iter__"].is_generator
    ):
        return f"{ITERATOR_CLASS} `{class_fact.name}`"
    for base in class_fact.bases:
        resolved = owner.resolve(base) or base
        if resolved.endswith(_PYTHON_BASES) or base in ("Sequence", "PyDataset"):
            return f"the Python `{resolved.split('.')[-1]}` class `{class_fact.name}`"
    return None


def iterable_provenance(facts: ModuleFacts, expr: cst.BaseExpression | None, scope: Scope, before: int,
                        depth: int = 0) -> Provenance | None:
    """What iterating over `expr` yields."""
    if expr is None or depth > _MAX_DEPTH:
        return None
    facts = scope.owner  # type: ignore[assignment]
    if isinstance(expr, cst.Call):
        name = dotted(expr.func)
        if name in ("enumerate", "iter", "tqdm", "tqdm.tqdm") or (facts.resolve(expr.func) or "").endswith("tqdm"):
            return iterable_provenance(facts, call_arg(expr, 0, None), scope, before, depth + 1)
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in DISTRIBUTE_DATASET_METHODS:
            return Provenance("distributed", "a distributed dataset")
        functions = facts.callables_of(expr.func, scope)
        found = _python_source(facts, expr, functions)
        if found is not None:
            return found
        if len(functions) == 1 and not functions[0].is_generator:  # a wrapper: `return batches(lines, size)`
            wrapper = functions[0]
            made = [r.value for r in wrapper.returns if not (isinstance(r.value, cst.Name) and r.value.value == "None")]
            found = _agreed([_python_source(facts, v, facts.callables_of(v.func, wrapper)) if isinstance(v, cst.Call)
                             else None for v in made])
            if found is not None:
                return found
    chain = facts.dataset_chain(expr, scope, before)
    if chain is not None:
        found = Provenance("undistributed", "a `tf.data.Dataset` that was never distributed", expr)
        return _cited(facts, chain.via, found) if chain.source_scope and chain.source_scope.owner is not facts else found
    if dotted(expr) is not None:
        origins = [o for o in facts.values_of(expr, scope, before) if o.expr is not expr]
        results = []
        for origin in origins:
            found = iterable_provenance(origin.model, origin.expr, origin.scope, origin.order, depth + 1) \
                if origin.kind == "value" and not origin.path else None  # type: ignore[arg-type]
            results.append(_cited(facts, origin.via, found) if origin.model is not facts else found)
        return _agreed(results)
    return None


def _python_source(facts: ModuleFacts, call: cst.Call, functions: list[Scope]) -> Provenance | None:
    """A call that makes a Python batch source: an iterator class or a generator function (`functions`: the
    callables the call invokes)."""
    described = is_python_iterator_class(facts, dotted(call.func))
    if described:
        return None if made_by_workers(facts, call, facts.module_scope, END_OF_SCOPE) else Provenance(
            "undistributed", described, call)
    if len(functions) == 1 and functions[0].is_generator and not _regroups(functions[0]) \
            and not _yields_the_same(functions[0]) and not enqueued(functions[0]):
        return Provenance("undistributed", f"{GENERATOR_FUNCTION} `{functions[0].name}`", call)
    return None


_ENQUEUER = re.compile(r"(^|\.)\w*Enqueuer$")  # Keras' `OrderedEnqueuer`, `GeneratorEnqueuer`, and copies of them
# Pools of worker threads or processes: Keras' enqueuers, `concurrent.futures`' executors, `multiprocessing`'s pools
_WORKER_POOLS = re.compile(r"(^|\.)(\w*Enqueuer|ThreadPoolExecutor|ProcessPoolExecutor|Pool|ThreadPool)$")


def enqueued(generator: Scope) -> bool:
    """A generator that hands out what a pool of workers made: the `get()` of a Keras `OrderedEnqueuer` or
    `GeneratorEnqueuer` (or a project's copy), or one that starts such an enqueuer, a `ThreadPoolExecutor` or a
    `multiprocessing.Pool` and yields what they made. The code sets their threads or processes, as for
    `fit(workers=...)`."""
    return bool(_ENQUEUER.search(generator.class_name or "")) or _starts_a_pool(generator)


def _starts_a_pool(scope: Scope) -> bool:
    """Whether a function makes a pool of workers (an enqueuer, an executor, a `multiprocessing` pool)."""
    return any(_WORKER_POOLS.search(call.func or "") for call in scope.calls)


_WORKER_COUNT = re.compile(r"(num_|n_)?(workers|readers|threads|processes|procs|jobs)$")


def made_by_workers(facts: ModuleFacts, expr: cst.BaseExpression | None, scope: Scope, before: int,
                    depth: int = 0) -> bool:
    """Whether iterating over `expr` (or `next(expr)`) hands out what a pool of workers made: a generator that
    `enqueued` tells so, or an instance of a project class whose methods start such a pool (`__next__`
    submitting each part of the batch to a `ThreadPoolExecutor`). Also `from_generator`'s argument: such a
    generator function itself, or a lambda that calls one. A call of code out of sight that is given a count of
    workers (`get_batch(num_workers=8)`) makes its batches in them."""
    if expr is None or depth > _MAX_DEPTH:
        return False
    facts = scope.owner  # type: ignore[assignment]
    if isinstance(expr, cst.Lambda):
        return made_by_workers(facts, expr.body, scope, before, depth + 1)
    if isinstance(expr, cst.Call):
        name = dotted(expr.func)
        if name in ("enumerate", "iter", "next", "tqdm", "tqdm.tqdm") or (facts.resolve(expr.func) or "").endswith(
                "tqdm"):
            return made_by_workers(facts, call_arg(expr, 0, None), scope, before, depth + 1)
        found = facts.class_and_module(name)
        if found is not None:
            return any(_starts_a_pool(method) for method in found[0].methods.values())
        functions = facts.callables_of(expr.func, scope)
        if not functions:  # code out of sight (`icdar.get_batch(num_workers=FLAGS.num_readers)`): asked for workers
            return any(arg.keyword is not None and _WORKER_COUNT.match(arg.keyword.value) for arg in expr.args)
        return all(f.is_generator and enqueued(f) for f in functions)
    if dotted(expr) is None:
        return False
    functions = facts.callables_of(expr, scope)
    if functions and all(f.is_generator for f in functions):  # `from_generator(batches)`
        return all(enqueued(f) for f in functions)
    origins = [o for o in facts.values_of(expr, scope, before) if o.expr is not expr]
    return bool(origins) and all(
        o.kind == "value" and not o.path
        and made_by_workers(o.model, o.expr, o.scope, o.order, depth + 1)  # type: ignore[arg-type]
        for o in origins)


def repeats_one_batch(facts: ModuleFacts, expr: cst.BaseExpression | None, scope: Scope, before: int) -> bool:
    """Whether every value of `expr` is a call of a generator that hands back the same batch each time."""
    if expr is None:
        return False
    values = [o.expr for o in facts.values_of(expr, scope, before)] if dotted(expr) else [expr]
    return bool(values) and all(
        isinstance(v, cst.Call) and (found := facts.callables_of(v.func, scope)) != []
        and all(f.is_generator and _yields_the_same(f) for f in found) for v in values)


def _yields_the_same(generator: Scope) -> bool:
    """`while True: yield X, Y` over arrays made once, outside: a generator that calls, assigns and iterates
    over nothing hands the same batch back each time (a benchmark's synthetic input), with no work per batch."""
    return not generator.calls and not generator.assigns and not any(isinstance(loop.node, cst.For)
                                                                     for loop in generator.loops)


def _regroups(generator: Scope) -> bool:
    """A generator that iterates over what its caller hands in (`for batch in dataset: ... yield group`):
    it groups or relabels someone else's batches, so it is not where they are made."""
    return any(isinstance(loop.node, cst.For) and isinstance(loop.iter_expr, cst.Name)
               and loop.iter_expr.value in generator.params for loop in generator.loops)


def _cited(facts: ModuleFacts, via: tuple[Step, ...], found: Provenance | None) -> Provenance | None:
    """A provenance found in another module, with the call there that passed the value in as evidence."""
    if found is None or not via or found.evidence:
        return found
    step = via[-1]
    model = step.caller.owner
    how = "returns" if step.returned else "is given"
    evidence = Evidence(f"`{step.callee.name}` {how} {found.reason}", model.path, model, step.call)  # type: ignore[attr-defined]
    return replace(found, evidence=(evidence,))


def value_provenance(facts: ModuleFacts, expr: cst.BaseExpression | None, scope: Scope, before: int,
                     depth: int = 0) -> Provenance | None:
    """Where a value given to `strategy.run` comes from, when the code shows it (every origin agreeing)."""
    if expr is None or depth > _MAX_DEPTH:
        return None
    facts = scope.owner  # type: ignore[assignment]
    if isinstance(expr, cst.Attribute):
        return None  # `batch.images`, `self.inputs`: a field of something else
    return _agreed([_cited(facts, o.via, _origin_provenance(o, depth)) if o.model is not facts
                    else _origin_provenance(o, depth) for o in facts.values_of(expr, scope, before)])


def _origin_provenance(origin: Origin, depth: int) -> Provenance | None:
    facts: ModuleFacts = origin.model  # type: ignore[assignment]
    expr = origin.expr
    if origin.kind == "element":
        return iterable_provenance(facts, expr, origin.scope, origin.order, depth + 1)  # type: ignore[arg-type]
    if origin.kind != "value" or not isinstance(expr, cst.Call):
        return None
    if dotted(expr.func) == "next":
        return iterable_provenance(facts, call_arg(expr, 0, None), origin.scope, origin.order, depth + 1)
    if origin.path:
        return None
    resolved = facts.resolve(expr.func) or ""
    if resolved.startswith("numpy."):
        return Provenance("undistributed", "a numpy array", expr)
    if resolved in ("tensorflow.constant", "tensorflow.convert_to_tensor"):
        if _python_number(facts, call_arg(expr, 0, "value"), origin.scope, origin.order):
            return None  # a scalar (`tf.constant(epoch)`), not a batch
        return Provenance("undistributed", PLAIN_TENSOR, expr)
    if resolved in _SAME_ORIGIN_OPS:
        found = value_provenance(facts, call_arg(expr, 0, None), origin.scope, origin.order, depth + 1)
        return found if found is not None and found.kind == "undistributed" else None
    return None


_ARRAY_LOADERS = frozenset({"numpy.load", "numpy.loadtxt", "numpy.genfromtxt", "numpy.fromfile"})
# What keeps an array the same data: numpy functions and array methods that convert or reshape it.
_ARRAY_KEEPERS = frozenset({"numpy.array", "numpy.asarray", "numpy.expand_dims", "numpy.reshape", "numpy.squeeze",
                            "numpy.transpose", "keras.utils.to_categorical", "keras.utils.normalize"})
_ARRAY_METHODS = frozenset({"reshape", "astype", "transpose", "copy", "squeeze"})


def loaded_arrays(facts: ModuleFacts, expr: cst.BaseExpression | None, scope: Scope, before: int,
                  depth: int = 0) -> cst.Call | None:
    """The call that loads the numpy arrays `expr` holds, when every value it may have comes from one:
    `keras.datasets.*.load_data()` or `np.load(...)`, through names, unpacking, arithmetic (`x / 255.0`),
    slicing and reshaping. Random or hand-made arrays are not loaded data."""
    if expr is None or depth > _MAX_DEPTH:
        return None
    facts = scope.owner  # type: ignore[assignment]
    if isinstance(expr, cst.BinaryOperation):
        return (loaded_arrays(facts, expr.left, scope, before, depth + 1)
                or loaded_arrays(facts, expr.right, scope, before, depth + 1))
    if isinstance(expr, cst.Subscript):
        return loaded_arrays(facts, expr.value, scope, before, depth + 1)
    if isinstance(expr, cst.Call):
        resolved = facts.resolve(expr.func) or ""
        if resolved in _ARRAY_LOADERS or re.match(r"keras\.datasets\.\w+\.load_data$", resolved):
            return expr
        if resolved in _ARRAY_KEEPERS:
            return loaded_arrays(facts, call_arg(expr, 0, None), scope, before, depth + 1)
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _ARRAY_METHODS and not resolved:
            return loaded_arrays(facts, expr.func.value, scope, before, depth + 1)
        return None
    if dotted(expr) is None or isinstance(expr, cst.Attribute):
        return None
    found = [loaded_arrays(o.model, o.expr, o.scope, o.order, depth + 1)  # type: ignore[arg-type]
             if o.kind == "value" and o.model is facts and o.expr is not expr else None
             for o in facts.values_of(expr, scope, before)]
    return found[0] if found and all(f is not None for f in found) else None


def _python_number(facts: ModuleFacts, value: cst.BaseExpression | None, scope: Scope, before: int) -> bool:
    """A number literal, or a name that only ever holds one or a counter of `range(...)` (`for epoch in
    range(n)`)."""
    if isinstance(value, (cst.Integer, cst.Float)) or literal_int(value) is not None:
        return True
    if not isinstance(value, cst.Name):
        return False
    origins = facts.values_of(value, scope, before)
    return bool(origins) and all(
        (o.kind == "value" and isinstance(o.expr, (cst.Integer, cst.Float)))
        or (o.kind == "element" and isinstance(o.expr, cst.Call) and dotted(o.expr.func) == "range")
        for o in origins)


def _agreed(results: list[Provenance | None]) -> Provenance | None:
    if results and all(r is not None and r.kind == results[0].kind for r in results):  # type: ignore[union-attr]
        return results[0]
    return None


@dataclass(frozen=True)
class TrainingInput:
    """An expression whose batches reach training, and how: `fit`, `distribute` (experimental_distribute_dataset),
    `distribute_fn` (returned by a distribute_datasets_from_function function), `loop` or `next`."""

    scope: Scope
    order: int
    expr: cst.BaseExpression
    statement: cst.CSTNode
    via: str
    distributed: bool = False  # a strategy distributes it: `experimental_distribute_dataset`, or `fit` under one
    one_step: bool = False     # `fit(..., epochs=1, steps_per_epoch=1)`: a single step (a timing), nothing follows it
    unscoped_model: bool = False  # `fit` on a Keras model made, compiled and fitted outside every strategy scope


_NOT_TRAINING = re.compile(r"val|eval|test|infer|predict", re.IGNORECASE)
_PASS_THROUGH = frozenset({"iter", "enumerate", "tqdm"})


def training_inputs(facts: ModuleFacts) -> list[TrainingInput]:
    cached = facts.__dict__.get("_training_inputs")
    if cached is not None:
        return cached
    found: list[TrainingInput] = []
    for call in facts.method_calls("fit", "fit_generator"):
        x = call_arg(call.node, 0, "x" if call.attr == "fit" else "generator")
        if x is not None:
            one_step = all(literal_int(call_arg(call.node, None, k)) == 1 for k in ("epochs", "steps_per_epoch"))
            scoped = under_strategy(facts, call)
            found.append(TrainingInput(call.scope, call.order, x, call.statement, "fit", scoped, one_step,
                                       not scoped and unscoped_model(facts, call)))
    for call in facts.calls:
        if call.attr not in DISTRIBUTE_DATASET_METHODS or not facts.is_strategy(call.receiver):
            continue
        targets = next((a.targets for a in facts.assigns if a.statement is call.statement), ())
        if any(_NOT_TRAINING.search(t) for t in targets) or (targets and _only_evaluated(facts, targets[0])):
            continue  # `eval_iterator = iter(strategy.experimental_distribute_dataset(ds))`
        if len(targets) == 1 and "." not in targets[0] and _private(facts, call) and not facts.read_later(
                targets[0], call.scope, 0):
            continue  # `dist_test = strategy.experimental_distribute_dataset(ds)`, and nothing can read it
        if call.attr == "experimental_distribute_dataset":
            dataset = call_arg(call.node, 0, "dataset")
            if dataset is not None and not _NOT_TRAINING.search(dotted(dataset) or ""):
                found.append(TrainingInput(call.scope, call.order, dataset, call.statement, "distribute", True))
        else:
            for fn in facts.callables_of(call_arg(call.node, 0, "dataset_fn"), call.scope):
                if fn.owner is facts:
                    found.extend(TrainingInput(fn, END_OF_SCOPE, r.value, call.statement, "distribute_fn", True)
                                 for r in fn.returns)
    for loop in training_loops(facts):
        if loop.iter_expr is not None:
            found.append(TrainingInput(loop.scope, loop.order, _unwrap(facts, loop.iter_expr, loop.scope, loop.order),
                                       loop.node, "loop"))
        for call in loop.calls:
            if call.func == "next" and call.loops[-1] is loop:
                iterator = call_arg(call.node, 0, None)
                if iterator is not None:
                    found.append(TrainingInput(call.scope, call.order, _unwrap(facts, iterator, call.scope, call.order),
                                               call.statement, "next"))
    facts.__dict__["_training_inputs"] = found
    return found


# what a call that may train is named: `apply_gradients`, `tape.gradient`, `model.train_step`, `update_weights`
_TRAINING_CALL = re.compile(r"train|grad|minimi[sz]e|optimi[sz]e|update|apply|fit|loss", re.IGNORECASE)


def _only_evaluated(facts: ModuleFacts, name: str) -> bool:
    """Whether the loops over a distributed dataset (`for batch in tqdm(dist_valid):`) run steps that compute
    no gradients, here or in the replica functions they hand to `strategy.run`: an evaluation pipeline, whatever
    its name (`dist_datasetv`). False when no loop over it, or no replica function of its steps, is in sight."""
    loops = [loop for loop in facts.loops if loop.iter_expr is not None and (
        _reads_name(loop.iter_expr, name) or any(o.kind == "value" and isinstance(o.expr, cst.BaseExpression)
                                                 and _reads_name(o.expr, name)  # `bar = tqdm(dist); for s in bar:`
                                                 for o in facts.values_of(loop.iter_expr, loop.scope, loop.order)))]
    if not loops:
        return False
    reached = facts.transitive_callees(c for loop in loops for call in loop.calls if (c := facts.callee(call)))
    runs = [run for run in facts.run_calls if any(run.scope is s for s in reached)
            or any(outer is loop for outer in run.loops for loop in loops)]  # `strategy.run` in the loop itself
    given = [facts.callables_of(facts.replica_fn_expr(run), run.scope) for run in runs]
    if not runs or not all(found and all(fn.owner is facts for fn in found) for found in given):
        return False  # no replica step in sight, or one this module does not define: it may train
    replicas = facts.transitive_callees(fn for found in given for fn in found)
    return not any(_TRAINING_CALL.search(call.func or call.attr or "")
                   for scope in (*loops, *reached, *replicas) for call in scope.calls)


def _private(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether what the call's statement binds is seen only by this module: a function's local, or a name
    bound under `if __name__ == "__main__":`, which no importer runs."""
    return call.scope is not facts.module_scope or any(main_guard(block.test) for block in call.ifs)


def _reads_name(expr: cst.BaseExpression, name: str) -> bool:
    """`name`, or a call that wraps it (`tqdm(name)`, `enumerate(name)`, `iter(name)`)."""
    while isinstance(expr, cst.Call) and expr.args:
        expr = expr.args[0].value
    return dotted(expr) == name


def under_strategy(facts: ModuleFacts, call: CallFact) -> bool:
    """A Keras `fit` (or `evaluate`, `predict`) that runs inside `strategy.scope()`, or whose model was built
    there (here, by a helper that returns it, or by the module that builds it or gives it to this one inside
    the scope): Keras distributes its input itself."""
    if facts.in_strategy_scope(call.scope, call.withs):
        return True
    receiver = dotted(call.receiver)
    if receiver is None:
        return False
    if any(facts.in_strategy_scope(a.scope, a.withs) for a in facts.definitions(receiver, call.scope, call.order)):
        return True
    for origin in facts.values_of(call.receiver, call.scope, call.order):  # a model a helper or module built or passed
        for node, scope in [(origin.expr, origin.scope), *((step.call, step.caller) for step in origin.via)]:
            owner = scope.owner
            made = owner.call_fact(node) if isinstance(owner, ModuleFacts) else None
            if made is not None and owner.in_strategy_scope(made.scope, made.withs):
                return True
    return False


# what makes a Keras model: its classes, a saved one loaded, a model of `keras.applications`
_KERAS_MODEL = re.compile(r"^(tensorflow\.)?keras\.((models\.)?(Sequential|Model|load_model)$|applications\.)")


def unscoped_model(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether a Keras `fit` (not itself in a strategy scope) trains a model that the code shows made, every
    way it can be, by a Keras model class, `load_model` or `keras.applications` outside every strategy scope
    (here, or in a helper of this module that returns it), and that is compiled outside every scope too: Keras
    then fits it on one device, whatever the module's strategies distribute (an Estimator's `train_distribute`)."""
    receiver = dotted(call.receiver)
    origins = facts.values_of(call.receiver, call.scope, call.order) if receiver else []
    if not origins or any(c.attr == "compile" and dotted(c.receiver) == receiver and facts.in_strategy_scope(
            c.scope, c.withs) for c in facts.calls):
        return False
    for origin in origins:
        made = facts.call_fact(origin.expr) if origin.kind == "value" and not origin.via else None
        if made is None or not _KERAS_MODEL.search(facts.resolve(made.func) or "") or facts.in_strategy_scope(
                made.scope, made.withs):
            return False
    return True


def _unwrap(facts: ModuleFacts, expr: cst.BaseExpression, scope: Scope, before: int) -> cst.BaseExpression:
    """`enumerate(ds)`, `iter(ds)`, `tqdm(ds)`, or a name bound to one of them -> `ds`."""
    for _ in range(4):
        if isinstance(expr, cst.Call) and (dotted(expr.func) or "").split(".")[-1] in _PASS_THROUGH and expr.args:
            expr = expr.args[0].value
            continue
        name = dotted(expr)
        found = facts.definitions(name, scope, before) if name else []
        value = found[-1].value if found else None
        if isinstance(value, cst.Call) and (dotted(value.func) or "").split(".")[-1] in _PASS_THROUGH:
            expr = value
            continue
        return expr
    return expr


def paced_by_python(facts: ModuleFacts, loop: LoopFact) -> bool:
    """Whether every dataset a training loop can iterate is fed by a Python generator
    (`Dataset.from_generator`), followed through `enumerate`, `distribute` and the callers in other modules:
    the generator, not the step, then sets the loop's pace."""
    if loop.iter_expr is None:
        return False
    return _from_generator(facts, _unwrap(facts, loop.iter_expr, loop.scope, loop.order), loop.scope, loop.order, 0)


def _from_generator(facts: ModuleFacts, expr: cst.BaseExpression, scope: Scope, before: int, depth: int) -> bool:
    if depth > _MAX_DEPTH:
        return False
    origins = [o for o in facts.values_of(expr, scope, before, depth=depth) if o.kind == "value"]
    if not origins:
        return False
    for origin in origins:
        owner: ModuleFacts = origin.scope.owner  # type: ignore[assignment]
        value = origin.expr
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
                and value.func.attr.value in DISTRIBUTE_DATASET_METHODS:
            given = call_arg(value, 0, "dataset")
            if given is None or not _from_generator(owner, given, origin.scope, origin.order, depth + 1):
                return False
            continue
        chain = owner.dataset_chain(value, origin.scope, origin.order) if isinstance(value, cst.BaseExpression) else None
        if chain is None or not chain.source.endswith(".from_generator"):
            return False
    return True


_EVALUATION = re.compile(r"(^|_)(val|valid|validation|test|eval|evaluation|dev|infer|inference|predict)(_|$)",
                         re.IGNORECASE)
_TRAINING = re.compile(r"(is_)?train(ing)?", re.IGNORECASE)
_EVALUATION_MODES = frozenset({"infer", "inference", "eval", "evaluate", "evaluation", "predict", "test", "val",
                               "valid", "validation"})


def evaluation_step(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether a pipeline step builds an evaluation or inference pipeline: the dataset it is called on or
    assigned to, or a function it lies in, is named so (`ds_val = ds_val.map(...)`, `def test_iterator():`), or
    it lies where a test says so (the body of
    `if validation:` or of `if mode == "eval":`, the `else` of `if is_training:` or of `if mode != "infer":`)."""
    names = [dotted(call.receiver) or "", *(t for a in facts.assigns if a.statement is call.statement for t in a.targets)]
    if any(evaluation_name(name) for name in names if name):
        return True
    scope: Scope | None = call.scope
    while scope is not None and scope.is_function:  # `def test_iterator(...)`, `def make_eval_dataset(...)`
        if evaluation_name(scope.name) and "train" not in scope.name.lower():
            return True
        scope = scope.parent
    for fact in facts.if_facts:
        test = fact.node.test
        if fact.scope is not call.scope:
            continue
        negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
        flag = (dotted(test.expression if negated else test) or "").rpartition(".")[2]  # type: ignore[attr-defined]
        if flag:  # `if validation:` holds an evaluation pipeline, `if is_training: ... else:` one in its else
            evaluation_part = fact.node.body if evaluation_name(flag) else (
                fact.node.orelse if _TRAINING.fullmatch(flag) else None)
            if negated and evaluation_part is not None:
                evaluation_part = fact.node.orelse if evaluation_part is fact.node.body else fact.node.body
            if evaluation_part is not None and in_part(evaluation_part, call.statement):
                return True
            continue
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            continue
        target = test.comparisons[0]
        mode = literal_str(target.comparator) or literal_str(test.left)
        if mode is None or mode.lower() not in _EVALUATION_MODES:
            continue
        if isinstance(target.operator, cst.Equal) and fact.node in call.ifs:
            return True
        if isinstance(target.operator, cst.NotEqual) and fact.node.orelse and in_part(fact.node.orelse, call.statement):
            return True
    return False


def cached_later(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether a pipeline step runs in the first epoch only: a later `cache()` or `snapshot()` of this
    module's pipelines holds it, with no `repeat()` between."""
    for cache in facts.method_calls("cache", "snapshot"):
        chain = facts.dataset_chain(cache.node, cache.scope, cache.order)
        op = next((op for op in chain.ops if op.call is call.node), None) if chain is not None else None
        if op is not None and runs_once(op, chain.ops):  # type: ignore[union-attr]
            return True
    return False


# Methods of tf.data's Dataset that numpy arrays, pandas objects and Spark frames do not have: on a source the
# code does not show (a parameter, an attribute set elsewhere), one of them says the chain is a pipeline.
DATASET_ONLY_METHODS = frozenset({"batch", "padded_batch", "ragged_batch", "shuffle", "prefetch", "interleave",
                                  "flat_map", "unbatch", "rebatch", "shard", "with_options", "parallel_interleave"})


# Sources already in memory, and the steps that make an element cost real work: without one of those an element
# is a slice and a copy. `list_files` globs once, where it is made, and hands out the names.
_IN_MEMORY = frozenset({f"tensorflow.data.Dataset.{name}" for name in ("from_tensor_slices", "from_tensors", "range",
                                                                         "list_files")})
_ELEMENT_WORK = frozenset({"map", "interleave", "flat_map", "parallel_interleave", "apply", "filter"})


_RANDOM_DATA = re.compile(r"^(tensorflow\.random\.\w+|tensorflow\.random_\w+|numpy\.random\.\w+)$")


def random_data(facts: ModuleFacts, chain: DatasetChain) -> bool:
    """A pipeline over tensors drawn at random where it is made (`from_tensor_slices((tf.random.uniform(...),
    ...))`), or built in the branch of a fake-data switch (`if use_fake_data:`): a demo's or a benchmark's
    synthetic data, whose order and augmentation no one learns from."""
    owner: ModuleFacts = chain.source_scope.owner if chain.source_scope is not None else facts  # type: ignore[assignment]
    steps = [(owner, chain.source_call), *((op.scope.owner if op.scope is not None else facts, op.call) for op in chain.ops)]
    if any(_in_fake_data_branch(module, call) for module, call in steps):  # type: ignore[arg-type]
        return True
    if chain.source not in _IN_MEMORY:
        return False
    given = [a.value for a in chain.source_call.args if a.keyword is None]
    return bool(given) and all(_drawn(owner, value) for value in given)


_FAKE_DATA = re.compile(r"(^|_)(fake|synthetic|dummy)(_|$)", re.IGNORECASE)


def _in_fake_data_branch(facts: ModuleFacts, node: cst.Call) -> bool:
    """Whether a call lies in the body of `if use_fake_data:` (`if FLAGS.synthetic:`, `if self._dummy_data:`)."""
    call = facts.call_fact(node)
    return call is not None and any(
        _FAKE_DATA.search((dotted(branch.test) or "").rpartition(".")[2]) and in_part(branch.body, call.statement)
        for branch in call.ifs)


def _drawn(facts: ModuleFacts, value: cst.BaseExpression) -> bool:
    """Whether every leaf of a tuple, list or dict of tensors is a random draw (`tf.random.uniform(...)`)."""
    if isinstance(value, (cst.Tuple, cst.List)):
        return bool(value.elements) and all(_drawn(facts, e.value) for e in value.elements)
    if isinstance(value, cst.Dict):
        return bool(value.elements) and all(isinstance(e, cst.DictElement) and _drawn(facts, e.value)
                                            for e in value.elements)
    return isinstance(value, cst.Call) and bool(_RANDOM_DATA.match(facts.resolve(value.func) or ""))


def slices_of_memory(source: str, steps: tuple[DatasetOp, ...]) -> bool:
    """A pipeline over arrays already in memory whose elements no step computes: its batches cost a copy."""
    return source in _IN_MEMORY and not any(op.method in _ELEMENT_WORK and not op.regroups_only for op in steps)


def training_chains(facts: ModuleFacts) -> list[tuple[DatasetChain, TrainingInput]]:
    """`tf.data` pipelines that feed training (evaluation and prediction pipelines are not among them), also
    those on a source the code does not show (`def setup(self, dataset): ... dataset.shuffle(n).batch(b)`),
    whose chain then has source "" and holds a method only datasets have."""
    cached = facts.__dict__.get("_training_chains")
    if cached is None:
        cached = []
        for use in training_inputs(facts):
            chain = facts.dataset_chain(use.expr, use.scope, use.order, any_source=True)
            if chain is not None and (chain.source or DATASET_ONLY_METHODS.intersection(chain.methods())):
                cached.append((chain, use))
        facts.__dict__["_training_chains"] = cached
    return cached


@dataclass(frozen=True)
class FedElsewhere:
    """A pipeline built in this module that another project module trains on: its steps and its source
    call that lie in this module (as this module's nodes), and where it is trained on."""

    ops: tuple[DatasetOp, ...]
    source: str                   # the chain's source ("" where not shown)
    source_call: cst.Call | None  # None: the source is not in this module
    evidence: Evidence
    use: TrainingInput            # how the other module trains on it (its scope and nodes are that module's)
    final_batch: DatasetOp | None = None  # the chain's last `batch`/`padded_batch`, when it is one of `ops`
    steps: tuple[DatasetOp, ...] = ()  # the pipeline's steps after its source, here and in the other module
    ends_here: bool = False        # its last step (or, with none, its source) is in this module
    other_sources: tuple[str, ...] = ()  # the sources of the other pipelines the input may be (`if flag: ...`)


def fed_elsewhere(facts: ModuleFacts) -> list[FedElsewhere]:
    """The pipelines of this module that the project's modules importing it train on (their own training
    inputs, followed back into this module), outside test code."""
    cached = facts.__dict__.get("_fed_elsewhere")
    if cached is None:
        cached = facts.__dict__["_fed_elsewhere"] = list(_fed_elsewhere(facts))
    return cached


def _fed_elsewhere(facts: ModuleFacts) -> Iterator[FedElsewhere]:
    if facts.loader is None or facts.file is None:
        return
    home = facts.file.resolve()
    for other in _training_modules(facts, home):
        for found, use in training_chains(other):
            for chain in (found, *found.alternatives):
                others = tuple(c.source for c in (found, *found.alternatives) if c is not chain)
                yield from _fed_here(facts, home, other, chain, use, others)


def _fed_here(facts: ModuleFacts, home: Path, other: ModuleFacts, chain: DatasetChain, use: TrainingInput,
              others: tuple[str, ...]) -> Iterator[FedElsewhere]:
    """The part of one pipeline that another module trains on that lies in this module, if any."""
    if in_test_code(other, use.scope):
        return  # a unit test that fits a few batches trains nothing
    here = [op for op in chain.ops if _in_file(op.scope, home)]
    source_here = _in_file(chain.source_scope, home)
    copy = here[0].scope.owner if here else chain.source_scope.owner if source_here else None
    # The importer sees this module as parsed from disk: its nodes are this module's only if the
    # text is the same (an editor's unsaved buffer is not), and then the n-th call is the n-th call.
    if not isinstance(copy, SemanticModel) or copy.source_lines != facts.source_lines:
        return
    index = {id(call.node): number for number, call in enumerate(copy.calls)}
    mine = [facts.calls[index[id(op.call)]] for op in here if id(op.call) in index]
    if len(mine) < len(here) or (source_here and id(chain.source_call) not in index):
        return
    ops = tuple(DatasetOp(op.method, call.node, call.scope) for op, call in zip(here, mine))
    source_call = facts.calls[index[id(chain.source_call)]].node if source_here else None
    what = f"trained on in `{use.scope.name}`" if use.scope.is_function else "trained on"  # placed at path:line
    last = chain.last_batch()
    final = next((mapped for op, mapped in zip(here, ops) if op is last), None)
    own = chain.own_ops
    ends_here = bool(here) and bool(own) and own[-1] is here[-1] or not own and source_here
    yield FedElsewhere(ops, chain.source, source_call,
                       Evidence(what, other.path, other, use.expr), use, final,
                       own, ends_here, others)


def _training_modules(facts: ModuleFacts, home: Path) -> list[ModuleFacts]:
    """The modules that may train on this one's pipelines: those importing it, and the project modules they
    import (`trainer.train(loader.dataset())` in train.py runs the loop of trainer.py)."""
    found: dict[Path, ModuleFacts] = {}
    assert facts.loader is not None
    for consumer in facts.loader.consumers(facts):
        for module in (consumer, *consumer.imported_modules()):
            if isinstance(module, ModuleFacts) and module.file is not None and module.file.resolve() != home:
                found.setdefault(module.file.resolve(), module)
    return list(found.values())


def _in_file(scope: Scope | None, home: Path) -> bool:
    owner = scope.owner if scope is not None else None
    return isinstance(owner, SemanticModel) and owner.file is not None and owner.file.resolve() == home
