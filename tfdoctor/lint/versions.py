"""The TensorFlow and Keras versions a user targets, which some rules depend on."""

from __future__ import annotations

import re
from dataclasses import dataclass

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
    """One package's target version and where it came from (`--target-keras`, `pyproject.toml`, ...)."""

    version: tuple[int, ...]
    source: str

    @property
    def text(self) -> str:
        return ".".join(str(part) for part in self.version)

    def at_least(self, *version: int) -> bool:
        return self.version >= version

    def below(self, *version: int) -> bool:
        return self.version[: len(version)] < version


@dataclass(frozen=True)
class Targets:
    tensorflow: Target
    keras: Target

    @classmethod
    def newest(cls) -> Targets:
        return cls(
            Target(parse_version(NEWEST_TENSORFLOW), "newest release"),
            Target(parse_version(NEWEST_KERAS), "newest release"),
        )
