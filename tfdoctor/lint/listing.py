"""A project's Python files and notebooks, and a digest of that listing that changes when any of them does.

The caller search (`project.py`) reads every Python file of a project that names a function; a cached
finding that rests on such a search is valid only while no file was added, removed or edited, since any
of them may now call the function. The digest covers each file's path, size and modification time, so
checking it costs one walk and one `stat` per file, never a read. Both are computed once per run
(`forget` starts a new one).
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path

MAX_FILES = 300  # a project with more Python files is not searched for callers (reading them all per question
# costs more than the parse it would save; precision over recall)
_SKIPPED = frozenset({"venv", "env", "site-packages", "node_modules", "build", "dist", "__pycache__"})


@lru_cache(maxsize=16)
def project_files(root: Path) -> tuple[Path, ...]:
    """The project's Python files and notebooks (not in virtual environments, builds or hidden folders),
    resolved; none when there are more than MAX_FILES Python files."""
    files: list[Path] = []
    count = 0
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d not in _SKIPPED and not d.startswith("."))
        for name in sorted(names):
            if name.endswith((".py", ".ipynb")):
                files.append(Path(folder) / name)
                count += name.endswith(".py")
        if count > MAX_FILES:
            return ()
    return tuple(f.resolve() for f in files)


def python_files(root: Path) -> tuple[Path, ...]:
    """The project's Python files (see `project_files`)."""
    return tuple(f for f in project_files(root) if f.suffix == ".py")


@lru_cache(maxsize=16)
def listing_digest(root: Path) -> str:
    """sha256 of the paths, sizes and modification times of `project_files(root)`."""
    digest = hashlib.sha256()
    for path in project_files(root):
        try:
            stat = path.stat()
        except OSError:
            continue
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def listing_key(root: Path) -> str:
    """How a cache entry names the listing of `root` among the files it used (a folder: a trailing `/`)."""
    return f"{root}{os.sep}"


def forget() -> None:
    """Walk the projects again when next asked."""
    project_files.cache_clear()
    listing_digest.cache_clear()
