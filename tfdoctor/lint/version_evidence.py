"""Version evidence in the code: APIs that exist only in a range of TensorFlow or Keras versions.

A project that calls `get_scaled_loss` was written for Keras 2, one that imports `keras.ops` for Keras 3, whatever
TensorFlow happens to be installed where tfdoctor runs. `scan` finds the first use of each API in a file's bytes: a
text scan (each API is first looked for as a literal, and its pattern runs only on files holding it) that costs
about 1% of parsing the same files. Uses in comments and docstrings are skipped, and so are files that check the
version they run under, unless the check only picks what to import (`if tf.__version__ < "2": import keras`): the
rest of such a file still shows its version. A notebook whose saved output shows the version it ran under (a cell
ending in `keras.__version__` that printed '2.0.8') gives that version, and so does one that installs it (`!pip
install tensorflow-gpu==2.0.0-alpha0`; Colab's `%tensorflow_version 1.x` gives TF 1), and the Python kernel its
metadata records bounds both (3.6: TF <= 2.6, and no Keras 3 before Python 3.9). `decide` turns the sightings into
one range per package, citing the sighting it rests on; sightings that contradict each other decide nothing.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Iterator

from tfdoctor.lint.notebooks import Notebook, NotebookError, output_text, read_notebook
from tfdoctor.lint.pins import parse_requirement
from tfdoctor.lint.project_root import project_root
from tfdoctor.lint.versions import Target

Version = tuple[int, ...]
TENSORFLOW = "tensorflow"
KERAS = "keras"
_MAX_FILE = 4_000_000  # bytes read per project file: larger ones are data, not code
_MAX_PROJECT_FILES = 5_000  # a project scan stops there (sorted walk, so the same files every run)


@dataclass(frozen=True)
class Api:
    """An API found only in versions `low`..`high` (inclusive; None: unbounded) of one package."""

    name: str  # as cited: `get_scaled_loss`
    package: str  # TENSORFLOW or KERAS
    low: Version | None
    high: Version | None
    label: str  # the range in words: "2", "<= 2.1", "1", "3"
    literal: bytes | tuple[bytes, ...]  # one of these must occur in the file for `pattern` to be tried
    pattern: bytes
    skip_if: bytes = b""  # a file containing this gives no sighting (`tf.Session` under `compat.v1`)


_KERAS2 = dict(package=KERAS, low=(2,), high=(2, 15), label="2")
_KERAS1 = dict(package=KERAS, low=None, high=(2, 2), label="<= 2.2")
_TF1 = dict(package=TENSORFLOW, low=None, high=(1, 15), label="1", skip_if=b"compat.v1")  # TF 0.x had them too
_KERAS3 = dict(package=KERAS, low=(3,), high=None, label="3")
_IMPORT = rb"^[ \t]*(?:from|import)[ \t]+"
_OPTIMIZERS = rb"(?:SGD|Adam|AdamW|RMSprop|Adagrad|Adadelta|Adamax|Nadam|Ftrl)"

APIS: tuple[Api, ...] = (
    # TensorFlow ranges (TF release notes: `run` replaced `experimental_run_v2` in 2.2; `multi_gpu_model` was
    # removed in 2.4; 2.4 added `tf.data.AUTOTUNE`, `distribute_datasets_from_function` and the stable
    # `MultiWorkerMirroredStrategy`; TF 2 has no `tf.contrib`, `tf.Session`, `tf.app`, `tf.logging` or
    # `tf.train.*Optimizer`).
    Api("experimental_run_v2", TENSORFLOW, (2,), (2, 1), "<= 2.1", b"experimental_run_v2",
        rb"\.experimental_run_v2\s*\("),
    Api("multi_gpu_model", TENSORFLOW, None, (2, 3), "<= 2.3", b"multi_gpu_model", rb"\bmulti_gpu_model\s*\("),
    Api("experimental_distribute_datasets_from_function", TENSORFLOW, (2, 1), (2, 3), "<= 2.3",
        b"experimental_distribute_datasets_from_function",
        rb"\.experimental_distribute_datasets_from_function\s*\("),
    Api("tf.contrib", literal=b"tf.contrib", pattern=rb"\btf\.contrib\.", **{**_TF1, "skip_if": b""}),
    Api("tf.Session", literal=b"Session", pattern=rb"\btf\.(?:Session|InteractiveSession)\s*\(", **_TF1),
    Api("tf.placeholder", literal=b"placeholder", pattern=rb"\btf\.placeholder\s*\(", **_TF1),
    Api("tf.app", literal=b"tf.app", pattern=rb"\btf\.app\.(?:flags|run)\b", **_TF1),
    Api("tf.logging", literal=b"tf.logging", pattern=rb"\btf\.logging\.\w+\s*\(", **_TF1),
    Api("tf.train optimizer", literal=b"Optimizer", pattern=rb"\btf\.train\.[A-Za-z]+Optimizer\s*\(", **_TF1),
    # TF 1.0 renamed these (`tf.multiply`, `tf.subtract`, `tf.negative`, `tf.stack`, `tf.unstack`)
    Api("tf.mul", TENSORFLOW, None, (0, 12), "<= 0.12", (b"tf.mul", b"tf.sub", b"tf.neg", b"tf.pack", b"tf.unpack"),
        rb"\btf\.(?:mul|sub|neg|pack|unpack)\s*\("),
    Api("tf.data.AUTOTUNE", TENSORFLOW, (2, 4), None, ">= 2.4", b"data.AUTOTUNE", rb"\bdata\.AUTOTUNE\b"),
    Api("distribute_datasets_from_function", TENSORFLOW, (2, 4), None, ">= 2.4",
        b"distribute_datasets_from_function", rb"(?<!experimental_)\bdistribute_datasets_from_function\s*\("),
    # Keras 1's argument names (Keras 2.0-2.2 still took them through its legacy interfaces, with a warning).
    Api("Keras 1 arguments", literal=(b"nb_", b"samples_per_epoch", b"border_mode", b"W_regularizer"),
        pattern=rb"\b(?:nb_epoch|nb_val_samples|samples_per_epoch|border_mode|W_regularizer)\s*=", **_KERAS1),
    # Keras 2 only (Keras 3 removed these; `tf.keras` is Keras 3 from TF 2.16).
    Api("get_scaled_loss", literal=b"get_scaled_loss", pattern=rb"\.get_scaled_loss\s*\(", **_KERAS2),
    Api("get_unscaled_gradients", literal=b"get_unscaled_gradients", pattern=rb"\.get_unscaled_gradients\s*\(",
        **_KERAS2),
    Api("get_gradients", literal=b"get_gradients", pattern=rb"\.get_gradients\s*\(", **_KERAS2),
    Api("mixed_precision.experimental", literal=b"mixed_precision.experimental",
        pattern=rb"\bmixed_precision\.experimental\b", **_KERAS2),
    Api("optimizer lr=", literal=(b"lr=", b"lr ="), pattern=rb"\b" + _OPTIMIZERS + rb"\((?:[^()=]*?,)?\s*lr\s*=",
        **_KERAS2),
    # Keras 3's optimizers have no `lr` attribute (`K.get_value(model.optimizer.lr)` raises AttributeError there),
    # and its `ModelCheckpoint` rejects Keras 2's deprecated `period=`
    Api("optimizer.lr", literal=b"optimizer.lr", pattern=rb"\boptimizer\.lr\b", **_KERAS2),
    Api("ModelCheckpoint(period=...)", literal=b"period", pattern=rb"\bModelCheckpoint\((?:[^()]|\([^()]*\))*?"
        rb"\bperiod\s*=", **_KERAS2),
    Api("tf_keras", literal=b"tf_keras", pattern=_IMPORT + rb"tf_keras\b", **_KERAS2),
    # `compile(experimental_run_tf_function=False)` (TF 2.0-2.1 code; Keras 3's `compile` rejects it), an optimizer
    # built on Keras 2's `OptimizerV2` internals, and the Keras 2 `keras_applications` package
    Api("compile(experimental_run_tf_function=...)", literal=b"experimental_run_tf_function",
        pattern=rb"\bexperimental_run_tf_function\s*=", **_KERAS2),
    Api("OptimizerV2 internals", literal=(b"_set_hyper", b"_resource_apply_dense"),
        pattern=rb"\._set_hyper\s*\(|\bdef[ \t]+_resource_apply_dense\b", **_KERAS2),
    Api("keras_applications", literal=b"keras_applications", pattern=_IMPORT + rb"keras_applications\b", **_KERAS2),
    Api("from keras.utils import multi_gpu_model", KERAS, (2,), (2, 3), "<= 2.3", b"multi_gpu_model",
        rb"^from[ \t]+keras\.utils(?:\.training_utils)?[ \t]+import[^\n]*\bmulti_gpu_model\b"),
    Api("keras.backend.tensorflow_backend", KERAS, (2,), (2, 3), "<= 2.3", b"tensorflow_backend",
        rb"\bkeras\.backend\.tensorflow_backend\b"),
    Api("tensorflow.python.keras", literal=b"tensorflow.python.keras",
        pattern=_IMPORT + rb"tensorflow\.python\.keras\b", **_KERAS2),
    # standalone Keras kept `keras.engine.topology` (deprecated from 2.2) until 2.4 made it tf.keras
    Api("keras.engine.topology", KERAS, None, (2, 3), "<= 2.3", b"engine.topology",
        _IMPORT + rb"keras\.engine\.topology\b"),
    # standalone Keras 1 and 2 had `keras.engine`; Keras 3 has no such module
    Api("keras.engine", literal=b"keras.engine", pattern=_IMPORT + rb"keras\.engine\b", **_KERAS2),
    # not `self.predict_generator(`: a class of the project's own (ktrain's predictors) by that name
    *(Api(f"{method}_generator", literal=b"_generator", pattern=rb"(?<!\bself)\.%b_generator\s*\(" % method.encode(),
          **_KERAS2) for method in ("fit", "evaluate", "predict")),
    Api("fit(workers=...)", literal=(b"workers", b"use_multiprocessing", b"max_queue_size"),
        pattern=rb"\.(?:fit|evaluate|predict)\((?:[^()]|\([^()]*\))*?"  # one level of nested parentheses
                rb"\b(?:workers|use_multiprocessing|max_queue_size)\s*=", **_KERAS2),
    Api("keras.optimizers.legacy", literal=b"optimizers.legacy", pattern=rb"\boptimizers\.legacy\b", **_KERAS2),
    Api("keras.layers.experimental", literal=b"layers.experimental", pattern=rb"\blayers\.experimental\b", **_KERAS2),
    # A metric's `reset_states()` (Keras 3 kept it on RNN layers only): told by the receiver's name.
    Api("metric.reset_states()", literal=b"reset_states", pattern=rb"\b\w*(?i:metric|loss|acc|auc|mean|meter|precision|"
        rb"recall)\w*\.reset_states\s*\(\s*\)", **_KERAS2),
    # Python 3.8 removed `time.clock()`; Keras 3 needs Python 3.9, and TensorFlow 2.11 was the last for 3.7.
    Api("time.clock()", KERAS, None, (2, 11), "2", b"clock", rb"\btime\.clock\s*\(", skip_if=b"version_info"),
    # Keras 3 only.
    Api("keras.ops", literal=(b"keras.ops", b"keras import"),
        pattern=rb"\bkeras\.ops\b|" + _IMPORT + rb"keras[ \t]+import[^\n]*\bops\b", **_KERAS3),
    Api("PyDataset", literal=b"PyDataset", pattern=rb"\bPyDataset\b", **_KERAS3),
    Api("keras.config", literal=b"keras.config", pattern=rb"\bkeras\.config\.", **_KERAS3),
    Api("keras_core", literal=b"keras_core", pattern=_IMPORT + rb"keras_core\b", **_KERAS3),
)
# Code that asks which version it runs under (`if tf.__version__.startswith("1"):`) supports several: its
# version-specific calls sit in those branches, and are no evidence. Where the branches only pick imports, what the
# code runs whatever the version still is.
_VERSION_CHECK = re.compile(rb"\b(?:tf|tensorflow|keras|K)\.(?:__version__|version\.VERSION)\b|\bkeras_version\b")
_VERSION_WORDS = (b"__version__", b"VERSION", b"keras_version")
# A line that decides by the version it reads (compares, parses or branches on it); `print(tf.__version__)` does not.
_DECIDES = re.compile(rb"\b(?:if|elif|assert|while)\b|[<>]|[=!]=|startswith|split|LooseVersion|StrictVersion|parse|"
                     rb"\[\s*0\s*\]|\bint\(")

_LITERALS = tuple((api, api.literal if isinstance(api.literal, tuple) else (api.literal,)) for api in APIS)


@lru_cache(maxsize=None)
def _compiled(api: Api) -> re.Pattern[bytes]:
    """An API's pattern, compiled the first time a file holds its literal (compiling all costs 90 ms)."""
    return re.compile(api.pattern, re.MULTILINE)


