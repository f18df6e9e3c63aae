"""Which lines of the script's own files ran before the measured window: the profiler cites a lint finding as a
cause only when its code ran (not one in a branch the run never took, such as `if args.cache:`).

`sys.settrace` records the lines of files under the script's folder while the script sets up and runs its
warm-up steps, and is removed when the window opens, so the measured steps run untraced. It costs a Python call
per frame entered and per line run meanwhile, which only the set-up pays. Threads the script starts before
then are traced too (`threading.settrace`); input threads TensorFlow runs are not, so a generator's own lines
may be missing: a file with no line recorded is not judged.
"""

from __future__ import annotations

import os
import sys
import threading
from types import FrameType
from typing import Any, Callable

Tracer = Callable[[FrameType, str, Any], Any]


class LinesRun:
    """Lines run in the `.py` files under one folder (not in an installed package below it)."""

    def __init__(self, folder: str) -> None:
        self.folder = os.path.join(os.path.abspath(folder), "")
        self.lines: dict[str, set[int]] = {}
        self._mine: dict[str, bool] = {}
        self.running = False

    def start(self) -> None:
        self.running = True
        threading.settrace(self._global)
        sys.settrace(self._global)

    def stop(self) -> None:
        """Stop recording: this thread's tracer goes, other threads' become no-ops."""
        if self.running:
            self.running = False
            sys.settrace(None)
            threading.settrace(None)  # type: ignore[arg-type]

    def recorded(self) -> dict[str, list[int]]:
        """Absolute path -> the sorted lines run."""
        return {path: sorted(lines) for path, lines in self.lines.items()}

    def _global(self, frame: FrameType, event: str, arg: Any) -> Tracer | None:
        if not self.running:
            return None
        path = frame.f_code.co_filename
        mine = self._mine.get(path)
        if mine is None:
            absolute = os.path.abspath(path)
            mine = self._mine[path] = absolute.startswith(self.folder) and "site-packages" not in absolute
        if not mine:
            return None
        lines = self.lines.setdefault(os.path.abspath(path), set())
        lines.add(frame.f_lineno)

        def local(frame: FrameType, event: str, arg: Any) -> Tracer | None:
            if not self.running:
                return None
            if event == "line":
                lines.add(frame.f_lineno)
            return local
        return local
