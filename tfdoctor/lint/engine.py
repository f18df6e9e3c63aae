"""Find files, prefilter, parse once, build facts once, run the rules, drop suppressed findings.

Positions are computed only for files that have findings: that re-renders the whole tree (about half a
parse, `semantic/positions.py`), so a clean file pays for parse + one fact walk (`semantic/walk.py`) and
nothing more. On every third file of the installed tensorflow+keras sources 2 of 824 parsed files have
findings, and a cold `-j 1` run costs 1.12x the libcst floor (parse + one empty libcst walk) in CPU time
(`benchmarks/lint_speed.py --every 3`), so positioning only flagged nodes would not pay for its complexity.

`lint_paths` reads every file in this process, drops the files larger than max-file-bytes (a warning each),
the ones the prefilter rules out and the ones the cache knows, and lints the rest in a process pool when
there is enough of it (`parallel.py`). Before libcst, the guard (`guard.py`) reports what CPython's parser
refuses for its limits; a file whose depth it cannot bound, or a large one, is never parsed in this process.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from functools import lru_cache
from typing import Iterable, Iterator, Mapping

import libcst as cst
from libcst.metadata import CodeRange

from tfdoctor.config import ConfigError, Overrides, Settings, load_settings, settings_for
from tfdoctor.lint.cache import Cache
from tfdoctor.lint.dead_code import dead_spans, in_untaken_branch
from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.deep_stack import deep_stack
from tfdoctor.lint.findings import Evidence, Finding, Group, Severity, Violation, with_evidence
from tfdoctor.lint.gc_threshold import sparse_collection
from tfdoctor.lint.guard import screen
from tfdoctor.lint.notebooks import NotebookError, read_notebook
from tfdoctor.lint.recorded_runs import recorded_replicas
from tfdoctor.lint.parallel import map_ordered
from tfdoctor.lint.precedence import Candidate, survivors
from tfdoctor.lint.project import Project
from tfdoctor.lint.project import forget as forget_project_files
from tfdoctor.lint.project_root import is_test_module
from tfdoctor.lint.rule import Context, Rule, all_rules
from tfdoctor.lint.semantic.positions import Positions
from tfdoctor.lint.semantic.positions import positions as node_positions
from tfdoctor.lint.tabs import expand_indentation, map_back
from tfdoctor.lint.version_evidence import forget as forget_project_evidence

_NOQA = re.compile(r"#\s*noqa(?::[\s]*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
_SKIP_FILE = re.compile(rb"^[ \t]*#[ \t]*tfdoctor:[ \t]*skip-file\b", re.MULTILINE)
PARSE_ERROR = ("TFD000", "parse-error")
_LIBCST_ONLY = "libcst cannot parse this file: "  # a file Python itself parses
# Every rule's facts hang on TF/Keras names, resolved through the file's imports, or on objects named like a
# strategy (a `strategy` parameter). A file with none of these words is never parsed, whatever the rules'
# own trigger words; on the installed tensorflow+keras sources this leaves 10% of the files unparsed.
_ANCHORS = (b"tensorflow", b"keras", b"strategy", b"Strategy")
# A serial run parses a file this large in a worker of its own, under the memory watchdog: libcst may need
# up to 1,000 bytes per byte of it.
ISOLATE_BYTES = 256 * 1024


class InternalError(Exception):
    """A bug in tfdoctor itself while checking one file: reported on one line, other files go on."""


@dataclass
class LintReport:
    files: int = 0
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # one line each: missing paths, unreadable files
    warnings: list[str] = field(default_factory=list)
    sources: dict[str, list[str]] = field(default_factory=dict)  # text of inputs that are not files (stdin)
    skipped: int = 0  # files never parsed: the prefilter ruled them out, or `# tfdoctor: skip-file`
    oversize: int = 0  # files larger than max-file-bytes, not linted (each named in a warning)
    cached: int = 0  # files whose findings came from the cache
    notes: list[str] = field(default_factory=list)  # said once per run (Keras 2 code under Keras 3's TF)


def enabled_rules(settings: Settings, path: Path | None) -> list[Rule]:
    """The rules that check this file: selected, not ignored for it, and, in test code that no profiled run
    executes, only the rules that find what a test would not notice (`Rule.IN_TESTS`)."""
    where = path if settings.per_file_ignores else None  # only per-file ignores need the path (resolving it is slow)
    in_tests = path is not None and not settings.run_code and is_test_module(path)
    return [rule for rule in all_rules()
            if settings.code_enabled(rule.code, where, rule.OPT_IN) and (rule.IN_TESTS or not in_tests)]


@dataclass(frozen=True)
class Reported:
    """A finding with the violation behind it and, when it has a fix, the span the fix replaces."""

    finding: Finding
    violation: Violation
    fix_span: tuple[tuple[int, int], tuple[int, int]] | None


@sparse_collection
@deep_stack
def lint_source(source: bytes, display_path: str, settings: Settings, path: Path | None = None,
                recorded_replicas: tuple[int, ...] = ()) -> list[Finding]:
    """Lint one file's bytes. Never raises for bad input: a file that cannot be parsed gives TFD000.
    `recorded_replicas`: what a notebook's saved outputs show of its run (`recorded_runs`)."""
    parsed = parse_source(source, display_path, settings, path)
    if isinstance(parsed, Finding) and parsed.message.startswith(f"cannot parse: {_LIBCST_ONLY}") and b"\t" in source:
        retried = _lint_tabs_expanded(source, display_path, settings, path, recorded_replicas)
        return [parsed] if retried is None else retried
    if not isinstance(parsed, cst.Module):
        return [parsed] if parsed is not None else []
    lines = source.decode(parsed.encoding, errors="replace").splitlines()  # not `parsed.code`: a re-render
    return [reported.finding for reported in check_module(parsed, display_path, settings, path, lines,
                                                          recorded_replicas)]


