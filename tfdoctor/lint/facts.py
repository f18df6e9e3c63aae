"""What a module knows about itself, computed in one libcst walk and shared by every rule.

The walk (`FactCollector`) records raw facts in source order: imports, scopes (module, functions, lambdas),
classes, calls, assignments, loops, `with` blocks, returns, subscripts, and the names each expression reads.
`ModuleFacts` then derives the distribution facts from those lists, never from the tree: strategies,
`strategy.run` calls and replica functions, `tf.function`-wrapped functions, `strategy.scope()` blocks and
the functions called from them, and `tf.data` method chains (continued across `ds = ds.map(...)`).
Rules read these facts; they never walk the tree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Iterator

import libcst as cst

from tfdoctor.lint.names import call_arg, canonical, dotted, module_name

END_OF_SCOPE = 1 << 62  # a visit order after every fact: "the value at the end of the scope"
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
_STRATEGY_WORD = re.compile(r"(^|_)strategy$", re.IGNORECASE)


def reads(names: Iterable[str], var: str) -> bool:
    """Whether a set of read names (`x`, `self.model`) includes `var` or an attribute of it."""
    prefix = var + "."
    return any(name == var or name.startswith(prefix) for name in names)


@dataclass(eq=False)
class LoopFact:
    node: cst.For | cst.While
    scope: Scope
    targets: tuple[str, ...]
    iter_expr: cst.BaseExpression | None
    order: int
    calls: list[CallFact] = field(default_factory=list)


@dataclass(eq=False)
class WithFact:
    node: cst.With
    scope: Scope
    items: tuple[cst.BaseExpression, ...]
    calls: list[CallFact] = field(default_factory=list)
    assigns: list[AssignFact] = field(default_factory=list)


@dataclass(eq=False)
class CallFact:
    node: cst.Call
    func: str | None  # dotted source text of the callee, when it is a name chain
    scope: Scope
    statement: cst.CSTNode
    loops: tuple[LoopFact, ...]
    withs: tuple[WithFact, ...]
    ifs: tuple[cst.If, ...]
    order: int
    arg_names: list[frozenset[str]] = field(default_factory=list)

    @property
    def attr(self) -> str | None:
        """The method name for `x.attr(...)` calls."""
        func = self.node.func
        return func.attr.value if isinstance(func, cst.Attribute) else None

    @property
    def receiver(self) -> cst.BaseExpression | None:
        func = self.node.func
        return func.value if isinstance(func, cst.Attribute) else None

    def names_of(self, arg: cst.BaseExpression | None) -> frozenset[str]:
        """The names read by one of this call's argument values."""
        for index, call_argument in enumerate(self.node.args):
            if call_argument.value is arg and index < len(self.arg_names):
                return self.arg_names[index]
        return frozenset()


@dataclass(eq=False)
class AssignFact:
    node: cst.Assign | cst.AnnAssign | cst.AugAssign
    scope: Scope
    statement: cst.CSTNode
    targets: tuple[str, ...]
    value: cst.BaseExpression
    names: frozenset[str]
    operator: str  # "=" or the augmented operator, e.g. "/="
    withs: tuple[WithFact, ...]
    loops: tuple[LoopFact, ...]
    order: int


@dataclass(eq=False)
class ReturnFact:
    value: cst.BaseExpression
    names: frozenset[str]


@dataclass(eq=False)
class SubscriptFact:
    node: cst.Subscript
    scope: Scope
    statement: cst.CSTNode
    value: str | None
    slice_names: frozenset[str]
    has_slice: bool


@dataclass(eq=False)
class ClassFact:
    node: cst.ClassDef
    name: str
    bases: tuple[str, ...]  # dotted source text
    methods: dict[str, Scope] = field(default_factory=dict)


