"""The project around a linted file: the modules its imports name from the same project, read on demand.

`Project` is the semantic model's `ModuleLoader`. A module is looked for under the project root (the nearest
folder with pyproject.toml, setup.py, setup.cfg or .git; `project_root.py`) and its `src/` folder, next to the
importing file (scripts that import their neighbours), and relative to the importer for `from . import x`.
It is parsed and analysed only when a rule's question reaches it (a helper's return value, a class's
bases, a decorator), once per process; a module that cannot be read or parsed is simply not known.

When a question reaches a parameter of a module-level function that its own module never calls, the
project's other files that name the function and its module are searched for the calls (`callers`); when it
is what other modules do with this one's values (a pipeline a loader returns and train.py fits on), the
files that import it are (`consumers`, at most MAX_CONSUMERS). Neither runs in a project of more than
`listing.MAX_FILES` files. A cached result that rests on such a search lists the project's file listing too
(`listing.py`): a call added to any file invalidates it.

Every module a linted file used is recorded with the digest of its bytes (`begin`/`used`), so a cached
finding is reused only while those files are unchanged.
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Callable

import libcst as cst

from tfdoctor.lint.analysis.tensorflow import ModuleFacts
from tfdoctor.lint.guard import screen
from tfdoctor.lint.listing import forget as forget_listings
from tfdoctor.lint.listing import listing_digest, listing_key, project_files, python_files
from tfdoctor.lint.project_root import project_root, source_roots
from tfdoctor.lint.names import dotted
from tfdoctor.lint.semantic.collector import CallFact, Scope
from tfdoctor.lint.semantic.model import SemanticModel

MAX_MODULE_BYTES = 1 << 20  # a larger module is not read for evidence (generated code, vendored data)
MAX_TEXT_BYTES = 256 * 1024  # files searched for callers are kept in memory when at most this large
MAX_CONSUMERS = 16  # more modules importing one than this: none is read for what it does with its values
_MEMO = 64  # analysed modules kept per process


class Project:
    """The modules of one project root, analysed when first imported."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.roots = source_roots(root)
        self._models: dict[tuple[Path, str], tuple[str, ModuleFacts | None]] = {}
        self._used: dict[str, str] = {}
        self._texts: dict[Path, bytes] = {}

    @staticmethod
    def for_file(path: Path) -> Project:
        return _project_at(_root_of(path.resolve().parent))

    def forget_files(self) -> None:
        """Read the files' texts afresh when next needed, and drop every analysed module once one of their files
        changed: a module remembers the modules its imports name (`imported`), so an unchanged one would go on
        answering from a changed one's old analysis."""
        self._texts.clear()
        if any(_digest(path) != digest for (path, _), (digest, _) in self._models.items()):
            self._models.clear()

    # -- what one linted file used --------------------------------------------------------------------
    def begin(self) -> None:
        """Start recording the modules one linted file uses."""
        self._used = {}

    def used(self) -> tuple[tuple[str, str], ...]:
        """(path, sha256 of its bytes) of every module read for the file since `begin`."""
        return tuple(sorted(self._used.items()))

    # -- ModuleLoader ---------------------------------------------------------------------------------
    def load(self, importer: SemanticModel, module: str, level: int) -> SemanticModel | None:
        if importer.file is None:
            return None
        for candidate in self._candidates(importer.file.resolve(), module, level):
            model = self._model(candidate, importer.path)
            if model is not None:
                return model
        return None

    def callers(self, function: Scope) -> list[CallFact]:
        """The calls of a module-level function from the project's other files, also of a module-level class
        (for its `__init__`) and of its methods on an instance (`trainer = Trainer(); trainer.train(ds)`):
        those whose text names the function, its class and its module are analysed, and their calls
        resolved through their imports."""
        model = function.owner
        if not isinstance(model, SemanticModel) or model.file is None or function.parent is not model.module_scope \
                or not isinstance(function.node, cst.FunctionDef):
            return []
        home = model.file.resolve()
        method = function.class_name is not None and function.name != "__init__"
        called = function.class_name if function.name == "__init__" and function.class_name else function.name
        words = (called.encode(), _module_name(home).encode(), *((function.class_name.encode(),) if method else ()))
        found: list[CallFact] = []
        for path in self._naming(model, lambda text: all(word in text for word in words)):
            other = self._model(path, model.path)
            for call in other.calls if other is not None else ():
                name = dotted(call.node.func)
                if name is None or called not in name:
                    continue
                targets = (other._instance_methods(call.receiver, called, call.scope, call.order)  # type: ignore[arg-type]
                           if method and call.attr == called else other.named_callables(name, call.scope))
                if any(_same(target, function, home) for target in targets):
                    found.append(call)
        return found

    def consumers(self, model: SemanticModel) -> list[SemanticModel]:
        """The project's other modules that import this one (an `import` line names its module, and resolves to
        this file: not `from keras.datasets import cifar10` for cifar10.py, nor `from model import X` of
        another folder's model.py), analysed; none when more than MAX_CONSUMERS name it (a `utils` every file
        imports: reading them all per question costs more than it finds)."""
        if model.file is None:
            return []
        home = model.file.resolve()
        name = re.escape(_module_name(home).encode())
        statement = re.compile(rb"^[ \t]*(?:from[ \t]+[\w.]*\b" + name + rb"\b[\w.]*[ \t]+import\b"  # from .data import
                               rb"|from[ \t]+[\w.]+[ \t]+import[ \t][^\n#]*\b" + name + rb"\b"  # from . import data
                               rb"|import[ \t][^\n#]*\b" + name + rb"\b)", re.MULTILINE)  # import pkg.data
        paths = self._naming(model, lambda text: statement.search(text) is not None)
        if len(paths) > MAX_CONSUMERS:
            return []
        return [other for other in (self._model(path, model.path) for path in paths)
                if other is not None and _imports_file(other, home)]

    def named_elsewhere(self, home: Path, pattern: re.Pattern[bytes]) -> bool | None:
        """Whether a file of the project other than `home`, a module or a notebook, has text that `pattern`
        finds; None when the project has too many files to search. The cached result of the file asking rests
        on the project's listing from then on."""
        files = project_files(self.root)
        if not files:
            return None
        self._used[listing_key(self.root)] = listing_digest(self.root)
        return any(path != home and pattern.search(self._text(path) or _read(path)) for path in files)

    def _naming(self, model: SemanticModel, wanted: Callable[[bytes], bool]) -> list[Path]:
        """The project's files other than `model`'s whose text is `wanted` (texts are read once per process).
        The cached result of the file asking rests on the project's listing from then on."""
        assert model.file is not None
        home = model.file.resolve()
        self._used[listing_key(self.root)] = listing_digest(self.root)
        return [path for path in python_files(self.root) if path != home and wanted(self._text(path))]

    def _text(self, path: Path) -> bytes:
        text = self._texts.get(path)
        if text is None:
            try:
                text = path.read_bytes() if path.stat().st_size <= MAX_TEXT_BYTES else b""
            except OSError:
                text = b""
            self._texts[path] = text
        return text

    def _candidates(self, importer: Path, module: str, level: int) -> list[Path]:
        parts = [p for p in module.split(".") if p]
        if level:
            base = importer.parent
            for _ in range(level - 1):
                base = base.parent
            bases = [base]
        else:
            if not parts:
                return []
            bases = [importer.parent, *self.roots]
        found = []
        for base in bases:
            target = base.joinpath(*parts)
            for candidate in (target.with_suffix(".py") if parts else None, target / "__init__.py"):
                if candidate is not None and candidate != importer and _inside(candidate, self.root):
                    found.append(candidate)
        return found

    def _model(self, path: Path, importer_display: str) -> ModuleFacts | None:
        try:
            if not path.is_file() or path.stat().st_size > MAX_MODULE_BYTES:
                return None
            source = path.read_bytes()
        except OSError:
            return None
        digest = hashlib.sha256(source).hexdigest()
        display = _display(path, importer_display)  # part of the key: it names the module in findings
        known = self._models.get((path, display))
        if known is None or known[0] != digest:
            known = (digest, self._analyse(source, path, display))
            if len(self._models) >= _MEMO:
                self._models.pop(next(iter(self._models)))
            self._models[(path, display)] = known
        if known[1] is not None:
            self._used[str(path)] = digest
        return known[1]

    def _analyse(self, source: bytes, path: Path, display: str) -> ModuleFacts | None:
        verdict = screen(source) if b"\0" not in source else None
        if verdict is None or verdict.rejection is not None or verdict.suspicious:  # could crash libcst here
            return None
        try:
            module = cst.parse_module(source)
            lines = source.decode(module.encoding, errors="replace").splitlines()
            return ModuleFacts(module, display, lines, loader=self, file=path)
        except (cst.ParserSyntaxError, UnicodeDecodeError, LookupError, SyntaxError, RecursionError, ValueError):
            return None  # a module that cannot be read gives no evidence; linting it says why


