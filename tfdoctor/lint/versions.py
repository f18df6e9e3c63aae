"""The TensorFlow and Keras versions a user targets, which some rules depend on."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata

NEWEST_TENSORFLOW = "2.21"
NEWEST_KERAS = "3.15"


def parse_version(text: str) -> tuple[int, ...]:
    """`"3.5"` -> (3, 5); `"2.2.4"` -> (2, 2, 4). Raises ValueError on anything else."""
    match = re.fullmatch(r"\s*v?(\d+(?:\.\d+)*)(?:\.\*)?\s*", text)
    if not match:
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(part) for part in match.group(1).split("."))


@dataclass(frozen=True)
class Target:
    """One package's target version and where it came from (`--target-keras`, `pyproject.toml`, ...).
    `kind` says which step of the resolution gave it (explicit, pin, code, derived, installed, newest);
    `label` is how a range read from the code is written ("2", "<= 2.1") instead of the version."""

    version: tuple[int, ...]
    source: str
    kind: str = "explicit"
    label: str | None = None
    # read from the code: the places it rests on (cited text, file as cited, line), the cited one first
    sightings: tuple[tuple[str, str, int], ...] = ()

    @property
    def text(self) -> str:
        return self.label or ".".join(str(part) for part in self.version)

    @property
    def guessed(self) -> bool:
        """Nothing the user, the project's pins or its code says gave it: the installed or the newest release."""
        return self.kind in ("installed", "newest")

    def at_least(self, *version: int) -> bool:
        return self.version >= version

    def below(self, *version: int) -> bool:
        return self.version[: len(version)] < version


@dataclass(frozen=True)
class Targets:
    tensorflow: Target
    keras: Target
    note: str | None = None  # said once per run: Keras 2 code under a TensorFlow whose tf.keras is Keras 3

    def assumed(self, package: str, at: tuple[str, int, int] | None = None) -> str | None:
        """`Keras 3.15 assumed: newest release`, for the findings that depend on that package's version. The
        code a finding is about (`at`: a file, its first and last line) is not its own evidence: another place
        the version was read from is cited instead, and with none, nothing is."""
        target, label = (self.keras, "Keras") if package == "keras" else (self.tensorflow, "TF")
        source = target.source
        if at is not None and target.sightings:
            others = [cited for cited, path, line in target.sightings
                      if not (at[1] <= line <= at[2] and os.path.abspath(path) == os.path.abspath(at[0]))]
            if not others:
                return None
            source = others[0]
        return f"{label} {target.text} assumed: {source}"

    @classmethod
    def newest(cls) -> Targets:
        return cls(
            Target(parse_version(NEWEST_TENSORFLOW), "newest release", "newest"),
            Target(parse_version(NEWEST_KERAS), "newest release", "newest"),
        )


_TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-macos", "tensorflow-intel",
                             "tf-nightly")


@lru_cache(maxsize=None)
def installed_version(package: str) -> Target | None:
    """The version installed beside tfdoctor (read from package metadata; nothing is imported)."""
    names = _TENSORFLOW_DISTRIBUTIONS if package == "tensorflow" else (package,)
    for name in names:
        try:
            text = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        match = re.match(r"\d+(\.\d+)*", text)
        if match:
            return Target(parse_version(match.group(0)), f"installed {name} {text}", "installed")
    return None


def keras_for_tensorflow(tensorflow: Target) -> Target:
    """The Keras that `tf.keras` is under a TensorFlow version: Keras 2 before TF 2.16, Keras 3 from then on
    (pip then installs the newest Keras 3)."""
    major, minor = (tensorflow.version + (0, 0))[:2]
    where = f"tf.keras of TensorFlow {tensorflow.text} ({tensorflow.source})"
    if major < 2:
        return Target((2, 2), where, "derived")
    if minor < 16:
        keras_minor = {0: (2, 2, 4), 1: (2, 2, 4), 2: (2, 3), 3: (2, 4), 4: (2, 4), 5: (2, 5)}.get(minor, (2, minor))
        return Target(keras_minor, where, "derived")
    return Target(parse_version(NEWEST_KERAS), f"newest Keras 3, installed with TensorFlow {tensorflow.text} "
                                               f"({tensorflow.source})", "derived")