def _lint_tabs_expanded(source: bytes, display_path: str, settings: Settings, path: Path | None,
                        recorded_replicas: tuple[int, ...]) -> list[Finding] | None:
    """A file that Python parses but libcst does not, for the way its indentation mixes tabs and spaces:
    its findings from the tab-expanded text (tabs.py); None when libcst cannot parse that either."""
    expanded = expand_indentation(source)
    try:
        module = cst.parse_module(expanded)
    except (cst.ParserSyntaxError, UnicodeDecodeError, LookupError, SyntaxError, RecursionError):
        return None
    original_lines = source.decode(module.encoding, errors="replace").splitlines()
    expanded_lines = expanded.decode(module.encoding, errors="replace").splitlines()
    findings = [reported.finding for reported in check_module(module, display_path, settings, path, expanded_lines,
                                                              recorded_replicas)]
    return map_back(findings, original_lines, expanded_lines)


def lint_notebook(source: bytes, display_path: str, settings: Settings, path: Path | None = None) -> list[Finding]:
    """Lint a notebook's code cells as one module; findings name the cell and the line in it."""
    if not should_parse(source, settings, path):
        return []
    try:
        notebook = read_notebook(source)
    except NotebookError as error:
        return [_parse_finding(display_path, 1, 1, f"not a notebook: {error}")] if settings.code_enabled(PARSE_ERROR[0], path) else []
    return notebook.to_cells(lint_source(notebook.python.encode(), display_path, settings, path,
                                         recorded_replicas(notebook)))


def is_notebook(path: str) -> bool:
    return path.endswith(".ipynb")


def should_parse(source: bytes, settings: Settings, path: Path | None = None) -> bool:
    """False for a file that is certainly clean without parsing: `# tfdoctor: skip-file`, or none of the
    enabled rules' words in it. Binary files are parsed (and reported as TFD000)."""
    if _SKIP_FILE.search(source):
        return False
    if b"\0" in source:
        return True
    return any(word in source for word in _ANCHORS) and any(
        word in source for word in _trigger_words(tuple(enabled_rules(settings, path)))
    )


