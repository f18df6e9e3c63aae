"""`[tool.tfdoctor]` settings from the nearest pyproject.toml, merged with command-line overrides."""

from __future__ import annotations

import fnmatch
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from tfdoctor.lint.pins import Pin, nearest_pins
from tfdoctor.lint.version_evidence import KERAS, TENSORFLOW, code_evidence, legacy_keras_note
from tfdoctor.lint.version_evidence import forget as forget_project_evidence
from tfdoctor.lint.versions import Target, Targets, installed_version, keras_for_tensorflow, parse_version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

KNOWN_KEYS = frozenset({"select", "ignore", "per-file-ignores", "exclude", "target-tensorflow", "target-keras",
                        "max-file-bytes"})
# libcst needs 300-1,000 bytes of memory per byte of source and parses about 0.1-0.6 MB/s; the largest
# hand-written .py among the installed tensorflow, keras, numpy and the standard library is 757 KB.
DEFAULT_MAX_FILE_BYTES = 1024 * 1024
DEFAULT_EXCLUDES = (
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", "build", "dist", "node_modules",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".eggs", "*.egg-info", "site-packages", ".tfdoctor_cache",
    ".ipynb_checkpoints",
    # someone else's code kept in the tree, and code kept only for the record: its owner is not the reader
    "third_party", "third-party", "third", "vendor", "vendored", "_vendor", "archive", "archived", "old", "legacy", "deprecated",
    "obsolete", "discard", "discarded", "unused",
    # backup copies of a module beside it (`dataset-bak.py`, `utils_bk.py`, `train copy.py`): nothing imports them
    "*[-_.]bak.py", "*[-_.]bk.py", "*[-_.]backup.py", "* copy.py",
    "*[-_.]bak.ipynb", "*[-_.]bk.ipynb", "*[-_.]backup.ipynb", "* copy.ipynb",
)


class ConfigError(Exception):
    """A configuration problem, reported on one line."""


@dataclass(frozen=True)
class Overrides:
    """Settings given on the command line; None means "not given"."""

    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] | None = None
    target_tensorflow: str | None = None
    target_keras: str | None = None
    max_file_bytes: int | None = None
    evidence_files: tuple[Path, ...] | None = None  # the only files whose code shows the versions (profile's run)
    run_code: bool = False  # the files are a run's own code (profile's run): none of them is test code
    also_checked: tuple[str, ...] = ()  # opt-in rules checked without `select` too (what the profile measures)


