"""GPUs the machine has that TensorFlow did not use, and why (no TensorFlow here: read in the parent).

The report's first note when `nvidia-smi` or `/dev/nvidia*` shows GPUs but the replicas ran on the CPU.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

GPU_INSTALL = "pip install -e '.[gpu]' (tensorflow[and-cuda])"


def machine_gpus(dev: Path = Path("/dev"), smi: str = "nvidia-smi") -> list[str]:
    """The machine's NVIDIA GPUs, by `nvidia-smi -L` or, without it, the /dev/nvidiaN device files."""
    if shutil.which(smi):
        try:
            listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            listing = ""
        found = [line.strip() for line in listing.splitlines() if line.startswith("GPU ")]
        if found:
            return found
    try:
        return sorted(p.name for p in dev.iterdir() if re.fullmatch(r"nvidia\d+", p.name))
    except OSError:
        return []


def _installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def unused_gpus_note(kind: str, gpus: list[str], env: Mapping[str, str] | None = None,
                     installed: frozenset[str] | None = None) -> str | None:
    """What to say when `gpus` exist but the replicas were logical CPU devices (`kind == "cpu"`), with the
    likely cause first: CUDA_VISIBLE_DEVICES hides them, the CPU build is installed, or CUDA is missing.
    `installed` (the distributions that matter) is read from the environment when not given."""
    if kind != "cpu" or not gpus:
        return None
    env = os.environ if env is None else env
    if installed is None:
        installed = frozenset(n for n in ("tensorflow", "tensorflow-cpu", "nvidia-cudnn-cu12", "nvidia-cublas-cu12")
                              if _installed(n))
    seen = f"this machine has {len(gpus)} GPU{'s' if len(gpus) > 1 else ''} ({gpus[0]}{', ...' if len(gpus) > 1 else ''})"
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        why = f"CUDA_VISIBLE_DEVICES={visible!r} hides them: unset it or list the GPUs to use (0,1)"
    elif "tensorflow-cpu" in installed:
        why = f"the CPU build of TensorFlow (tensorflow-cpu) is installed: pip uninstall tensorflow-cpu, then {GPU_INSTALL}"
    elif not {"nvidia-cudnn-cu12", "nvidia-cublas-cu12"} & installed:
        why = f"TensorFlow found no CUDA libraries (cuDNN, cuBLAS): {GPU_INSTALL}, or install CUDA and cuDNN"
    else:
        why = ("TensorFlow could not use them although the CUDA packages are installed: check that the driver "
               "matches (nvidia-smi) and TensorFlow's log (TF_CPP_MIN_LOG_LEVEL=0)")
    return f"GPUs not used: {seen}, but TensorFlow saw none and ran on the CPU; {why}."
