"""TensorFlow and Keras versions pinned in a project's files: requirements*.txt, pyproject.toml, setup.cfg,
setup.py and environment.yml, nearest above the linted file."""

from __future__ import annotations

import configparser
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Iterator

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TENSORFLOW_PACKAGES = frozenset({
    "tensorflow", "tensorflow-gpu", "tensorflow-cpu", "tensorflow-macos", "tensorflow-intel", "tensorflow-aarch64",
    "intel-tensorflow", "tf-nightly",
})
KERAS_PACKAGES = frozenset({"keras", "tf-keras"})
# `name ==1.2.3`, `name~=2.4`, `name===2.0`, `name<=2.15`, conda's `name=2.4`, `name==2.4.*`; poetry's bare "2.4"/"^2.4".
_REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*"
    r"(?P<op>===|==|~=|<=|=(?!=))\s*(?P<version>\d+(?:\.\d+)*)(?:\.\*)?"
)


@dataclass(frozen=True)
class Pin:
    package: str  # as written, e.g. "tensorflow-gpu"
    version: str
    file: Path
    text: str  # the requirement as written

    @property
    def kind(self) -> str:
        name = _normalise(self.package)
        return "tensorflow" if name in TENSORFLOW_PACKAGES else name


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_requirement(text: str, file: Path) -> Pin | None:
    """A pin of a TensorFlow or Keras package with an exact (or lower-bound-compatible) version."""
    match = _REQUIREMENT.match(text.strip().strip("'\"").lstrip("-").strip())
    if not match:
        return None
    name = _normalise(match.group("name"))
    if name not in TENSORFLOW_PACKAGES and name not in KERAS_PACKAGES:
        return None
    return Pin(match.group("name"), match.group("version"), file, text.strip().strip("'\",").lstrip("- ").strip())


def _requirements_txt(path: Path) -> Iterator[str]:
    yield from _text(path).splitlines()


def _environment_yml(path: Path) -> Iterator[str]:
    for line in _text(path).splitlines():
        stripped = line.strip()
        if stripped.startswith("- "):
            yield stripped[2:]


def _setup_py(path: Path) -> Iterator[str]:
    yield from re.findall(r"""["']([^"'\n]+)["']""", _text(path))


def _setup_cfg(path: Path) -> Iterator[str]:
    parser = configparser.ConfigParser()
    try:
        parser.read_string(_text(path))
    except configparser.Error:
        return
    for section in parser.sections():
        for key, value in parser.items(section):
            if "requires" in key or section.startswith("options.extras_require"):
                yield from value.splitlines()


def _pyproject(path: Path) -> Iterator[str]:
    try:
        data = tomllib.loads(_text(path))
    except tomllib.TOMLDecodeError:
        return
    project = data.get("project", {})
    yield from project.get("dependencies", [])
    for extra in project.get("optional-dependencies", {}).values():
        yield from extra
    poetry = data.get("tool", {}).get("poetry", {})
    for table in (poetry.get("dependencies", {}), *(g.get("dependencies", {}) for g in poetry.get("group", {}).values())):
        for name, spec in table.items():
            version = spec.get("version") if isinstance(spec, dict) else spec
            if isinstance(version, str):
                yield f"{name}=={version.lstrip('^~=')}"


_READERS = (
    ("requirements*.txt", _requirements_txt),
    ("pyproject.toml", _pyproject),
    ("setup.cfg", _setup_cfg),
    ("setup.py", _setup_py),
    ("environment.yml", _environment_yml),
    ("environment.yaml", _environment_yml),
)


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def pins_in(folder: Path) -> dict[str, Pin]:
    """The first pin of each kind ("tensorflow", "keras", "tf-keras") in one folder's project files."""
    found: dict[str, Pin] = {}
    for pattern, reader in _READERS:
        for path in sorted(folder.glob(pattern)):
            for pin in _pins(reader(path), path):
                found.setdefault(pin.kind, pin)
    return found


def _pins(lines: Iterable[str], path: Path) -> Iterator[Pin]:
    for line in lines:
        pin = parse_requirement(line.split("#", 1)[0], path)
        if pin is not None:
            yield pin


@lru_cache(maxsize=256)
def nearest_pins(folder: Path) -> dict[str, Pin]:
    """Pins from the nearest folder at or above `folder` whose project files pin TensorFlow or Keras."""
    for candidate in (folder, *folder.parents):
        found = pins_in(candidate)
        if found:
            return found
    return {}