def _read(path: Path) -> bytes:
    """A file too large to keep in memory, read once for one question."""
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _digest(path: Path) -> str | None:
    """sha256 of a file's bytes (None: unreadable)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _module_name(home: Path) -> str:
    """The name other modules import a file by (its last part): `data` for data.py, `pkg` for pkg/__init__.py."""
    return home.parent.name if home.name == "__init__.py" else home.stem


def _imports_file(model: SemanticModel, home: Path) -> bool:
    """Whether one of the module's imports that name `home`'s module (a star import too) resolves to that file;
    only those are resolved, so the module's other imports are not read."""
    name = _module_name(home)
    named = (hit[0] for fact in model.imports if name in (*fact.module.split("."), fact.symbol)
             if (hit := model.imported(fact.local)) is not None)
    star = (model.loader.load(model, module, level) for module, level in model.star_imports
            if name in module.split(".")) if model.loader else ()
    return any(other is not None and other.file is not None and other.file.resolve() == home
               for other in (*named, *star))


def _same(target: Scope, function: Scope, home: Path) -> bool:
    """The same function, though the linted module's model and the one its importers see are two objects."""
    owner = target.owner
    return (target.qualname == function.qualname and isinstance(owner, SemanticModel) and owner.file is not None
            and owner.file.resolve() == home)


def _display(path: Path, importer_display: str) -> str:
    """A path shown like the importer's: relative to the working directory when the importer's is."""
    if os.path.isabs(importer_display):
        return str(path)
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


@lru_cache(maxsize=256)
def _root_of(folder: Path) -> Path:
    return project_root(folder)


_PROJECTS: dict[Path, Project] = {}  # by root, the 16 made last
_MAX_PROJECTS = 16


def _project_at(root: Path) -> Project:
    project = _PROJECTS.get(root)
    if project is None:
        if len(_PROJECTS) >= _MAX_PROJECTS:
            _PROJECTS.pop(next(iter(_PROJECTS)))
        project = _PROJECTS[root] = Project(root)
    return project


def forget() -> None:
    """Files may have changed since they were read (a long-lived process: the language server): forget the
    projects' roots, file lists and texts. Module models stay; each is checked against its file's digest."""
    _root_of.cache_clear()
    forget_listings()
    for project in _PROJECTS.values():
        project.forget_files()