@lru_cache(maxsize=64)
def _trigger_words(rules: tuple[Rule, ...]) -> frozenset[bytes]:
    return frozenset(word.encode() for rule in rules for word in rule.triggers)


def parse_source(source: bytes, display_path: str, settings: Settings, path: Path | None = None) -> cst.Module | Finding | None:
    """The parsed module; a TFD000 finding when it cannot be parsed; None when the file is skipped
    (`# tfdoctor: skip-file`, or none of the enabled rules' trigger words occur in it)."""
    if not should_parse(source, settings, path):
        return None
    parse_enabled = settings.code_enabled(PARSE_ERROR[0], path)
    if b"\0" in source:
        return _parse_finding(display_path, 1, 1, "binary file (contains NUL bytes), not Python source") if parse_enabled else None
    rejection = screen(source).rejection
    if rejection is not None:
        return _parse_finding(display_path, rejection.line, rejection.column, rejection.reason) if parse_enabled else None
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        return _syntax_finding(display_path, source, error) if parse_enabled else None
    except (UnicodeDecodeError, LookupError, SyntaxError) as error:
        return _parse_finding(display_path, 1, 1, f"cannot decode: {error}") if parse_enabled else None
    except RecursionError:
        return _parse_finding(display_path, 1, 1, "nested too deeply to parse") if parse_enabled else None


def check_module(module: cst.Module, display_path: str, settings: Settings, path: Path | None = None,
                 lines: list[str] | None = None, recorded_replicas: tuple[int, ...] = ()) -> list[Reported]:
    """Build the facts once, run every enabled rule, and position the unsuppressed findings. `lines` is the
    source text when the caller has it (rendering `module.code` again costs a fifth of a parse)."""
    lines = module.code.splitlines() if lines is None else lines
    context = Context(targets=settings.targets, run_code=settings.run_code)
    found: list[tuple[Rule, Violation]] = []
    stage = "module facts"
    try:
        project = _project(path)
        facts = ModuleFacts(module, display_path, lines, loader=project, file=path if project else None,
                            recorded_replicas=recorded_replicas)
        for rule in enabled_rules(settings, path):
            stage = rule.code
            found.extend((rule, violation) for violation in rule.check(facts, context))
        stage = "dead code"
        found = [(rule, violation) for rule, violation in found if not in_untaken_branch(facts, violation, project)]
        if not found:
            return []
        stage = "positions"
        positions = node_positions(module)
        stage = "dead code"
        dead = dead_spans(facts, positions, "\n".join(lines), project, path, is_notebook(display_path))
        found = [(rule, violation) for rule, violation in found if not _within(positions, violation.node, dead)]
        stage = "positions"
        return list(_position(positions, lines, display_path, one_per_group(facts, found), context))
    except (RecursionError, Exception) as error:  # a bug of ours must not hide the other files' findings
        raise InternalError(f"internal error in {stage}: {type(error).__name__}: {error} (please report)") from error


def _within(positions: Positions, node: cst.CSTNode, spans: list[tuple[int, int]]) -> bool:
    """Whether a node starts on a line of one of the (first, last) spans."""
    return node in positions and any(first <= positions[node].start.line <= last for first, last in spans)


def one_per_group(facts: ModuleFacts, found: list[tuple[Rule, Violation]]) -> list[tuple[Rule, Violation]]:
    """The violations with the places of each group (see `Group`) made one: the first, with the others as its
    related locations."""
    single = [(rule, violation) for rule, violation in found if violation.group is None]
    groups: dict[tuple[str, Group], list[tuple[Rule, Violation]]] = {}
    for rule, violation in found:
        if violation.group is not None:
            groups.setdefault((rule.code, violation.group), []).append((rule, violation))
    for (_, group), members in groups.items():
        (rule, first), *others = sorted(members, key=lambda member: facts.position(member[1].node)[:2])
        evidence = tuple(Evidence(group.what, facts.path, facts, other.node) for _, other in others)
        single.append((rule, replace(first, evidence=first.evidence + evidence)))
    return single


