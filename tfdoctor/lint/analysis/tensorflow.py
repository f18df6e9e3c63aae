"""TensorFlow knowledge over the semantic model: what a module's values are in `tf.distribute` terms.

`ModuleFacts` adds to the generic model (`semantic/model.py`) the distribution facts every rule reads:
strategies (by construction, `get_strategy()`, `a or MirroredStrategy()`, parameters named or annotated so),
`strategy.run` calls and their replica functions (also a Keras `train_step` override, and functions given to a
home-made decorator that calls `strategy.run`), `tf.function`-wrapped functions and the code that runs in a
graph, `strategy.scope()` blocks and what they call, and `tf.data` pipelines (`DatasetChain`: a source and the
methods applied, continued through assignments, returns and other project modules). Every name is resolved
by the model's one lookup, `values_of`; nothing here walks a tree.
"""

from __future__ import annotations

import itertools

import re
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterator, Sequence

import libcst as cst
import libcst.matchers as m

from tfdoctor.lint.findings import Evidence
from tfdoctor.lint.names import call_arg, dotted, string_key, value_alternatives
from tfdoctor.lint.semantic.collector import END_OF_SCOPE, CallFact, Scope, WithFact
from tfdoctor.lint.semantic.model import LIBRARIES, ModuleLoader, SemanticModel, Step

RUN_METHODS = frozenset({"run", "experimental_run_v2"})
DATASET_METHODS = frozenset(
    {
        "map", "batch", "padded_batch", "ragged_batch", "shuffle", "repeat", "prefetch", "cache", "filter",
        "interleave", "flat_map", "take", "skip", "unbatch", "rebatch", "shard", "with_options", "apply",
        "concatenate", "enumerate", "window", "snapshot", "ignore_errors", "unique", "scan",
        "group_by_window", "bucket_by_sequence_length", "map_with_legacy_function", "parallel_interleave",
    }
)
DISTRIBUTE_DATASET_METHODS = frozenset(
    {"experimental_distribute_dataset", "distribute_datasets_from_function",
     "experimental_distribute_datasets_from_function"}
)
_STRATEGY_CTOR = re.compile(r"^tensorflow\.distribute\.(experimental\.)?\w*Strategy$")
_STRATEGY_GETTERS = frozenset({"tensorflow.distribute.get_strategy"})
STRATEGY_WORD = re.compile(r"(^|_)strategy$", re.IGNORECASE)
_SCOPE_HELPER = re.compile(r"(^|[._])strategy_scope$", re.IGNORECASE)  # `get_strategy_scope(strategy)`
# Sources outside `tf.data` that give a `tf.data.Dataset` (Keras utilities batch it themselves, 32 by default).
_KERAS_SOURCES = re.compile(
    r"^keras\.(utils|preprocessing|preprocessing\.image|preprocessing\.text)\."
    r"(image|text|audio|timeseries)_dataset_from_(directory|array)$"
)
_TFDS_SOURCES = frozenset({"tensorflow_datasets.load", "tensorflow_datasets.data_source"})
_JOINS = (".Dataset.zip", ".sample_from_datasets", ".choose_from_datasets")  # sources that take other pipelines
_KERAS_MODEL_BASES = re.compile(r"^keras\.(models\.)?Model$|^keras\.Model$")


_BATCHING_METHODS = frozenset({"batch", "padded_batch", "ragged_batch"})
# Given to `apply`: functions that batch, and (with them) those that only regroup or reorder elements.
_BATCHING_FUNCTIONS = frozenset({"dense_to_ragged_batch", "dense_to_sparse_batch", "batch_and_drop_remainder",
                                 "padded_batch_and_drop_remainder"})
_REGROUPING_FUNCTIONS = _BATCHING_FUNCTIONS | {"unbatch", "shuffle_and_repeat"}


@dataclass(frozen=True)
class DatasetOp:
    method: str
    call: cst.Call
    scope: Scope | None = None  # where the call is (None: where the chain is used)

    @property
    def applied(self) -> tuple[str, cst.Call] | None:
        """For `apply(tf.data.experimental.f(...))`: the transformation's name (`f`) and its call."""
        inner = call_arg(self.call, 0, "transformation_func") if self.method == "apply" else None
        return ((dotted(inner.func) or "").rsplit(".", 1)[-1], inner) if isinstance(inner, cst.Call) else None

    @property
    def batching_call(self) -> cst.Call | None:
        """The call that batches here: `batch(n)` itself, or the function `apply` is given
        (`apply(tf.data.experimental.dense_to_ragged_batch(n))`)."""
        if self.method in _BATCHING_METHODS:
            return self.call
        applied = self.applied
        return applied[1] if applied is not None and applied[0] in _BATCHING_FUNCTIONS else None

    @property
    def regroups_only(self) -> bool:
        """An `apply` of a transformation that only batches, unbatches or shuffles the elements
        (`apply(tf.contrib.data.batch_and_drop_remainder(n))`): no work on each element."""
        applied = self.applied
        return applied is not None and applied[0] in _REGROUPING_FUNCTIONS


