"""The pre-commit hook as users run it: the real `pre-commit try-repo` against this checkout's last commit
(uncommitted work is left out, as it would be for users), in a throwaway git repository. pre-commit builds
the hook's environment with pip, so this needs the package index."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

BAD = "import tensorflow as tf\nfrom tensorflow.keras.utils import multi_gpu_model\nparallel = multi_gpu_model(model, gpus=2)\n"
GOOD = "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n"

pytestmark = pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None,
                                reason="needs git and a git checkout of tfdoctor")


def _git(*args: str, cwd) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_hook_fails_on_a_finding_and_passes_on_good_code(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "PRE_COMMIT_COLOR": "never"}
    _git("init", "-q", cwd=project)
    (project / "train.py").write_text(BAD)
    _git("add", "train.py", cwd=project)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()

    def hook() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "tfdoctor", "--ref", head,
             "--files", "train.py"],
            cwd=project, env=env, capture_output=True, text=True, timeout=600,
        )

    failed = hook()
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "train.py:3:12: TFD101" in failed.stdout and "Failed" in failed.stdout

    (project / "train.py").write_text(GOOD)
    _git("add", "train.py", cwd=project)
    passed = hook()
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Passed" in passed.stdout
