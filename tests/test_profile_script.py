"""Script mode (`tfdoctor profile -- python train.py`) and the Python API, on the small training scripts
in tests/scripts/: each has a known bottleneck and known lint findings."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, children_running, run_cli
from tfdoctor.profile.script.join import local_modules
from tfdoctor.profile.script.parent import split_command

SCRIPTS = ROOT / "tests" / "scripts"


def _profile(script: str, tmp_path, *args: str) -> dict:
    result = run_cli("profile", "--gpus", "2", "--steps", "10", "--warmup", "2", "--format", "json", "--logdir",
                     str(tmp_path), "--", "python", f"tests/scripts/{script}", *args)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def _error(script: str, *flags: str, args: tuple[str, ...] = ()) -> str:
    result = run_cli("profile", "--gpus", "2", *flags, "--", "python", f"tests/scripts/{script}", *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_the_command_after_the_double_dash_names_the_script_and_its_arguments():
    target = split_command(("python3", "-u", "tests/scripts/host_bound.py", "--lr", "0.1"))
    assert target.interpreter == sys.executable and target.path.name == "host_bound.py"
    assert target.args == ("--lr", "0.1") and target.module is None
    assert split_command(("tests/scripts/host_bound.py",)).args == ()


def test_lint_covers_the_modules_the_script_imports_from_its_folder(tmp_path):
    (tmp_path / "train.py").write_text("import helpers\nfrom data import pipeline\nimport os\n")
    (tmp_path / "helpers.py").write_text("import common\n")
    (tmp_path / "common.py").write_text("")
    (tmp_path / "data").mkdir()
    (tmp_path / "unused.py").write_text("")
    found = {p.name for p in local_modules(tmp_path / "train.py")}
    assert found == {"train.py", "helpers.py", "common.py", "data"}


def test_the_package_imports_without_tensorflow():
    code = "import sys, tfdoctor.profile, tfdoctor.profile.measure; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.tf
def test_slow_python_generator_is_input_bound_and_cites_tfd201(tmp_path):
    report = _profile("input_bound.py", tmp_path)
    assert report["mode"] == "script" and report["verdict"]["primary"] == "input-bound"
    assert "TFD201 at tests/scripts/input_bound.py:40" in report["verdict"]["statement"]
    first = report["suggestions"][0]
    assert first["rules"] == ["TFD201", "TFD103"]
    assert first["locations"][0] == "TFD201 at tests/scripts/input_bound.py:40"
    assert report["workload"]["step_source"] == "tf.function" and report["workload"]["global_batch"] == 32
    logs = [note.split(": ", 1)[1] for note in report["notes"] if note.startswith("the script's output: ")]
    assert len(logs) == 1 and Path(logs[0]).is_file()


@pytest.mark.tf
def test_a_finding_in_a_branch_the_run_never_took_is_not_cited(tmp_path):
    report = _profile("untaken_branch.py", tmp_path)
    assert report["verdict"]["primary"] == "input-bound"
    assert "TFD201 at tests/scripts/untaken_branch.py:22" in report["verdict"]["statement"]
    locations = [where for suggestion in report["suggestions"] for where in suggestion["locations"]]
    assert locations == ["TFD201 at tests/scripts/untaken_branch.py:22"]
    assert ("not cited: 1 lint finding is in code the run did not execute before its measured steps (TFD204 at "
            "tests/scripts/untaken_branch.py:24)") in report["notes"]


@pytest.mark.tf
def test_eager_distributed_step_is_host_bound_and_cites_tfd107(tmp_path):
    report = _profile("host_bound.py", tmp_path)
    assert report["verdict"]["primary"] == "host-bound"
    assert "TFD107 at tests/scripts/host_bound.py:26" in report["verdict"]["statement"]
    first = report["suggestions"][0]
    assert first["rules"] == ["TFD107"] and first["locations"] == ["TFD107 at tests/scripts/host_bound.py:26"]
    assert report["workload"]["step_source"] == "eager strategy.run"


@pytest.mark.tf
def test_large_model_in_a_graph_step_is_compute_bound(tmp_path):
    report = _profile("compute_bound.py", tmp_path)
    assert report["verdict"]["primary"] == "compute-bound", (report["shares"], report["notes"])
    assert report["devices"]["names"] == ["/device:CPU:0", "/device:CPU:1"]
    assert report["trace"]["logdir"] and report["trace"]["xprof"]["steps"] >= 1
    assert all(not s["locations"] for s in report["suggestions"])  # the script is clean


@pytest.mark.tf
@pytest.mark.parametrize("killed_at", ["replays", "trace"])
def test_a_script_killed_after_its_window_keeps_what_was_measured_before(tmp_path, killed_at):
    """The window's result goes out before the replays, and again with them before the trace (which
    TensorFlow's profiler sometimes crashes): a kill costs only what comes after it."""
    from tfdoctor.profile import protocol
    from tfdoctor.profile.script.parent import ScriptOptions, profile_script
    from tfdoctor.profile.script.recorder import UNREPLAYED

    killed = []

    def on_event(event):
        if (isinstance(event, protocol.ScriptMeasured) and not killed
                and event.replayed == (killed_at == "trace") and (event.replay_steps or killed_at == "replays")):
            killed.extend(children_running("tfdoctor.profile.script.launch"))
            for pid in killed:
                os.kill(pid, signal.SIGABRT)

    options = ScriptOptions(("python", "tests/scripts/compute_bound.py"), steps=6, warmup=2, logdir=tmp_path)
    report = profile_script(options, on_event)
    assert len(killed) == 1
    assert report.breakdown is not None and report.breakdown.step.median > 0
    assert report.breakdown.separated == (killed_at == "trace")
    assert (UNREPLAYED in report.notes) == (killed_at == "replays")
    assert "the trace is missing: the process was killed by SIGABRT before it was written" in report.notes
    assert report.trace == {"logdir": None, "xprof": None}