def runs_once(op: DatasetOp, steps: Sequence[DatasetOp]) -> bool:
    """Whether `op` (one of `steps`, a pipeline's steps in order) runs in the first epoch only: a `cache()`
    or `snapshot()` follows it with no `repeat()` between (an endless dataset never finishes filling the cache)."""
    index = next((i for i, step in enumerate(steps) if step.call is op.call), None)
    return index is not None and cached_before_repeat(steps[index + 1:])


def cached_before_repeat(steps: Sequence[DatasetOp]) -> bool:
    """Whether a `cache()` or `snapshot()` comes among these steps before any `repeat()`: what comes before them
    runs in the first epoch only."""
    for step in steps:
        if step.method == "repeat":
            return False
        if step.method in ("cache", "snapshot"):
            return True
    return False


# A bound on how deep one pipeline lookup may nest (a cycle stops sooner, at the question it is already asking). Each
# `ds = ds.map(...)` reassignment is one level, and an input function of twenty steps is not rare. A question is
# answered once, whichever rule asks first and from however deep, so the bound must not cut short ordinary code.
_MAX_CHAIN_DEPTH = 48
# A bound on the other pipelines one may be: each `if flag: ds = ds.map(f)` doubles them, and twenty such flags
# (augmentation switches) made a million, which took minutes to build. Past it, the first ones stand for all.
_MAX_ALTERNATIVES = 64


# A bound on the lookups one outermost question may make. An answer cut short is not remembered (it holds only
# where it was asked from), so a decoder of many `if flag: d = d.op(...)` steps whose chain is cut somewhere asked
# for the same earlier pipelines again along every path: one 640-line file took over half an hour. Past the bound
# the question has no answer, and the rules that asked it stay silent.
_MAX_CHAIN_STEPS = 20_000


class _Cuts:
    """How many pipeline lookups have been cut short (too deep, or a cycle) so far in this process, and how many
    the outermost question now asked may still make (None when none is being asked)."""

    made = 0
    steps_left: int | None = None


class _OutOfSteps(Exception):
    """The outermost pipeline question made more lookups than `_MAX_CHAIN_STEPS`."""


@dataclass(eq=False)
class DatasetChain:
    """A `tf.data` pipeline: its source and the methods applied, in order. `via` lists the calls into other
    project modules it was followed through: a finding about it is placed on the first of them."""

    source: str  # canonical qualified name of the source call
    source_call: cst.Call
    ops: tuple[DatasetOp, ...]
    scope: Scope
    via: tuple[Step, ...] = ()
    source_scope: Scope | None = None  # where the source call is
    alternatives: tuple[DatasetChain, ...] = ()  # the other pipelines it may be (`if train: ... else: ...`)
    joined: int = 0  # how many of `ops`, first, are the steps of the pipelines its source joins (`zip`)

    @property
    def own_ops(self) -> tuple[DatasetOp, ...]:
        """The steps after the source: the joined pipelines' own steps left out."""
        return self.ops[self.joined:]

    def methods(self) -> list[str]:
        return [op.method for op in self.ops]

    def last(self, method: str) -> DatasetOp | None:
        found = [op for op in self.ops if op.method == method]
        return found[-1] if found else None

    @property
    def batches_at_source(self) -> bool:
        """Keras' `*_dataset_from_directory(batch_size=...)` batches (32 unless `batch_size=None`)."""
        if not _KERAS_SOURCES.match(self.source):
            return False
        size = call_arg(self.source_call, None, "batch_size")
        return not (isinstance(size, cst.Name) and size.value == "None")

    @property
    def prefetches_at_source(self) -> bool:
        """Keras' dataset utilities end in `prefetch(AUTOTUNE)` themselves."""
        return bool(_KERAS_SOURCES.match(self.source))

    def last_batch(self) -> DatasetOp | None:
        """The step that batches last."""
        return next((op for op in reversed(self.ops) if op.batching_call is not None), None)

    def batch_size(self) -> tuple[cst.Call, cst.BaseExpression | None] | None:
        """The call that batches last and its size expression (None: Keras' default of 32)."""
        batch = self.last_batch()
        if batch is not None:
            call = batch.batching_call
            return call, call_arg(call, 0, "batch_size")  # type: ignore[arg-type]
        if self.batches_at_source:
            return self.source_call, call_arg(self.source_call, None, "batch_size")
        return None

    def place(self, node: cst.CSTNode, op: DatasetOp | None) -> tuple[cst.CSTNode, tuple[Evidence, ...]] | None:
        """Where to report something about `node` (of `op`, None: of the source): the node itself when it
        lies in the module the chain is used in, else the call that brings the chain in from another
        module (for the source, the last such call in this module: `load(files)`, not the `augment(ds)`
        given its result), with the node as evidence; None for a node of another module that no call
        brings in (a pipeline imported as a module variable: that module's own lint reports it)."""
        home = self.scope.owner
        where = op.scope if op is not None and op.scope is not None else self.source_scope
        if where is None or where.owner is home:
            return node, ()
        if not self.via:
            return None
        model = where.owner
        what = f"`{op.method}`" if op is not None else "the pipeline's source"
        call = self.via[0].call if op is not None else next(  # the source: the call here that brings it in
            (found for step in reversed(self.via) if (found := home.own_call(step.call, step.caller.owner))),
            self.via[0].call)
        return call, (Evidence(f"{what} in `{self.via[-1].callee.name}`", model.path, model, node,
                                           subject=True),)


