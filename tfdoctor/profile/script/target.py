"""What script mode runs: a script file, or a module run as `python -m pkg.module`, found without importing
anything (a package's `__init__` may import TensorFlow), the way Python itself would find it."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

from tfdoctor.profile.runner import ProfileError


@dataclass(frozen=True)
class Target:
    """The interpreter, the file that runs (the script, or the module's file), and the arguments after it."""

    interpreter: str
    path: Path
    args: tuple[str, ...] = ()
    module: str | None = None  # with `-m`
    package: Path | None = None  # with `-m`: the folder of the top-level package the module belongs to

    @property
    def launch_args(self) -> list[str]:
        """How the launcher is told what to run: `-m MODULE ARGS` or `SCRIPT ARGS`."""
        return [*(["-m", self.module] if self.module else [str(self.path)]), *self.args]

    @property
    def name(self) -> str:
        return f"-m {self.module}" if self.module else str(self.path)


def module_target(interpreter: str, name: str, args: tuple[str, ...]) -> Target:
    """The target of `python -m name`: searched in the working folder, then PYTHONPATH, then this Python's
    path, as `python -m` does; a package runs its `__main__`."""
    locations = [os.getcwd(), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)), *sys.path[1:]]
    parts = name.split(".")
    top: ModuleSpec | None = None
    spec: ModuleSpec | None = None
    for depth in range(1, len(parts) + 1):
        spec = PathFinder.find_spec(".".join(parts[:depth]), locations)
        if spec is None or (depth < len(parts) and not spec.submodule_search_locations):
            raise ProfileError(f"module not found: {name} (looked in {os.getcwd()}, PYTHONPATH and {interpreter}'s path)")
        top = top or spec
        locations = list(spec.submodule_search_locations or [])
    assert spec is not None and top is not None
    if spec.submodule_search_locations:
        main = PathFinder.find_spec(f"{name}.__main__", list(spec.submodule_search_locations))
        if main is None or not main.origin:
            raise ProfileError(f"{name} is a package without a __main__ module: it cannot be run with -m")
        spec = main
    if not spec.origin or not Path(spec.origin).is_file():
        raise ProfileError(f"module not found: {name} (it has no source file to run)")
    package = Path(list(top.submodule_search_locations)[0]) if top.submodule_search_locations else None
    return Target(interpreter, Path(os.path.relpath(spec.origin)) if _below_cwd(spec.origin) else Path(spec.origin),
                  args, name, Path(os.path.relpath(package)) if package and _below_cwd(str(package)) else package)


def _below_cwd(path: str) -> bool:
    return not os.path.relpath(path).startswith("..")
