"""Shared helpers for the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfdoctor.config import Settings
from tfdoctor.lint.engine import lint_source
from tfdoctor.lint.findings import Finding
from tfdoctor.lint.versions import Target, Targets, parse_version

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
# How deep a tree tfdoctor lints is measured on CPython 3.11, the default here. Python 3.10 recurses
# differently, and 3.12's fixed C recursion limit (1,500 in 3.12.1) stops libcst's position walk sooner; on
# them such a file gets a one-line internal error, never a crash (tests/test_never_falls_over.py).
DEPTH_MEASURED = pytest.mark.skipif(sys.version_info[:2] != (3, 11),
                                    reason="depth limits are measured on CPython 3.11 (DEVELOPERS.md)")


def children_running(module: str) -> list[int]:
    """This process's children running `python -m module`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and module.encode() in command:
            found.append(int(stat.parent.name))
    return found


def lint_text(code: str, select: tuple[str, ...] = ("TFD",), keras: str | None = None,
              tensorflow: str | None = None) -> list[Finding]:
    """Lint a snippet under the newest release, or the targets given."""
    targets = Targets.newest()
    if keras is not None:
        targets = Targets(targets.tensorflow, Target(parse_version(keras), "test"))
    if tensorflow is not None:
        targets = Targets(Target(parse_version(tensorflow), "test"), targets.keras)
    settings = Settings(root=ROOT, select=select, targets=targets)
    return lint_source(code.encode(), "example.py", settings)


def run_cli(*args: str, cwd: Path | None = None, stdin: str | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the real command line in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "tfdoctor", *args], cwd=cwd or ROOT, input=stdin, capture_output=True, text=True,
        timeout=timeout,
    )


@pytest.fixture
def lint():
    return lint_text