class ModuleFacts(SemanticModel):
    """Facts about one module: the semantic model plus what its values are for `tf.distribute`."""

    def __init__(self, module: cst.Module, path: str, source_lines: list[str],
                 loader: ModuleLoader | None = None, file: Path | None = None,
                 recorded_replicas: tuple[int, ...] = ()) -> None:
        super().__init__(module, path, source_lines, loader, file)
        self.recorded_replicas = recorded_replicas  # a notebook's: the replica counts its saved outputs show

    # -- tf.function ----------------------------------------------------------------------------------
    def _is_tf_function_ref(self, node: cst.BaseExpression) -> bool:
        target = node.func if isinstance(node, cst.Call) else node
        if isinstance(target, cst.Name) and self._bound_to_tf_function(target.value):
            return True
        name = self.resolve(target)
        return name == "tensorflow.function" or (name is not None and self.memo(
            ("returns tf.function", name), lambda: self._wraps_tf_function(name)))

    def _wraps_tf_function(self, qualified: str) -> bool:
        """A project's own decorator that is or returns `tf.function(...)`: the module-level function `qualified`
        names, in a project module, returns a call of `tf.function` (TF-Agents' `common.function`), or the name is
        bound to `tf.function` there, in any branch (`mode_decor = tf.function if graph_mode else do_nothing`)."""
        module, _, function = qualified.rpartition(".")
        other = self.loader.load(self, module, 0) if module and self.loader is not None else None
        if other is None or not isinstance(other, ModuleFacts):
            return False
        if other._bound_to_tf_function(function):
            return True
        found = other.function_named(function, other.module_scope)
        return found is not None and any(isinstance(r.value, cst.Call) and other.resolve(r.value.func) ==
                                         "tensorflow.function" for r in found.returns)

    def _bound_to_tf_function(self, name: str) -> bool:
        """Whether a module-level assignment binds `name` to `tf.function` itself, in any branch: a decorator that
        may make a graph function, whichever the configuration picks."""
        return any(name in a.targets and a.operator == "=" and any(
            self.resolve(value) == "tensorflow.function" for value in value_alternatives(a.value))
            for a in self.module_scope.assigns)

    @cached_property
    def _arithmetic(self) -> list[cst.BinaryOperation]:
        """The module's divisions and multiplications: walked once, when a rule asks for either."""
        found = m.findall(self.module, m.BinaryOperation(operator=m.Divide() | m.FloorDivide() | m.Multiply()))
        return [node for node in found if isinstance(node, cst.BinaryOperation)]

    @cached_property
    def divisions(self) -> list[cst.BinaryOperation]:
        """The module's divisions (`x / n`, `x // n`)."""
        return [node for node in self._arithmetic if isinstance(node.operator, (cst.Divide, cst.FloorDivide))]

    @cached_property
    def products(self) -> list[cst.BinaryOperation]:
        """The module's multiplications (`x * n`)."""
        return [node for node in self._arithmetic if isinstance(node.operator, cst.Multiply)]

    @cached_property
    def divisors(self) -> frozenset[str]:
        """The names the module divides by (`self.` left out)."""
        return frozenset(name.removeprefix("self.") for node in self.divisions
                         if (name := dotted(node.right)) is not None)

    @cached_property
    def tf_functions(self) -> list[Scope]:
        """Functions and lambdas decorated with or wrapped by `tf.function`."""
        found: dict[int, Scope] = {}
        for scope in self.scopes:
            if any(self._is_tf_function_ref(d.decorator) for d in scope.decorators):
                found[id(scope)] = scope
        for call in self.calls:
            if call.func is not None and self.resolve(call.func) == "tensorflow.function":
                for wrapped in self.callables_of(call_arg(call.node, 0, "func"), call.scope, before=call.order):
                    found[id(wrapped)] = wrapped
        return list(found.values())

    def decorated_out_of_sight(self, scope: Scope) -> bool:
        """Whether a decorator of the function comes from a project module the linter cannot read (`from
        pkg.train_util import mode_decor`, with no `pkg/` in the project): it may make a `tf.function`."""
        for decorator in scope.decorators:
            expr = decorator.decorator
            head = (dotted(expr.func if isinstance(expr, cst.Call) else expr) or "").partition(".")[0]
            top = self.aliases.get(head, "").partition(".")[0]
            if top and top not in LIBRARIES and top not in sys.stdlib_module_names and self.imported(head) is None:
                return True
        return False

    def tf_function_made_by(self, call: CallFact) -> list[cst.Call | None] | None:
        """For a call that surely runs a `tf.function`: the `tf.function(...)` calls that make it, whose arguments
        configure it (None for a bare `@tf.function`); None when the call may run something else. A function
        wrapped somewhere (`f = tf.function(g)`) but called by its own name (`g(x)`) runs eagerly."""
        wrappers = [_tf_function_call(o.model, o.expr) if o.kind == "value" and not o.path else None
                    for o in self.values_of(call.node.func, call.scope, call.order)]
        if wrappers and all(wrappers):
            return wrappers  # type: ignore[return-value]
        made: list[cst.Call | None] = []
        functions = self.callables_of(call.node.func, call.scope, before=call.order)
        for function in functions:
            decorator = next((d.decorator for d in function.decorators
                              if function.owner._is_tf_function_ref(d.decorator)), False)  # type: ignore[attr-defined]
            if decorator is False:
                return None
            made.append(decorator if isinstance(decorator, cst.Call) else None)
        return made or None

    def runs_in_graph(self, scope: Scope) -> bool:
        """True when a function is a tf.function, nested in one, or only ever called from graph code (a
        tf.function, or while a TF 1 graph is built: `with tf.Graph().as_default():`)."""
        return self._graph_scopes.get(id(scope), False)

    @cached_property
    def _graph_scopes(self) -> dict[int, bool]:
        graph = {id(s): True for s in self.tf_functions}
        for scope in self.tf_functions:
            for inner in self._nested(scope):
                graph[id(inner)] = True
        changed = True
        while changed:  # functions whose every caller runs in a graph run in one too
            changed = False
            for scope in self.scopes:
                if id(scope) in graph or not scope.is_function:
                    continue
                callers = self.callers_of(scope)
                if callers and all(graph.get(id(c.scope)) or self.building_graph(c) for c in callers):
                    graph[id(scope)] = True
                    changed = True
        return graph

    def building_graph(self, call: CallFact) -> bool:
        """A call made while a TF 1 graph is being built: in `with tf.Graph().as_default():` (or `with
        graph.as_default():` of a graph made so, or got from `get_default_graph()` or Keras' `backend.get_graph()`),
        or in a branch taken only outside eager execution (the `else` of `if context.executing_eagerly():`)."""
        if any(_outside_eager(branch, call.statement) for branch in self._eager_tests(call.scope)):
            return True
        for block in call.withs:
            for item in block.items:
                if not (isinstance(item, cst.Call) and isinstance(item.func, cst.Attribute)
                        and item.func.attr.value == "as_default"):
                    continue
                made = item.func.value
                values = [made] if isinstance(made, cst.Call) else [
                    o.expr for o in self.values_of(made, block.scope) if isinstance(o.expr, cst.Call)]
                if values and all(_makes_graph(self.resolve(v.func) or dotted(v.func)) for v in values):  # type: ignore[union-attr]
                    return True
        return False

    def _eager_tests(self, scope: Scope) -> list[cst.If]:
        """The `if ...executing_eagerly():` statements of a scope, from the `if`s the walk recorded."""
        def by_scope() -> dict[int, list[cst.If]]:
            found: dict[int, list[cst.If]] = {}
            for fact in self.if_facts:
                if _eager_test(fact.node) is not None:
                    found.setdefault(id(fact.scope), []).append(fact.node)
            return found
        return self.memo("eager-tests", by_scope).get(id(scope), [])

    def _nested(self, scope: Scope) -> Iterator[Scope]:
        for child in scope.children:
            yield child
            yield from self._nested(child)

    # -- strategies -----------------------------------------------------------------------------------
    def is_strategy_constructor(self, node: cst.BaseExpression | None) -> bool:
        if not isinstance(node, cst.Call):
            return False
        name = self.resolve(node.func)
        return name is not None and (bool(_STRATEGY_CTOR.match(name)) or name in _STRATEGY_GETTERS)

    @cached_property
    def strategy_names(self) -> frozenset[str]:
        """Dotted names that hold a strategy: assigned from a constructor or `get_strategy()`, copied from
        one, or parameters named or annotated as strategies (and attributes set from those)."""
        names: set[str] = set()
        for scope in self.scopes:
            for param in scope.params:
                annotation = scope.annotations.get(param, "")
                if STRATEGY_WORD.search(param) or annotation.endswith("Strategy"):
                    names.add(param)
        for _ in range(3):
            for assign in self.assigns:
                if assign.operator != "=" or len(assign.targets) != 1:
                    continue
                if any(self.is_strategy_constructor(v) or (dotted(v) or "") in names
                       for v in value_alternatives(assign.value)):
                    names.add(assign.targets[0])
        return frozenset(names)

    @cached_property
    def _non_strategy_names(self) -> frozenset[str]:
        """Names assigned something that is not a strategy (`None`, a placeholder set later, does not count)."""
        return frozenset(
            t for a in self.assigns for t in a.targets
            if t not in self.strategy_names and not (isinstance(a.value, cst.Name) and a.value.value == "None")
        )

    def is_strategy(self, node: cst.BaseExpression | None) -> bool:
        """A strategy by construction, by assignment, or a name such as `strategy`/`self.strategy` that the
        module uses without assigning anything else to it (imported or set up elsewhere)."""
        if node is None:
            return False
        if self.is_strategy_constructor(node):
            return True
        name = dotted(node)
        if name is None:
            return False
        if name in self.strategy_names:
            return True
        return bool(STRATEGY_WORD.search(name.split(".")[-1])) and name not in self._non_strategy_names

    @cached_property
    def strategy_constructions(self) -> list[CallFact]:
        return [c for c in self.calls if self.is_strategy_constructor(c.node)]

    @cached_property
    def run_calls(self) -> list[CallFact]:
        """`strategy.run(fn, ...)`, `strategy.experimental_run_v2(...)`, `strategy.extended.call_for_each_replica(...)`.
        A call with no function to run (`self.strategy.run()` of a search strategy) is not one."""
        found = []
        for call in self.calls:
            receiver = call.receiver
            if not call.node.args:
                continue
            if call.attr in RUN_METHODS and self.is_strategy(receiver):
                found.append(call)
            elif (
                call.attr == "call_for_each_replica"
                and isinstance(receiver, cst.Attribute)
                and receiver.attr.value == "extended"
                and self.is_strategy(receiver.value)
            ):
                found.append(call)
        return found

    def replica_fn_expr(self, run_call: CallFact) -> cst.BaseExpression | None:
        return call_arg(run_call.node, 0, "fn")

    def replica_args(self, run_call: CallFact, starred: bool = False) -> list[cst.BaseExpression]:
        """The positional inputs given to the replica function (`args=(a, b)`); with `starred`, also what
        `*x` unpacks (`x`)."""
        args = call_arg(run_call.node, 1, "args")
        if isinstance(args, (cst.Tuple, cst.List)):
            return [element.value for element in args.elements
                    if starred or not isinstance(element, cst.StarredElement)]
        return [args] if args is not None else []

    @cached_property
    def replica_functions(self) -> list[Scope]:
        """Every callable passed to a run call (through names, attributes, parameters and home-made
        decorators, here or in another project module), for lambdas the module functions their body calls,
        and the `train_step` override of a Keras model subclass in a module that sets up a strategy (Keras
        runs it once per replica)."""
        found: dict[int, Scope] = {}
        for run_call in self.run_calls:
            for scope in self.callables_of(self.replica_fn_expr(run_call), run_call.scope):
                if scope.owner is not self:
                    continue
                found[id(scope)] = scope
                if isinstance(scope.node, cst.Lambda):
                    for call in scope.calls:
                        target = self.callee(call)
                        if target is not None:
                            found[id(target)] = target
        for scope in self._decorated_by_foreign_runner():
            found[id(scope)] = scope
        if self.strategy_constructions or self.scope_blocks:
            for class_fact in self.classes:
                step = class_fact.methods.get("train_step")
                if step is not None and any(_KERAS_MODEL_BASES.match(self.resolve(b) or "") for b in class_fact.bases):
                    found[id(step)] = step
        return list(found.values())

    def _decorated_by_foreign_runner(self) -> Iterator[Scope]:
        """Functions of this module decorated by another project module's decorator that gives its argument
        to `strategy.run` (a decorator of this module is followed by the lookup itself)."""
        if self.loader is None:
            return
        for scope in self.scopes:
            for decorator in scope.decorators:
                for target in self.decorator_functions(decorator, scope):
                    other = target.owner
                    if other is self or not isinstance(other, ModuleFacts) or not target.value_params():
                        continue
                    first = target.value_params()[0]
                    if any(dotted(other.replica_fn_expr(run)) == first and run.scope.within(target)
                           for run in other.run_calls):
                        yield scope

    # -- strategy.scope() -----------------------------------------------------------------------------
    @cached_property
    def scope_blocks(self) -> list[WithFact]:
        """`with strategy.scope():` blocks."""
        return [w for w in self.withs if any(self.strategy_scope_call(item, w.scope) is not None for item in w.items)]

    def strategy_scope_call(self, item: cst.BaseExpression, scope: Scope) -> cst.Call | None:
        """The `strategy.scope()` call a `with` item enters: the item itself, a helper named for it
        (`get_strategy_scope(strategy)`), or the call a name holds (`scope = strategy.scope()` ... `with scope:`)
        when every assignment of the name is one."""
        if isinstance(item, cst.Name):
            assigned = self.definitions(item.value, scope)
            calls = [self.strategy_scope_call(a.value, a.scope) for a in assigned
                     if not isinstance(a.value, cst.Name)]
            return calls[0] if assigned and len(calls) == len(assigned) and None not in calls else None
        if (isinstance(item, cst.Call) and isinstance(item.func, cst.Attribute) and item.func.attr.value == "scope"
                and self.is_strategy(item.func.value)):
            return item
        if isinstance(item, cst.Call) and _SCOPE_HELPER.search(dotted(item.func) or ""):
            return item  # a helper that enters it (the official models' `get_strategy_scope(strategy)`)
        return None

    @cached_property
    def scoped_functions(self) -> list[Scope]:
        """Functions called (directly or not) from inside a `strategy.scope()` block."""
        roots = [t for w in self.scope_blocks for c in w.calls if (t := self.callee(c)) is not None]
        return self.transitive_callees(roots)

    def in_strategy_scope(self, scope: Scope, withs: tuple[WithFact, ...]) -> bool:
        """Whether code at this point runs inside `strategy.scope()`."""
        blocks = {id(b) for b in self.scope_blocks}
        if any(id(w) in blocks for w in withs):
            return True
        current: Scope | None = scope
        scoped = {id(s) for s in self.scoped_functions}
        while current is not None and current.is_function:
            if id(current) in scoped:
                return True
            current = current.parent
        return False

    # -- tf.data --------------------------------------------------------------------------------------
    def is_dataset_source(self, node: cst.BaseExpression, path: tuple[int, ...] = ()) -> bool:
        """A call that makes a `tf.data.Dataset`: `tf.data.*` constructors, `tfds.load(..., split=...)` (item
        i of it when `split` is a list), `builder.as_dataset(split=...)`, Keras' `*_dataset_from_directory`."""
        if not isinstance(node, cst.Call):
            return False
        name = self.resolve(node.func)
        if name is not None and name.startswith("tensorflow.data.") and not path:
            return name.split(".")[-1] not in ("AUTOTUNE", "Options", "experimental")
        if name is not None and _KERAS_SOURCES.match(name) and not path:
            return True
        if name in _TFDS_SOURCES or (isinstance(node.func, cst.Attribute) and node.func.attr.value == "as_dataset"):
            split = call_arg(node, 1 if name in _TFDS_SOURCES else None, "split")
            with_info = call_arg(node, None, "with_info")
            prefix = (0,) if isinstance(with_info, cst.Name) and with_info.value == "True" else ()
            if path[:len(prefix)] != prefix:
                return False
            rest = path[len(prefix):]
            if isinstance(split, (cst.List, cst.Tuple)):
                return len(rest) == 1 and 0 <= rest[0] < len(split.elements)
            return split is not None and not rest
        return False

    def _split_of_all_splits(self, node: cst.BaseExpression, scope: Scope, before: int) -> cst.Call | None:
        """`datasets["train"]` where `datasets` is what `tfds.load(...)` without `split=` returns (a dict of
        splits; item 0 of it with `with_info=True`): the load call."""
        if not isinstance(node, cst.Subscript) or string_key(node) is None:
            return None
        origins = self.values_of(node.value, scope, before)
        if len(origins) != 1 or origins[0].kind != "value" or not isinstance(origins[0].expr, cst.Call):
            return None
        load, owner = origins[0].expr, origins[0].model
        if owner is not self or owner.resolve(load.func) not in _TFDS_SOURCES or call_arg(load, 1, "split") is not None:
            return None
        with_info = call_arg(load, None, "with_info")
        expected = (0,) if isinstance(with_info, cst.Name) and with_info.value == "True" else ()
        return load if origins[0].path == expected else None

    def _instance_join(self, node: cst.BaseExpression, path: tuple[int, ...]) -> bool:
        """`ds.zip((a, b))`: the static `Dataset.zip` called on an instance (the instance plays no part)."""
        return (not path and isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                and node.func.attr.value == "zip" and self.resolve(node.func) is None)

    def _joined_ops(self, node: cst.Call, name: str, seen_from: Scope, before: int, depth: int,
                    any_source: bool) -> tuple[DatasetOp, ...]:
        """The steps of the pipelines a join (`Dataset.zip`, `sample_from_datasets`, `choose_from_datasets`)
        takes in: each branch's `map` is the training pipeline's too. Branches the code does not show are
        left out."""
        if not name.endswith(_JOINS):
            return ()
        given = call_arg(node, 0, "datasets")
        if isinstance(given, (cst.Tuple, cst.List)):
            branches = [element.value for element in given.elements]
        elif isinstance(given, cst.Dict):
            branches = [element.value for element in given.elements if isinstance(element, cst.DictElement)]
        else:
            return ()
        ops: list[DatasetOp] = []
        for branch in branches:
            chain = self.dataset_chain(branch, seen_from, before, depth + 1, any_source=any_source)
            ops.extend(chain.ops if chain is not None else ())
        return tuple(ops)

    def _source_name(self, node: cst.Call) -> str:
        name = self.resolve(node.func)
        if name is None and isinstance(node.func, cst.Attribute):
            return f"tensorflow_datasets.{node.func.attr.value}"
        return name or ""

    def dataset_chain(
        self, expr: cst.BaseExpression | None, seen_from: Scope, before: int = END_OF_SCOPE, depth: int = 0,
        path: tuple[int, ...] = (), any_source: bool = False,
    ) -> DatasetChain | None:
        """The pipeline an expression evaluates to: a method chain on a dataset source, through whatever the
        semantic model's lookup follows (assignments, `ds = ds.map(...)`, returns, unpacking, other project
        modules). `before` is the visit order of the use, so `ds` means its latest assignment before it.
        With `any_source`, `tf.data` methods on a source the code does not show still make a chain (with
        source ""), for questions about the order of the methods only. A transformation whose result is
        discarded (`ds.shuffle(n)` as a statement of its own) is no step of the pipeline: datasets are immutable.
        Remembered per question: a function of many conditional `ds = ds.map(...)` steps asks for the same
        earlier pipeline along every combination of its branches (a 600-line decoder took over four minutes)."""
        if expr is None:
            return None
        model: ModuleFacts = seen_from.owner  # type: ignore[assignment]
        key = (id(expr), id(seen_from), before, path, any_source)
        chains = model._chains
        if key in chains:
            return chains[key]
        if depth > _MAX_CHAIN_DEPTH or key in model._open_chains:  # too deep, or a cycle (`ds = ds.map(f)` in a loop)
            _Cuts.made += 1
            return None
        outermost = _Cuts.steps_left is None
        if outermost:
            _Cuts.steps_left = _MAX_CHAIN_STEPS
        elif _Cuts.steps_left == 0:
            raise _OutOfSteps
        _Cuts.steps_left -= 1  # type: ignore[operator]
        cuts = _Cuts.made
        model._open_chains.add(key)
        try:
            chain = model._dataset_chain(expr, seen_from, before, depth, path, any_source)
        except _OutOfSteps:
            if not outermost:
                raise
            chains[key] = None  # the same question would spend the same steps again
            return None
        finally:
            model._open_chains.discard(key)
            if outermost:
                _Cuts.steps_left = None
        if _Cuts.made == cuts:  # an answer cut short holds only for where it was asked from (one rule's lookup)
            chains[key] = chain
        return chain

    @cached_property
    def _chains(self) -> dict[tuple[object, ...], DatasetChain | None]:
        return {}

    @cached_property
    def _open_chains(self) -> set[tuple[object, ...]]:
        return set()

    def _dataset_chain(self, expr: cst.BaseExpression, seen_from: Scope, before: int, depth: int,
                       path: tuple[int, ...], any_source: bool) -> DatasetChain | None:
        model: ModuleFacts = seen_from.owner  # type: ignore[assignment]
        ops: list[DatasetOp] = []
        node = expr
        while (
            not path
            and isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in DATASET_METHODS
        ):
            if node is not expr or not model.discards(node):
                ops.append(DatasetOp(node.func.attr.value, node, seen_from))
            node = node.func.value
        ops.reverse()
        base: DatasetChain | None = None
        split = model._split_of_all_splits(node, seen_from, before) if not path else None
        if model.is_dataset_source(node, path) or model._instance_join(node, path):
            assert isinstance(node, cst.Call)
            name = model._source_name(node) if model.is_dataset_source(node, path) else "tensorflow.data.Dataset.zip"
            joined = model._joined_ops(node, name, seen_from, before, depth, any_source)
            base = DatasetChain(name, node, joined, seen_from, source_scope=seen_from, joined=len(joined))
        elif split is not None:
            base = DatasetChain("tensorflow_datasets.load", split, (), seen_from, source_scope=seen_from)
        else:
            # Every origin must be a pipeline (`ds = a if c else b`, branches); the latest one stands for them.
            origins = [o for o in model.values_of(node, seen_from, before, path) if o.expr is not node]
            chains = [o.model.dataset_chain(o.expr, o.scope, o.order, depth + 1, o.path,  # type: ignore[attr-defined]
                                            any_source) if o.kind == "value" else None for o in origins]
            if chains and all(chain is not None for chain in chains):
                found, origin = chains[0], origins[0]
                assert found is not None
                every = (c for chain in chains for c in (chain, *chain.alternatives))  # type: ignore[union-attr]
                others = tuple(itertools.islice((c for c in every if c is not found), _MAX_ALTERNATIVES))
                base = DatasetChain(found.source, found.source_call, found.ops, found.scope,
                                    (*origin.via, *found.via), found.source_scope, others, found.joined)
        if base is None and any_source and ops:
            base = DatasetChain("", ops[0].call, (), seen_from, source_scope=seen_from)
        if base is None:
            return None
        alternatives = tuple(DatasetChain(a.source, a.source_call, a.ops + tuple(ops), seen_from, a.via, a.source_scope,
                                          joined=a.joined) for a in base.alternatives)
        return DatasetChain(base.source, base.source_call, base.ops + tuple(ops), seen_from, base.via,
                            base.source_scope, alternatives, base.joined)


