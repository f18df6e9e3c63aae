"""Multi-worker profiling without TensorFlow: TF_CONFIG, the part files, and the merge into one job."""

from __future__ import annotations

import json
import os
import random
import statistics
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from tfdoctor.profile.cluster.job import find_straggler, worker_breakdown
from tfdoctor.profile.cluster.job_report import job_report
from tfdoctor.profile.cluster.parts import PART_VERSION, PartError, WorkerPart, read_parts, write_part
from tfdoctor.profile.protocol import PhaseTimes
from tfdoctor.profile.cluster.tf_config import ClusterConfigError, free_ports, from_environment, local_cluster

MS = 0.001
ROUNDS = 20


def _series(step_call: float, waited: float, on_device: float, looped: float, gradients: float, reduced: float,
            seed: int) -> PhaseTimes:
    """Rounds of phase timings with 1% noise on every call (ms in, seconds out)."""
    noise = random.Random(seed)

    def calls(ms: float) -> list[float]:
        return [ms * MS * noise.uniform(0.99, 1.01) for _ in range(ROUNDS)]

    waits = calls(waited)
    return PhaseTimes(full=[w + c for w, c in zip(waits, calls(step_call))], input_wait=waits,
                       on_device=calls(on_device), looped=calls(looped)[:2], gradients=calls(gradients),
                       reduced=calls(reduced))


def _part(task: str, phases: PhaseTimes | None, error: str | None = None) -> WorkerPart:
    return WorkerPart(version=PART_VERSION, task=task, job="job1", job_tasks=2, address=f"127.0.0.1:{1000 + int(task[-1])}", host="h",
                      replicas=2, device_kind="cpu", device_names=[f"/job:worker/replica:0/task:{task[-1]}/device:CPU:0"],
                      collective="RING", workload={"name": "mlp", "global_batch": 64, "per_replica_batch": 32},
                      phases=phases, error=error)


# Worker 1 waits 80 ms for each batch; worker 0 has its batch at once and waits for worker 1 in the all-reduce.
SLOW_INPUT = _part("worker-1", _series(step_call=50, waited=80, on_device=50, looped=45, gradients=20, reduced=30, seed=1))
WAITS_FOR_IT = _part("worker-0", _series(step_call=130, waited=1, on_device=50, looped=45, gradients=20, reduced=30,
                                         seed=2))


def test_tf_config_of_a_worker():
    config = from_environment({"TF_CONFIG": json.dumps(
        {"cluster": {"chief": ["a:1"], "worker": ["b:2", "c:3"], "ps": ["d:4"]}, "task": {"type": "worker", "index": 1}})})
    assert config.task.name == "worker-1"
    assert config.address == "c:3"
    assert [task.name for task in config.training_tasks] == ["chief-0", "worker-0", "worker-1"]


@pytest.mark.parametrize("environ, message", [
    ({}, "TF_CONFIG is not set"),
    ({"TF_CONFIG": "{cluster"}, "TF_CONFIG is not JSON"),
    ({"TF_CONFIG": '{"task": {}}'}, 'no "cluster" object'),
    ({"TF_CONFIG": '{"cluster": {"worker": ["nohostport"]}, "task": {"type": "worker", "index": 0}}'},
     '"host:port" addresses'),
    ({"TF_CONFIG": '{"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": "ps", "index": 0}}'},
     "runs no training step"),
    ({"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}'}, "not in its cluster"),
])
def test_bad_tf_config_is_one_line(environ, message):
    with pytest.raises(ClusterConfigError, match=message) as caught:
        from_environment(environ)
    assert "\n" not in str(caught.value)


def test_local_cluster_is_on_loopback_ports_nothing_uses():
    ports = free_ports(3)
    assert len(set(ports)) == 3
    configs = local_cluster(3, ports)
    assert [config.task.index for config in configs] == [0, 1, 2]
    assert all(address.startswith("127.0.0.1:") for address in configs[0].cluster["worker"])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[0]))  # free when chosen
    assert json.loads(configs[1].to_json())["task"] == {"type": "worker", "index": 1}