@dataclass(frozen=True)
class Sighting:
    """The first use of an API in one file."""

    api: Api
    path: str  # as cited
    line: int  # in a notebook: in its code cells joined as one module (the lines its findings are found at)
    cell: tuple[int, int] | None = None  # in a notebook: the cell and the line in it, as cited

    @property
    def cited(self) -> str:
        where = f"cell {self.cell[0]}:{self.cell[1]}" if self.cell is not None else str(self.line)
        return f"`{self.api.name}` at {self.path}:{where}"


@dataclass(frozen=True)
class Range:
    """What the code says about one package: versions `low`..`high`, resting on `sighting`."""

    low: Version | None
    high: Version | None
    sighting: Sighting
    others: tuple[Sighting, ...] = ()  # the other sightings as narrow as the cited one, which could be cited

    @property
    def label(self) -> str:
        return self.sighting.api.label

    def holds(self, version: Version) -> bool:
        return (self.low is None or version[: len(self.low)] >= self.low) and (
            self.high is None or version[: len(self.high)] <= self.high)


def scan(source: bytes, path: str) -> tuple[Sighting, ...]:
    """The first use of each API in a file's bytes, outside comments and docstrings, and outside the branches
    of an `if` on the version the code runs under that only pick imports; nothing in a file that reads its
    version some other way."""
    found: list[Sighting] = []
    branches: list[range] = []
    if any(word in source for word in _VERSION_WORDS):
        governed = _version_branches(source)
        if governed is None:
            return ()
        branches = governed
    for api, literals in _LITERALS:
        if not any(literal in source for literal in literals) or (api.skip_if and api.skip_if in source):
            continue
        for match in _compiled(api).finditer(source):
            line = source.count(b"\n", 0, match.start()) + 1
            if _in_comment_or_docstring(source, match.start()) or any(line in branch for branch in branches):
                continue
            found.append(Sighting(api, path, line))
            break
    return tuple(found)


