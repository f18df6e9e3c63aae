"""What pyproject.toml promises (Python >= 3.10) holds for every module, including those that import
TensorFlow and so cannot be imported in CI's quick suite on the other Pythons: read, not imported."""

from __future__ import annotations

import ast
import sys
import typing

from tests.conftest import ROOT


def test_every_name_imported_from_typing_exists_in_this_python():
    missing = []
    for path in sorted((ROOT / "tfdoctor").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "typing":
                missing += [f"{path.relative_to(ROOT)}:{node.lineno} typing.{alias.name}"
                            for alias in node.names if not hasattr(typing, alias.name)]
    assert not missing, f"not in Python {sys.version_info.major}.{sys.version_info.minor}: {missing}"