@dataclass(frozen=True)
class Settings:
    root: Path
    config_path: Path | None = None
    select: tuple[str, ...] | None = None  # None: every rule but the opt-in ones (`Rule.OPT_IN`)
    ignore: tuple[str, ...] = ()
    per_file_ignores: dict[str, tuple[str, ...]] = field(default_factory=dict)
    exclude: tuple[str, ...] = ()
    targets: Targets = field(default_factory=Targets.newest)  # resolved for one file: see `for_file`
    explicit_tensorflow: Target | None = None  # from the command line or [tool.tfdoctor]
    explicit_keras: Target | None = None
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES  # a larger file is not linted (a warning names it)
    evidence_files: tuple[Path, ...] | None = None  # None: the whole project's code is version evidence
    run_code: bool = False  # every linted file is code a run executes, wherever it lies (never test code)
    also_checked: tuple[str, ...] = ()  # opt-in rules checked where `select` is not given (profile's causes)

    def for_file(self, path: Path, source: bytes | None = None) -> Settings:
        """These settings with the targets resolved for one file (`source`: its bytes, when read already)."""
        return replace(self, targets=resolve_targets(self, path, source))

    def code_enabled(self, code: str, path: Path | None = None, opt_in: bool = False) -> bool:
        """Whether a rule checks a file: selected (an opt-in rule only when `select` names it, or, without
        `select`, when the run checks it too), and not ignored for it."""
        if self.select is None:
            if opt_in and code not in self.also_checked:
                return False
        elif not any(code.startswith(prefix) for prefix in self.select):
            return False
        ignored = list(self.ignore)
        if path is not None:
            relative = self._relative(path)
            for pattern, codes in self.per_file_ignores.items():
                if fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(path.name, pattern):
                    ignored.extend(codes)
        return not any(code.startswith(prefix) for prefix in ignored)

    def is_excluded(self, path: Path) -> bool:
        """Whether a discovered path (file or folder) is skipped by the default or configured excludes."""
        if any(fnmatch.fnmatchcase(path.name.strip().lower(), pattern) for pattern in DEFAULT_EXCLUDES):
            return True
        if path.is_dir() and (path / "pyvenv.cfg").exists():
            return True
        relative = self._relative(path)
        return any(
            fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(path.name, pattern)
            or fnmatch.fnmatch(relative, pattern.rstrip("/") + "/*")
            for pattern in self.exclude
        )

    def _relative(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return path.as_posix()


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.tfdoctor] table, at or above `start`."""
    folder = start.resolve()
    if not folder.is_dir():
        folder = folder.parent
    for candidate in (folder, *folder.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file() and "[tool.tfdoctor" in _read_text(pyproject):
            return pyproject
    return None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _codes(value: object, key: str, path: Path) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path}: [tool.tfdoctor] {key} must be a list of rule codes")
    return tuple(v.strip().upper() for v in value)


def load_settings(start: Path, overrides: Overrides = Overrides()) -> Settings:
    """Settings for files under `start`: the nearest [tool.tfdoctor] table, then the overrides on top."""
    pyproject = find_pyproject(start)
    settings = Settings(root=pyproject.parent if pyproject else Path.cwd(), config_path=pyproject)
    table: dict[str, object] = {}
    if pyproject is not None:
        try:
            table = tomllib.loads(_read_text(pyproject)).get("tool", {}).get("tfdoctor", {})
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"{pyproject}: invalid TOML: {error}") from None
        unknown = sorted(set(table) - KNOWN_KEYS)
        if unknown:
            raise ConfigError(f"{pyproject}: unknown key in [tool.tfdoctor]: {', '.join(unknown)}")
    where = str(pyproject) if pyproject else ""
    if "select" in table:
        settings = replace(settings, select=_codes(table["select"], "select", pyproject))  # type: ignore[arg-type]
    if "ignore" in table:
        settings = replace(settings, ignore=_codes(table["ignore"], "ignore", pyproject))  # type: ignore[arg-type]
    if "exclude" in table:
        exclude = table["exclude"]
        if not isinstance(exclude, list) or not all(isinstance(v, str) for v in exclude):
            raise ConfigError(f"{pyproject}: [tool.tfdoctor] exclude must be a list of glob patterns")
        settings = replace(settings, exclude=tuple(exclude))
    if "per-file-ignores" in table:
        per_file = table["per-file-ignores"]
        if not isinstance(per_file, dict):
            raise ConfigError(f"{pyproject}: [tool.tfdoctor] per-file-ignores must be a table of glob = [codes]")
        settings = replace(settings, per_file_ignores={
            pattern: _codes(codes, "per-file-ignores", pyproject) for pattern, codes in per_file.items()  # type: ignore[arg-type]
        })
    if "max-file-bytes" in table:
        settings = replace(settings, max_file_bytes=_max_file_bytes(table["max-file-bytes"], pyproject))
    if overrides.max_file_bytes is not None:
        settings = replace(settings, max_file_bytes=overrides.max_file_bytes)
    if overrides.evidence_files is not None:
        settings = replace(settings, evidence_files=tuple(p.resolve() for p in overrides.evidence_files))
    if overrides.run_code:
        settings = replace(settings, run_code=True)
    if overrides.also_checked:
        settings = replace(settings, also_checked=overrides.also_checked)
    explicit: dict[str, Target] = {}
    for key, attribute in (("target-tensorflow", "tensorflow"), ("target-keras", "keras")):
        if key in table:
            explicit[attribute] = _target(str(table[key]), f"{where} [tool.tfdoctor] {key}", key)
    if overrides.select is not None:
        settings = replace(settings, select=tuple(c.upper() for c in overrides.select))
    if overrides.ignore is not None:
        settings = replace(settings, ignore=tuple(c.upper() for c in overrides.ignore))
    if overrides.target_tensorflow is not None:
        explicit["tensorflow"] = _target(overrides.target_tensorflow, "--target-tensorflow", "--target-tensorflow")
    if overrides.target_keras is not None:
        explicit["keras"] = _target(overrides.target_keras, "--target-keras", "--target-keras")
    newest = Targets.newest()
    return replace(
        settings, explicit_tensorflow=explicit.get("tensorflow"), explicit_keras=explicit.get("keras"),
        targets=Targets(explicit.get("tensorflow", newest.tensorflow), explicit.get("keras", newest.keras)),
    )


def _max_file_bytes(value: object, path: Path | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{path}: [tool.tfdoctor] max-file-bytes must be a positive number of bytes")
    return value


def settings_for(path: Path, overrides: Overrides = Overrides(), source: bytes | None = None) -> Settings:
    """The settings one file is linted with (its nearest [tool.tfdoctor], the overrides, and the targets
    resolved for it), read afresh; the file need not exist (standard input, an editor's unsaved buffer: `source`)."""
    forget_project_evidence()
    return load_settings(path, overrides).for_file(path, source)


def _target(text: str, source: str, key: str) -> Target:
    try:
        return Target(parse_version(text), source)
    except ValueError:
        raise ConfigError(f"{key}: not a version: {text!r} (expected e.g. 2.15 or 3.8)") from None


def resolve_targets(settings: Settings, path: Path, source: bytes | None = None) -> Targets:
    """TensorFlow and Keras targets for one file: the command line or [tool.tfdoctor], else the pins nearest
    above the file, else what the file's and its project's code shows (`version_evidence`), else the
    installed packages, else the newest release. An unpinned Keras follows a pinned, explicit or evidenced
    TensorFlow (tf.keras is Keras 2 before TF 2.16) unless the code shows its own Keras."""
    folder = path.resolve() if path.is_dir() else path.resolve().parent
    pins = nearest_pins(folder)
    code = code_evidence(path, source, settings.is_excluded, settings.evidence_files)
    running = installed_version("tensorflow") or Targets.newest().tensorflow
    tensorflow = settings.explicit_tensorflow or _pinned(pins.get("tensorflow")) or code.target(
        TENSORFLOW, running) or running
    keras = settings.explicit_keras or _pinned(pins.get("keras")) or _pinned(pins.get("tf-keras"))
    # tf.keras's version follows a TensorFlow the user names or the code bounds above (`<= 2.3`), not one
    # that is merely installed or only bounded below (`>= 2.4` holds both Keras 2 and 3).
    bounded = tensorflow.kind in ("explicit", "pin") or bool(code.tensorflow and code.tensorflow.high)
    derived = keras_for_tensorflow(tensorflow) if bounded else None
    fallback = derived or installed_version("keras") or Targets.newest().keras
    keras = keras or code.target(KERAS, fallback) or fallback
    return Targets(tensorflow, keras, legacy_keras_note(tensorflow, keras, code))


def _pinned(pin: Pin | None) -> Target | None:
    if pin is None:
        return None
    try:
        where = pin.file.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        where = pin.file
    return Target(parse_version(pin.version), f"{where}: {pin.text}", "pin")