def forget_files_read() -> None:
    """Read the projects' files afresh from the next lint on (their version evidence, file lists, texts)."""
    forget_project_evidence()
    forget_project_files()


def _project(path: Path | None) -> Project | None:
    """The project of a linted file, whose other modules may give evidence (none for stdin or a notebook)."""
    if path is None or is_notebook(path.name) or not path.is_file():
        return None
    return Project.for_file(path)


def _position(
    positions: Positions, lines: list[str], display_path: str, found: list[tuple[Rule, Violation]], context: Context
) -> Iterator[Reported]:
    seen: set[tuple[str, int, int]] = set()
    kept: list[tuple[Rule, Violation, CodeRange, int]] = []
    for rule, violation in found:
        if violation.node not in positions:  # another module's node that no rule should have given: stay silent
            continue
        where = positions[violation.node]
        statement_line = positions[violation.statement].start.line if violation.statement in positions else where.start.line
        if _suppressed(rule.code, lines, {where.start.line, statement_line}):
            continue
        key = (rule.code, where.start.line, where.start.column)
        if key in seen:
            continue
        seen.add(key)
        kept.append((rule, violation, where, statement_line))
    candidates = [_candidate(rule, violation, positions) for rule, violation, _, _ in kept]
    for (rule, violation, where, statement_line), reported in zip(kept, survivors(candidates)):
        if not reported:
            continue
        related = tuple(evidence.related() for evidence in violation.evidence)
        finding = Finding(
            path=display_path, line=where.start.line, column=where.start.column + 1, end_line=where.end.line,
            end_column=where.end.column + 1, code=rule.code, name=rule.name,
            severity=violation.severity or rule.severity_for(context),
            message=with_evidence(violation.message, related, display_path), fixable=violation.fix is not None and not related,
            statement_line=statement_line, related=related,
        )
        span = None
        if violation.fix is not None and violation.fix.old in positions and not violation.evidence:
            fix_range = positions[violation.fix.old]
            span = ((fix_range.start.line, fix_range.start.column), (fix_range.end.line, fix_range.end.column))
        yield Reported(finding, violation, span)


def _candidate(rule: Rule, violation: Violation, positions: Mapping[cst.CSTNode, CodeRange]) -> Candidate:
    span = positions[violation.construct if violation.construct in positions else violation.node]
    return Candidate(rule.code, frozenset(rule.OUTRANKS), (span.start.line, span.start.column),
                     (span.end.line, span.end.column))


def _suppressed(code: str, lines: list[str], line_numbers: Iterable[int]) -> bool:
    for number in line_numbers:
        if not 0 < number <= len(lines):
            continue
        match = _NOQA.search(lines[number - 1])
        if match and (match.group("codes") is None or code in re.split(r"[\s,]+", match.group("codes").upper())):
            return True
    return False


def with_noqa(line: str, code: str) -> str:
    """The line with `code` added to its `# noqa: ...` comment, or with `  # noqa: CODE` appended."""
    match = _NOQA.search(line)
    if match and match.group("codes") is None:
        return line  # a bare `# noqa` already suppresses every code
    if match:
        return f"{line[:match.end('codes')]}, {code}{line[match.end('codes'):]}"
    return f"{line.rstrip()}  # noqa: {code}"


def _syntax_finding(path: str, source: bytes, error: cst.ParserSyntaxError) -> Finding:
    """TFD000 for a syntax error. Python's own parser words and places errors best ("'(' was never
    closed"), so on this failure path only, the file is compiled once more to ask it."""
    try:
        ast.parse(source)
    except SyntaxError as python_error:
        return _parse_finding(path, python_error.lineno or 1, python_error.offset or 1, python_error.msg)
    except (ValueError, RecursionError, MemoryError):
        pass
    where = re.search(r"error at (\d+):(\d+)", error.message)
    line, column = (int(where.group(1)), int(where.group(2)) + 1) if where else (error.raw_line, error.raw_column + 1)
    return _parse_finding(path, line, column, f"{_LIBCST_ONLY}{error.message}")


