"""Multi-worker jobs for real: W=2 MultiWorkerMirroredStrategy workers on loopback, one per process, through
the same `--from-tf-config` wrapper that runs on each host of a cluster."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tfdoctor.profile.cluster import local
from tfdoctor.profile.cluster.parts import read_parts
from tfdoctor.profile.cluster.tf_config import free_ports, local_cluster

MLP = ("--workload", "tests.profile.workloads:build", "--steps", "8", "--warmup", "2")
DELAY_S = 0.15  # several times either step (the MLP, tests/scripts/multi_worker_train.py): far from the thresholds

pytestmark = pytest.mark.tf


def _report(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def _left_running(marker: str) -> list[str]:
    """Command lines of processes that mention `marker` (the test's own folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in command and entry.name != str(os.getpid()):
            found.append(command)
    return found


@pytest.mark.untimed
def test_reference_job_has_a_row_per_worker_and_report_merges_its_parts(tmp_path: Path):
    result = run_cli("profile", "--workers", "2", "--steps", "3", "--warmup", "1", "--img-size", "64", "--width",
                     "0.25", "--logdir", str(tmp_path / "logs"), "--output-dir", str(tmp_path / "parts"),
                     "--format", "json")
    document = _report(result)
    assert document["mode"] == "multi-worker"
    assert [row["task"] for row in document["workers"]] == ["worker-0", "worker-1"]
    for row in document["workers"]:
        assert sum(row["shares"].values()) == pytest.approx(1.0)
        assert row["step_time_s"]["median"] > 0
    assert any("MultiWorkerMirroredStrategy, RING collectives" in note for note in document["notes"])
    assert document["devices"]["requested"] == 2  # one CPU replica per worker
    merged = _report(run_cli("report", str(tmp_path / "parts"), "--format", "json"))
    assert merged["workers"] == document["workers"] and merged["verdict"] == document["verdict"]


def test_slow_input_on_one_worker_is_the_straggler_and_the_others_wait_in_sync(tmp_path: Path):
    result = run_cli("profile", "--workers", "2", *MLP, "--workload-param", "inject=input_delay",
                     "--workload-param", f"input_delay={DELAY_S}", "--workload-param", "task=1",
                     "--logdir", str(tmp_path), "--format", "json")
    document = _report(result)
    rows = {row["task"]: row for row in document["workers"]}
    assert document["straggler"]["task"] == "worker-1" and document["straggler"]["part"] == "input"
    assert rows["worker-1"]["breakdown_s"]["input"] == pytest.approx(DELAY_S, rel=0.3)
    assert rows["worker-0"]["waiting_for_others_s"] == pytest.approx(DELAY_S, rel=0.3)
    assert rows["worker-0"]["shares"]["sync"] > 0.5 and rows["worker-0"]["shares"]["input"] < 0.1
    assert document["verdict"]["primary"] == "input-bound"  # the job, paced by worker-1


def test_a_crashing_worker_ends_the_job_with_its_error_and_leaves_nothing_running(tmp_path: Path):
    result = run_cli("profile", "--workers", "2", *MLP, "--workload-param", "inject=crash", "--workload-param",
                     "task=1", "--max-seconds", "240", "--logdir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: worker-1 failed: the measurement failed: RuntimeError: injected crash on this worker")
    assert _left_running(str(tmp_path)) == []


def test_parts_written_by_separate_tf_config_runs_are_merged_by_report(tmp_path: Path):
    """The cluster recipe: each host runs the wrapper with the TF_CONFIG its scheduler set."""
    configs = local_cluster(2, free_ports(2))
    command = [sys.executable, "-m", "tfdoctor", "profile", "--from-tf-config", "--output-dir", str(tmp_path / "parts"),
               *MLP, "--logdir", str(tmp_path / "logs")]
    hosts = [subprocess.Popen(command, cwd=ROOT, env={**os.environ, "TF_CONFIG": config.to_json()},
                              stderr=subprocess.PIPE, text=True) for config in configs]
    errors = [host.communicate(timeout=300)[1] for host in hosts]
    assert [host.returncode for host in hosts] == [0, 0], errors
    assert "worker-1: part written to" in errors[1]
    assert [part.task for part in read_parts(tmp_path / "parts")] == ["worker-0", "worker-1"]
    text = run_cli("report", str(tmp_path / "parts"))
    assert text.returncode == 0 and "worker-0" in text.stdout and "Verdict:" in text.stdout


def test_a_port_taken_before_the_workers_bind_it_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    choices = iter([[taken.getsockname()[1], free_ports(1)[0]]])
    monkeypatch.setattr(local, "free_ports", lambda count: next(choices, None) or free_ports(count))
    monkeypatch.chdir(ROOT)
    try:
        local.run_local_job(2, [*MLP, "--steps", "2", "--logdir", str(tmp_path)], tmp_path / "parts", 240,
                            lambda name, event: None)
    finally:
        taken.close()
    assert [part.task for part in read_parts(tmp_path / "parts")] == ["worker-0", "worker-1"]


@pytest.mark.untimed
def test_tf_config_errors_and_flag_clashes_are_one_line():
    missing = run_cli("profile", "--from-tf-config", "--output-dir", "x")
    assert missing.returncode == 2 and missing.stderr.strip() == (
        "error: TF_CONFIG is not set: --from-tf-config runs on each host of a job that sets it")
    both = run_cli("profile", "--workers", "2", "--pipeline", "both")
    assert both.returncode == 2 and "one --pipeline variant" in both.stderr


def test_a_multi_worker_script_runs_on_every_worker_with_its_lint_joined(tmp_path: Path):
    scripts = ROOT / "tests" / "scripts"
    result = run_cli("profile", "--workers", "2", "--steps", "8", "--warmup", "2", "--logdir", str(tmp_path),
                     "--format", "json", "--", "python", "multi_worker_train.py", "300", "1", cwd=scripts)
    document = _report(result)
    rows = {row["task"]: row for row in document["workers"]}
    assert document["straggler"] is not None, (document["workers"], document["notes"])
    assert document["straggler"]["task"] == "worker-1" and document["straggler"]["part"] == "input"
    assert rows["worker-1"]["breakdown_s"]["input"] == pytest.approx(DELAY_S, rel=0.3)
    assert rows["worker-0"]["waiting_for_others_s"] == pytest.approx(DELAY_S, rel=0.3)
    cited = {location for suggestion in document["suggestions"] for location in suggestion["locations"]}
    assert "TFD201 at multi_worker_train.py:47" in cited


def test_a_worker_waiting_in_next_for_a_slower_worker_counts_that_wait_as_sync(tmp_path: Path):
    """In a multi-worker job, `next()` on a distributed iterator agrees with the other workers on whether each
    still has data: the healthy worker waits there for the one whose generator is slow."""
    scripts = ROOT / "tests" / "scripts"
    result = run_cli("profile", "--workers", "2", "--steps", "8", "--warmup", "2", "--logdir", str(tmp_path),
                     "--format", "json", "--", "python", "multi_worker_dataset_fn.py", "300", "1", cwd=scripts)
    document = _report(result)
    rows = {row["task"]: row for row in document["workers"]}
    assert document["straggler"] is not None, (document["workers"], document["notes"])
    assert document["straggler"]["task"] == "worker-1" and document["straggler"]["part"] == "input"
    assert rows["worker-0"]["shares"]["input"] < 0.2 and rows["worker-0"]["shares"]["sync"] > 0.5
    assert rows["worker-1"]["shares"]["input"] > 0.4


def test_the_reference_path_splits_a_distributed_next_into_own_input_and_waiting(tmp_path: Path):
    result = run_cli("profile", "--workers", "2", *MLP, "--workload-param", "inject=input_delay",
                     "--workload-param", f"input_delay={DELAY_S}", "--workload-param", "task=1",
                     "--workload-param", "input=distributed", "--logdir", str(tmp_path), "--format", "json")
    document = _report(result)
    rows = {row["task"]: row for row in document["workers"]}
    assert document["straggler"] is not None, (document["workers"], document["notes"])
    assert document["straggler"]["task"] == "worker-1" and document["straggler"]["part"] == "input"
    assert rows["worker-0"]["shares"]["input"] < 0.2 and rows["worker-0"]["shares"]["sync"] > 0.5


def test_a_keras_2_fit_under_multi_worker_is_replayed_with_sync_separated(tmp_path: Path):
    """Keras 2 through tf_keras (TF_USE_LEGACY_KERAS=1): its fit is timed by its own kind of callback and its
    train_step replayed, as Keras 3's are, so each worker's step is split and its wait for the other known."""
    pytest.importorskip("tf_keras")
    scripts = ROOT / "tests" / "scripts"
    result = run_cli("profile", "--workers", "2", "--steps", "8", "--warmup", "2", "--logdir", str(tmp_path),
                     "--format", "json", "--", "python", "legacy_fit.py", cwd=scripts)
    document = _report(result)
    assert document["separated"] is True
    assert document["notes"][0].startswith("2 workers x 1 replica each")
    assert document["workload"]["global_batch"] == 128 and document["throughput"]["examples_per_s"] > 0
    assert not any("not replayed" in note or "not separated" in note for note in document["notes"])
    assert all(row["waiting_for_others_s"] is not None for row in document["workers"])


@pytest.mark.untimed
def test_keras_3_fit_under_multi_worker_fails_with_what_it_means(tmp_path: Path):
    scripts = ROOT / "tests" / "scripts"
    result = run_cli("profile", "--workers", "2", "--steps", "4", "--warmup", "1", "--logdir", str(tmp_path), "--",
                     "python", "keras3_fit_multi_worker.py", cwd=scripts)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "keras3_fit_multi_worker.py failed with exit code 1: ValueError: Attempt to convert a value (PerReplica" in line
    assert "(Keras 3's Model.fit fails under MultiWorkerMirroredStrategy with this TensorFlow (TFD518)" in line
    assert "numpy=" not in line and line.endswith("script-output.log")