@dataclass(eq=False)
class Scope:
    """The module, a function or a lambda."""

    node: cst.Module | cst.FunctionDef | cst.Lambda
    name: str
    qualname: str
    parent: Scope | None
    class_name: str | None = None
    params: tuple[str, ...] = ()
    annotations: dict[str, str] = field(default_factory=dict)
    calls: list[CallFact] = field(default_factory=list)
    assigns: list[AssignFact] = field(default_factory=list)
    loops: list[LoopFact] = field(default_factory=list)
    withs: list[WithFact] = field(default_factory=list)
    returns: list[ReturnFact] = field(default_factory=list)
    yields: list[ReturnFact] = field(default_factory=list)
    subscripts: list[SubscriptFact] = field(default_factory=list)
    children: list[Scope] = field(default_factory=list)
    is_generator: bool = False

    @property
    def is_function(self) -> bool:
        return not isinstance(self.node, cst.Module)

    @property
    def decorators(self) -> tuple[cst.Decorator, ...]:
        return tuple(self.node.decorators) if isinstance(self.node, cst.FunctionDef) else ()

    def value_params(self) -> tuple[str, ...]:
        """Parameters other than `self`/`cls`."""
        if self.class_name and self.params and self.params[0] in ("self", "cls"):
            return self.params[1:]
        return self.params

    def assignments_of(self, var: str) -> list[AssignFact]:
        return [a for a in self.assigns if var in a.targets]


@dataclass(frozen=True)
class DatasetOp:
    method: str
    call: cst.Call


@dataclass(eq=False)
class DatasetChain:
    """A `tf.data` pipeline: its source and the methods applied, in order."""

    source: str  # canonical qualified name of the source call
    source_call: cst.Call
    ops: tuple[DatasetOp, ...]
    scope: Scope

    def methods(self) -> list[str]:
        return [op.method for op in self.ops]

    def last(self, method: str) -> DatasetOp | None:
        found = [op for op in self.ops if op.method == method]
        return found[-1] if found else None


