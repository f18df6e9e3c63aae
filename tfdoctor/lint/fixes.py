"""Apply fixes: safe ones with `--fix`, unsafe ones too with `--unsafe-fixes`; show them with `--diff`.

A pass lints the module, applies every non-overlapping fix in one transform, and re-parses; passes repeat
until nothing changes (a fix can reveal another). Files are written atomically, only when they changed, and
never when they changed on disk while being fixed or are read-only.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Generic, TypeVar

import libcst as cst

from tfdoctor.config import Overrides, Settings, load_settings
from tfdoctor.lint.engine import InternalError, Reported, check_module, discover, parse_source
from tfdoctor.lint.findings import Finding
from tfdoctor.lint.notebooks import NotebookError

MAX_PASSES = 10
Source = TypeVar("Source", str, bytes)


class FixError(Exception):
    """A file that could not be fixed safely: reported on one line, the file left as it was."""


@dataclass
class FixResult(Generic[Source]):
    text: Source
    fixed: list[Finding] = field(default_factory=list)  # positions are those of the text the fix was made on
    descriptions: list[str] = field(default_factory=list)  # what each fix did, parallel to `fixed`


class _Replace(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, cst.CSTNode]) -> None:
        super().__init__()
        self.replacements = replacements

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        return self.replacements.get(id(original_node), updated_node)


def fix_source(source: Source, display_path: str, settings: Settings, path: Path | None = None,
               unsafe: bool = False, wanted: Callable[[Finding], bool] | None = None) -> FixResult[Source]:
    """The source with fixes applied (same type as given: text or bytes) and the findings they fixed.
    With `wanted`, only the findings it accepts are fixed, in one pass (an editor's fix for one finding)."""
    result: FixResult[Source] = FixResult(source)
    for _ in range(MAX_PASSES if wanted is None else 1):
        raw = result.text.encode("utf-8") if isinstance(result.text, str) else result.text
        module = parse_source(raw, display_path, settings, path)
        if not isinstance(module, cst.Module):
            break
        chosen = _non_overlapping([
            r for r in check_module(module, display_path, settings, path)
            if r.violation.fix is not None and r.fix_span is not None and (r.violation.fix.safe or unsafe)
            and (wanted is None or wanted(r.finding))
        ])
        if not chosen:
            break
        fixed = module.visit(_Replace({id(r.violation.fix.old): r.violation.fix.new for r in chosen}))  # type: ignore[union-attr]
        text = fixed.code if isinstance(source, str) else fixed.bytes
        if text == result.text:
            break
        result = FixResult(text, result.fixed + [r.finding for r in chosen],  # type: ignore[arg-type]
                           result.descriptions + [r.violation.fix.description for r in chosen])  # type: ignore[union-attr]
    return result


def _non_overlapping(reported: list[Reported]) -> list[Reported]:
    chosen: list[Reported] = []
    for candidate in sorted(reported, key=lambda r: r.fix_span):  # type: ignore[arg-type, return-value]
        start, _ = candidate.fix_span  # type: ignore[misc]
        if not chosen or chosen[-1].fix_span[1] <= start:  # type: ignore[index]
            chosen.append(candidate)
    return chosen


def unified_diff(path: str, before: bytes, after: bytes) -> str:
    return "".join(difflib.unified_diff(
        before.decode("utf-8", errors="replace").splitlines(keepends=True),
        after.decode("utf-8", errors="replace").splitlines(keepends=True),
        fromfile=f"a/{path}", tofile=f"b/{path}",
    ))


def write_atomically(path: Path, new: bytes, original: bytes) -> None:
    """Replace a file's bytes in one rename, keeping its mode; refuse if it is read-only or changed since
    it was read (`original`)."""
    if not os.access(path, os.W_OK):
        raise FixError(f"{path}: read-only; not fixed")
    try:
        if path.read_bytes() != original:
            raise FixError(f"{path}: changed while being fixed; not written")
        mode = path.stat().st_mode
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tfdoctor-fix")
    except OSError as error:
        raise FixError(f"{path}: cannot fix: {error.strerror or error}") from None
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(new)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode & 0o7777)
        os.replace(temporary, path)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise FixError(f"{path}: cannot write: {error.strerror or error}") from None


@dataclass
class FileFix:
    path: Path
    before: bytes
    result: FixResult[bytes]


@dataclass
class FixReport:
    files: list[FileFix] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _notebook_fixer() -> Callable[..., FixResult[bytes]]:
    from tfdoctor.lint.notebook_fixes import fix_notebook  # imported here: it builds on this module

    return fix_notebook


def fix_file(source: bytes, display_path: str, settings: Settings, path: Path, unsafe: bool = False,
             wanted: Callable[[Finding], bool] | None = None) -> FixResult[bytes]:
    """One file's bytes fixed: a notebook (`.ipynb`) by its cells, anything else as Python source."""
    fixer = _notebook_fixer() if path.suffix == ".ipynb" else fix_source
    return fixer(source, display_path, settings, path, unsafe, wanted)


def fix_paths(paths: list[str], overrides: Overrides, unsafe: bool) -> FixReport:
    """The fixes for every Python file under the paths (nothing is written here)."""
    report = FixReport()
    for raw in paths:
        path = Path(raw)
        if raw == "-" or not path.exists():
            continue  # stdin is fixed by the command; missing paths are reported by the lint run
        settings = load_settings(path, overrides)
        for file in (discover(path, settings) if path.is_dir() else [path]):
            if file.suffix not in (".py", ".ipynb"):
                continue
            try:
                before = file.read_bytes()
            except OSError as error:
                report.errors.append(f"{file}: cannot read: {error.strerror or error}")
                continue
            try:
                result = fix_file(before, str(file), settings.for_file(file, before), file, unsafe)
            except InternalError as error:
                report.errors.append(f"{file}: {error}")
                continue
            except NotebookError as error:
                report.errors.append(f"{file}: not fixed: {error}")
                continue
            if result.text != before:
                report.files.append(FileFix(file, before, result))
    return report
