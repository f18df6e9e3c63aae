"""Fixtures for the reference-workload tests: a private cache folder and a small synthetic dataset."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# These tests need the `profile` extra (TensorFlow, OpenCV): without it (CI's quick suite on the other Pythons,
# `.[dev]` only) they are not collected.
collect_ignore_glob = [] if all(importlib.util.find_spec(m) for m in ("tensorflow", "cv2")) else ["test_*.py"]


@pytest.fixture(scope="session")
def cache_home(tmp_path_factory) -> Path:
    """XDG_CACHE_HOME for the whole session, so tests never write to the user's cache."""
    path = tmp_path_factory.mktemp("xdg-cache")
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(path)
    yield path
    if old is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = old


@pytest.fixture(scope="session")
def annotations(cache_home) -> Path:
    from tfdoctor.reference.data import ensure_dataset

    return ensure_dataset(num_images=64, img_size=160, seed=0, num_classes=3)


@pytest.fixture(scope="session")
def examples(annotations):
    from tfdoctor.reference.annotations import read_annotations

    return read_annotations(annotations, num_classes=3)


def run_reference(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """``python -m tfdoctor reference ARGS`` in a subprocess with its own cache folder."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-m", "tfdoctor", "reference", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
