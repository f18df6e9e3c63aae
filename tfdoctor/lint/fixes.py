"""Apply fixes: safe ones with `--fix`, unsafe ones too with `--unsafe-fixes`; show them with `--diff`.

Each file's source is fixed by source_fixes.py (notebooks by notebook_fixes.py). Files are written atomically,
only when they changed, and never when they changed on disk while being fixed or are read-only.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tfdoctor.config import Overrides, Settings, load_settings
from tfdoctor.lint.engine import InternalError, discover, linted_size, needs_isolation
from tfdoctor.lint.findings import Finding
from tfdoctor.lint.notebook_fixes import fix_notebook
from tfdoctor.lint.notebooks import NotebookError
from tfdoctor.lint.parallel import map_ordered
from tfdoctor.lint.source_fixes import FixResult, fix_source

class FixError(Exception):
    """A file that could not be fixed safely: reported on one line, the file left as it was."""


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


def fix_file(source: bytes, display_path: str, settings: Settings, path: Path, unsafe: bool = False,
             wanted: Callable[[Finding], bool] | None = None) -> FixResult[bytes]:
    """One file's bytes fixed: a notebook (`.ipynb`) by its cells, anything else as Python source."""
    fixer = fix_notebook if path.suffix == ".ipynb" else fix_source
    return fixer(source, display_path, settings, path, unsafe, wanted)


@dataclass(frozen=True)
class _FixTask:
    """One file to fix, as sent to a worker process when it must be parsed apart."""

    path: Path
    before: bytes
    settings: Settings
    unsafe: bool


def _fix_task(task: _FixTask) -> FixResult[bytes] | str:
    """The file's fixes, or the one-line reason it was not fixed."""
    try:
        return fix_file(task.before, str(task.path), task.settings, task.path, task.unsafe)
    except InternalError as error:
        return f"{task.path}: {error}"
    except NotebookError as error:
        return f"{task.path}: not fixed: {error}"
    except (RecursionError, Exception) as error:  # a bug of ours: the other files are still fixed
        return f"{task.path}: not fixed: internal error: {type(error).__name__}: {error} (please report)"


def _fix_failed(task: _FixTask, reason: str) -> str:
    return f"{task.path}: not fixed: internal error: {reason} (please report)"


def fix_paths(paths: list[str], overrides: Overrides, unsafe: bool) -> FixReport:
    """The fixes for every Python file under the paths (nothing is written here). Files larger than
    max-file-bytes are left alone (the lint run names them); the ones the guard cannot bound are fixed in
    a process of their own."""
    report = FixReport()
    tasks: list[_FixTask] = []
    for raw in paths:
        path = Path(raw)
        if raw == "-" or not path.exists():
            continue  # stdin is fixed by the command; missing paths are reported by the lint run
        settings = load_settings(path, overrides)
        for file in (discover(path, settings) if path.is_dir() else [path]):
            if file.suffix not in (".py", ".ipynb"):
                continue
            try:
                if linted_size(file, settings) > settings.max_file_bytes:
                    continue
                before = file.read_bytes()
            except OSError as error:
                report.errors.append(f"{file}: cannot read: {error.strerror or error}")
                continue
            tasks.append(_FixTask(file, before, settings.for_file(file, before), unsafe))
    results = map_ordered(_fix_task, tasks, 1, [len(task.before) for task in tasks], _fix_failed,
                          lambda task: needs_isolation(task.before, str(task.path)))
    for task, result in zip(tasks, results):
        if isinstance(result, str):
            report.errors.append(result)
        elif result.text != task.before:
            report.files.append(FileFix(task.path, task.before, result))
    return report
