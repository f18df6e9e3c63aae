"""The one libcst walk over a module: raw facts in source order, and nothing else.

`FactCollector` records imports, scopes (module, functions, lambdas), classes, calls, assignments (with
the unpacking path of every target), loops, `with` blocks, `if` tests, returns, subscripts, and the names
each expression reads. The semantic model (`model.py`) answers questions from these lists, never from the
tree; nothing here knows TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator

import libcst as cst

from tfdoctor.lint.cells import displayed_statements
from tfdoctor.lint.names import dotted, module_name
from tfdoctor.lint.semantic.walk import Visitor

END_OF_SCOPE = 1 << 62  # a visit order after every fact: "the value at the end of the scope"


def reads(names: Iterable[str], var: str) -> bool:
    """Whether a set of read names (`x`, `self.model`) includes `var` or an attribute of it."""
    prefix = var + "."
    return any(name == var or name.startswith(prefix) for name in names)


@dataclass(eq=False)
class Block:
    """A body that may not run (an `if`/`else` branch, a loop body, a `try` or `except` body), as the visit
    orders it spans: a binding inside it is definite only for uses within it."""

    start: int
    end: int = 1 << 62
    other_branch: Block | None = None  # an `if` body's `else` (and the other way round), when no loop repeats them
    leaves: bool = False  # it ends with `return` or `raise`: nothing bound in it reaches past it

    def holds(self, order: int) -> bool:
        return self.start <= order <= self.end

    def excludes(self, order: int) -> bool:
        """Whether a binding in this body cannot reach a use at `order`: the use lies in the branch that runs
        instead of this one, or after this body, which returns or raises."""
        return (self.other_branch is not None and self.other_branch.holds(order)) or (
            self.leaves and order > self.end)


@dataclass(eq=False)
class LoopFact:
    node: cst.For | cst.While
    scope: Scope
    targets: tuple[str, ...]
    iter_expr: cst.BaseExpression | None
    order: int
    calls: list[CallFact] = field(default_factory=list)
    unpack: tuple[tuple[int, ...], ...] = ()  # per target, its index path in the loop target (`i, (x, y)`)
    blocks: tuple[Block, ...] = ()  # the conditional bodies it is in

    def iterated(self, target: str) -> cst.BaseExpression | None:
        """What a loop target is an element of, through `enumerate` and `zip`: `gpus` for `device` in
        `for i, (device, batch) in enumerate(zip(gpus, batches))`; None for the index `enumerate` counts, or
        an argument not shown."""
        expr = self.iter_expr
        index = self.targets.index(target)
        path = self.unpack[index] if index < len(self.unpack) else ()
        while path and isinstance(expr, cst.Call) and dotted(expr.func) in ("enumerate", "zip"):
            position = path[0] if dotted(expr.func) == "zip" else 0 if path[0] == 1 else -1
            if not 0 <= position < len(expr.args):
                return None
            expr, path = expr.args[position].value, path[1:]
        return None if path else expr


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
    blocks: tuple[Block, ...] = ()  # the conditional bodies it is in
    displayed: bool = False  # its statement ends a notebook cell, which shows the value

    @property
    def attr(self) -> str | None:
        """The method name for `x.attr(...)` calls."""
        func = self.node.func
        return func.attr.value if isinstance(func, cst.Attribute) else None

    @property
    def receiver(self) -> cst.BaseExpression | None:
        func = self.node.func
        return func.value if isinstance(func, cst.Attribute) else None

    @property
    def discarded(self) -> bool:
        """Whether the call's result is thrown away: the call is a whole expression statement (`ds.shuffle(n)`).
        A notebook may display it first (`displayed`), but the code never uses it."""
        statement = self.statement
        return isinstance(statement, cst.SimpleStatementLine) and any(
            isinstance(small, cst.Expr) and small.value is self.node for small in statement.body)

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
    unpack: tuple[tuple[int, ...], ...] = ()  # per target, its index path (`a, (b, c) = v`: (0,), (1, 0), (1, 1))
    blocks: tuple[Block, ...] = ()  # the conditional bodies it is in

    def definite_at(self, order: int) -> bool:
        """Whether this assignment surely ran before a use at `order` in its scope (it is in no branch or
        loop body that the use is outside of)."""
        return all(block.holds(order) for block in self.blocks)

    def path_of(self, var: str) -> tuple[int, ...]:
        """Where `var` sits in the unpacked value: () for a plain target."""
        index = self.targets.index(var)
        return self.unpack[index] if index < len(self.unpack) else ()


@dataclass(eq=False)
class IfFact:
    """An `if` statement: its test and the names the test reads."""

    node: cst.If
    scope: Scope
    loops: tuple[LoopFact, ...]
    names: frozenset[str]
    order: int
    ifs: tuple[cst.If, ...] = ()  # the `if` bodies it is nested in


@dataclass(frozen=True)
class ImportFact:
    """`from <module> import <symbol> as <local>` or `import <module> as <local>`; `level` counts the
    leading dots of a relative import."""

    local: str
    module: str  # dotted module text, "" for `from . import x`
    symbol: str | None  # None for `import module`
    level: int


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
    outer_names: set[str] = field(default_factory=set)  # names its `global` / `nonlocal` statements declare
    order: int = 0  # where its `def` runs, in the visit order of facts: a later def of the name rebinds it
    owner: object = field(default=None, repr=False)  # the semantic model of the module holding this scope

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

    def within(self, outer: Scope) -> bool:
        """Whether this scope is `outer` or nested in it."""
        scope: Scope | None = self
        while scope is not None:
            if scope is outer:
                return True
            scope = scope.parent
        return False


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


class FactCollector(Visitor):
    """The one walk over a module. Records facts in source order and nothing else."""

    def __init__(self, module: cst.Module) -> None:
        self.aliases: dict[str, str] = {}
        self.imports: list[ImportFact] = []
        self.star_imports: list[tuple[str, int]] = []  # (module, level) of each `from module import *`
        self.module_scope = Scope(node=module, name="", qualname="", parent=None)
        self.scopes: list[Scope] = [self.module_scope]
        self.classes: list[ClassFact] = []
        self.calls: list[CallFact] = []
        self.assigns: list[AssignFact] = []
        self.loops: list[LoopFact] = []
        self.withs: list[WithFact] = []
        self.subscripts: list[SubscriptFact] = []
        self.if_facts: list[IfFact] = []
        self._scope_stack: list[Scope] = [self.module_scope]
        self._class_stack: list[ClassFact] = []
        self._statements: list[cst.CSTNode] = [module]
        self._displayed = displayed_statements(module)
        # Per scope: the loops, withs and ifs open at this point (reset when a function starts).
        self._loops: list[list[LoopFact]] = [[]]
        self._blocks: list[list[Block]] = [[]]
        self._if_bodies: dict[int, Block] = {}  # the body of an `if` whose `else` is still to come
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
            params=tuple(p.name.value for p in all_params), annotations=annotations, order=self._next_order(),
        )
        parent.children.append(scope)
        if class_name is not None:
            self._class_stack[-1].methods[name] = scope
        self.scopes.append(scope)
        self._scope_stack.append(scope)
        self._loops.append([])
        self._blocks.append([])
        self._withs.append([])
        self._ifs.append([])

    def _leave_scope(self) -> None:
        self._scope_stack.pop()
        self._loops.pop()
        self._blocks.pop()
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
                self.imports.append(ImportFact(alias.asname.name.value, full, None, 0))
            else:
                root = full.split(".")[0]
                self.aliases.setdefault(root, root)
                self.imports.append(ImportFact(full, full, None, 0))

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        base = module_name(node.module) if node.module is not None else ""
        if base is None:
            return
        if isinstance(node.names, cst.ImportStar):
            self.star_imports.append((base, len(node.relative)))
            return
        for alias in node.names:
            name = module_name(alias.name)
            if name is None:
                continue
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
            self.imports.append(ImportFact(local, base, name, len(node.relative)))
            if not node.relative:
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

    def visit_Global(self, node: cst.Global) -> None:
        self.scope.outer_names.update(name.name.value for name in node.names)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self.scope.outer_names.update(name.name.value for name in node.names)

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
            order=self._next_order(), blocks=tuple(self._blocks[-1]),
            displayed=id(self._statements[-1]) in self._displayed,
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
        targets: list[tuple[str, tuple[int, ...]]] = []
        for target in original_node.targets:
            targets.extend(_target_paths(target.target, ()))
        self._record_assign(original_node, tuple(t for t, _ in targets), original_node.value, names, "=",
                            tuple(p for _, p in targets))

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
        value: cst.BaseExpression, names: set[str], operator: str, unpack: tuple[tuple[int, ...], ...] = (),
    ) -> None:
        fact = AssignFact(
            node=node, scope=self.scope, statement=self._statements[-1], targets=targets, value=value,
            names=frozenset(names), operator=operator, withs=tuple(self._withs[-1]), loops=tuple(self._loops[-1]),
            order=self._next_order(), unpack=unpack, blocks=tuple(self._blocks[-1]),
        )
        self.assigns.append(fact)
        self.scope.assigns.append(fact)
        for with_fact in self._withs[-1]:
            with_fact.assigns.append(fact)
        self._read_all(names)

    # -- loops, withs, ifs ----------------------------------------------------------------------------
    def visit_For(self, node: cst.For) -> None:
        paths = list(_target_paths(node.target, ()))
        fact = LoopFact(node=node, scope=self.scope, targets=tuple(t for t, _ in paths), iter_expr=node.iter,
                        order=self._next_order(), unpack=tuple(p for _, p in paths), blocks=tuple(self._blocks[-1]))
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

    def visit_If_test(self, node: cst.If) -> None:
        self._push_collector()

    def leave_If_test(self, node: cst.If) -> None:
        names = self._collectors.pop() or set()
        fact = IfFact(node=node, scope=self.scope, loops=tuple(self._loops[-1]), names=frozenset(names),
                      order=self._next_order(), ifs=tuple(self._ifs[-1]))
        self.if_facts.append(fact)
        self._read_all(names)

    # -- conditional bodies ---------------------------------------------------------------------------
    def _open_block(self) -> None:
        self._blocks[-1].append(Block(self._next_order()))

    def _close_block(self, body: cst.BaseSuite | None = None) -> None:
        block = self._blocks[-1].pop()
        block.end = self._next_order()
        block.leaves = body is not None and _ends_by_leaving(body)

    def visit_If_orelse(self, node: cst.If) -> None:
        body = self._if_bodies.pop(id(node), None)
        self._open_block()
        if body is not None and not self._loops[-1]:
            body.other_branch, self._blocks[-1][-1].other_branch = self._blocks[-1][-1], body

    def leave_If_orelse(self, node: cst.If) -> None:
        self._close_block(node.orelse.body if isinstance(node.orelse, cst.Else) else None)

    def visit_For_body(self, node: cst.For) -> None:
        self._open_block()

    def leave_For_body(self, node: cst.For) -> None:
        self._close_block()

    def visit_While_body(self, node: cst.While) -> None:
        self._open_block()

    def leave_While_body(self, node: cst.While) -> None:
        self._close_block()

    def visit_Try_body(self, node: cst.Try) -> None:
        self._open_block()

    def leave_Try_body(self, node: cst.Try) -> None:
        self._close_block()

    def visit_ExceptHandler_body(self, node: cst.ExceptHandler) -> None:
        self._open_block()

    def leave_ExceptHandler_body(self, node: cst.ExceptHandler) -> None:
        self._close_block()

    def visit_If_body(self, node: cst.If) -> None:
        self._open_block()
        if node.orelse is not None:
            self._if_bodies[id(node)] = self._blocks[-1][-1]
        self._ifs[-1].append(node)

    def leave_If_body(self, node: cst.If) -> None:
        self._ifs[-1].pop()
        self._close_block(node.body)

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
    return (name for name, _ in _target_paths(target, ()))


def _target_paths(target: cst.BaseExpression, path: tuple[int, ...]) -> Iterator[tuple[str, tuple[int, ...]]]:
    """Each name a target binds, with its index path in the value (a starred target ends the path)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        for index, element in enumerate(target.elements):
            if isinstance(element, cst.StarredElement):  # some of the items: index -1
                yield from ((name, (*path, -1)) for name, _ in _target_paths(element.value, ()))
            else:
                yield from _target_paths(element.value, (*path, index))
    elif isinstance(target, cst.StarredElement):
        yield from ((name, (*path, -1)) for name, _ in _target_paths(target.value, ()))
    elif isinstance(target, cst.Subscript):  # `acc[i] = ...` mutates `acc`: recorded as `acc[]`, never as `acc`
        base = dotted(target.value)
        if base is not None:
            yield base + "[]", path
    else:
        name = dotted(target)
        if name is not None:
            yield name, path


def _ends_by_leaving(body: cst.BaseSuite) -> bool:
    """Whether a suite's last statement is `return` or `raise`."""
    last = body.body[-1] if body.body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1] if last.body else None
    return isinstance(last, (cst.Return, cst.Raise))