def parse_error(path: str, message: str) -> Finding:
    """TFD000 at the top of a file that could not be linted for a reason found outside the engine."""
    return _parse_finding(path, 1, 1, message)


def _parse_finding(path: str, line: int, column: int, message: str) -> Finding:
    return Finding(
        path=path, line=max(line, 1), column=max(column, 1), end_line=max(line, 1), end_column=max(column, 1),
        code=PARSE_ERROR[0], name=PARSE_ERROR[1], severity=Severity.ERROR,
        message=f"cannot parse: {message.strip().splitlines()[0] if message.strip() else 'syntax error'}",
    )


def discover(root: Path, settings: Settings) -> Iterator[Path]:
    """Python files and notebooks under a folder, skipping VCS folders, virtual environments, builds and
    excludes."""
    for folder, subfolders, files in os.walk(root):
        here = Path(folder)
        subfolders[:] = sorted(d for d in subfolders if not settings.is_excluded(here / d))
        for name in sorted(files):
            candidate = here / name
            if name.endswith((".py", ".ipynb")) and not settings.is_excluded(candidate):
                yield candidate


@dataclass(frozen=True)
class _Task:
    """One file to lint, as sent to a worker process."""

    source: bytes
    display: str
    settings: Settings
    path: Path | None


@dataclass(frozen=True)
class _Linted:
    """One file's findings and the other project modules they used, with the digests of their bytes."""

    findings: list[Finding]
    used: tuple[tuple[str, str], ...]


def _lint_task(task: _Task) -> _Linted | str:
    """Lint one file; a bug of ours comes back as one line, never as a traceback."""
    lint = lint_notebook if is_notebook(task.display) else lint_source
    project = _project(task.path)
    try:
        if project is not None:
            project.begin()
        findings = lint(task.source, task.display, task.settings, task.path)
        return _Linted(findings, project.used() if project is not None else ())
    except InternalError as error:
        return str(error)
    except (RecursionError, Exception) as error:
        return f"internal error: {type(error).__name__}: {error} (please report)"


def _one_note(notes: dict[str, list[str]]) -> list[str]:
    """The first note of the run, saying for how many other files it holds too: one note, not one per file."""
    if not notes:
        return []
    note, files = next(iter(notes.items()))
    others = sum(len(f) for f in notes.values()) - 1
    return [f"{files[0]}: {note}" + (f" (and {others} more file{'s' if others > 1 else ''})" if others else "")]


def _task_failed(task: _Task, reason: str) -> str:
    return f"internal error: {reason}; the other files were linted (please report)"


def needs_isolation(source: bytes, display: str) -> bool:
    """Whether a serial run must parse this file in a worker of its own: it is large, or the guard cannot
    bound its depth (the guard's verdict is computed again when it is parsed, from its cache)."""
    return len(source) > ISOLATE_BYTES or (not is_notebook(display) and b"\0" not in source
                                           and screen(source).suspicious)


def _isolate(task: _Task) -> bool:
    return needs_isolation(task.source, task.display)