_BRANCHING = re.compile(rb"[ \t]*(?:if|elif|while)\b")
_BINDING = re.compile(rb"[ \t]*([A-Za-z_]\w*)[ \t]*=(?!=)")
_CONTINUED = re.compile(rb"[ \t]*(?:elif|else)\b")
# the lines of a branch that only picks what to import (`if tf.__version__ < "2": import keras`)
_PICKS_IMPORTS = re.compile(rb"[ \t]*(?:$|#|(?:import|from|elif|else|pass|try|except)\b)")


def _version_branches(source: bytes) -> list[range] | None:
    """The lines (1-based) of each `if`, `elif` or `while` that decides by the version the code runs under, directly
    (`if tf.__version__ < "2":`) or through a name bound to it (`V = tf.__version__.split(".")`, then `if
    int(V[0]) < 2:`), with the blocks it governs (through its `elif` and `else`), where those blocks only pick what
    to import. None when the version decides anything else (other code in a branch, a helper that returns it, a
    value computed from it): which code runs under which version is then not in sight."""
    lines = source.split(b"\n")
    starts: set[int] = set()
    names: set[bytes] = set()
    for match in _VERSION_CHECK.finditer(source):
        index = source.count(b"\n", 0, match.start())
        text = lines[index]
        if not _DECIDES.search(text) or _in_comment_or_docstring(source, match.start()):
            continue  # `print(tf.__version__)`
        if _BRANCHING.match(text):
            starts.add(index)
        elif (bound := _BINDING.match(text)) is not None:
            names.add(bound.group(1))
        else:
            return None
    for name in names:
        uses = re.compile(rb"\b%b\b" % re.escape(name))
        tests = set()
        for index, text in enumerate(lines):
            if not uses.search(text) or text.lstrip().startswith(b"#"):
                continue
            if _BRANCHING.match(text):
                tests.add(index)
            elif not ((bound := _BINDING.match(text)) is not None and bound.group(1) == name):
                return None
        if not tests:
            return None  # bound, and used where this scan does not see
        starts |= tests
    branches = [range(start + 1, _block_end(lines, start) + 2) for start in sorted(starts)]  # 1-based, inclusive
    if any(not _PICKS_IMPORTS.match(lines[line - 1]) for branch in branches for line in branch[1:]):
        return None  # a library that runs other code under each version: what runs outside is no evidence either
    return branches


