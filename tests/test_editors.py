"""A real editor's LSP client against `tfdoctor server`: Neovim, when it is installed (CI has only Python)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES, ROOT

NEOVIM = shutil.which("nvim")


@pytest.mark.skipif(NEOVIM is None, reason="Neovim is not installed")
@pytest.mark.parametrize("filetype", ["filetype on", "filetype off"])
def test_neovim_shows_the_findings_as_diagnostics(tmp_path, filetype: str):
    train = tmp_path / "train.py"
    shutil.copy(FIXTURES / "seeds" / "keras_multi_gpu_model.py", train)
    result = subprocess.run(
        [str(NEOVIM), "--headless", "-u", "NONE", "-c", filetype, "-c", f"luafile {ROOT / 'tests/editors/neovim.lua'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TFDOCTOR_PYTHON": sys.executable, "TFDOCTOR_FILE": str(train)},
    )
    lines = result.stdout.replace("\r", "\n").split("\n")
    assert "arrived" in lines, result.stdout + result.stderr
    assert any(line.startswith("35:16 TFD101 `multi_gpu_model` copies the model") for line in lines), lines