@pytest.mark.tf
def test_another_process_busy_only_while_the_step_is_replayed_is_said(tmp_path):
    """Host overhead and all-reduce come from the replays, after the window: load then is named as such."""
    from tfdoctor.profile import protocol
    from tfdoctor.profile.script.parent import ScriptOptions, profile_script

    burners: list[subprocess.Popen] = []

    def on_event(event):
        if isinstance(event, protocol.Progress) and event.phase == "replays" and not burners:
            burners.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        elif isinstance(event, protocol.ScriptMeasured) and event.replayed and burners:
            burners[0].kill()

    options = ScriptOptions(("python", "tests/scripts/compute_bound.py"), steps=6, warmup=2, logdir=tmp_path)
    try:
        report = profile_script(options, on_event)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert len(burners) == 1
    loaded = [note for note in report.notes if note.startswith("other processes kept ")]
    assert len(loaded) == 1 and "busy while the step was replayed (host overhead and all-reduce" in loaded[0]


@pytest.mark.tf
def test_model_fit_fed_by_a_slow_pydataset_is_input_bound(tmp_path):
    report = _profile("fit_slow_dataset.py", tmp_path)
    assert report["workload"]["step_source"] == "fit" and report["workload"]["global_batch"] == 32
    assert report["workload"]["warmup_steps"] == 2  # one epoch: the window opens after --warmup
    assert report["verdict"]["primary"] == "input-bound", report["shares"]
    assert report["suggestions"][0]["locations"][0] == "TFD201 at tests/scripts/fit_slow_dataset.py:24"


@pytest.mark.tf
def test_fit_input_read_inside_its_calls_is_measured_in_turns_on_a_copy_of_the_pipeline(tmp_path):
    """fit's calls fetch their own batch, 50 ms each from the map, against a step of a few ms: the step on a
    copy of the script's pipeline and on a captured batch, timed in turns, say input-bound, and the note
    says how it was measured."""
    report = _profile("fit_slow_pipeline.py", tmp_path)
    assert report["verdict"]["primary"] == "input-bound", report["shares"]
    assert report["shares"]["input"] > 0.6 and report["intervals"]["input"]["share"][0] > 0.5, report["intervals"]
    note = next(n for n in report["notes"] if n.startswith("fit's step calls fetch their own input, measured in "
                                                             "turns: "))
    assert " rounds of 5 steps on a copy of the script's pipeline (" in note, note
    assert float(note.split("pipeline (")[1].split(" ms")[0]) >= 45, note  # the copy ran the script's map


@pytest.mark.tf
def test_fit_of_several_epochs_is_measured_after_its_first_epoch(tmp_path):
    """The first epoch reads each batch slowly into a cache (input ~90% there), the later ones read the cache:
    the window measures the epochs that follow. The second epoch starts 1 s late, outside every step: the
    report says so apart from the breakdown."""
    report = _profile("fit_slow_first_epoch.py", tmp_path)
    assert report["workload"]["warmup_steps"] == report["workload"]["epoch_steps"] == 20
    assert report["shares"]["input"] < 0.5, report["shares"]
    assert any(note.startswith("the window opened in fit's second epoch: the first (20 steps) was the warm-up")
               for note in report["notes"])
    (end, start), = report["workload"]["between_epochs_s"]
    assert start >= 1.0 and end < 0.5, (end, start)
    assert "of the training time passed between fit's epochs (see the notes)." in report["verdict"]["statement"]
    between = next(note for note in report["notes"] if note.startswith("between fit's epochs: "))
    assert between.endswith("outside the steps measured above; fit's dataset ends each epoch, so every epoch starts "
                            "a new iterator over it: `dataset.repeat()` with `steps_per_epoch` keeps one")


@pytest.mark.tf
def test_a_script_that_stops_early_is_measured_on_the_steps_it_ran(tmp_path):
    report = _profile("input_bound.py", tmp_path, "8")  # the script's own argument: stop after 9 steps
    assert report["verdict"]["primary"] == "input-bound" and report["workload"]["steps"] == 6
    assert any("ended after 9 steps: 6 of 10 measured" in note for note in report["notes"])


@pytest.mark.untimed
@pytest.mark.tf
def test_too_few_steps_to_measure_is_one_line():
    line = _error("input_bound.py", "--warmup", "5", args=("3",))
    assert "only 4 training steps ran" in line and "--warmup" in line


