"""Where a linted file's project begins: the folder whose own modules its imports may name."""

from __future__ import annotations

from pathlib import Path

MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


def project_root(path: Path) -> Path:
    """The nearest folder at or above `path` holding one of MARKERS; else the file's own folder."""
    start = path.resolve()
    folder = start if start.is_dir() else start.parent
    for candidate in (folder, *folder.parents):
        if any((candidate / marker).exists() for marker in MARKERS):
            return candidate
    return folder


def source_roots(root: Path) -> tuple[Path, ...]:
    """The folders absolute imports are resolved from: the root, and `root/src` in a src layout."""
    src = root / "src"
    return (root, src) if src.is_dir() else (root,)