def _block_end(lines: list[bytes], start: int) -> int:
    """The index of the last line of the compound statement that starts at `start`, through its `elif`/`else`."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start
    for index in range(start + 1, len(lines)):
        text = lines[index]
        stripped = text.lstrip()
        if not stripped or stripped.startswith(b"#"):
            continue
        depth = len(text) - len(stripped)
        if depth > indent or (depth == indent and _CONTINUED.match(text)):
            end = index
            continue
        break
    return end


_TRIPLE_QUOTES = (b'"' * 3, b"'" * 3)


def _in_comment_or_docstring(source: bytes, at: int) -> bool:
    """Whether a position follows a `#` on its line, or lies inside a triple-quoted string (an odd number of
    triple quotes before it). Quotes inside other strings can fool it; that only loses evidence."""
    line_start = source.rfind(b"\n", 0, at) + 1
    if b"#" in source[line_start:at]:
        return True
    return any(source.count(quotes, 0, at) % 2 == 1 for quotes in _TRIPLE_QUOTES)


def decide(sightings: Iterable[Sighting], package: str) -> Range | None:
    """The range of versions all sightings of a package allow, citing the narrowest; None when there are none
    or they contradict each other."""
    sightings = tuple(sightings)
    low: Version | None = None
    high: Version | None = None
    cited: Sighting | None = None
    for sighting in sightings:
        api = sighting.api
        if api.package != package:
            continue
        if api.low is not None and (low is None or api.low > low):
            low = api.low
        if api.high is not None and (high is None or api.high < high):
            high = api.high
        if cited is None or _width(api) < _width(cited.api):
            cited = sighting
    if cited is None or (low is not None and high is not None and low > high[: len(low)]):
        return None
    equal = tuple(s for s in sightings if s is not cited and s.api.package == package
                  and _width(s.api) == _width(cited.api))
    return Range(low, high, cited, equal)


def _width(api: Api) -> tuple[int, ...]:
    """Narrower ranges first: bounded above before unbounded, then by the upper bound."""
    return (0, *api.high) if api.high is not None else (1, *(api.low or ()))


def project_sightings(root: Path, excluded: Callable[[Path], bool], cite: Callable[[Path], str]
                      ) -> tuple[Sighting, ...]:
    """The sightings in every Python file under a project root (skipping `excluded` folders; checking each
    file too would cost more than scanning it), walked once per run (`forget` starts a new one); a file is
    read again only when its size or mtime changed."""
    key = (root, excluded, cite)
    if key not in _PROJECTS:
        _PROJECTS[key] = tuple(_project_scan(root, excluded, cite))
    return _PROJECTS[key]


def forget() -> None:
    """Start a new run: files may have changed since the last one."""
    _PROJECTS.clear()
    _ROOTS.clear()
    _PATHS.clear()
    _BRANCH_IMPORTS.clear()
    _IMPORT_LINES.clear()
    _package_import.cache_clear()


_PROJECTS: dict[tuple[Path, Callable[[Path], bool], Callable[[Path], str]], tuple[Sighting, ...]] = {}
_SEEN: dict[tuple[Path, int, int], tuple[Sighting, ...]] = {}  # a file's sightings by its stat, across runs
_ROOTS: dict[Path, Path] = {}  # a folder's project root, once per run
_OWN: dict[tuple[str | None, int, int], tuple[Sighting, ...]] = {}  # a linted file's sightings, by its bytes' hash


def _project_scan(root: Path, excluded: Callable[[Path], bool], cite: Callable[[Path], str]) -> Iterable[Sighting]:
    files = 0
    for folder, subfolders, names in os.walk(root):
        here = Path(folder)
        subfolders[:] = sorted(d for d in subfolders if not excluded(here / d))
        for name in sorted(names):
            if not name.endswith(".py") or files >= _MAX_PROJECT_FILES:
                continue
            files += 1
            yield from _file_sightings(here / name, cite)


def _file_sightings(file: Path, cite: Callable[[Path], str]) -> tuple[Sighting, ...]:
    """One project file's sightings, cited; read again only when its size or mtime changed."""
    try:
        stat = file.stat()
        key = (file, stat.st_mtime_ns, stat.st_size)
        found = _SEEN.get(key)
        if found is None:
            found = _SEEN[key] = scan(file.read_bytes(), "") if stat.st_size <= _MAX_FILE else ()
    except OSError:
        return ()
    if not found:
        return ()
    where = cite(file)
    return tuple(replace(sighting, path=where) for sighting in found)