@pytest.mark.tf
def test_garbage_on_the_event_channel_ends_the_profile_at_once_as_one_line():
    started = time.monotonic()
    line = _error("garbage_event.py")
    assert time.monotonic() - started < 120  # the script sleeps 600 s: its process group was killed
    assert line.startswith("error: profiling tests/scripts/garbage_event.py sent a malformed event (not JSON:")


def test_missing_script_is_one_line():
    assert _error("missing.py") == "error: script not found: tests/scripts/missing.py"


@pytest.mark.untimed
@pytest.mark.tf
def test_crash_shows_the_exit_code_and_where():
    line = _error("crashes.py")
    assert "exit code 1" in line and "FileNotFoundError" in line and "tests/scripts/crashes.py:7" in line


@pytest.mark.tf
def test_no_step_before_the_deadline_says_what_was_hooked_and_how_to_mark_steps():
    line = _error("no_step.py", "--max-seconds", "5")
    assert "no training step seen" in line and "tf.function steps that call strategy.run" in line
    assert "prof.step()" in line


@pytest.mark.untimed
@pytest.mark.tf
def test_out_of_memory_is_the_verdict(tmp_path):
    result = run_cli("profile", "--format", "json", "--logdir", str(tmp_path), "--", "python",
                     "tests/scripts/out_of_memory.py")
    assert result.returncode == 0, result.stderr
    verdict = json.loads(result.stdout)["verdict"]
    assert verdict["primary"] == "out-of-memory" and "shape[4096,4096,64]" in verdict["statement"]


@pytest.mark.tf
def test_api_session_and_keras_callback_report_in_process():
    result = subprocess.run([sys.executable, str(SCRIPTS / "api_loop.py")], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if line.startswith(("LOOP", "FIT")))
    assert lines["LOOP"].startswith("tf.function ")   # the hooks found the step, not only the marker
    assert lines["FIT"].startswith("fit ")
    assert "Verdict:" in result.stderr


@pytest.mark.tf
def test_a_script_that_hangs_is_called_idle_with_its_last_output_line():
    line = _error("hangs.py", "--max-seconds", "8")
    assert "no training step seen" in line and "idle for its last 4 s" in line
    assert "its last output: 'waiting for the batch queue 1'" in line
    assert "all of it: " in line and line.endswith("script-output.log")


@pytest.mark.tf
def test_a_whole_epoch_in_one_tf_function_is_measured_as_its_calls_and_said_so(tmp_path):
    report = _profile("epoch_function.py", tmp_path)
    # each training epoch: 8 batches x 2 replicas x 5 ms; the test epoch after it is not a step
    assert report["step_time_s"]["median"] > 0.060, report["step_time_s"]
    assert any(note.startswith("`train_epoch` runs strategy.run in a loop inside one tf.function call")
               for note in report["notes"]), report["notes"]
    assert not any("`test_epoch`" in note for note in report["notes"])
    # the test epoch between two training epochs (4 batches x 2 replicas x 5 ms) is not input
    assert any("ran in other step functions between the measured ones" in note for note in report["notes"])
    assert report["shares"]["input"] < 0.15, report["shares"]
    # the input read inside each call is in compute: no compute-bound verdict, input between calls a lower bound
    assert report["input_inside_calls"] is True
    assert report["verdict"]["primary"] == "not-separated", report["verdict"]
    assert report["verdict"]["statement"].startswith("Not separated: each ")
    assert "runs many steps in one tf.function and reads their input inside it" in report["verdict"]["statement"]
    assert "a lower bound" in report["verdict"]["statement"]


@pytest.mark.tf
def test_launches_that_disagree_widen_the_intervals_and_are_called_unstable(tmp_path):
    """A script whose Python feed waits 250 ms a batch in one launch and not at all in the next: one launch's interval
    cannot hold the other's share, so `--launches 2` reports the launches, widens input's interval to hold both
    and says that they disagree; each launch keeps its own output log."""
    result = run_cli("profile", "--gpus", "2", "--steps", "8", "--warmup", "2", "--launches", "2", "--format", "json",
                     "--logdir", str(tmp_path / "logs"), "--", "python", "tests/scripts/launch_dependent.py",
                     str(tmp_path / "launch-count"))
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    inputs = sorted(launch["shares"]["input"] for launch in report["launches"])
    assert inputs[0] < 0.3 and inputs[1] > 0.6, report["launches"]
    low, high = report["intervals"]["input"]["share"]
    assert low <= inputs[0] and high >= inputs[1]
    assert report["launches_apart"][0] == "input"
    assert any(note.startswith("2 launches of the script") for note in report["notes"])
    assert (tmp_path / "logs" / "launch-1" / "script-output.log").is_file()
    assert (tmp_path / "logs" / "launch-2" / "script-output.log").is_file()


def test_launches_need_a_script_on_this_host():
    line = _error("input_bound.py", "--launches", "2", "--workers", "2")
    assert line == "error: --launches repeats a script on this host: use it with `-- python train.py` and without --workers"
    line = _error("input_bound.py", "--launches", "2", "--what-if", "xla")
    assert line.startswith("error: --launches and --what-if")