class FactCollector(cst.CSTVisitor):
    """The one walk over a module. Records facts in source order and nothing else."""

    def __init__(self, module: cst.Module) -> None:
        self.aliases: dict[str, str] = {}
        self.module_scope = Scope(node=module, name="", qualname="", parent=None)
        self.scopes: list[Scope] = [self.module_scope]
        self.classes: list[ClassFact] = []
        self.calls: list[CallFact] = []
        self.assigns: list[AssignFact] = []
        self.loops: list[LoopFact] = []
        self.withs: list[WithFact] = []
        self.subscripts: list[SubscriptFact] = []
        self._scope_stack: list[Scope] = [self.module_scope]
        self._class_stack: list[ClassFact] = []
        self._statements: list[cst.CSTNode] = [module]
        # Per scope: the loops, withs and ifs open at this point (reset when a function starts).
        self._loops: list[list[LoopFact]] = [[]]
        self._withs: list[list[WithFact]] = [[]]
        self._ifs: list[list[cst.If]] = [[]]
        self._collectors: list[set[str] | None] = []
        self._open_calls: list[CallFact] = []
        self._open_subscripts: list[SubscriptFact] = []
        self._with_facts: dict[int, WithFact] = {}
        self._order = 0

    # -- helpers --------------------------------------------------------------------------------------
    def _next_order(self) -> int:
        self._order += 1
        return self._order

    @property
    def scope(self) -> Scope:
        return self._scope_stack[-1]

    def _push_collector(self) -> set[str]:
        names: set[str] = set()
        self._collectors.append(names)
        return names

    def _read(self, name: str) -> None:
        for names in reversed(self._collectors):
            if names is None:
                return
            names.add(name)

    def _enter_scope(self, node: cst.FunctionDef | cst.Lambda, name: str, params: cst.Parameters) -> None:
        parent = self.scope
        class_name = None
        if isinstance(node, cst.FunctionDef) and self._class_stack and self._class_stack[-1].node is self._statements[-2]:
            class_name = self._class_stack[-1].name
        qualname = f"{class_name}.{name}" if class_name else ".".join(p for p in (parent.qualname, name) if p)
        all_params = [*params.posonly_params, *params.params, *params.kwonly_params]
        if isinstance(params.star_arg, cst.Param):
            all_params.append(params.star_arg)
        if params.star_kwarg is not None:
            all_params.append(params.star_kwarg)
        annotations = {
            p.name.value: dotted(p.annotation.annotation) or ""
            for p in all_params
            if p.annotation is not None
        }
        scope = Scope(
            node=node, name=name, qualname=qualname, parent=parent, class_name=class_name,
            params=tuple(p.name.value for p in all_params), annotations=annotations,
        )
        parent.children.append(scope)
        if class_name is not None:
            self._class_stack[-1].methods[name] = scope
        self.scopes.append(scope)
        self._scope_stack.append(scope)
        self._loops.append([])
        self._withs.append([])
        self._ifs.append([])

    def _leave_scope(self) -> None:
        self._scope_stack.pop()
        self._loops.pop()
        self._withs.pop()
        self._ifs.pop()

    # -- statements -----------------------------------------------------------------------------------
    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._statements.append(node)

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine) -> None:
        self._statements.pop()

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.BaseCompoundStatement):
            self._statements.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        if isinstance(original_node, cst.BaseCompoundStatement):
            self._statements.pop()

    # -- imports --------------------------------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = module_name(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.aliases[alias.asname.name.value] = full
            else:
                root = full.split(".")[0]
                self.aliases.setdefault(root, root)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        base = module_name(node.module)
        if base is None or node.relative or isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:
            name = module_name(alias.name)
            if name is None:
                continue
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
            self.aliases[local] = f"{base}.{name}"

    # -- scopes ---------------------------------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        bases = tuple(d for d in (dotted(arg.value) for arg in node.bases) if d)
        fact = ClassFact(node=node, name=node.name.value, bases=bases)
        self.classes.append(fact)
        self._class_stack.append(fact)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._class_stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._enter_scope(node, node.name.value, node.params)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._leave_scope()

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self._enter_scope(node, "<lambda>", node.params)
        self.scope.returns.append(ReturnFact(value=node.body, names=frozenset()))
        self._collectors.append(set())

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        names = self._collectors.pop()
        scope = self.scope
        scope.returns[0] = ReturnFact(value=original_node.body, names=frozenset(names or ()))
        self._leave_scope()
        self._read_all(names or set())

    def _read_all(self, names: set[str]) -> None:
        for name in names:
            self._read(name)

    def visit_Yield(self, node: cst.Yield) -> None:
        self.scope.is_generator = True
        self._push_collector()

    def leave_Yield(self, original_node: cst.Yield) -> None:
        names = self._collectors.pop() or set()
        if isinstance(original_node.value, cst.BaseExpression):
            self.scope.yields.append(ReturnFact(value=original_node.value, names=frozenset(names)))
        self._read_all(names)

    def visit_Return(self, node: cst.Return) -> None:
        self._push_collector()

    def leave_Return(self, original_node: cst.Return) -> None:
        names = self._collectors.pop()
        if original_node.value is not None:
            self.scope.returns.append(ReturnFact(value=original_node.value, names=frozenset(names or ())))
        self._read_all(names or set())

    # -- names read -----------------------------------------------------------------------------------
    def visit_Name(self, node: cst.Name) -> None:
        self._read(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        name = dotted(node)
        if name is None:
            return True
        self._read(name)
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._collectors.append(None)

    def leave_AssignTarget(self, original_node: cst.AssignTarget) -> None:
        self._collectors.pop()

    # -- calls ----------------------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        scope = self.scope
        fact = CallFact(
            node=node, func=dotted(node.func), scope=scope, statement=self._statements[-1],
            loops=tuple(self._loops[-1]), withs=tuple(self._withs[-1]), ifs=tuple(self._ifs[-1]),
            order=self._next_order(),
        )
        self.calls.append(fact)
        scope.calls.append(fact)
        for loop in self._loops[-1]:
            loop.calls.append(fact)
        for with_fact in self._withs[-1]:
            with_fact.calls.append(fact)
        self._open_calls.append(fact)

    def leave_Call(self, original_node: cst.Call) -> None:
        self._open_calls.pop()

    def visit_Arg(self, node: cst.Arg) -> None:
        self._push_collector()

    def leave_Arg(self, original_node: cst.Arg) -> None:
        names = self._collectors.pop() or set()
        if self._open_calls and any(a is original_node for a in self._open_calls[-1].node.args):
            self._open_calls[-1].arg_names.append(frozenset(names))
        self._read_all(names)

    # -- assignments ----------------------------------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        self._push_collector()

    def leave_Assign(self, original_node: cst.Assign) -> None:
        names = self._collectors.pop() or set()
        targets: list[str] = []
        for target in original_node.targets:
            targets.extend(_target_names(target.target))
        self._record_assign(original_node, tuple(targets), original_node.value, names, "=")

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._push_collector()

    def visit_AnnAssign_target(self, node: cst.AnnAssign) -> None:
        self._collectors.append(None)

    def leave_AnnAssign_target(self, node: cst.AnnAssign) -> None:
        self._collectors.pop()

    def visit_AnnAssign_annotation(self, node: cst.AnnAssign) -> None:
        self._collectors.append(None)

    def leave_AnnAssign_annotation(self, node: cst.AnnAssign) -> None:
        self._collectors.pop()

    def leave_AnnAssign(self, original_node: cst.AnnAssign) -> None:
        names = self._collectors.pop() or set()
        if original_node.value is not None:
            targets = tuple(_target_names(original_node.target))
            self._record_assign(original_node, targets, original_node.value, names, "=")

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._push_collector()

    def leave_AugAssign(self, original_node: cst.AugAssign) -> None:
        names = self._collectors.pop() or set()
        operator = type(original_node.operator).__name__
        self._record_assign(
            original_node, tuple(_target_names(original_node.target)), original_node.value, names, operator
        )

    def _record_assign(
        self, node: cst.Assign | cst.AnnAssign | cst.AugAssign, targets: tuple[str, ...],
        value: cst.BaseExpression, names: set[str], operator: str,
    ) -> None:
        fact = AssignFact(
            node=node, scope=self.scope, statement=self._statements[-1], targets=targets, value=value,
            names=frozenset(names), operator=operator, withs=tuple(self._withs[-1]), loops=tuple(self._loops[-1]),
            order=self._next_order(),
        )
        self.assigns.append(fact)
        self.scope.assigns.append(fact)
        for with_fact in self._withs[-1]:
            with_fact.assigns.append(fact)
        self._read_all(names)

    # -- loops, withs, ifs ----------------------------------------------------------------------------
    def visit_For(self, node: cst.For) -> None:
        fact = LoopFact(node=node, scope=self.scope, targets=tuple(_target_names(node.target)), iter_expr=node.iter,
                        order=self._next_order())
        self.loops.append(fact)
        self.scope.loops.append(fact)
        self._loops[-1].append(fact)

    def leave_For(self, original_node: cst.For) -> None:
        self._loops[-1].pop()

    def visit_While(self, node: cst.While) -> None:
        fact = LoopFact(node=node, scope=self.scope, targets=(), iter_expr=None, order=self._next_order())
        self.loops.append(fact)
        self.scope.loops.append(fact)
        self._loops[-1].append(fact)

    def leave_While(self, original_node: cst.While) -> None:
        self._loops[-1].pop()

    def visit_With(self, node: cst.With) -> None:
        fact = WithFact(node=node, scope=self.scope, items=tuple(item.item for item in node.items))
        self.withs.append(fact)
        self.scope.withs.append(fact)
        self._with_facts[id(node)] = fact

    def visit_With_body(self, node: cst.With) -> None:
        self._withs[-1].append(self._with_facts[id(node)])

    def leave_With_body(self, node: cst.With) -> None:
        self._withs[-1].pop()

    def visit_If_body(self, node: cst.If) -> None:
        self._ifs[-1].append(node)

    def leave_If_body(self, node: cst.If) -> None:
        self._ifs[-1].pop()

    # -- subscripts -----------------------------------------------------------------------------------
    def visit_Subscript(self, node: cst.Subscript) -> None:
        has_slice = any(isinstance(element.slice, cst.Slice) for element in node.slice)
        fact = SubscriptFact(
            node=node, scope=self.scope, statement=self._statements[-1], value=dotted(node.value),
            slice_names=frozenset(), has_slice=has_slice,
        )
        self.subscripts.append(fact)
        self.scope.subscripts.append(fact)
        self._open_subscripts.append(fact)

    def visit_Subscript_slice(self, node: cst.Subscript) -> None:
        self._push_collector()

    def leave_Subscript_slice(self, node: cst.Subscript) -> None:
        names = self._collectors.pop() or set()
        self._open_subscripts[-1].slice_names = frozenset(names)
        self._read_all(names)

    def leave_Subscript(self, original_node: cst.Subscript) -> None:
        self._open_subscripts.pop()


def _target_names(target: cst.BaseExpression) -> Iterator[str]:
    if isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from _target_names(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from _target_names(target.value)
    elif isinstance(target, cst.Subscript):  # `acc[i] = ...` mutates `acc`: recorded as `acc[]`, never as `acc`
        base = dotted(target.value)
        if base is not None:
            yield base + "[]"
    else:
        name = dotted(target)
        if name is not None:
            yield name


class ModuleFacts:
    """Facts about one module, derived from the collector's lists."""

    def __init__(self, module: cst.Module, path: str, source_lines: list[str]) -> None:
        collector = FactCollector(module)
        module.visit(collector)
        self.module = module
        self.path = path
        self.source_lines = source_lines
        self.aliases = collector.aliases
        self.module_scope = collector.module_scope
        self.scopes = collector.scopes
        self.classes = collector.classes
        self.calls = collector.calls
        self.assigns = collector.assigns
        self.loops = collector.loops
        self.withs = collector.withs
        self.subscripts = collector.subscripts

    # -- names ----------------------------------------------------------------------------------------
    def resolve(self, node: cst.CSTNode | str | None) -> str | None:
        """Canonical qualified name of a name chain through this module's imports (`T.split` -> `tensorflow.split`)."""
        name = node if isinstance(node, str) else dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        if head not in self.aliases:
            return None
        full = self.aliases[head] + ("." + rest if rest else "")
        return canonical(full)

    @cached_property
    def _call_facts(self) -> dict[int, CallFact]:
        return {id(call.node): call for call in self.calls}

    def call_fact(self, node: cst.CSTNode) -> CallFact | None:
        """The fact recorded for a call node (e.g. a method of a dataset chain)."""
        return self._call_facts.get(id(node))

    def method_calls(self, *attrs: str) -> Iterator[CallFact]:
        wanted = set(attrs)
        return (c for c in self.calls if c.attr in wanted)

    # -- functions ------------------------------------------------------------------------------------
    @cached_property
    def _functions_by_name(self) -> dict[str, list[Scope]]:
        table: dict[str, list[Scope]] = {}
        for scope in self.scopes:
            if isinstance(scope.node, cst.FunctionDef):
                table.setdefault(scope.name, []).append(scope)
        return table

    def function_named(self, name: str, seen_from: Scope) -> Scope | None:
        """The def a bare name refers to from `seen_from`: a nested def first, then a module-level one."""
        candidates = self._functions_by_name.get(name, [])
        scope: Scope | None = seen_from
        while scope is not None:
            for candidate in candidates:
                if candidate.parent is scope and candidate.class_name is None:
                    return candidate
            scope = scope.parent
        return None

    def method_named(self, class_name: str, name: str) -> Scope | None:
        for class_fact in self.classes:
            if class_fact.name == class_name and name in class_fact.methods:
                return class_fact.methods[name]
        return None

    def class_named(self, name: str) -> ClassFact | None:
        return next((c for c in self.classes if c.name == name), None)

    def enclosing_class(self, scope: Scope) -> str | None:
        while scope is not None:
            if scope.class_name is not None:
                return scope.class_name
            scope = scope.parent  # type: ignore[assignment]
        return None

    def callables_of(self, expr: cst.BaseExpression | None, seen_from: Scope, depth: int = 0) -> list[Scope]:
        """The functions or lambdas an expression evaluates to: a name, `self.method`, a lambda,
        `functools.partial(f, ...)`, `tf.function(f)`, or a variable assigned one of these."""
        if expr is None or depth > 4:
            return []
        if isinstance(expr, cst.Lambda):
            return [s for s in self.scopes if s.node is expr]
        if isinstance(expr, cst.Call):
            qualname = self.resolve(expr.func)
            if qualname in ("functools.partial", "tensorflow.function") or (
                dotted(expr.func) in ("partial",) and "partial" not in self.aliases
            ):
                return self.callables_of(call_arg(expr, 0, "func"), seen_from, depth + 1)
            return []
        name = dotted(expr)
        if name is None:
            return []
        if name.startswith("self.") and name.count(".") == 1:
            class_name = self.enclosing_class(seen_from)
            attr = name.split(".")[1]
            if class_name is not None:
                method = self.method_named(class_name, attr)
                if method is not None:
                    return [method]
                return [
                    found
                    for scope in self.scopes
                    if self.enclosing_class(scope) == class_name
                    for assign in scope.assignments_of(name)
                    for found in self.callables_of(assign.value, scope, depth + 1)
                ]
            return []
        if "." in name:
            return []
        function = self.function_named(name, seen_from)
        if function is not None:
            return [function]
        class_fact = self.class_named(name)
        if class_fact is not None:  # calling a class runs its __init__
            return [class_fact.methods["__init__"]] if "__init__" in class_fact.methods else []
        scope: Scope | None = seen_from
        while scope is not None:
            assigned = scope.assignments_of(name)
            if assigned:
                return [f for a in assigned for f in self.callables_of(a.value, a.scope, depth + 1)]
            scope = scope.parent
        return []

    def callee(self, call: CallFact) -> Scope | None:
        """The function of this module that a call invokes, when it is a plain name or `self.method`."""
        found = self.callables_of(call.node.func, call.scope)
        return found[0] if len(found) == 1 and isinstance(found[0].node, cst.FunctionDef) else None

    @cached_property
    def callers(self) -> dict[int, list[CallFact]]:
        """id(scope) -> the calls that invoke it."""
        table: dict[int, list[CallFact]] = {}
        for call in self.calls:
            if call.func is None:
                continue
            target = self.callee(call)
            if target is not None:
                table.setdefault(id(target), []).append(call)
        return table

    def callers_of(self, scope: Scope) -> list[CallFact]:
        return self.callers.get(id(scope), [])

    def transitive_callees(self, roots: Iterable[Scope]) -> list[Scope]:
        """The roots and every module function they call, directly or not."""
        seen: dict[int, Scope] = {}
        stack = list(roots)
        while stack:
            scope = stack.pop()
            if id(scope) in seen:
                continue
            seen[id(scope)] = scope
            stack.extend(child for child in scope.children if isinstance(child.node, cst.Lambda))
            for call in scope.calls:
                target = self.callee(call)
                if target is not None:
                    stack.append(target)
        return list(seen.values())

    # -- tf.function ----------------------------------------------------------------------------------
    def _is_tf_function_ref(self, node: cst.BaseExpression) -> bool:
        target = node.func if isinstance(node, cst.Call) else node
        return self.resolve(target) == "tensorflow.function"

    @cached_property
    def tf_functions(self) -> list[Scope]:
        """Functions and lambdas decorated with or wrapped by `tf.function`."""
        found: dict[int, Scope] = {}
        for scope in self.scopes:
            if any(self._is_tf_function_ref(d.decorator) for d in scope.decorators):
                found[id(scope)] = scope
        for call in self.calls:
            if call.func is not None and self.resolve(call.func) == "tensorflow.function":
                for wrapped in self.callables_of(call_arg(call.node, 0, "func"), call.scope):
                    found[id(wrapped)] = wrapped
        return list(found.values())

    def runs_in_graph(self, scope: Scope) -> bool:
        """True when a function is a tf.function, nested in one, or only ever called from graph code."""
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
                if callers and all(graph.get(id(c.scope)) for c in callers):
                    graph[id(scope)] = True
                    changed = True
        return graph

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
                if _STRATEGY_WORD.search(param) or annotation.endswith("Strategy"):
                    names.add(param)
        for _ in range(3):
            for assign in self.assigns:
                if assign.operator != "=" or len(assign.targets) != 1:
                    continue
                value_name = dotted(assign.value)
                if self.is_strategy_constructor(assign.value) or (value_name is not None and value_name in names):
                    names.add(assign.targets[0])
        return frozenset(names)

    @cached_property
    def _non_strategy_names(self) -> frozenset[str]:
        return frozenset(
            t for a in self.assigns for t in a.targets if t not in self.strategy_names
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
        return bool(_STRATEGY_WORD.search(name.split(".")[-1])) and name not in self._non_strategy_names

    @cached_property
    def strategy_constructions(self) -> list[CallFact]:
        return [c for c in self.calls if self.is_strategy_constructor(c.node)]

    @cached_property
    def run_calls(self) -> list[CallFact]:
        """`strategy.run(fn, ...)`, `strategy.experimental_run_v2(...)`, `strategy.extended.call_for_each_replica(...)`."""
        found = []
        for call in self.calls:
            receiver = call.receiver
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

    def replica_args(self, run_call: CallFact) -> list[cst.BaseExpression]:
        """The positional inputs given to the replica function (`args=(a, b)`)."""
        args = call_arg(run_call.node, 1, "args")
        if isinstance(args, (cst.Tuple, cst.List)):
            return [element.value for element in args.elements if not isinstance(element, cst.StarredElement)]
        return [args] if args is not None else []

    @cached_property
    def replica_functions(self) -> list[Scope]:
        """Every callable passed to a run call, and for lambdas, the module functions their body calls."""
        found: dict[int, Scope] = {}
        for run_call in self.run_calls:
            for scope in self.callables_of(self.replica_fn_expr(run_call), run_call.scope):
                found[id(scope)] = scope
                if isinstance(scope.node, cst.Lambda):
                    for call in scope.calls:
                        target = self.callee(call)
                        if target is not None:
                            found[id(target)] = target
        return list(found.values())

    # -- strategy.scope() -----------------------------------------------------------------------------
    @cached_property
    def scope_blocks(self) -> list[WithFact]:
        """`with strategy.scope():` blocks."""
        return [
            w for w in self.withs
            if any(
                isinstance(item, cst.Call)
                and isinstance(item.func, cst.Attribute)
                and item.func.attr.value == "scope"
                and self.is_strategy(item.func.value)
                for item in w.items
            )
        ]

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
    def is_dataset_source(self, node: cst.BaseExpression) -> bool:
        if not isinstance(node, cst.Call):
            return False
        name = self.resolve(node.func)
        return name is not None and name.startswith("tensorflow.data.") and name.split(".")[-1] not in (
            "AUTOTUNE", "Options",
        )

    def dataset_chain(
        self, expr: cst.BaseExpression | None, seen_from: Scope, before: int = END_OF_SCOPE, depth: int = 0
    ) -> DatasetChain | None:
        """The pipeline an expression evaluates to: a method chain on a `tf.data` source, a variable bound
        to one (continued across `ds = ds.map(...)`), or the call of a module function that returns one.
        `before` is the visit order of the use, so `ds` means its latest assignment before that point."""
        if expr is None or depth > 6:
            return None
        ops: list[DatasetOp] = []
        node = expr
        while (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in DATASET_METHODS
        ):
            ops.append(DatasetOp(node.func.attr.value, node))
            node = node.func.value
        ops.reverse()
        base: DatasetChain | None = None
        if self.is_dataset_source(node):
            assert isinstance(node, cst.Call)
            base = DatasetChain(self.resolve(node.func) or "", node, (), seen_from)
        elif isinstance(node, cst.Call):
            function = self.callables_of(node.func, seen_from)
            if len(function) == 1:
                chains = [self.dataset_chain(r.value, function[0], depth=depth + 1) for r in function[0].returns]
                base = chains[0] if len(chains) == 1 else None
        else:
            name = dotted(node)
            if name is not None:
                base = self._dataset_variable(name, seen_from, before, depth)
        if base is None:
            return None
        return DatasetChain(base.source, base.source_call, base.ops + tuple(ops), seen_from)

    def _dataset_variable(self, name: str, seen_from: Scope, before: int, depth: int) -> DatasetChain | None:
        """The chain bound to `name` by its last assignment before `before` (any, in an enclosing scope)."""
        scope: Scope | None = seen_from
        while scope is not None:
            assigned = [a for a in scope.assignments_of(name) if a.operator == "=" and len(a.targets) == 1]
            if scope is seen_from:
                assigned = [a for a in assigned if a.order < before]
            if assigned:
                chosen = assigned[-1]
                return self.dataset_chain(chosen.value, scope, chosen.order, depth + 1)
            scope = scope.parent
        return None