def lint_paths(paths: list[str], overrides: Overrides = Overrides(), stdin: bytes | None = None,
               stdin_filename: str | None = None, jobs: int | None = 1, cache: bool = False) -> LintReport:
    """Lint files and folders. Problems with one path are reported and the others still linted.
    `jobs` worker processes (None: one per core); `cache` reuses findings from `.tfdoctor_cache/`."""
    report = LintReport()
    forget_files_read()  # the files as they are now
    notes: dict[str, list[str]] = {}
    tasks: list[tuple[_Task, Cache | None, str | None]] = []
    for raw in paths:
        if raw == "-":
            display = stdin_filename or "<stdin>"
            where = Path(display) if stdin_filename else Path.cwd() / display
            settings = settings_for(where, overrides, stdin or b"")
            report.files += 1
            if _oversize(report, display, len(stdin or b""), settings):
                continue
            report.sources[display] = (stdin or b"").decode("utf-8", errors="replace").splitlines()
            if settings.targets.note:
                notes.setdefault(settings.targets.note, []).append(display)
            tasks.append((_Task(stdin or b"", display, settings, Path(display)), None, None))
            continue
        path = Path(raw)
        if not path.exists():
            report.errors.append(f"{raw}: no such file or directory")
            continue
        settings = load_settings(path, overrides)
        file_cache = Cache.for_settings(settings) if cache else None
        if path.is_dir():
            files = list(discover(path, settings))
            if not files:
                report.warnings.append(f"{raw}: no Python files found")
        else:
            files = [path]
        for file in files:
            try:
                if _oversize(report, str(file), linted_size(file, settings), settings):
                    report.files += 1
                    continue
                source = file.read_bytes()
            except OSError as error:
                report.errors.append(f"{file}: cannot read: {error.strerror or error}")
                continue
            report.files += 1
            if not should_parse(source, settings, file):
                report.skipped += 1
                continue
            file_settings = settings.for_file(file, source)
            if file_settings.targets.note:
                notes.setdefault(file_settings.targets.note, []).append(str(file))
            key = file_cache.key(source, file, enabled_rules(file_settings, file), file_settings.targets) if file_cache else None
            hit = file_cache.get(key, str(file)) if file_cache and key else None
            if hit is not None:
                report.cached += 1
                report.findings.extend(hit)
                continue
            tasks.append((_Task(source, str(file), file_settings, file), file_cache, key))
    work = [task for task, _, _ in tasks]
    outcomes = map_ordered(_lint_task, work, jobs, [len(task.source) for task in work], _task_failed, _isolate)
    for (task, file_cache, key), outcome in zip(tasks, outcomes):
        if isinstance(outcome, str):
            report.errors.append(f"{task.display}: {outcome}")
            continue
        report.findings.extend(outcome.findings)
        if file_cache and key:
            file_cache.put(key, outcome.findings, outcome.used)
    report.warnings.extend(sorted({c.warning for _, c, _ in tasks if c is not None and c.warning}))
    report.notes.extend(_one_note(notes))
    report.findings = sorted(_one_per_smell(report.findings), key=Finding.sort_key)
    return report


def _one_per_smell(findings: list[Finding]) -> list[Finding]:
    """Without the findings that stand on a call bringing in what they are about from another file, where
    that file was linted too and has the same finding on it (a loader's `map` is reported in data.py, not
    again in train.py)."""
    at = {(os.path.abspath(f.path), f.line, f.column, f.code) for f in findings}
    return [f for f in findings
            if not any(r.subject and (os.path.abspath(r.path), r.line, r.column, f.code) in at for r in f.related)]


# A notebook is read to measure its code cells up to this many times max-file-bytes (outputs, such as plots
# saved as base64 images, make most of a large notebook).
_NOTEBOOK_READ_FACTOR = 64


def linted_size(file: Path, settings: Settings) -> int:
    """The size that max-file-bytes bounds: the file's, or for a notebook the size of its code cells."""
    size = file.stat().st_size
    if not is_notebook(file.name) or size <= settings.max_file_bytes or \
            size > settings.max_file_bytes * _NOTEBOOK_READ_FACTOR:
        return size
    try:
        return len(read_notebook(file.read_bytes()).python.encode())
    except NotebookError:
        return size


def _oversize(report: LintReport, display: str, size: int, settings: Settings) -> bool:
    """Count and name a file larger than max-file-bytes; True when it is not to be linted."""
    if size <= settings.max_file_bytes:
        return False
    report.oversize += 1
    report.warnings.append(f"{display}: not linted: {size:,} bytes is more than max-file-bytes "
                           f"({settings.max_file_bytes:,}); raise it with --max-file-bytes or in [tool.tfdoctor]")
    return True


__all__ = ["ConfigError", "InternalError", "LintReport", "Reported", "check_module", "discover", "lint_notebook",
           "linted_size", "lint_paths", "lint_source", "parse_error", "parse_source", "should_parse", "with_noqa"]
