"""The linter never falls over: CPython's limits are reported as TFD000 before libcst, over-size files are
skipped with a warning, and a file that crashes or exhausts its process costs only its own line."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import DEPTH_MEASURED, run_cli
from tfdoctor.lint import engine, guard, parallel
from tfdoctor.lint.engine import lint_paths
from tfdoctor.lint.parallel import MB, Limits, map_ordered

BAD = "import tensorflow as tf\nm = tf.keras.utils.multi_gpu_model(base, gpus=2)\n"
DEEP = "import tensorflow as tf\nx = " + "(" * 5000 + "1" + ")" * 5000 + "\n"
# Python stops at the unknown character name, which libcst does not decode, and the longest line (a comment)
# passes alone: the guard cannot bound the depth, and libcst's native parser overflows its stack on the
# 100,000 minus signs.
CRASHES_LIBCST = ('import tensorflow as tf\ny = "\\N{NOT A NAME}"\n# ' + "x" * 150_000 + "\nx = " + "-" * 100_000
                  + "1\n")
# Clean TensorFlow code, enough of it (> MIN_POOL_BYTES) for a run with -j 2 to use worker processes.
PADDING = "import tensorflow as tf\n" + "".join(f"def f{i}(x):\n    return tf.reduce_sum(x) * {i}\n" for i in range(6000))


def _json(result) -> dict:
    assert "Traceback" not in result.stderr and result.returncode >= 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def test_5000_deep_file_gives_tfd000_with_pythons_reason_and_position(tmp_path):
    (tmp_path / "deep.py").write_text(DEEP)
    result = run_cli("lint", "--format", "concise", "--no-cache", str(tmp_path / "deep.py"))
    assert result.returncode == 1, result.stderr
    assert result.stdout == (f"{tmp_path / 'deep.py'}:2:205: TFD000 cannot parse: too many nested parentheses "
                             "(Python refuses it too)\n")


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_folder_holding_a_deep_file_still_reports_the_other_files(tmp_path, jobs):
    (tmp_path / "deep.py").write_text(DEEP)
    (tmp_path / "lambdas.py").write_text("import tensorflow as tf\nf = " + "lambda: " * 5000 + "1\n")
    (tmp_path / "train.py").write_text(BAD)
    (tmp_path / "padding.py").write_text(PADDING)
    report = _json(run_cli("lint", "--format", "json", "--no-cache", "-j", jobs, str(tmp_path)))
    found = sorted((Path(f["path"]).name, f["line"], f["column"], f["code"]) for f in report["findings"])
    assert found == [("deep.py", 2, 205, "TFD000"), ("lambdas.py", 2, 1, "TFD000"), ("train.py", 2, 5, "TFD101")]
    assert report["summary"]["files"] == 4


@DEPTH_MEASURED
def test_legal_but_deep_code_is_linted_not_an_internal_error(tmp_path):
    (tmp_path / "deep.py").write_text("import tensorflow as tf\nx = " + "-" * 2500 + "1\n" + BAD.split("\n", 1)[1])
    result = run_cli("lint", "--format", "concise", "--no-cache", "-j", "1", str(tmp_path / "deep.py"))
    assert result.returncode == 1 and result.stderr == ""
    assert result.stdout.startswith(f"{tmp_path / 'deep.py'}:3:5: TFD101 ") and result.stdout.count("\n") == 1


def test_over_size_file_is_skipped_with_a_warning_and_counted(tmp_path):
    (tmp_path / "big.py").write_text(BAD + "# " + "x" * 500 + "\n")
    (tmp_path / "train.py").write_text(BAD)
    result = run_cli("lint", "--no-cache", "--max-file-bytes", "400", str(tmp_path))
    assert result.returncode == 1
    size = (tmp_path / "big.py").stat().st_size
    assert result.stderr == (f"warning: {tmp_path / 'big.py'}: not linted: {size} bytes is more than max-file-bytes "
                             "(400); raise it with --max-file-bytes or in [tool.tfdoctor]\n")
    assert "train.py" in result.stdout and "big.py" not in result.stdout
    assert result.stdout.rstrip().endswith("in 2 files (1 not linted: larger than max-file-bytes).")
    report = _json(run_cli("lint", "--format", "json", "--no-cache", "--max-file-bytes", "400", str(tmp_path)))
    assert report["summary"]["oversize"] == 1 and report["summary"]["files"] == 2
    # The same limit from [tool.tfdoctor]; the command line wins over it.
    (tmp_path / "pyproject.toml").write_text("[tool.tfdoctor]\nmax-file-bytes = 400\n")
    assert _json(run_cli("lint", "--format", "json", "--no-cache", str(tmp_path)))["summary"]["oversize"] == 1
    assert "oversize" not in _json(run_cli("lint", "--format", "json", "--no-cache", "--max-file-bytes", "1000",
                                           str(tmp_path)))["summary"]
    # --fix leaves an over-size file as it was.
    before = (tmp_path / "big.py").read_bytes()
    run_cli("lint", "--fix", "--no-cache", str(tmp_path))
    assert (tmp_path / "big.py").read_bytes() == before


def test_bad_max_file_bytes_is_one_line(tmp_path):
    result = run_cli("lint", "--max-file-bytes", "-3", str(tmp_path))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "positive number of bytes" in result.stderr
    (tmp_path / "pyproject.toml").write_text("[tool.tfdoctor]\nmax-file-bytes = \"1 MB\"\n")
    (tmp_path / "a.py").write_text(BAD)
    result = run_cli("lint", str(tmp_path))
    assert result.returncode == 2 and result.stderr.strip().endswith(
        "[tool.tfdoctor] max-file-bytes must be a positive number of bytes")


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_native_crash_costs_only_its_own_file(tmp_path, jobs):
    (tmp_path / "crash.py").write_text(CRASHES_LIBCST)
    (tmp_path / "train.py").write_text(BAD)
    (tmp_path / "z_padding.py").write_text(PADDING)
    result = run_cli("lint", "--format", "concise", "--no-cache", "-j", jobs, str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert result.stdout == f"{tmp_path / 'train.py'}:2:5: TFD101 {result.stdout.split('TFD101 ', 1)[1]}"
    assert result.stderr == (f"error: {tmp_path / 'crash.py'}: internal error: the process linting this file "
                             "crashed (SIGSEGV); the other files were linted (please report)\n")


def _exit_on_b(source, display, settings, path=None):
    if display.endswith("b.py"):
        os._exit(3)
    return _lint_source(source, display, settings, path)


_lint_source = engine.lint_source


def _pooled(monkeypatch, tmp_path, lint):
    """Four files linted by two workers, each file by `lint`."""
    for name in ("a.py", "b.py", "c.py", "d.py"):
        (tmp_path / name).write_text(BAD)
    monkeypatch.setattr(parallel, "MIN_POOL_BYTES", 0)
    monkeypatch.setattr(engine, "lint_source", lint)
    return lint_paths([str(tmp_path)], jobs=2)


def test_a_worker_that_dies_costs_only_its_own_file(monkeypatch, tmp_path):
    report = _pooled(monkeypatch, tmp_path, _exit_on_b)
    assert sorted(Path(f.path).name for f in report.findings) == ["a.py", "c.py", "d.py"]
    assert report.errors == [f"{tmp_path / 'b.py'}: internal error: the process linting this file exited unexpectedly "
                             "(status 3); the other files were linted (please report)"]


def _killed_once_on_b(source, display, settings, path=None):
    """The first worker to lint b.py is killed (as the kernel's out-of-memory killer would); later ones are not."""
    marker = Path(display).with_name("b.killed")
    if display.endswith("b.py") and not marker.exists():
        marker.write_text("")
        os.kill(os.getpid(), signal.SIGKILL)
    return _lint_source(source, display, settings, path)


def test_a_worker_killed_once_from_outside_costs_nothing(monkeypatch, tmp_path):
    report = _pooled(monkeypatch, tmp_path, _killed_once_on_b)
    assert (tmp_path / "b.killed").exists()  # it was killed, and linted by the worker that replaced it
    assert sorted(Path(f.path).name for f in report.findings) == ["a.py", "b.py", "c.py", "d.py"]
    assert report.errors == []


def _hog_or_square(item: int) -> int:
    if item == 3:  # grows until the watchdog stops it
        hoard = []
        while True:
            hoard.append(bytearray(20 * MB))
            time.sleep(0.02)
    if item == 5:  # spins until the watchdog stops it
        while True:
            pass
    return item * item


def _failed(item: int, reason: str) -> str:
    return f"{item}: {reason}"


def test_the_watchdog_stops_a_process_over_the_memory_or_time_limit():
    # The limit is on what the run adds to this process (the full suite has TensorFlow loaded by now).
    limits = Limits(memory_bytes=600 * MB, seconds_per_item=5)
    results = map_ordered(_hog_or_square, list(range(8)), 2, [MB] * 8, _failed, limits=limits)
    assert results == [0, 1, 4, f"3: linting this file needed more than {limits.memory_bytes // MB} MB of memory", 16,
                       "5: linting this file took more than 5 s of CPU time", 36, 49]


def test_a_serial_run_parses_what_the_guard_cannot_bound_in_a_worker_of_its_own():
    items = [1, 2, 3]
    results = map_ordered(_hog_or_square, items, 1, [1, 1, 1], _failed, isolate=lambda item: item == 3,
                          limits=Limits(memory_bytes=300 * MB))
    assert results[:2] == [1, 4] and results[2].startswith("3: linting this file needed more than")


def test_guard_bounds_depth_cheaply_and_asks_python_only_past_the_bound():
    # The longest line (21 bytes, at byte 6) plus one `elif`.
    assert guard.depth_bound(b"x = 1\nx = f(a, [b, {c: d}])\nif a:\n    pass\nelif b:\n    pass\n") == (22, 6)
    assert guard.screen(b"import tensorflow as tf\nx = (1)\n") == guard.SAFE
    # A bracket in a string only loosens the bound: Python, asked, accepts the file.
    unclosed = b"doc = '(' \n" + b"x = 1\n" * 1000
    assert guard.depth_bound(unclosed)[0] > guard.DEPTH_BOUND and guard.screen(unclosed) == guard.SAFE
    assert guard.screen(b"x = " + b"-" * 5000 + b"1\n").rejection == guard.Rejection(
        1, 1, "nested too deeply: Python refuses to compile it")
    chain = b"x = (" + b" or\n".join(b"a" for _ in range(guard.MAX_BOOLEAN_OPERANDS + 1)) + b")\n"
    assert guard.screen(chain).rejection == guard.Rejection(
        1, 6, f"{guard.MAX_BOOLEAN_OPERANDS + 1} `and`/`or` operands in one expression: more than tfdoctor's parser "
              f"handles ({guard.MAX_BOOLEAN_OPERANDS})")
    assert guard.screen(CRASHES_LIBCST.encode()) == guard.Screen(suspicious=True)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="the kernel's thread count is read on Linux")
def test_a_deep_stack_thread_is_gone_when_its_call_returns():
    from tfdoctor.lint.deep_stack import os_threads, run_deep

    def recurse(depth: int) -> int:
        return depth if depth == 0 else recurse(depth - 1)

    before = os_threads()  # TensorFlow's own threads, when an earlier test imported it
    for _ in range(5):  # a thread that touched megabytes of stack takes a moment to go: a fork must not see it
        run_deep(lambda: recurse(5000))
        assert os_threads() <= before


def _slow_square(item: int) -> int:
    time.sleep(0.5)  # busy long enough for the watchdog to look
    return item * item


def test_the_memory_limit_counts_what_the_run_adds_not_what_the_caller_holds():
    held = bytearray(600 * MB)  # a caller that already holds much (TensorFlow imported: about a gigabyte)
    held[::4096] = b"x" * len(held[::4096])  # touched, so it is resident
    results = map_ordered(_slow_square, [1, 2, 3, 4], 2, [MB] * 4, _failed, limits=Limits(memory_bytes=400 * MB))
    assert results == [1, 4, 9, 16] and len(held) == 600 * MB
