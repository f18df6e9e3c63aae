"""The semantic model of one module: generic Python, no TensorFlow.

Built from the collector's lists (one walk), it answers: what a name chain means through the imports
(`resolve`), which assignments a name has (`definitions`), what a name, an attribute `self.x` or any
expression can hold at one point (`values_of`, the one lookup every analysis uses), which functions an
expression evaluates to (`callables_of`), and the call graph (`callee`, `callers_of`, decorators).

`values_of` follows names to their assignments (the latest one before the use; every one for `self.x`, set
in any method), both sides of `a or b` and of `x if c else y`, tuple unpacking and items taken by a literal
index (`pair[0]`), calls of the module's (or the project's) functions to their return values with the
parameters bound to the call's arguments, and parameters to the arguments at every call site of their
function, until nothing new is found (cycles and depth are bounded). What it cannot follow it returns as a leaf, which the analysis above classifies.

Another module of the project enters only through a `ModuleLoader`, given by the project layer above.
"""

from __future__ import annotations

import io
import operator
import re
import tokenize
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Hashable, Iterable, Iterator, Literal, Protocol, TypeVar

import libcst as cst

from tfdoctor.lint.cells import is_notebook_module
from tfdoctor.lint.names import STATEMENT_PARTS, call_arg, canonical, dotted, in_part
from tfdoctor.lint.semantic.collector import (
    END_OF_SCOPE,
    AssignFact,
    Block,
    CallFact,
    ClassFact,
    FactCollector,
    ImportFact,
    LoopFact,
    Scope,
    reads,
)
from tfdoctor.lint.semantic.conditions import exclusive, implied
from tfdoctor.lint.semantic.positions import Positions, positions
from tfdoctor.lint.semantic.walk import walk

_MAX_DEPTH = 12
# Packages that are never a project's own module: no re-export to follow, and a decorator from one is in sight
LIBRARIES = frozenset({"tensorflow", "keras", "tf_keras", "numpy", "horovod", "torch", "jax", "os", "sys", "absl", "gin",
                       "tqdm", "wandb"})
_FUNCTION_WRAPPERS = frozenset({"functools.partial", "tensorflow.function", "functools.wraps"})
_COUNTERS = (("range", ()), ("enumerate", (0,)))  # what a loop target counts with: the callee and the target's path


class ModuleLoader(Protocol):
    """The other modules of the same project: the model of one an import names (None: not in the project,
    unreadable), the calls of a module-level function made from other modules, and the modules that may
    use a module (they import it)."""

    def load(self, importer: SemanticModel, module: str, level: int) -> SemanticModel | None: ...

    def callers(self, function: Scope) -> list[CallFact]: ...

    def consumers(self, model: SemanticModel) -> list[SemanticModel]: ...


@dataclass(frozen=True)
class Step:
    """A call through which a value came from another module: the call (in the caller's module) and the
    function it runs (in the other one); `returned` when the value is what the function returns, not an
    argument the call hands it."""

    call: cst.CSTNode
    callee: Scope
    caller: Scope
    returned: bool = False


OriginKind = Literal["value", "element", "parameter"]


@dataclass(frozen=True)
class Origin:
    """One thing an expression can hold: `value` (the expression `expr` itself, in `scope` at `order`),
    `element` (an item of iterating `expr`, as a `for` target) or `parameter` (an argument no call site
    shows). `path` indexes into it for unpacked targets (`a, b = expr`: b is path (1,)). `via` lists the
    calls into other modules the lookup went through, outermost first."""

    kind: OriginKind
    expr: cst.CSTNode
    scope: Scope
    order: int
    path: tuple[int, ...] = ()
    via: tuple[Step, ...] = ()

    @property
    def model(self) -> SemanticModel:
        return self.scope.owner  # type: ignore[return-value]


Answer = TypeVar("Answer")