def _tf_function_call(model: SemanticModel, expr: cst.CSTNode) -> cst.Call | None:
    """`tf.function(f, ...)` or `tf.function(...)(f)`: the call to `tf.function` that holds its options."""
    wrapper = expr.func if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Call) else expr
    return wrapper if isinstance(wrapper, cst.Call) and model.resolve(wrapper.func) == "tensorflow.function" else None



_GRAPH_MAKERS = frozenset({"Graph", "FuncGraph", "get_default_graph", "get_graph"})  # what `as_default()` of builds into


def _eager_test(branch: cst.If) -> bool | None:
    """For `if ...executing_eagerly():` False, for `if not ...executing_eagerly():` True (whether its body is the
    graph part); None for any other test."""
    test, negated = branch.test, False
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negated = test.expression, True
    if isinstance(test, cst.Call) and (dotted(test.func) or "").rpartition(".")[2] == "executing_eagerly":
        return negated
    return None


def _outside_eager(branch: cst.If, statement: cst.CSTNode) -> bool:
    """Whether `statement` lies in the part of `if ...executing_eagerly():` (or `if not ...executing_eagerly():`)
    that runs only while a graph is built."""
    graph_part = branch.body if _eager_test(branch) else branch.orelse
    return graph_part is not None and bool(m.findall(graph_part, m.MatchIfTrue(lambda node: node is statement)))


def _makes_graph(name: str | None) -> bool:
    """A call that makes or gets a TF graph (`tf.Graph()`, `tf.compat.v1.get_default_graph()`, Keras'
    `backend.get_graph()`), by its name's last part: a summary writer's or a session's `as_default()` is not."""
    return name is not None and name.rpartition(".")[2] in _GRAPH_MAKERS