@dataclass(frozen=True)
class CodeEvidence:
    """What a file and its project say about the versions they were written for."""

    sightings: tuple[Sighting, ...]  # the file's own first, then the rest of the project's
    tensorflow: Range | None
    keras: Range | None

    def target(self, package: str, fallback: Target) -> Target | None:
        """The target the code's range gives: `fallback` when the range holds it, else the range's nearest
        end; None when the code says nothing about the package."""
        found = self.tensorflow if package == TENSORFLOW else self.keras
        if found is None:
            return None
        held = found.holds(fallback.version)
        version = fallback.version if held else (found.high or found.low or fallback.version)
        return Target(version, found.sighting.cited, "code", found.label,
                      tuple((s.cited, s.path, s.line) for s in (found.sighting, *found.others)))


def code_evidence(path: Path, source: bytes | None, excluded: Callable[[Path], bool],
                  within: tuple[Path, ...] | None = None) -> CodeEvidence:
    """The evidence of one file (`source`, or the file read from `path`) and of its project (or, `within`,
    of those files only: the ones a profiled run imports). The project decides when its sightings agree; when
    they contradict each other the file's own decide alone."""
    cite = _citer()
    own: tuple[Sighting, ...] = ()
    if source is None and path.is_file():
        try:
            source = path.read_bytes()
        except OSError:
            source = None
    here = cite(path) if source is not None else None
    if source is not None:
        key = (here, len(source), hash(source))
        if key not in _OWN:
            _OWN[key] = _notebook_scan(source, here) if path.suffix == ".ipynb" else scan(source, here)
        own = _OWN[key]
    if within is not None:
        project = tuple(sighting for file in within for sighting in _file_sightings(file, cite))
    else:
        folder = path if path.is_dir() else path.parent
        if folder not in _ROOTS:
            _ROOTS[folder] = project_root(folder)
        root = _ROOTS[folder]
        code = _notebook_code(source or b"") if path.suffix == ".ipynb" else source or b""
        imported = tuple(sorted(cite(p) for p in _imported_packages(code, root)))
        project = _on_its_path(project_sightings(root, excluded, cite), cite(folder), imported)
        if path.suffix == ".ipynb":  # a notebook is a program of its own: only the modules it imports run with it
            project = tuple(s for s in project if any(s.path == m or s.path.startswith(m + "/") for m in imported))
        named = _package_import(path.parent)
        known = set(project)  # a set: a large project has thousands of sightings, each file asks
        importers = tuple(s for s in project_sightings(root, excluded, cite)
                          if path.stem != "__init__" and s not in known and named.search(_import_lines(s.path)))
        project = project + importers  # a script elsewhere that imports this module (through `sys.path`) runs it
    project = tuple(s for s in project if not _test_file(s.path))  # no program imports a test: it runs alone
    others = tuple(s for s in project if s.path != here)
    sightings = own + others
    if not own and len(others) == len(project):  # nothing of its own: what the project decides (cached)
        ranges = _project_ranges(project)
    else:
        ranges = tuple(decide(sightings, package) for package in (TENSORFLOW, KERAS))
    ranges = tuple(found or decide(own, package) for found, package in zip(ranges, (TENSORFLOW, KERAS)))
    return CodeEvidence(sightings, *ranges)


