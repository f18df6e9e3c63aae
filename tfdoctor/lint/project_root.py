"""Where a linted file's project begins: the folder whose own modules its imports may name."""

from __future__ import annotations

import fnmatch
from functools import lru_cache
from pathlib import Path

MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
# Test code: where a slow or odd input pipeline is the point of the test, not a cost to anyone.
TEST_FOLDERS = frozenset({"test", "tests", "testing", "unittests", "integration_tests"})
TEST_FILES = ("test_*.py", "*_test.py", "*_tests.py", "conftest.py")


def project_root(path: Path) -> Path:
    """The nearest folder at or above `path` holding one of MARKERS; else the file's own folder."""
    start = path.resolve()
    folder = start if start.is_dir() else start.parent
    for candidate in (folder, *folder.parents):
        if any((candidate / marker).exists() for marker in MARKERS):
            return candidate
    return folder


def is_test_module(path: Path) -> bool:
    """Whether a file is test code: named `test_*.py`, `*_test.py` or `conftest.py`, or in a `tests`
    (`test`, `testing`) folder below its project root. Folders above the root do not count."""
    if any(fnmatch.fnmatch(path.name, pattern) for pattern in TEST_FILES):
        return True
    return _in_test_folder(path.parent)


@lru_cache(maxsize=4096)
def _in_test_folder(folder: Path) -> bool:
    resolved = folder.resolve()
    try:
        inside = resolved.relative_to(project_root(resolved)).parts
    except ValueError:
        return False
    return any(part.lower() in TEST_FOLDERS for part in inside)


def source_roots(root: Path) -> tuple[Path, ...]:
    """The folders absolute imports are resolved from: the root, and `root/src` in a src layout."""
    src = root / "src"
    return (root, src) if src.is_dir() else (root,)
