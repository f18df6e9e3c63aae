"""A cheap screen before libcst: what CPython's own parser refuses for its limits is reported without libcst.

libcst's native parser has no depth limit. 5,000 nested parentheses overflow its stack and kill the process
(SIGSEGV); a 50,000-term `+` chain runs for minutes. CPython refuses both: more than 200 open brackets ("too
many nested parentheses"), or a tree deeper than its compiler's recursion limit (about 3,000 levels), so no
such file is runnable Python. Its verdict is what a user would see from `python file.py`.

Asking `compile()` about every file would cost a tenth of a libcst parse (on the tensorflow+keras sources),
so a scan first bounds the tree's depth from the bytes. Each level of nesting takes at least one byte of one
logical line (`(`, `-`, `.b`, `lambda:`), except an `elif` chain, which nests one `If` per `elif`. The
bound is the longest logical line (a bracketed span, a physical line, or lines joined by backslashes) plus
the number of `elif`s; it costs about 1% of a parse. Only a file whose bound passes DEPTH_BOUND is compiled.

A file CPython accepts is no deeper than its limit, which tfdoctor handles too, except one long `a or b or
...` (CPython keeps it in one node, libcst nests each operand): more than MAX_BOOLEAN_OPERANDS of them is
refused as well, and so are runs of nested `lambda`s and conditional expressions whose memory in libcst
(the square of each run's length) would pass MAX_NESTED_COST.

A file CPython refuses for an ordinary syntax error was not checked for depth: its longest logical line is
compiled alone, and if that passes the file is `suspicious`, and the engine parses it where a native crash
cannot take down the run (libcst words the error itself). If that line fails alone too, or the depth is an
`elif` chain's (which no one line holds), the depth stays unknown and the file gets Python's own syntax
error. On the tensorflow+keras sources 5% of the parsed files are compiled, none is suspicious.
"""

from __future__ import annotations

import ast
import re
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator

# In-process, tfdoctor handles trees this deep (with the recursion limit the engine sets, see parallel.py);
# a file whose depth bound is below it is neither compiled nor isolated.
DEPTH_BOUND = 3000
# CPython's compiler scales its recursion limit with sys.getrecursionlimit() (x3 before 3.12); the engine
# raises that limit while it lints, so the screen asks CPython under the interpreter's default.
_DEFAULT_RECURSION_LIMIT = 1000
# libcst nests each `and`/`or` operand one level deeper; CPython keeps them in one node.
MAX_BOOLEAN_OPERANDS = DEPTH_BOUND
# libcst's memory grows with the square of a run of nested `lambda`s or `x if c else` expressions, about
# 190 bytes times the run's length squared (0.2 GB at 1,000 levels, 1.6 GB at 2,900, which CPython takes),
# summed over the file's runs (16 runs of 1,000 took 3 GB). This keeps the parse under 1 GB.
MAX_NESTED_COST = 5_000_000
_BRACKETS = re.compile(rb"[()\[\]{}]")
_OPENING = frozenset(b"([{")
_CONTINUATION = re.compile(rb"\\\r?\n")
_LIMIT_MESSAGES = ("too many nested parentheses", "too many levels of indentation", "too complex")
TOO_DEEP = "nested too deeply: Python refuses to compile it"


@dataclass(frozen=True)
class Rejection:
    """Why CPython would refuse the file, and where (1-based line and column)."""

    line: int
    column: int
    reason: str


@dataclass(frozen=True)
class Screen:
    """The guard's verdict: `rejection` when CPython refuses the file for its limits; `suspicious` when its
    depth is unknown and it must be parsed in isolation."""

    rejection: Rejection | None = None
    suspicious: bool = False


SAFE = Screen()