class SemanticModel:
    """Names, scopes, definitions and calls of one module."""

    def __init__(self, module: cst.Module, path: str, source_lines: list[str],
                 loader: ModuleLoader | None = None, file: Path | None = None) -> None:
        collector = FactCollector(module)
        walk(module, collector)
        self.module = module
        self.path = path  # as shown to the user
        self.file = file  # where it lies, when it is a file: imports are resolved from there
        self.source_lines = source_lines
        self.loader = loader
        self.aliases = collector.aliases
        self.imports = collector.imports
        self.star_imports = collector.star_imports
        self.module_scope = collector.module_scope
        self.scopes = collector.scopes
        self.classes = collector.classes
        self.calls = collector.calls
        self.assigns = collector.assigns
        self.loops = collector.loops
        self.withs = collector.withs
        self.subscripts = collector.subscripts
        self.if_facts = collector.if_facts
        self.notebook = is_notebook_module(module)  # a notebook's cells: nothing imports its functions
        for scope in self.scopes:
            scope.owner = self
        self._memo: dict[Hashable, object] = {}

    def memo(self, key: Hashable, compute: Callable[[], Answer]) -> Answer:
        """`compute()` once per key for this module: for recursive questions an analysis asks many times
        over (a name's origins), which otherwise grow with the number of paths to them."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]  # type: ignore[return-value]

    # -- names ----------------------------------------------------------------------------------------
    def resolve(self, node: cst.CSTNode | str | None) -> str | None:
        """Canonical qualified name of a name chain through this module's imports (`T.split` -> `tensorflow.split`)."""
        name = node if isinstance(node, str) else dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        imported = self.aliases.get(head) or (self._star_aliases().get(head) if self.star_imports else None)
        if imported is None:
            return None
        if imported.partition(".")[0] not in LIBRARIES and self.loader is not None:
            imported = self.memo(("re-export", head), lambda: self._reexported(head, imported))
            shim = self.memo(("shim", imported), lambda: self._tensorflow_shim(imported))
            if shim is not None and rest and rest.partition(".")[0] not in shim[1]:
                imported = shim[0]  # `import lingvo.compat as tf`: `tf.function` is TensorFlow's
        return canonical(imported + ("." + rest if rest else ""))

    def _tensorflow_shim(self, module: str) -> tuple[str, frozenset[str]] | None:
        """For a project module that stands in for TensorFlow (`lingvo/compat.py`: `from tensorflow.compat.v2
        import *`, then its own changes): the TensorFlow module it star-imports, and the names it binds itself."""
        other = self.loader.load(self, module, 0)  # type: ignore[union-attr]
        if other is None or other is self:
            return None
        star = next((name for name, level in other.star_imports if not level and name.partition(".")[0] == "tensorflow"),
                    None)
        if star is None:
            return None
        own = {*other.aliases, *_defined_symbols(other), *(t for a in other.module_scope.assigns for t in a.targets)}
        return star, frozenset(own)

    def _reexported(self, local: str, imported: str) -> str:
        """What `from pkg import tf` names when the project's own `pkg` does `import tensorflow as tf`: the
        name that module imports (one step), else `imported` as it is."""
        fact = next((f for f in self.imports if f.local == local and f.symbol is not None and not f.level), None)
        if fact is None or f"{fact.module}.{fact.symbol}" != imported:
            return imported
        other = self.loader.load(self, fact.module, 0)  # type: ignore[union-attr]
        again = other.aliases.get(fact.symbol) if other is not None and other is not self else None
        return again if again is not None else imported

    def _star_aliases(self) -> dict[str, str]:
        """The imports of the project modules this one star-imports: `from utils import *` brings `tf`."""
        return self.memo("star_aliases", lambda: self._star_imported(lambda model: model.aliases))

    def _star_imported(self, table: Callable[[SemanticModel], dict[str, Answer]],
                       seen: set[int] | None = None) -> dict[str, Answer]:
        """`table` of each project module this one star-imports, and of the ones those star-import, the
        first binding of a name winning."""
        seen = seen if seen is not None else {id(self)}
        found: dict[str, Answer] = {}
        for module, level in self.star_imports if self.loader is not None else ():
            other = self.loader.load(self, module, level)  # type: ignore[union-attr]
            if other is None or id(other) in seen:
                continue
            seen.add(id(other))
            for name, value in (*table(other).items(), *other._star_imported(table, seen).items()):
                found.setdefault(name, value)
        return found

    @cached_property
    def _call_facts(self) -> dict[int, CallFact]:
        return {id(call.node): call for call in self.calls}

    def call_fact(self, node: cst.CSTNode) -> CallFact | None:
        """The fact recorded for a call node (e.g. a method of a dataset chain)."""
        return self._call_facts.get(id(node))

    def exclusive_branches(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Whether two calls of one scope lie in `if` bodies that never both run on one pass (`if train and
        not cache:` and `if train and cache:`, assuming the value the tests read is not rebound between them;
        an `if` body and its `else` or `elif`)."""
        a, b = self.call_fact(first), self.call_fact(second)
        if a is None or b is None or a.scope is not b.scope:
            return False
        return any(exclusive(x, y) for x in a.ifs for y in b.ifs if x is not y) or _exclusive(
            (a.order, a.blocks), (b.order, b.blocks))

    def separate_branches(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Whether each of two calls lies under an `if` the other is not under, and the second's tests do not
        imply the first's (`if repeat_sample:`, then `if use_cache:`; not `if training:`, then `if training and
        cache:`): whether one pass takes both, the code does not show."""
        a, b = self.call_fact(first), self.call_fact(second)
        if a is None or b is None:
            return False
        first_only = [branch for branch in a.ifs if branch not in b.ifs]
        second_only = [branch for branch in b.ifs if branch not in a.ifs]
        return bool(second_only) and any(not implied(branch.test, second_only) for branch in first_only)

    def discards(self, node: cst.CSTNode) -> bool:
        """Whether a call's result is thrown away (the call is a statement of its own)."""
        call = self._call_facts.get(id(node))
        return call is not None and call.discarded

    def method_calls(self, *attrs: str) -> Iterator[CallFact]:
        wanted = set(attrs)
        return (c for c in self.calls if c.attr in wanted)

    @cached_property
    def _imports_by_name(self) -> dict[str, ImportFact]:
        return {fact.local: fact for fact in self.imports}

    def imported(self, name: str) -> tuple[SemanticModel, str | None] | None:
        """For a name bound by an import of a project module: that module's model and the symbol
        (`from losses import f` -> (losses, "f"); `import pkg.losses as L` -> (pkg.losses, None))."""
        fact = self._imports_by_name.get(name)
        if fact is None and self.star_imports and self.loader is not None:
            home = self.memo("star_symbols", lambda: self._star_imported(_defined_symbols)).get(name)
            own = self.memo("own_symbols", lambda: _defined_symbols(self))
            return (home, name) if home is not None and name not in own else None
        if fact is None or self.loader is None:
            return None
        return self.memo(("imported", name), lambda: self._imported(fact))

    def _imported(self, fact: ImportFact) -> tuple[SemanticModel, str | None] | None:
        assert self.loader is not None
        if fact.symbol is not None:
            inner = self.loader.load(self, f"{fact.module}.{fact.symbol}" if fact.module else fact.symbol, fact.level)
            if inner is not None:  # `from pkg import module`
                return inner, None
            outer = self.loader.load(self, fact.module, fact.level) if fact.module or fact.level else None
            return (outer, fact.symbol) if outer is not None else None
        found = self.loader.load(self, fact.module, 0)
        return (found, None) if found is not None else None

    def imported_modules(self) -> list[SemanticModel]:
        """The project modules this one imports, each once."""
        found: dict[int, SemanticModel] = {}
        for name in self._imports_by_name:
            hit = self.imported(name)
            if hit is not None and hit[0] is not self:
                found.setdefault(id(hit[0]), hit[0])
        return list(found.values())

    def imported_within(self, depth: int) -> list[SemanticModel]:
        """The project modules this one imports, and those they import, up to `depth` imports away, each once."""
        found: dict[int, SemanticModel] = {}
        layer: list[SemanticModel] = [self]
        for _ in range(depth):
            layer = [m for module in layer for m in module.imported_modules() if m is not self and id(m) not in found]
            found.update((id(m), m) for m in layer)
        return list(found.values())

    def foreign(self, name: str) -> tuple[SemanticModel, str] | None:
        """`f` imported from a project module, or `module.f` through an imported project module."""
        head, _, rest = name.partition(".")
        found = self.imported(head)
        if found is None:
            return None
        model, symbol = found
        if symbol is not None:
            return (model, symbol) if not rest else None
        if rest and "." not in rest:
            return model, rest
        return None

    # -- functions and classes ------------------------------------------------------------------------
    @cached_property
    def _functions_by_name(self) -> dict[str, list[Scope]]:
        table: dict[str, list[Scope]] = {}
        for scope in self.scopes:
            if isinstance(scope.node, cst.FunctionDef):
                table.setdefault(scope.name, []).append(scope)
        return table

    @cached_property
    def _scope_of_node(self) -> dict[int, Scope]:
        return {id(scope.node): scope for scope in self.scopes}

    def scope_of(self, node: cst.CSTNode) -> Scope | None:
        """The scope a function or lambda node opens."""
        return self._scope_of_node.get(id(node))

    def function_named(self, name: str, seen_from: Scope, before: int = END_OF_SCOPE) -> Scope | None:
        """The def a bare name refers to from `seen_from` at a point (`before`): a nested def first, then a
        module-level one. Of several defs of the name in one scope (a notebook that redefines `input_fn` in a later
        cell), the last one before that point; the first one when all come after it (a helper defined below)."""
        candidates = self._functions_by_name.get(name, [])
        scope: Scope | None = seen_from
        while scope is not None:
            defs = [c for c in candidates if c.parent is scope and c.class_name is None]
            if defs:
                earlier = [d for d in defs if d.order < before]
                return earlier[-1] if earlier else defs[0]
            scope = scope.parent
        return None

    def method_named(self, class_name: str, name: str, cross_module: bool = False, depth: int = 0) -> Scope | None:
        """The method `name` of a class of this module, or the one it inherits from a base class defined here
        (or, `cross_module`, in another project module), bases searched left to right."""
        class_fact = self.class_named(class_name)
        if class_fact is None or depth > 4:
            return None
        if name in class_fact.methods:
            return class_fact.methods[name]
        for base in class_fact.bases:
            found = self.class_and_module(base) if cross_module or "." not in base else None
            if found is None or (found[1] is not self and not cross_module):
                continue
            method = found[1].method_named(found[0].name, name, cross_module, depth + 1)
            if method is not None:
                return method
        return None

    def class_named(self, name: str) -> ClassFact | None:
        return next((c for c in self.classes if c.name == name), None)

    def class_of(self, name: str | None) -> ClassFact | None:
        """The class a name refers to: defined here, or imported from a project module."""
        found = self.class_and_module(name)
        return found[0] if found is not None else None

    def class_and_module(self, name: str | None) -> tuple[ClassFact, SemanticModel] | None:
        """The class a name refers to and the model of the module defining it."""
        if name is None:
            return None
        found = self.class_named(name) if "." not in name else None
        if found is not None:
            return found, self
        foreign = self.foreign(name)
        if foreign is None:
            return None
        other = foreign[0].class_named(foreign[1])
        return (other, foreign[0]) if other is not None else None

    def enclosing_class(self, scope: Scope) -> str | None:
        while scope is not None:
            if scope.class_name is not None:
                return scope.class_name
            scope = scope.parent  # type: ignore[assignment]
        return None

    # -- definitions ----------------------------------------------------------------------------------
    def definitions(self, name: str, scope: Scope, before: int | None = None) -> list[AssignFact]:
        """Assignments of `name` visible from `scope` (the innermost scope that assigns it or has it as a
        parameter), in source order. `self.x` is looked up across the methods of the enclosing class. With
        `before`, only earlier ones in `scope` itself."""
        if name.startswith("self."):
            return self._attribute_assigns(self.enclosing_class(scope), name)
        current: Scope | None = scope
        while current is not None:
            assigned = current.assignments_of(name)
            if current is scope and before is not None:
                assigned = [a for a in assigned if a.order < before]
            if assigned or (current.is_function and name in current.params):
                return assigned  # a parameter hides the enclosing scopes' bindings of its name
            current = current.parent
        return []

    def _bindings_in(self, scope: Scope) -> dict[str, list[AssignFact | LoopFact]]:
        """Name -> its assignments and `for` targets in one scope, in source order (built once per scope)."""
        table = self._binding_tables.get(id(scope))
        if table is None:
            table = {}
            for binding in sorted([*scope.assigns, *scope.loops], key=lambda b: b.order):
                for name in binding.targets:
                    table.setdefault(name, []).append(binding)
            self._binding_tables[id(scope)] = table
        return table

    @cached_property
    def _binding_tables(self) -> dict[int, dict[str, list[AssignFact | LoopFact]]]:
        return {}

    def _attribute_assigns(self, class_name: str | None, name: str) -> list[AssignFact]:
        if class_name is None:
            return []
        found = [a for s in self.scopes if self.enclosing_class(s) == class_name for a in s.assignments_of(name)]
        return sorted(found, key=lambda a: a.order)

    # -- the one lookup: what an expression can hold ---------------------------------------------------
    def values_of(self, expr: cst.CSTNode | None, scope: Scope, before: int = END_OF_SCOPE,
                  path: tuple[int, ...] = (), parameters: bool = True, depth: int = 0) -> list[Origin]:
        """Every origin of the value `expr` holds when evaluated in `scope` at visit order `before`. Without
        `parameters`, a parameter is a leaf (the call graph is built so, since call sites need it). A lookup
        made inside another one starts at that one's `depth`, so that lookups nested through each other
        stay bounded."""
        if expr is None:
            return []
        found: list[Origin] = []
        _Lookup(found, parameters).expand(expr, scope, before, path, (), {}, depth, frozenset())
        return found

    def items_of(self, name: str, scope: Scope, before: int = END_OF_SCOPE) -> list[Origin]:
        """What a list holds at a point: the elements of the literal it was last bound to and everything
        `append`ed or `+=`-ed to it since (in loops too). Empty when it was bound to anything else."""
        assigned = [a for a in self.definitions(name, scope, before) if a.operator == "="]
        if not assigned or not isinstance(assigned[-1].value, (cst.List, cst.Tuple)) or assigned[-1].path_of(name):
            return []
        start = assigned[-1]
        home = start.scope
        limit = before if home is scope else END_OF_SCOPE
        found = [o for e in start.value.elements for o in self.values_of(e.value, home, start.order)]
        for call in home.calls:
            if call.attr == "append" and start.order < call.order < limit and dotted(call.receiver) == name:
                found.extend(self.values_of(call_arg(call.node, 0, None), home, call.order))
        for assign in home.assigns:
            if (assign.operator == "AddAssign" and name in assign.targets and start.order < assign.order < limit
                    and isinstance(assign.value, (cst.List, cst.Tuple))):
                found.extend(o for e in assign.value.elements for o in self.values_of(e.value, home, assign.order))
        return found

    def read_later(self, name: str, scope: Scope, after: int,
                   ignore: Callable[[CallFact], bool] = lambda c: False, returns: bool = True,
                   skip: cst.CSTNode | None = None) -> bool:
        """Whether code after visit order `after` in `scope`, or in a function defined there, reads `name` (a call,
        an assignment, a loop, a return unless `returns` is False), calls that `ignore` accepts and the statement
        `skip` aside. A function that binds a name of its own (a parameter, or an assignment without `global`)
        reads its own variable, not this one."""
        stack = [scope]
        while stack:
            current = stack.pop()
            stack.extend(child for child in current.children if not _binds_locally(child, name))
            if (any(c.order > after and not ignore(c) and c.statement is not skip
                    and (reads({c.func} if c.func else (), name) or any(reads(n, name) for n in c.arg_names))
                    for c in current.calls)
                    or any(a.order > after and a.statement is not skip and reads(a.names, name) for a in current.assigns)
                    or any(loop.order > after and reads({dotted(loop.iter_expr) or ""}, name) for loop in current.loops)
                    or any(reads(r.names, name) for r in (*(current.returns if returns else ()), *current.yields))):
                return True
        return False

    def loop_counter(self, expr: cst.BaseExpression | None, scope: Scope,
                     before: int = END_OF_SCOPE) -> LoopFact | None:
        """The `for` loop whose counter a name holds at a point (`for epoch in range(n)`, the index of `for i, x in
        enumerate(xs)`), when every value it can hold there comes from that loop: a new Python int each turn."""
        if not isinstance(expr, cst.Name) or any(n in self.aliases or self.function_named(n, scope)
                                                 for n in ("range", "enumerate")):
            return None
        origins = self.values_of(expr, scope, before)
        loops = {id(loop.iter_expr): loop for loop in scope.loops if isinstance(loop.node, cst.For)}
        counted = [loops.get(id(o.expr)) for o in origins if o.kind == "element" and o.scope is scope
                   and isinstance(o.expr, cst.Call) and (dotted(o.expr.func), o.path) in _COUNTERS]
        return counted[0] if len(origins) == 1 and len(counted) == 1 else None

    # -- callables ------------------------------------------------------------------------------------
    def callables_of(self, expr: cst.BaseExpression | None, seen_from: Scope, depth: int = 0,
                     before: int = END_OF_SCOPE, parameters: bool = True) -> list[Scope]:
        """The functions or lambdas an expression evaluates to: a name, `self.method`, a lambda,
        `functools.partial(f, ...)`, `tf.function(f)`, a function of another project module, or a variable,
        attribute or parameter holding one of these."""
        if expr is None or depth > 4:
            return []
        found: dict[int, Scope] = {}
        for origin in self.values_of(expr, seen_from, before, parameters=parameters):
            for scope in origin.model._callables_at(origin, depth, parameters):
                found[id(scope)] = scope
        if not found and isinstance(expr, cst.Attribute) and not (dotted(expr) or "").startswith("self."):
            found = {id(scope): scope
                     for scope in self._instance_methods(expr.value, expr.attr.value, seen_from, before, depth)}
        return list(found.values())

    def _instance_methods(self, receiver: cst.BaseExpression, method: str, seen_from: Scope, before: int,
                          depth: int = 0) -> list[Scope]:
        """`x.m` where `x` holds an instance of a class this module or another project module defines
        (`x = Loader(path)`): that class's own method `m` (`__call__` for `x(...)`). Remembered: lookups nested
        through returns ask the same question again and again (with `dataset_chain`'s own memory, a 600-line
        decoder of chained builders went from over four minutes to about a second)."""
        key = (id(receiver), method, id(seen_from), before, depth)
        if key not in self._instance_lookups:
            self._instance_lookups[key] = self._instance_methods_of(receiver, method, seen_from, before, depth)
        return self._instance_lookups[key]

    @cached_property
    def _instance_lookups(self) -> dict[tuple[object, ...], list[Scope]]:
        return {}

    def _instance_methods_of(self, receiver: cst.BaseExpression, method: str, seen_from: Scope, before: int,
                             depth: int) -> list[Scope]:
        found = []
        for origin in self.values_of(receiver, seen_from, before, parameters=False, depth=depth):
            value = origin.expr
            if origin.kind == "parameter" and _is_self(origin):  # `this = self; this.init_net()`
                class_name = origin.model.enclosing_class(origin.scope)
                own = origin.model.method_named(class_name, method, False) if class_name else None
                found.extend([own] if own is not None else [])
                continue
            if origin.kind != "value" or origin.path or not isinstance(value, cst.Call):
                continue
            known = origin.model.class_and_module(dotted(value.func))
            if known is not None and method in known[0].methods:
                found.append(known[0].methods[method])
        return found

    def _callables_at(self, origin: Origin, depth: int, parameters: bool = True) -> list[Scope]:
        node = origin.expr
        if isinstance(node, (cst.Lambda, cst.FunctionDef)):
            scope = self.scope_of(node)
            return [scope] if scope is not None else []
        if origin.kind != "value" or origin.path:
            return []
        if isinstance(node, cst.Call):
            qualname = self.resolve(node.func)
            if qualname in _FUNCTION_WRAPPERS or (dotted(node.func) == "partial" and "partial" not in self.aliases):
                return self.callables_of(call_arg(node, 0, "func"), origin.scope, depth + 1, origin.order, parameters)
            return []
        name = dotted(node)
        if name is None:
            return []
        return self._named_callable(name, origin.scope, cross_module=True, before=origin.order)

    def named_callables(self, name: str, seen_from: Scope) -> list[Scope]:
        """What a name calls, seen from a scope: a def, a method (`self.m`), a class's `__init__`, or a function
        another project module defines (`from utils import is_chief`)."""
        return self._named_callable(name, seen_from, cross_module=True)

    def _named_callable(self, name: str, seen_from: Scope, cross_module: bool,
                        before: int = END_OF_SCOPE) -> list[Scope]:
        """A def, a method (`self.m`), a class (its `__init__`) or a project function by name."""
        if name.startswith("self.") and name.count(".") == 1:
            class_name = self.enclosing_class(seen_from)
            method = self.method_named(class_name, name[5:], cross_module) if class_name else None
            return [method] if method is not None else []
        if "." not in name:
            function = self.function_named(name, seen_from, before)
            if function is not None:
                return [function]
            class_fact = self.class_named(name)
            if class_fact is not None:  # calling a class runs its __init__
                return [class_fact.methods["__init__"]] if "__init__" in class_fact.methods else []
        if cross_module:
            foreign = self.foreign(name)
            if foreign is not None:
                model, symbol = foreign
                found = model._named_callable(symbol, model.module_scope, cross_module=False)
                again = model.foreign(symbol) if not found and model is not self else None
                if again is not None:  # a package's `__init__` that re-exports it (`from .trainer import Trainer`)
                    found = again[0]._named_callable(again[1], again[0].module_scope, cross_module=False)
                return found
        return []

    def callee(self, call: CallFact) -> Scope | None:
        """The function of this module that a call surely invokes (see `callees`)."""
        found = self.callees(call)
        return found[0] if len(found) == 1 else None

    def callees(self, call: CallFact) -> list[Scope]:
        """The functions of this module a call may invoke: a def, `self.method`, a variable bound to one
        (`f = a if c else b` gives both), or a method of an instance of this module's class
        (`trainer = Trainer(); trainer.train(ds)`). Another module's functions are not looked up: this is
        the call graph of the module."""
        cached = self._callees.get(id(call))
        if cached is not None:
            return cached
        func = call.node.func
        name = dotted(func)
        found: list[Scope] = []
        if name is not None:
            found = self._named_callable(name, call.scope, cross_module=False, before=call.order)
            if not found and ("." not in name or name.startswith("self.")) and name not in self.aliases:
                found = [s for o in self.values_of(func, call.scope, call.order, parameters=False) if o.model is self
                         for s in self._callables_at(o, 0, parameters=False) if s.owner is self]
            if (not found and isinstance(func, cst.Attribute) and name.count(".") == 1
                    and not name.startswith("self.") and dotted(func.value) not in self.aliases):
                found = [s for s in self._instance_methods(func.value, func.attr.value, call.scope, call.order)
                         if s.owner is self]
        found = [s for s in dict.fromkeys(found) if isinstance(s.node, cst.FunctionDef)]
        self._callees[id(call)] = found
        return found

    @cached_property
    def _callees(self) -> dict[int, list[Scope]]:
        return {}

    @cached_property
    def callers(self) -> dict[int, list[CallFact]]:
        """id(scope) -> the calls of this module that may invoke it."""
        table: dict[int, list[CallFact]] = {}
        for call in self.calls:
            if call.func is None:
                continue
            for target in self.callees(call):
                table.setdefault(id(target), []).append(call)
        return table

    def callers_of(self, scope: Scope) -> list[CallFact]:
        return self.callers.get(id(scope), [])

    def never_runs(self, call: CallFact, application: bool = False) -> bool:
        """Whether a call lies in the body of an `if` on a parameter of its function that defaults to False,
        None or 0 and that none of the function's calls sets (`if cached:` in `def get_dataset(files,
        cached=False)`, never called with `cached=`). Only where every call is in sight: in a notebook, in a
        private function (`_load`) of a module, or, in an `application` (nobody imports it as a library), in a
        module-level function that its module names only in calls, with the calls of the project's other
        files. The same for `if isinstance(P, str):` on a parameter whose default is of another type
        (`cache=True`) that no call sets, and for `if P == "literal":` (an `elif` too) on one whose default is
        another literal (`mode="one_machine"`) that no call sets. Also the body of an `if` that compares a module
        constant set once to a literal with a number it fails (`gpus = 1` ... `if gpus >= 2:`)."""
        if any(in_part(branch.body, call.statement) and self._constant_test(branch.test) is False
               for branch in call.ifs):
            return True
        scope = call.scope
        if not isinstance(scope.node, cst.FunctionDef):
            return False
        parameters = scope.value_params()
        defaults = {p.name.value: p.default for p in scope.node.params.params}
        flags = [name for branch in call.ifs if in_part(branch.body, call.statement) and (
                 isinstance(branch.test, cst.Name) and (name := branch.test.value) in parameters
                 and _falsy(defaults.get(name)) or (name := _default_not_of_type(branch.test, parameters, defaults))
                 or (name := _default_unequal(branch.test, parameters, defaults)))]
        if not flags:
            return False  # asking for the calls costs the project's other files: only for a candidate branch
        callers = self.callers_of(scope)
        if not (self.notebook or scope.name.startswith("_")):
            if not (application and self.loader is not None and scope.parent is self.module_scope
                    and self.named_only_in_calls(scope.name)):
                return False
            callers = [*callers, *self.loader.callers(scope)]
        return bool(callers) and any(not any(_sets(caller.node, name, parameters.index(name)) for caller in callers)
                                     for name in flags)

    def named_only_in_calls(self, name: str) -> bool:
        """Whether every other mention of a function in its module's code is the callee of a call (`prepare(ds)`),
        never a value handed on (`ds.map(prepare)`, `partial(prepare, cached=True)`), whose calls would not be in
        sight. A mention in a string counts (`getattr(module, "prepare")`): when unsure, it is not. Comments do not."""
        called = sum(1 for c in self.calls if isinstance(c.node.func, cst.Name) and c.node.func.value == name)
        mention = re.compile(rf"\b{re.escape(name)}\b")
        return sum(len(mention.findall(text)) for text in self._code_tokens) == called + 1  # and its `def`

    @cached_property
    def _code_tokens(self) -> tuple[str, ...]:
        """The text of the module's tokens, comments left out; the whole text as one, where it does not tokenize."""
        text = "\n".join(self.source_lines) + "\n"
        try:
            return tuple(t.string for t in tokenize.generate_tokens(io.StringIO(text).readline)
                         if t.type != tokenize.COMMENT)
        except (tokenize.TokenError, SyntaxError):
            return (text,)

    def _constant_test(self, test: cst.BaseExpression) -> bool | None:
        """The value of `NAME op INTEGER` where NAME is bound once in the module, at its top level, to an integer
        literal; None for any other test."""
        if not (isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and len(test.comparisons) == 1):
            return None
        target = test.comparisons[0]
        compare = _COMPARE.get(type(target.operator))
        if compare is None or not isinstance(target.comparator, cst.Integer):
            return None
        name = test.left.value
        bindings = [b for scope in self.scopes for b in self._bindings_in(scope).get(name, ())]
        if len(bindings) != 1 or not isinstance(bindings[0], AssignFact) or bindings[0].scope is not self.module_scope \
                or not isinstance(bindings[0].value, cst.Integer) or bindings[0].operator != "=":
            return None
        return compare(int(bindings[0].value.value, 0), int(target.comparator.value, 0))

    def runs_before(self, first: CallFact | AssignFact, second: CallFact | AssignFact) -> bool | None:
        """Whether `first` surely runs before `second` in one run of the module: True when, in every function
        (or the module) that reaches both, directly or through the calls that lead to them (three levels
        up), each way to `first` comes before each way to `second`, and no branch that holds one excludes
        the other; False when surely after; None when the module cannot tell (a function nothing here
        calls, calls in both orders, or one branch or the other)."""
        before = self._placements(first.scope, first.order, first.blocks, 0)
        after = self._placements(second.scope, second.order, second.blocks, 0)
        verdicts = set()
        for key in before.keys() & after.keys():
            pairs = [(a, b) for a in before[key] for b in after[key]]
            if any(_exclusive(a, b) for a, b in pairs):
                return None
            if all(a[0] < b[0] for a, b in pairs):
                verdicts.add(True)
            elif all(a[0] > b[0] for a, b in pairs):
                verdicts.add(False)
            elif not all(a[0] == b[0] for a, b in pairs):
                return None  # one call reaches both, another only one of them, in either order
        return verdicts.pop() if len(verdicts) == 1 else None

    def _placements(self, scope: Scope, order: int, blocks: tuple[Block, ...],
                    depth: int) -> dict[int, list[tuple[int, tuple[Block, ...]]]]:
        """id(scope) -> where a statement at `order` in `scope` runs, there and in the functions that call it."""
        found: dict[int, list[tuple[int, tuple[Block, ...]]]] = {id(scope): [(order, blocks)]}
        if scope.is_function and depth < 3:
            for caller in self.callers_of(scope):
                if caller.scope is scope:
                    continue
                for key, places in self._placements(caller.scope, caller.order, caller.blocks, depth + 1).items():
                    found.setdefault(key, []).extend(places)
        return found

    @cached_property
    def decorated(self) -> dict[int, list[Scope]]:
        """id(decorator function) -> the functions it decorates (`@wrap def f` is `f = wrap(f)`)."""
        table: dict[int, list[Scope]] = {}
        for scope in self.scopes:
            for decorator in scope.decorators:
                for target in self.decorator_functions(decorator, scope, imported=False):
                    table.setdefault(id(target), []).append(scope)
        return table

    def decorator_functions(self, decorator: cst.Decorator, scope: Scope, imported: bool = True) -> list[Scope]:
        """The project functions that a decorator of `scope` gives the decorated function to, as their first
        parameter: `@wrap` names one; `@make_wrap(args)` calls a factory, whose returned inner function is
        the decorator. Without `imported`, only this module's own names."""
        expr = decorator.decorator
        factory = isinstance(expr, cst.Call)
        name = dotted(expr.func if isinstance(expr, cst.Call) else expr)
        if name is None or (not imported and name in self.aliases):
            return []
        targets = self._named_callable(name, scope.parent or scope, cross_module=True)
        if not factory:
            return targets
        return [inner for target in targets for r in target.returns if isinstance(r.value, cst.Name)
                for inner in target.children if inner.name == r.value.value and isinstance(inner.node, cst.FunctionDef)]

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
            model: SemanticModel = scope.owner  # type: ignore[assignment]
            for call in scope.calls:
                target = model.callee(call)
                if target is not None:
                    stack.append(target)
        return list(seen.values())

    # -- positions of evidence ------------------------------------------------------------------------
    @cached_property
    def _positions(self) -> Positions:
        return positions(self.module)

    def position(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        """(line, column, end line, end column), 1-based, of a node of this module. Costs about half a parse the
        first time, so it is asked only for evidence a finding cites."""
        where = self._positions[node]
        return where.start.line, where.start.column + 1, where.end.line, where.end.column + 1

    def own_call(self, node: cst.CSTNode, owner: SemanticModel) -> cst.CSTNode | None:
        """This module's node for a call `owner` holds: the node itself when `owner` is this model, the call at
        the same place when `owner` is another analysis of this module's file (one the project read while
        looking for a function's callers), else None."""
        if owner is self:
            return node
        if self.file is None or owner.file is None or owner.file.resolve() != self.file.resolve():
            return None
        where = owner.position(node)
        return next((call.node for call in self.calls if self.position(call.node) == where), None)


_COMPARE = {cst.GreaterThan: operator.gt, cst.GreaterThanEqual: operator.ge, cst.LessThan: operator.lt,
            cst.LessThanEqual: operator.le, cst.Equal: operator.eq, cst.NotEqual: operator.ne}


def _is_self(origin: Origin) -> bool:
    """The `self` parameter of a method: the first one, named so."""
    node = origin.scope.node
    return (isinstance(origin.expr, cst.Name) and origin.expr.value == "self" and isinstance(node, cst.FunctionDef)
            and bool(node.params.params) and node.params.params[0].name.value == "self")


def _default_not_of_type(test: cst.BaseExpression, parameters: tuple[str, ...],
                         defaults: dict[str, cst.BaseExpression | None]) -> str:
    """P for `isinstance(P, str)` (a builtin type) when P's default is a literal of another type
    (`def prepare(ds, cache=True)`, then `if isinstance(cache, str):`); '' otherwise."""
    if not (isinstance(test, cst.Call) and dotted(test.func) == "isinstance" and len(test.args) == 2):
        return ""
    name, kind = dotted(test.args[0].value), _BUILTIN_TYPES.get(dotted(test.args[1].value))
    value = _literal(defaults.get(name) if name in parameters else None)
    unlike = kind is not None and value is not _UNKNOWN and not isinstance(value, kind)
    return name if unlike and name is not None else ""


def _default_unequal(test: cst.BaseExpression, parameters: tuple[str, ...],
                     defaults: dict[str, cst.BaseExpression | None]) -> str:
    """P for `P == "literal"` when P's default is another literal (`def make(mode="local")`, then
    `elif mode == "multi_worker":`); '' otherwise."""
    if not (isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.Equal)):
        return ""
    name = test.left.value
    wanted = _literal(test.comparisons[0].comparator)
    default = _literal(defaults.get(name) if name in parameters else None)
    return name if _UNKNOWN not in (wanted, default) and wanted != default else ""


def _falsy(value: cst.BaseExpression | None) -> bool:
    return (isinstance(value, cst.Name) and value.value in ("False", "None")
            or isinstance(value, cst.Integer) and value.value == "0")


def _sets(call: cst.Call, name: str, index: int) -> bool:
    """Whether a call may give a parameter a true value: by keyword or in its place, unless as False, None or
    0; a `*args` or `**kwargs` may."""
    for position, argument in enumerate(call.args):
        if argument.star:
            return True
        given = (argument.keyword.value == name) if argument.keyword is not None else position == index
        if given:
            return not _falsy(argument.value)
    return False


class _Lookup:
    """One `values_of` query: expands an expression into its origins, depth-first."""

    def __init__(self, found: list[Origin], parameters: bool) -> None:
        self.found = found
        self.parameters = parameters
        self.budget = 400  # expansions per query: a pathological module cannot make one query slow

    def leaf(self, kind: OriginKind, expr: cst.CSTNode, scope: Scope, before: int, path: tuple[int, ...],
             via: tuple[Step, ...]) -> None:
        origin = Origin(kind, expr, scope, before, path, via)
        if origin not in self.found:
            self.found.append(origin)

    def expand(self, expr: cst.CSTNode, scope: Scope, before: int, path: tuple[int, ...], via: tuple[Step, ...],
               bound: dict[tuple[int, str], tuple[cst.BaseExpression, Scope, int]], depth: int,
               active: frozenset[tuple[int, str]]) -> None:
        self.budget -= 1
        if depth > _MAX_DEPTH or self.budget < 0:
            self.leaf("value", expr, scope, before, path, via)
            return
        model: SemanticModel = scope.owner  # type: ignore[assignment]
        if path and isinstance(expr, (cst.Tuple, cst.List)):
            index = path[0]
            elements = expr.elements
            if 0 <= index < len(elements) and not any(isinstance(e, cst.StarredElement) for e in elements[:index + 1]):
                self.expand(elements[index].value, scope, before, path[1:], via, bound, depth + 1, active)
                return
        if isinstance(expr, cst.BooleanOperation) and isinstance(expr.operator, cst.Or):
            for side in (expr.left, expr.right):
                self.expand(side, scope, before, path, via, bound, depth + 1, active)
            return
        if isinstance(expr, cst.IfExp):
            for side in (expr.body, expr.orelse):
                self.expand(side, scope, before, path, via, bound, depth + 1, active)
            return
        if isinstance(expr, cst.Call) and self._returns(expr, scope, path, via, bound, depth, active):
            return
        index = _item_index(expr)
        if index is not None:  # `pair[0]`: item 0 of what `pair` holds
            self.expand(expr.value, scope, before, (index, *path), via, bound, depth + 1, active)  # type: ignore[attr-defined]
            return
        name = dotted(expr)
        if name is None or ("." in name and not name.startswith("self.")) or name.count(".") > 1:
            if name is not None and "." in name and not name.startswith("self."):
                foreign = model.foreign(name)
                if foreign is not None and self._module_global(foreign, path, via, depth, active):
                    return
            self.leaf("value", expr, scope, before, path, via)
            return
        key = (id(scope), name)
        if key in active:
            return  # a cycle: what it adds is found along the other way in
        active = active | {key}
        if name.startswith("self."):
            assigned = model.definitions(name, scope)
            local = _reaching_bindings([a for a in assigned if a.scope is scope], before)
            for assign in local or assigned:
                self._assigned(assign, name, path, via, bound, depth, active)
            if not assigned or any(name in assign.names for assign in assigned):
                # `self.step = tf.function(self.step)` wraps the method: the attribute may be the method too
                self.leaf("value", expr, scope, before, path, via)
            return
        self._name(name, expr, scope, before, path, via, bound, depth, active)

    def _name(self, name: str, expr: cst.CSTNode, scope: Scope, before: int, path: tuple[int, ...],
              via: tuple[Step, ...], bound: dict[tuple[int, str], tuple[cst.BaseExpression, Scope, int]],
              depth: int, active: frozenset[tuple[int, str]]) -> None:
        model: SemanticModel = scope.owner  # type: ignore[assignment]
        current: Scope | None = scope
        while current is not None:
            limit = before if current is scope else END_OF_SCOPE
            bindings = _reaching_bindings(model._bindings_in(current).get(name, ()), limit)
            if any(key[0] == id(current) for key in bound):  # `make(data, "valid")`: not the `"train"` branch
                bindings = [b for b in bindings if not _branch_not_taken(b, current, bound)]
            for binding in bindings:
                if isinstance(binding, LoopFact):
                    where = binding.targets.index(name)
                    loop_path = binding.unpack[where] if where < len(binding.unpack) else ()
                    if binding.iter_expr is not None:
                        self.leaf("element", binding.iter_expr, current, binding.order, loop_path + path, via)
                else:
                    self._assigned(binding, name, path, via, bound, depth, active)
            if bindings:
                return
            if name in current.params and current.is_function:
                self._parameter(name, expr, current, path, via, bound, depth, active)
                return
            current = current.parent
        function = model.function_named(name, scope, before)
        if function is not None:
            self.leaf("value", function.node, function, END_OF_SCOPE, path, via)
            return
        foreign = model.foreign(name)
        if foreign is not None and self._module_global(foreign, path, via, depth, active):
            return
        self.leaf("value", expr, scope, before, path, via)

    def _assigned(self, assign: AssignFact, name: str, path: tuple[int, ...], via: tuple[Step, ...],
                  bound: dict[tuple[int, str], tuple[cst.BaseExpression, Scope, int]], depth: int,
                  active: frozenset[tuple[int, str]]) -> None:
        if assign.operator != "=":  # `x += y`: the analysis folds the assignments itself
            self.leaf("value", assign.node, assign.scope, assign.order, path, via)
            return
        inner = assign.path_of(name)
        if -1 in inner:
            self.leaf("value", assign.node, assign.scope, assign.order, path, via)
            return
        self.expand(assign.value, assign.scope, assign.order, inner + path, via, bound, depth + 1, active)

    def _parameter(self, name: str, expr: cst.CSTNode, function: Scope, path: tuple[int, ...],
                   via: tuple[Step, ...], bound: dict[tuple[int, str], tuple[cst.BaseExpression, Scope, int]],
                   depth: int, active: frozenset[tuple[int, str]]) -> None:
        given = bound.get((id(function), name))
        if given is not None:
            argument, caller, order = given
            self.expand(argument, caller, order, path, via, bound, depth + 1, active)
            return
        if not self.parameters:
            self.leaf("parameter", expr, function, END_OF_SCOPE, path, via)
            return
        model: SemanticModel = function.owner  # type: ignore[assignment]
        params = function.value_params()
        sites = [(c.node, c.scope, c.order) for c in model.callers_of(function)]
        decorators = [d for d in model.decorated.get(id(function), ())]
        elsewhere = model.loader.callers(function) if not decorators and name in params and model.loader else []
        for call in elsewhere:  # calls from the project's other modules
            argument = call_arg(call.node, params.index(name), name)
            if argument is None:
                self.leaf("parameter", expr, function, END_OF_SCOPE, path, via)
            else:
                step = Step(call.node, function, call.scope)
                self.expand(argument, call.scope, call.order, path, (*via, step), bound, depth + 1, active)
        if elsewhere and not sites:
            return
        if not sites and not decorators or name not in params:
            self.leaf("parameter", expr, function, END_OF_SCOPE, path, via)
            return
        index = params.index(name)
        for decorated in decorators:  # `@wrap def f`: wrap's first parameter is f
            if index == 0:
                self.leaf("value", decorated.node, decorated, END_OF_SCOPE, path, via)
        for call, caller, order in sites:
            argument = call_arg(call, index, name)
            if argument is None:
                self.leaf("parameter", expr, function, END_OF_SCOPE, path, via)
            else:
                self.expand(argument, caller, order, path, via, bound, depth + 1, active)

    def _returns(self, call: cst.Call, scope: Scope, path: tuple[int, ...], via: tuple[Step, ...],
                 bound: dict[tuple[int, str], tuple[cst.BaseExpression, Scope, int]], depth: int,
                 active: frozenset[tuple[int, str]]) -> bool:
        """A call of a function of the module or project: its return values, parameters bound to this call's
        arguments. False when the callee is unknown, a class, or returns nothing."""
        model: SemanticModel = scope.owner  # type: ignore[assignment]
        name = dotted(call.func)
        if name is None or model.resolve(name) is not None and model.foreign(name) is None:
            return False
        fact = model.call_fact(call)
        order = fact.order if fact is not None else END_OF_SCOPE
        targets = model._named_callable(name, scope, cross_module=True, before=order)
        if not targets and isinstance(call.func, cst.Attribute) and not name.startswith("self."):
            # `loader.batches()` with `loader = Loader()`
            targets = model._instance_methods(call.func.value, call.func.attr.value, scope, order, depth + 1)
        elif not targets and isinstance(call.func, cst.Name):  # `loader(8)`: its class's `__call__`
            targets = model._instance_methods(call.func, "__call__", scope, order, depth + 1)
        if len(targets) != 1:
            return False
        function = targets[0]
        if not isinstance(function.node, cst.FunctionDef) or function.is_generator or not function.returns:
            return False
        if function.name == "__init__":
            return False
        key = (id(function), "<return>")
        if key in active:
            return True
        active = active | {key}
        if function.owner is not model:
            via = (*via, Step(call, function, scope, returned=True))
        bind = dict(bound)
        for index, param in enumerate(function.value_params()):
            value = call_arg(call, index, param)
            if value is not None:
                bind[(id(function), param)] = (value, scope, order)
        for returned in function.returns:
            self.expand(returned.value, function, END_OF_SCOPE, path, via, bind, depth + 1, active)
        return True

    def _module_global(self, foreign: tuple[SemanticModel, str], path: tuple[int, ...], via: tuple[Step, ...],
                       depth: int, active: frozenset[tuple[int, str]]) -> bool:
        """A module-level name of another project module (`from config import strategy`)."""
        model, symbol = foreign
        if model.function_named(symbol, model.module_scope) is not None or model.class_named(symbol) is not None:
            return False
        if not model.module_scope.assignments_of(symbol):
            return False
        self._name(symbol, cst.Name(symbol), model.module_scope, END_OF_SCOPE, path, via, {}, depth + 1, active)
        return True


Bound = dict[tuple[int, str], tuple[cst.BaseExpression, Scope, int]]
_LITERALS = (cst.SimpleString, cst.Integer)
_CONSTANTS = {"True": True, "False": False, "None": None}
_UNKNOWN = object()  # a parameter whose value in the call is not a literal
_BUILTIN_TYPES: dict[str | None, type] = {"str": str, "int": int, "float": float, "bool": bool, "bytes": bytes}


def _branch_not_taken(binding: AssignFact | LoopFact, function: Scope, bound: Bound) -> bool:
    """Whether a binding lies in an `if` branch that the call's literal arguments rule out: the body of `if mode
    == "train":` (or `if self.mode == "train":` after `self.mode = mode`) when the call gives `mode="valid"`,
    and the body of `if cache:` when the call leaves `cache=False` at its default."""
    if not isinstance(function.node, cst.FunctionDef):
        return False
    for branch, in_body in _branches_around(function.node.body, binding.node if isinstance(binding, LoopFact)
                                            else binding.statement):
        holds = _test_holds(branch, function, bound)
        if holds is not None and holds != in_body:
            return True
    return False


def _test_holds(branch: cst.If, function: Scope, bound: Bound) -> bool | None:
    """Whether the `if`'s test holds for the call's literal arguments: `P == lit`, `P != lit`, `P` or `not P`
    for a parameter P; None when it cannot be told."""
    test, negated = branch.test, False
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negated = test.expression, True
    if isinstance(test, cst.Comparison):
        if not (len(test.comparisons) == 1 and type(test.comparisons[0].operator) in (cst.Equal, cst.NotEqual)
                and isinstance(test.comparisons[0].comparator, _LITERALS)):
            return None
        given = _literal_argument(test.left, function, bound, branch)
        if given is _UNKNOWN:
            return None
        holds = (given == test.comparisons[0].comparator.evaluated_value) == isinstance(  # type: ignore[union-attr]
            test.comparisons[0].operator, cst.Equal)
    else:
        given = _literal_argument(test, function, bound, branch)
        if given is _UNKNOWN:
            return None
        holds = bool(given)
    return holds != negated


def _literal_argument(expr: cst.BaseExpression, function: Scope, bound: Bound, before: cst.If) -> object:
    """The literal a parameter holds in this call (its argument, else its default), looking through one
    `self.mode = mode` made at the function's top level before `before`; _UNKNOWN when not a literal."""
    name = dotted(expr)
    if name is not None and name.startswith("self.") and name.count(".") == 1:
        stores = [a for a in function.assigns if name in a.targets]
        first = next((n for n, s in enumerate(function.node.body.body) if s is before), None)  # type: ignore[union-attr]
        if not (len(stores) == 1 and not stores[0].blocks and isinstance(stores[0].value, cst.Name) and first
                and any(s is stores[0].statement for s in function.node.body.body[:first])):  # type: ignore[union-attr]
            return _UNKNOWN
        name = stores[0].value.value
    if name is None or name not in function.value_params():
        return _UNKNOWN
    given = bound.get((id(function), name))
    value = given[0] if given is not None else next(
        (p.default for p in function.node.params.params if p.name.value == name), None)  # type: ignore[union-attr]
    return _literal(value)


def _literal(value: cst.BaseExpression | None) -> object:
    """The Python value of `True`, `False`, `None`, a string or an integer literal; _UNKNOWN for anything else."""
    if isinstance(value, cst.Name) and value.value in _CONSTANTS:
        return _CONSTANTS[value.value]
    return value.evaluated_value if isinstance(value, _LITERALS) else _UNKNOWN


def _branches_around(root: cst.CSTNode, statement: cst.CSTNode) -> list[tuple[cst.If, bool]]:
    """The `if` statements around a statement, outermost first, each with whether it is in the body (else in
    the `else`/`elif`)."""
    stack: list[tuple[cst.CSTNode, tuple[tuple[cst.If, bool], ...]]] = [(root, ())]
    while stack:
        node, around = stack.pop()
        if node is statement:
            return list(around)
        if isinstance(node, cst.If):
            stack.append((node.body, (*around, (node, True))))
            if node.orelse is not None:
                stack.append((node.orelse, (*around, (node, False))))
        elif isinstance(node, STATEMENT_PARTS):
            stack.extend((child, around) for child in node.children)
    return []


def _item_index(expr: cst.CSTNode) -> int | None:
    """The index of `x[i]` for a non-negative integer literal `i`, else None."""
    if not (isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index)):
        return None
    value = expr.slice[0].slice.value
    return int(value.evaluated_value) if isinstance(value, cst.Integer) else None