_TEST_NAME = re.compile(r"^(?:test_\w*|\w+_tests?|conftest)\.py$")


def _test_file(path: str) -> bool:
    """A test module (`x_test.py`, `test_x.py`, `conftest.py`, or any file under a `tests` or `test` folder):
    it runs alone, under its test runner, and may test compatibility with other versions (a TF 1 `tf.Session`
    test of a TF 2 library), so what it uses says nothing of the files it tests."""
    parts = path.split("/")
    return bool(_TEST_NAME.match(parts[-1])) or any(part in ("tests", "test") for part in parts[:-1])


@lru_cache(maxsize=1024)
def _package_import(folder: Path) -> re.Pattern[str]:
    """An import of a module of `folder` named with the folder (`model_build_utils.save` for
    `model_build_utils/opt_model_gpus.py`): a script that imports a package runs code written for the same
    Keras as its modules. Only the folder's own module names count: not every `utils` of a collection of
    examples is the one a script imports."""
    try:
        modules = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    except OSError:
        modules = []
    names = "|".join(re.escape(stem) for stem in modules) or r"(?!)"
    return re.compile(rf"\b{re.escape(folder.name)}\.(?:{names})\b")


def _import_lines(path: str) -> str:
    """A file's `import` and `from ... import` lines, joined, read once per run."""
    if path not in _IMPORT_LINES:
        try:
            text = Path(path).read_bytes()
        except OSError:
            text = b""
        _IMPORT_LINES[path] = b"\n".join(_IMPORT_LINE.findall(text)).decode(errors="replace")
    return _IMPORT_LINES[path]


_IMPORT_LINE = re.compile(rb"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import[^\n]*|import[ \t]+[^\n]*)", re.MULTILINE)
_IMPORT_LINES: dict[str, str] = {}  # a sighting's file -> its import lines, once per run


def _on_its_path(sightings: tuple[Sighting, ...], folder: str, imported: tuple[str, ...]) -> tuple[Sighting, ...]:
    """The sightings in files of `folder`, below it, or directly in a folder above it (a helper module, or a
    script that imports the branch `folder` lies in: `train.py` beside `models/`, importing `models.net`), and
    in the project's packages and modules the file imports (`imported`): the scripts and the packages a file
    belongs to. A sibling folder's files (another chapter of a course, another example of a collection), and a
    script above that imports nothing of this branch (`examples/onnx_demo.py` above `examples/quantized/`),
    are other programs, whose versions say nothing of this one's."""
    key = (id(sightings), folder, imported)
    if key not in _PATHS:
        if len(_PATHS) > 4096:
            _PATHS.clear()
        _PATHS[key] = (sightings, tuple(
            s for s in sightings if _related(posixpath.dirname(s.path), folder) and _imports_branch(s.path, folder)
            or any(s.path == module or s.path.startswith(module + "/") for module in imported)))
    return _PATHS[key][1]


_IMPORT = re.compile(rb"^[ \t]*(?:from|import)[ \t]+([A-Za-z_]\w*)", re.MULTILINE)


def _imported_packages(source: bytes, root: Path) -> list[Path]:
    """The project's top-level packages and modules that `import x` / `from x import ...` lines name (under the
    root or its `src/`)."""
    found = []
    for name in dict.fromkeys(match.decode() for match in _IMPORT.findall(source)):
        for base in (root, root / "src"):
            for candidate in (base / name, base / f"{name}.py"):
                if candidate.exists():
                    found.append(candidate)
    return found


def _related(where: str, folder: str) -> bool:
    """Whether a file in folder `where` is in `folder`, below it, or directly in one of its ancestors."""
    if where in ("", ".") or folder in ("", "."):
        return True  # the top folder: directly above every other, and holding them all
    return where == folder or folder.startswith(where + "/") or where.startswith(folder + "/")


def _imports_branch(path: str, folder: str) -> bool:
    """For a file in a folder above `folder`: whether it is a helper module (no call at its top level, no
    `__main__` block), or a script that imports the branch `folder` lies in (the first folder below its own).
    Files in `folder` or below it always count, and so does a file that cannot be read."""
    where = posixpath.dirname(path)
    if where == folder or folder in ("", ".") or where.startswith(folder + "/"):
        return True
    branch = folder[len(where) + 1:].split("/")[0] if where not in ("", ".") else folder.split("/")[0]
    key = (path, branch)
    if key not in _BRANCH_IMPORTS:
        try:
            text = Path(path).read_bytes()
        except OSError:
            text = None
        _BRANCH_IMPORTS[key] = text is None or not _SCRIPT.search(text) or branch.encode() in _IMPORT.findall(text)
    return _BRANCH_IMPORTS[key]


# a top-level call, `with` or `for` (`with tf.Session() as sess:`), or a main block
_SCRIPT = re.compile(rb"^(?:if __name__\s*==|[A-Za-z_][\w.]*\(|with\s|for\s)", re.MULTILINE)