def test_parts_round_trip_and_are_written_whole(tmp_path: Path):
    write_part(tmp_path, SLOW_INPUT)
    write_part(tmp_path, WAITS_FOR_IT)
    assert sorted(os.listdir(tmp_path)) == ["worker-0.part.json", "worker-1.part.json"]  # no temporary left
    assert read_parts(tmp_path) == [WAITS_FOR_IT, SLOW_INPUT]


def test_unreadable_or_mixed_parts_are_one_line_errors(tmp_path: Path):
    with pytest.raises(PartError, match="no worker parts"):
        read_parts(tmp_path)
    write_part(tmp_path, SLOW_INPUT)
    write_part(tmp_path, replace(WAITS_FOR_IT, job="another"))
    with pytest.raises(PartError, match="parts of 2 different jobs"):
        read_parts(tmp_path)
    (tmp_path / "worker-0.part.json").write_text('{"version": 1, "task": "worker-0"}')
    with pytest.raises(PartError, match=r"worker-0.part.json: not a tfdoctor worker part"):
        read_parts(tmp_path)


def test_a_workers_parts_add_up_to_its_step():
    for part in (SLOW_INPUT, WAITS_FOR_IT):
        result = worker_breakdown(part).breakdown
        assert sum(result.seconds().values()) == pytest.approx(result.step.median)


def test_the_worker_with_slow_input_is_the_straggler_and_the_other_waits_in_sync():
    fast, slow = worker_breakdown(WAITS_FOR_IT), worker_breakdown(SLOW_INPUT)
    assert slow.breakdown.input == pytest.approx(0.080, rel=0.03)
    assert fast.waiting == pytest.approx(0.080, rel=0.05)
    assert fast.breakdown.sync == pytest.approx(0.090, rel=0.05)  # 10 ms all-reduce + the wait
    straggler = find_straggler([fast, slow])
    assert straggler is not None and (straggler.task, straggler.part) == ("worker-1", "input")
    assert straggler.excess_s == pytest.approx(0.079, rel=0.05)


def test_balanced_workers_have_no_straggler():
    twin = _part("worker-1", _series(step_call=130, waited=1, on_device=50, looped=45, gradients=20, reduced=30, seed=3))
    assert find_straggler([worker_breakdown(WAITS_FOR_IT), worker_breakdown(twin)]) is None


def test_job_report_rows_straggler_and_verdict_of_the_pacing_worker():
    document = job_report([WAITS_FOR_IT, SLOW_INPUT]).to_json()
    assert [row["task"] for row in document["workers"]] == ["worker-0", "worker-1"]
    assert document["straggler"]["task"] == "worker-1"
    assert document["verdict"]["primary"] == "input-bound"
    assert document["mode"] == "multi-worker"


def test_a_workers_wait_over_replays_that_spread_widely_gets_an_interval_that_holds_their_spread():
    """Two workers sharing two cores: the step replayed in step on both took 40-60 ms (phases of the machine's
    speed), the calls 60 ms. The wait for the other worker (sync) is the calls' excess over the replays, so its
    interval holds the excess over either end, and the job's report says why it is wide."""
    phases = _series(step_call=60, waited=1, on_device=50, looped=45, gradients=20, reduced=20, seed=4)
    spread = [(40 + 20 * (i % 5) / 4) * MS for i in range(ROUNDS)]  # 40, 45, 50, 55, 60 ms in turn
    part = _part("worker-0", replace(phases, on_device=spread))
    steady = worker_breakdown(_part("worker-0", phases)).breakdown
    result = worker_breakdown(part).breakdown
    assert steady.unsteady is None and result.unsteady == ("sync", pytest.approx(0.040), pytest.approx(0.060))
    low, high = result.share_interval("sync")
    assert low <= (result.sync - 0.010) / result.step.median + 0.01 and high >= (result.sync + 0.010) / result.step.median - 0.01
    document = job_report([part, _part("worker-1", phases)]).to_json()
    assert document["replayed_step_spread_s"]["part"] == "sync"