def _defined_symbols(model: SemanticModel) -> dict[str, SemanticModel]:
    """The module-level functions, classes and variables of a module, each mapped to the module."""
    names = [*(s.name for s in model.module_scope.children if isinstance(s.node, cst.FunctionDef)),
             *(c.name for c in model.classes), *(t for a in model.module_scope.assigns for t in a.targets)]
    return {name: model for name in names if not name.startswith("_")}


def _reaching_bindings(found: Iterable[AssignFact | LoopFact], before: int) -> list[AssignFact | LoopFact]:
    """Of the bindings of one name in one scope (in source order), those that can reach a use at visit
    order `before`: the last one before it, and earlier ones as long as the later ones are conditional (in
    an `if` branch, a loop or a `try` body the use is not in), but none from the `if` branch whose `else`
    the use is in."""
    reaching: list[AssignFact | LoopFact] = []
    for binding in reversed([b for b in found if b.order < before]):
        if any(block.excludes(before) for block in binding.blocks):
            continue
        reaching.append(binding)
        if all(block.holds(before) for block in binding.blocks):
            break
    return reaching


__all__ = ["ModuleLoader", "Origin", "SemanticModel", "Step"]


def _exclusive(first: tuple[int, tuple[Block, ...]], second: tuple[int, tuple[Block, ...]]) -> bool:
    """Whether two places in one scope cannot both run: they lie in the two branches of one `if`, or one is
    in a branch that returns or raises before the other."""
    return any(block.excludes(second[0]) for block in first[1]) or any(block.excludes(first[0]) for block in second[1])


def _binds_locally(scope: Scope, name: str) -> bool:
    """Whether a function's `name` (a plain name) is a local of its own: a parameter, or assigned without a
    `global` or `nonlocal` statement for it."""
    return "." not in name and name not in scope.outer_names and (
        name in scope.params or any(name in a.targets for a in scope.assigns))