_BRANCH_IMPORTS: dict[tuple[str, str], bool] = {}  # (a file above, a branch below it): counts, once per run
_PATHS: dict[tuple[int, str, tuple[str, ...]], tuple[tuple[Sighting, ...], tuple[Sighting, ...]]] = {}  # keeps each key's tuple alive


def _notebook_code(source: bytes) -> bytes:
    """A notebook's code cells as one module (nothing for a file that is no notebook)."""
    try:
        return read_notebook(source).python.encode()
    except NotebookError:
        return b""


def _notebook_scan(source: bytes, here: str) -> tuple[Sighting, ...]:
    """The sightings in a notebook's code cells, placed by cell and line, and the versions its outputs show it
    ran under (a cell that ends in `keras.__version__` and printed '2.0.8')."""
    try:
        notebook = read_notebook(source)
    except NotebookError:
        return ()
    code = tuple(replace(s, cell=notebook.place(s.line)) for s in scan(notebook.python.encode(), here))
    return (code + tuple(_recorded_versions(notebook, here)) + tuple(_installed_versions(notebook, here))
            + tuple(_kernel_versions(notebook, here)) + tuple(_multi_backend_outputs(notebook, here)))


# What only multi-backend Keras (standalone, up to 2.3) prints or runs from: its backend banner, and modules that
# Keras 2.4 removed (the later standalone `keras` 2.6-2.15 has `keras/engine/` too, so that is no evidence)
_MULTI_BACKEND = re.compile(r"Using TensorFlow backend\.|site-packages/keras/(?:legacy/interfaces|"
                            r"backend/tensorflow_backend)\.py")


def _multi_backend_outputs(notebook: Notebook, here: str) -> Iterator[Sighting]:
    """Standalone Keras <= 2.3, where a notebook's saved output shows it ran under it: the backend banner it
    printed, or a traceback through its modules. Cited at the first such cell."""
    for cell in notebook.cells:
        outputs = notebook.data["cells"][cell.number - 1].get("outputs")
        texts = [output_text(o) + "\n".join(map(str, o.get("traceback") or ())) for o in outputs or ()
                 if isinstance(o, dict)]
        if not any(_MULTI_BACKEND.search(text) for text in texts):
            continue
        line = next((index for index, place in enumerate(notebook.places, 1) if place[0] == cell.number), None)
        if line is not None:
            name = "multi-backend Keras in a cell's output"
            yield Sighting(Api(name, KERAS, (2,), (2, 3), "<= 2.3", b"", b""), here, line, notebook.places[line - 1])
            return


# The newest TensorFlow with wheels for a Python (release notes: 2.7 dropped 3.6, 2.12 dropped 3.7, 2.14 dropped
# 3.8); Keras 3 and TensorFlow 2.16 need Python 3.9
_LAST_TENSORFLOW_FOR_PYTHON = (((3, 7), (2, 6)), ((3, 8), (2, 11)), ((3, 9), (2, 13)))


def _kernel_versions(notebook: Notebook, here: str) -> Iterator[Sighting]:
    """What the Python a notebook last ran under (its metadata's `language_info.version`) allows: before 3.9, no
    Keras 3, and the newest TensorFlow that still had wheels for it. Cited at the notebook's first line."""
    info = notebook.data.get("metadata", {}).get("language_info") if isinstance(notebook.data, dict) else None
    version = info.get("version") if isinstance(info, dict) else None
    found = re.match(r"(\d+)\.(\d+)", version) if isinstance(version, str) else None
    if found is None or not notebook.places:
        return
    python = (int(found.group(1)), int(found.group(2)))
    tensorflow = next((last for before, last in _LAST_TENSORFLOW_FOR_PYTHON if python < before), None)
    if tensorflow is None:
        return
    name = f"the notebook's Python {version} kernel"
    at = notebook.places[0]
    yield Sighting(Api(name, KERAS, None, (2, 15), "2", b"", b""), here, 1, at)
    yield Sighting(Api(name, TENSORFLOW, None, tensorflow, "<= " + ".".join(map(str, tensorflow)), b"", b""),
                   here, 1, at)


# A cell whose last line shows a package's version (`keras.__version__`, `print(tf.__version__)`), and the
# version in what it printed; or a cell whose every `print` prints a version, one output line each
_SHOWN_VERSION = re.compile(r"^\s*(?:print\()?\s*(keras|tf|tensorflow)\.__version__\s*\)?\s*$")
_PRINTS_VERSION = re.compile(r"^\s*print\(\s*(keras|tf\.keras|tf|tensorflow)\.__version__\s*\)\s*$")
_PRINTED_VERSION = re.compile(r"\b(\d+)\.(\d+)\.(\d+)\b")