def test_a_failed_worker_fails_the_merge_with_its_error():
    with pytest.raises(PartError, match="worker-1 failed: ValueError: boom"):
        job_report([WAITS_FOR_IT, _part("worker-1", None, error="ValueError: boom")])


def test_a_job_whose_replicas_are_unknown_says_so_instead_of_zero_per_worker():
    unknown = [replace(part, replicas=1) for part in (WAITS_FOR_IT, SLOW_INPUT)]
    notes = job_report(unknown).notes
    assert notes[0].startswith("2 workers (replicas per worker not known: the step was not replayed)")
    assert not any("x 0 replica" in note for note in notes)
    assert job_report([WAITS_FOR_IT, SLOW_INPUT]).notes[0].startswith("2 workers x 1 replica each")


def test_one_replica_is_not_written_as_replicas():
    from rich.console import Console

    from tfdoctor.profile.report import render

    report = replace(job_report([WAITS_FOR_IT, SLOW_INPUT]), requested=1, workers=None)
    console = Console(record=True, width=120)
    render(report, console)
    assert "on 1 replica (cpu)" in console.export_text()


def test_a_job_whose_steps_were_not_replayed_puts_no_share_on_the_parts_it_did_not_separate():
    """Neither worker's step was replayed (a Keras fit whose replay failed, say): their step calls are known
    whole, so the verdict, the rows and the JSON name input alone and say the rest is not separated."""
    from rich.console import Console

    from tfdoctor.profile.report import render

    def unreplayed(part: WorkerPart) -> WorkerPart:
        assert part.phases is not None
        calls = [full - wait for full, wait in zip(part.phases.full, part.phases.input_wait)]
        phases = replace(part.phases, on_device=calls, looped=[statistics.median(calls)], gradients=[0.0],
                         reduced=[0.0])
        return replace(part, phases=phases, separated=False)

    report = job_report([unreplayed(WAITS_FOR_IT), unreplayed(replace(WAITS_FOR_IT, task="worker-1"))])
    document = report.to_json()
    assert document["verdict"]["primary"] == "not-separated"
    assert document["verdict"]["statement"].startswith("Not separated: input is 1% of each 131 ms step")
    assert "compute" not in document["verdict"]["statement"].split(";")[0]
    assert document["shares"]["compute"] is None and document["shares"]["sync"] is None
    assert document["separated"] is False and document["straggler"] is None
    assert all(row["shares"]["host"] is None and row["waiting_for_others_s"] is None for row in document["workers"])
    assert [s["title"] for s in document["suggestions"]] == []
    console = Console(record=True, width=140)
    render(report, console)
    text = console.export_text()
    assert "Straggler not known" in text and "No straggler" not in text
    assert "step call (host, sync, compute not separated)" in text


def test_an_unreplayed_job_says_its_batch_and_replicas_are_not_known_and_where_its_traces_are(tmp_path):
    """Without a replay the job's global batch and replicas are unknown: the report shows no throughput (not
    0.0 examples/s), no batch (not 0), "replicas not known" (not "1 replicas"), and the folder that holds the
    workers' traces."""
    from rich.console import Console

    from tfdoctor.profile.report import render

    def unreplayed(part: WorkerPart) -> WorkerPart:
        return replace(part, replicas=0, separated=False, trace_logdir=str(tmp_path / part.task),
                       workload={"name": "train.py", "global_batch": None, "per_replica_batch": None})

    report = job_report([unreplayed(WAITS_FOR_IT), unreplayed(replace(WAITS_FOR_IT, task="worker-1"))])
    document = report.to_json()
    assert document["throughput"]["examples_per_s"] is None
    assert document["workload"]["global_batch"] is None
    assert document["trace"]["logdir"] == str(tmp_path)
    console = Console(record=True, width=140)
    render(report, console)
    text = console.export_text()
    assert "on 2 workers, replicas not known (cpu)" in text
    assert "examples/s" not in text and "0 replica" not in text
    assert f"xprof --logdir {tmp_path}" in text
