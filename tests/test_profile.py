"""The profiler: its arithmetic and verdicts (no TensorFlow), and real runs with injected ground truth."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import run_cli
from tfdoctor.profile.breakdown import breakdown
from tfdoctor.profile.report import Report
from tfdoctor.profile.suggest import Cause, suggest
from tfdoctor.profile.verdict import judge

MS = 0.001


def _breakdown(a: float, b: float, h: float, g: float, r: float):
    return breakdown([a * MS] * 5, [b * MS] * 5, [h * MS], [g * MS] * 5, [r * MS] * 5)


def test_parts_add_up_to_the_median_step():
    result = _breakdown(a=100, b=70, h=60, g=30, r=40)
    assert result.seconds() == pytest.approx({"input": 0.030, "host": 0.010, "sync": 0.010, "compute": 0.050})
    assert sum(result.seconds().values()) == pytest.approx(result.step.median)
    assert sum(result.shares().values()) == pytest.approx(1.0)


def test_noise_never_makes_a_part_negative():
    result = _breakdown(a=100, b=104, h=110, g=50, r=45)
    assert all(value >= 0 for value in result.seconds().values())
    assert sum(result.seconds().values()) == pytest.approx(0.100)


def test_paired_rounds_take_each_rounds_difference():
    full = [0.100, 0.140, 0.101]        # the machine slowed down in the second round
    on_device = [0.095, 0.135, 0.130]   # and B alone hit a hiccup in the third
    assert breakdown(full, on_device, [0.0], [0.0] * 3, [0.0] * 3).input == 0.0  # medians: 101 - 130 ms
    assert breakdown(full, on_device, [0.0], [0.0] * 3, [0.0] * 3, paired=True).input == pytest.approx(0.005)


def test_on_shared_cores_the_pipeline_slowing_the_replicas_is_compute_not_input():
    # A waits 2 ms for its batch, and its step call runs 8 ms slower than the same step on batches taken
    # earlier (S), while the pipeline's threads share the cores: 2 ms input, 8 ms contention inside compute.
    full, waits, stored, on_device = [0.110] * 3, [0.002] * 3, [0.100] * 3, [0.100] * 3
    result = breakdown(full, on_device, [0.090], [0.0] * 3, [0.0] * 3, paired=True, waits=waits, stored=stored)
    assert result.input == pytest.approx(0.002) and result.contention == pytest.approx(0.008)
    assert result.compute == pytest.approx(0.098) and sum(result.seconds().values()) == pytest.approx(0.110)
    assert breakdown(full, on_device, [0.090], [0.0] * 3, [0.0] * 3, paired=True).input == pytest.approx(0.010)


@pytest.mark.parametrize(("timings", "primary", "level"), [
    ((100, 70, 70, 50, 50), "input-bound", "high"),       # input 30%
    ((100, 90, 90, 50, 50), "input-bound", "moderate"),   # input 10%
    ((100, 100, 100, 40, 60), "sync-bound", "high"),      # all-reduce 20%
    ((100, 100, 100, 40, 45), "sync-bound", "moderate"),  # all-reduce 5%
    ((100, 100, 80, 40, 40), "host-bound", "high"),       # host 20%
    ((100, 99, 95, 40, 41), "compute-bound", "high"),
])
def test_verdict_thresholds(timings, primary, level):
    verdict = judge(_breakdown(*timings))
    assert (verdict.primary, verdict.level) == (primary, level)
    assert "%" in verdict.statement and "ms" in verdict.statement


def test_suggestions_are_ranked_and_cite_the_rules_found():
    result = _breakdown(a=100, b=40, h=30, g=10, r=20)  # input 60 ms, host 10, sync 10, compute 20
    causes = [Cause("TFD201", "train.py", 41), Cause("TFD107", "train.py", 80), Cause("TFD999", "x.py", 1)]
    suggestions = suggest(result, causes, replicas=2)
    assert [s.estimated_saving_s for s in suggestions] == sorted((s.estimated_saving_s for s in suggestions),
                                                                 reverse=True)
    first = suggestions[0]
    assert first.rules == ("TFD201",) and first.locations == ("TFD201 at train.py:41",)
    assert first.estimated_saving_s == pytest.approx(0.060)
    host = next(s for s in suggestions if "Python" in s.title)
    assert host.rules == ("TFD107",)


def test_report_json_has_the_documented_shape():
    result = _breakdown(a=100, b=70, h=60, g=30, r=40)
    report = Report(mode="reference", requested=2, device_kind="cpu", device_names=["/cpu:0", "/cpu:1"],
                    workload={"name": "x"}, breakdown=result, verdict=judge(result),
                    suggestions=suggest(result, [], 2), examples_per_s=640.0, one_replica_examples_per_s=400.0)
    document = report.to_json()
    assert {"version", "mode", "devices", "workload", "step_time_s", "throughput", "breakdown_s", "shares",
            "verdict", "suggestions", "trace"} <= set(document)
    assert set(document["step_time_s"]) == {"median", "p10", "p90"}
    assert set(document["breakdown_s"]) == set(document["shares"]) == {"input", "sync", "host", "compute"}
    assert document["verdict"]["primary"] in ("input-bound", "sync-bound", "host-bound", "compute-bound",
                                              "out-of-memory")
    assert {"title", "evidence", "estimated_saving_s", "rules", "locations"} <= set(document["suggestions"][0])
    assert document["throughput"]["scaling_efficiency"] == pytest.approx(0.8)
    json.dumps(document)


@pytest.mark.parametrize("args", [("--gpus", "0"), ("--img-size", "100"), ("--pipeline", "fast"), ("--steps", "x")])
def test_bad_flags_are_one_line_errors(args):
    result = run_cli("profile", *args)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


# -- real runs with injected ground truth --------------------------------------------------------------------

def _profile(inject: str, steps: int = 20, **params):
    from tfdoctor.profile.measure import Options, profile

    options = Options(gpus=2, steps=steps, warmup=3, workload="tests.profile.workloads:build", one_replica=False,
                      params={"inject": inject, **params}, timeout_s=300)
    return profile(options, lambda event: None)


def _truth(report, part: str) -> float:
    note = next(n for n in report.notes if n.startswith(f"ground-truth {part} "))
    return float(re.search(r"[-0-9.e]+$", note).group(0))


@pytest.mark.tf
def test_injected_input_delay_is_input_bound_and_measured():
    report = _profile("input_delay", input_delay=0.05)
    assert report.verdict.primary == "input-bound"
    assert report.breakdown.input == pytest.approx(_truth(report, "input"), rel=0.15)


@pytest.mark.tf
def test_injected_all_reduce_payload_is_measured_as_sync():
    # A 2-core machine's speed wanders by about 10% from second to second; 120 steps average that out.
    baseline = _profile("none", steps=120)
    report = _profile("payload", steps=120, payload_mb=16)
    assert report.verdict.primary == "sync-bound"
    added = report.breakdown.sync - baseline.breakdown.sync
    assert added == pytest.approx(_truth(report, "sync"), rel=0.15)


@pytest.mark.tf
def test_eager_distributed_step_is_host_bound_and_measured():
    report = _profile("eager")
    assert report.verdict.primary == "host-bound"
    # the truth was timed before the profile: scale it by how much faster or slower the machine is now
    speed = report.breakdown.step.median / _truth(report, "host-step")
    assert report.breakdown.host == pytest.approx(_truth(report, "host") * speed, rel=0.15)


@pytest.mark.tf
def test_out_of_memory_reports_the_batch_and_what_fits():
    from tfdoctor.profile.measure import Options, profile

    options = Options(gpus=2, steps=3, warmup=1, batch_per_replica=32, workload="tests.profile.workloads:build",
                      one_replica=False, params={"inject": "oom", "fits": 8}, timeout_s=300)
    report = profile(options, lambda event: None)
    assert report.verdict.primary == "out-of-memory"
    assert "per-replica batch of 32" in report.verdict.statement and "batch of 8 fits" in report.verdict.statement
    assert report.workload["fits_per_replica_batch"] == 8


@pytest.mark.slow
@pytest.mark.tf
def test_reference_naive_pipeline_is_input_bound_and_the_tuned_one_is_not(tmp_path):
    result = run_cli("profile", "--gpus", "2", "--pipeline", "both", "--steps", "10", "--format", "json",
                     "--logdir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    naive = json.loads(result.stdout)
    tuned = naive["comparison"]["tuned"]
    assert (naive["verdict"]["primary"], naive["verdict"]["level"]) == ("input-bound", "high")
    assert {"TFD201", "TFD206", "TFD103"} <= set(naive["suggestions"][0]["rules"])
    assert any(l.startswith("TFD201 at") and "pipelines.py:" in l for l in naive["suggestions"][0]["locations"])
    # 10 rounds keep the test short; the input share of a tuned run is then known to about +-2%
    assert tuned["verdict"]["primary"] != "input-bound" and tuned["shares"]["input"] < naive["shares"]["input"] / 3
    assert naive["comparison"]["speedup_tuned_over_naive"] > 1.2
    assert (tmp_path / "naive").is_dir() and (tmp_path / "tuned").is_dir()