def _recorded_versions(notebook: Notebook, here: str) -> Iterator[Sighting]:
    """The versions a notebook's saved outputs show it ran under: the strongest evidence there is, so each is a
    range of one version."""
    for cell in notebook.cells:
        outputs = notebook.data["cells"][cell.number - 1].get("outputs")
        if not isinstance(outputs, list):
            continue
        printed = "".join(output_text(output) for output in outputs if isinstance(output, dict))
        for line, module, text in _shown_versions(cell.lines, printed):
            version = _PRINTED_VERSION.search(text)
            if version is None:
                continue
            number = tuple(int(part) for part in version.groups())
            package = KERAS if module.endswith("keras") else TENSORFLOW
            name = f"{module}.__version__ shown as {'.'.join(map(str, number))}"
            api = Api(name, package, number, number, ".".join(map(str, number)), b"", b"")
            at = (cell.number, cell.lines.index(line) + 1)
            yield Sighting(api, here, len(notebook.places) - notebook.places[::-1].index(at), at)


# `!pip install -q tensorflow-gpu==2.0.0-alpha0`, `%pip install ...`, `!python3 -m pip install ...`; Colab's
# `%tensorflow_version 1.x` (it chose TensorFlow 1.15 until Colab dropped TF 1)
_PIP_INSTALL = re.compile(r"^\s*[!%]\s*(?:python[\d.]*\s+-m\s+)?pip3?\s+install\s+(?P<arguments>[^#;&|]*)")
_COLAB_TF1 = re.compile(r"^\s*%tensorflow_version\s+1(?:\.x|\.\d+)?\s*$")


def _installed_versions(notebook: Notebook, here: str) -> Iterator[Sighting]:
    """The versions a notebook installs for itself: an exact TensorFlow or Keras pin on a `pip install` line
    (a range of that one version), or Colab's `%tensorflow_version 1.x` (TensorFlow 1). These lines run before
    the code, so they say what it was written for."""
    for cell in notebook.cells:
        for index, line in enumerate(cell.lines):
            if "install" not in line and "tensorflow_version" not in line:
                continue
            at = (cell.number, index + 1)
            module_line = len(notebook.places) - notebook.places[::-1].index(at)
            if _COLAB_TF1.match(line):
                yield Sighting(Api("%tensorflow_version 1.x", literal=b"", pattern=b"", **_TF1), here, module_line, at)
                continue
            install = _PIP_INSTALL.match(line)
            for argument in install.group("arguments").split() if install else ():
                pin = parse_requirement(argument, Path(here))
                if pin is None or "==" not in pin.text or pin.kind not in (TENSORFLOW, KERAS):
                    continue
                number = tuple(int(part) for part in pin.version.split("."))
                api = Api(f"pip install {pin.text}", pin.kind, number, number, pin.version, b"", b"")
                yield Sighting(api, here, module_line, at)


def _shown_versions(lines: list[str], printed: str) -> list[tuple[str, str, str]]:
    """(line, module, what it printed) for each version a cell shows: its last line alone (`keras.__version__`
    and all its output), or each of its prints when every print is of a version and the output has one line
    per print (`print(tf.__version__)`, `print(tf.keras.__version__)` printed '2.0.0' and '2.2.4-tf')."""
    written = [line for line in lines if line.strip()]
    shown = _SHOWN_VERSION.match(written[-1]) if written else None
    if shown is not None:
        return [(written[-1], shown.group(1), printed)]
    prints = [line for line in written if line.lstrip().startswith("print(")]
    matches = [_PRINTS_VERSION.match(line) for line in prints]
    out = [line for line in printed.splitlines() if line.strip()]
    if not prints or not all(matches) or len(out) != len(prints):
        return []
    return [(line, match.group(1), text) for line, match, text in zip(prints, matches, out)]  # type: ignore[union-attr]


@lru_cache(maxsize=64)
def _project_ranges(sightings: tuple[Sighting, ...]) -> tuple[Range | None, Range | None]:
    """What a whole project's sightings decide (most files add nothing of their own to them)."""
    return decide(sightings, TENSORFLOW), decide(sightings, KERAS)


def legacy_keras_note(tensorflow: Target, keras: Target, evidence: CodeEvidence) -> str | None:
    """The note for Keras 2 code under a TensorFlow whose `tf.keras` is Keras 3 (2.16 and later), unless the
    code already imports `tf_keras`."""
    if keras.kind != "code" or not keras.below(3) or tensorflow.kind not in ("explicit", "pin", "installed"):
        return None
    if not tensorflow.at_least(2, 16) or any(s.api.name == "tf_keras" for s in evidence.sightings):
        return None
    return (f"Keras 2 code ({keras.source}) under TensorFlow {tensorflow.text} ({tensorflow.source}): `tf.keras` is "
            "Keras 3 from TF 2.16, so this code needs `tf_keras` with TF_USE_LEGACY_KERAS=1, or migrating; "
            "`--target-keras 3` lists what migrating would break")


def _citer() -> Callable[[Path], str]:
    cwd = Path.cwd().resolve()

    def cite(path: Path) -> str:
        try:
            return path.resolve().relative_to(cwd).as_posix()
        except ValueError:
            return str(path)
    return _CITERS.setdefault(cwd, cite)


_CITERS: dict[Path, Callable[[Path], str]] = {}