@lru_cache(maxsize=4)  # the engine asks once to decide where to parse a file, and again when it parses it
def screen(source: bytes) -> Screen:
    """Screen one file's bytes (NUL-free: the engine reports binary files before)."""
    bound, start = depth_bound(source)
    if bound <= DEPTH_BOUND:
        return SAFE
    with _default_recursion_limit(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SyntaxWarnings of the file's own (invalid escapes) are not ours
        try:
            tree = compile(source, "<screened>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
        except SyntaxError as error:
            message = str(error.msg)
            if any(limit in message for limit in _LIMIT_MESSAGES):
                return Screen(Rejection(error.lineno or 1, error.offset or 1, f"{message} (Python refuses it too)"))
            return _region_alone(source, start, error)
        except (RecursionError, MemoryError):
            line, column = _position(source, start)
            return Screen(Rejection(line, column, TOO_DEEP))
        except ValueError:
            return Screen(suspicious=True)
    if _deeper_than(tree, DEPTH_BOUND):  # Python 3.10 builds such trees, then its compiler refuses them
        line, column = _position(source, start)
        return Screen(Rejection(line, column, TOO_DEEP))
    return _beyond_libcst(source, tree)


def _deeper_than(tree: ast.AST, limit: int) -> bool:
    """Whether the tree nests more than `limit` levels (walked without recursion)."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return False


def depth_bound(source: bytes) -> tuple[int, int]:
    """An upper bound on the depth of the file's syntax tree, and the byte offset of the line that sets it.
    Brackets inside strings and comments only loosen the bound (an unclosed `(` in a docstring makes the rest
    of the file one span), never tighten it."""
    widest, start = _widest_region(source)
    return widest + source.count(b"elif"), start


def _widest_region(source: bytes) -> tuple[int, int]:
    """The length and byte offset of the longest logical line: a bracketed span, a physical line, or lines
    joined by backslashes."""
    depth, opened, widest, start = 0, 0, 0, 0
    for match in _BRACKETS.finditer(source):
        if match.group()[0] in _OPENING:
            if depth == 0:
                opened = match.start()
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0 and match.end() - opened > widest:
                widest, start = match.end() - opened, opened
    if depth > 0 and len(source) - opened > widest:
        widest, start = len(source) - opened, opened
    longest_line = max(map(len, source.splitlines()), default=0)
    if longest_line > widest:
        widest, start = longest_line, _longest_line_start(source, longest_line)
    if _CONTINUATION.search(source):
        joined, joined_start = _longest_joined_line(source)
        if joined > widest:
            widest, start = joined, joined_start
    return widest, start


def _region_alone(source: bytes, start: int, error: SyntaxError) -> Screen:
    """Python stopped at an ordinary syntax error, before it could judge the depth: ask it about the longest
    logical line alone (a deep chain after a stray byte-order mark is still refused for its depth). When
    that line does not parse alone either, its depth stays unknown and libcst may take gigabytes to fail on
    it (4,000 `x if c else` cut short): the file gets Python's own syntax error."""
    length, _ = _widest_region(source)
    region = source[start:start + length].lstrip()
    line, column = _position(source, start)
    with _default_recursion_limit(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = compile(region, "<screened>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
        except (RecursionError, MemoryError):
            return Screen(Rejection(line, column, TOO_DEEP))
        except SyntaxError as alone:
            if any(limit in str(alone.msg) for limit in _LIMIT_MESSAGES):
                return Screen(Rejection(line, column, f"{alone.msg} (Python refuses it too)"))
            return Screen(Rejection(error.lineno or 1, error.offset or 1, f"{error.msg} (Python refuses it too)"))
        except ValueError:
            return Screen(suspicious=True)
    if _deeper_than(tree, DEPTH_BOUND):  # parsed alone, but too deep to compile (a long `x if c else` chain)
        return Screen(Rejection(line, column, TOO_DEEP))
    if source.count(b"elif") > DEPTH_BOUND:  # the depth is the `elif` chain's, which no one line holds
        return Screen(Rejection(error.lineno or 1, error.offset or 1, f"{error.msg} (Python refuses it too)"))
    chain = _beyond_libcst(region, tree).rejection
    if chain is not None:
        return Screen(Rejection(line + chain.line - 1, chain.column + (column - 1 if chain.line == 1 else 0),
                                chain.reason))
    return Screen(suspicious=True)


def _longest_line_start(source: bytes, length: int) -> int:
    offset = 0
    for line in source.splitlines(keepends=True):
        if len(line.rstrip(b"\r\n")) == length:
            return offset
        offset += len(line)
    return 0


def _longest_joined_line(source: bytes) -> tuple[int, int]:
    """The longest run of physical lines joined by trailing backslashes, and its byte offset."""
    longest, longest_start, run, run_start, offset = 0, 0, 0, 0, 0
    for line in source.splitlines(keepends=True):
        if run == 0:
            run_start = offset
        run += len(line)
        offset += len(line)
        if not line.rstrip(b"\r\n").endswith(b"\\"):
            if run > longest:
                longest, longest_start = run, run_start
            run = 0
    return max(longest, run), longest_start if longest >= run else run_start


def _beyond_libcst(source: bytes, tree: ast.AST) -> Screen:
    """What CPython accepts but libcst cannot parse within the run's memory: a long `and`/`or` chain, or a
    long run of nested `lambda`/conditional expressions."""
    chain = _long_boolean_chain(source, tree)
    return chain if chain.rejection is not None else _long_nested_run(tree)


def _long_nested_run(tree: ast.AST) -> Screen:
    """Runs of nested `lambda`/conditional expressions whose squared lengths sum past MAX_NESTED_COST."""
    cost, deepest = 0, 0
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, run = stack.pop()
        if isinstance(node, (ast.Lambda, ast.IfExp)):
            run += 1
            cost += 2 * run - 1  # a run of n levels adds 1 + 3 + ... + (2n - 1) = n * n
            deepest = max(deepest, run)
            if cost > MAX_NESTED_COST:
                return Screen(Rejection(node.lineno, node.col_offset + 1,
                                        f"runs of nested `lambda` or `if`-`else` expressions (up to {deepest} deep) "
                                        f"that need more memory than tfdoctor's parser may take"))
        else:
            run = 0
        stack.extend((child, run) for child in reversed(list(ast.iter_child_nodes(node))))  # in source order
    return SAFE


def _long_boolean_chain(source: bytes, tree: ast.AST) -> Screen:
    if source.count(b"or") + source.count(b"and") < MAX_BOOLEAN_OPERANDS:  # n words join n + 1 operands
        return SAFE
    for node in ast.walk(tree):
        if isinstance(node, ast.BoolOp) and len(node.values) > MAX_BOOLEAN_OPERANDS:
            return Screen(Rejection(node.lineno, node.col_offset + 1,
                                    f"{len(node.values)} `and`/`or` operands in one expression: more than tfdoctor's "
                                    f"parser handles ({MAX_BOOLEAN_OPERANDS})"))
    return SAFE


def _position(source: bytes, offset: int) -> tuple[int, int]:
    line_start = source.rfind(b"\n", 0, offset) + 1
    return source.count(b"\n", 0, offset) + 1, offset - line_start + 1


@contextmanager
def _default_recursion_limit() -> Iterator[None]:
    raised = sys.getrecursionlimit()
    sys.setrecursionlimit(min(raised, _DEFAULT_RECURSION_LIMIT))
    try:
        yield
    finally:
        sys.setrecursionlimit(raised)
