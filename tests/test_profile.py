"""The profiler: its arithmetic and verdicts (no TensorFlow), and real runs with injected ground truth."""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
from dataclasses import replace

import pytest

from tests.conftest import ROOT, children_running, run_cli
from tfdoctor.profile.breakdown import Breakdown, breakdown
from tfdoctor.profile.report import Report
from tfdoctor.profile.suggest import Cause, Seen, suggest
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


@pytest.mark.parametrize(("timings", "primary", "secondary"), [
    ((100, 70, 70, 50, 50), "input-bound", []),                          # input 30%
    ((100, 90, 90, 50, 50), "compute-bound", [("input", "moderate")]),   # input 10%: a secondary finding
    ((100, 100, 100, 40, 60), "sync-bound", []),                         # all-reduce 20%
    ((100, 100, 100, 40, 45), "compute-bound", [("sync", "moderate")]),  # all-reduce 5%
    ((100, 100, 80, 40, 40), "host-bound", []),                          # host 20%
    ((100, 70, 70, 30, 50), "input-bound", [("sync", "high")]),          # input 30% and all-reduce 20%
    ((100, 99, 95, 40, 41), "compute-bound", []),                        # host 4%, all-reduce 1%: below the lines
])
def test_the_primary_verdict_is_a_part_past_its_high_cut_off(timings, primary, secondary):
    verdict = judge(_breakdown(*timings))
    assert verdict.primary == primary and verdict.level == "high"
    assert [(f.part, f.level) for f in verdict.secondary] == secondary
    assert "%" in verdict.statement and "ms" in verdict.statement
    assert ("Secondary:" in verdict.statement) == bool(secondary)


def test_a_little_all_reduce_in_a_compute_bound_step_is_a_secondary_finding():
    # The case: 85-93% compute and 3-5% all-reduce once read "Moderately sync-bound".
    verdict = judge(_breakdown(a=100, b=99, h=96, g=40, r=44))
    assert verdict.primary == "compute-bound"
    assert verdict.statement.startswith("Compute-bound: ")
    assert "Secondary: moderately sync-bound (all-reduce 4%" in verdict.statement


@pytest.mark.parametrize(("timings", "primary"), [
    ((100, 95, 95, 50, 50), "not-separated"),  # input between the calls 5%: compute would hold the rest
    ((100, 100, 100, 40, 60), "sync-bound"),   # the all-reduce is measured apart whatever the input
    ((100, 70, 70, 50, 50), "input-bound"),    # input between the calls alone passes the cut-off
])
def test_steps_that_read_their_input_inside_one_call_are_never_called_compute_bound(timings, primary):
    verdict = judge(replace(_breakdown(*timings), input_inside=True))
    assert verdict.primary == primary
    if primary == "not-separated":
        assert verdict.statement.startswith("Not separated: each 100 ms call runs many steps in one tf.function")
        assert "input between the calls is 5% (interval 5%-5%), a lower bound" in verdict.statement


def test_input_inside_the_calls_with_a_part_whose_interval_reaches_its_cut_off_says_another_run_may_differ():
    # The real case: a whole epoch in one tf.function gave host overhead 33%, 14% and 17% in three runs, called
    # host-bound, not separated (saying nothing of host) and host-bound. Here host is 12%, its rounds 2 or 22 ms.
    on_device = [90 * MS, 110 * MS] * 10
    full = [b + 3 * MS for b in on_device]
    result = replace(breakdown(full, on_device, [88 * MS], [0.05] * 20, [0.05] * 20, paired=True), input_inside=True)
    verdict = judge(result)
    assert verdict.primary == "not-separated" and verdict.borderline
    assert [(f.part, f.level) for f in verdict.secondary] == [("host", "moderate")]
    assert verdict.statement.endswith("Borderline: the host overhead interval 2%-19% reaches the 15% cut-off, so "
                                      "another run may call it host-bound.")


def _rounds(differences_ms: list[float], step_ms: float = 100.0):
    """A, B, G and R of paired rounds whose A - B are `differences_ms` (no host, no all-reduce)."""
    full = [step_ms * MS] * len(differences_ms)
    on_device = [(step_ms - d) * MS for d in differences_ms]
    looped = [(step_ms - statistics.median(differences_ms)) * MS]  # B's median: no host overhead
    return breakdown(full, on_device, looped, [0.05] * len(full), [0.05] * len(full), paired=True)


def test_every_part_carries_an_interval_from_its_rounds():
    result = _rounds([8, 9, 10, 11, 12] * 4)
    low, high = result.share_interval("input")
    assert low < result.shares()["input"] < high and 0.08 <= low and high <= 0.12
    assert set(result.intervals) == {"input", "sync", "host", "compute"}


def test_a_part_that_drifts_during_the_window_is_called_unstable_and_its_interval_holds_both_halves():
    from rich.console import Console
    from tfdoctor.profile.report import render

    waits = [1, 2, 3, 2, 1, 2, 3, 2, 1, 2] + [24, 25, 26, 25, 24, 25, 26, 25, 24, 25]  # ms, the step on device 75
    full, on_device = [(75 + w) * MS for w in waits], [75 * MS] * len(waits)
    result = breakdown(full, on_device, [0.075], [0.05] * len(full), [0.05] * len(full), paired=True)
    first, second = result.drift["input"]
    assert "sync" not in result.drift and first < 0.05 and second > 0.20
    low, high = result.share_interval("input")
    assert low <= first and high >= second
    assert judge(result).borderline  # the widened interval straddles the 20% cut-off
    report = Report(mode="script", requested=2, device_kind="cpu", device_names=[], workload={"name": "x"},
                    breakdown=result, verdict=judge(result), suggestions=suggest(result, [], 2))
    assert report.to_json()["unstable"]["input"] == {"first_half": first, "second_half": second}
    console = Console(record=True, width=300)
    render(report, console)
    assert f"unstable: input was {first:.0%} of the step in the first half of the window and {second:.0%}" \
        in console.export_text()
    steady = _rounds([8, 9, 10, 11, 12] * 4)
    assert not steady.drift and "unstable" not in Report(
        mode="script", requested=2, device_kind="cpu", device_names=[], workload={"name": "x"}, breakdown=steady,
        verdict=judge(steady), suggestions=[]).to_json()


def _fit_window(calls: list[float], replays: list[float]) -> tuple[list[float], list[float], Breakdown]:
    """A fit window from its step calls and replays (ms): each step-to-step interval 0.5 ms over its call, and
    input the call's excess over the replays' median. Returns the intervals, B per step, and their breakdown."""
    replay = statistics.median(replays)
    full = [(c + 0.5) * MS for c in calls]
    on_device = [(c + 0.5 - max(c - replay, 0)) * MS for c in calls]
    return full, on_device, breakdown(full, on_device, [replay * MS] * 10, [0.1] * 10, [0.1] * 10, paired=True)


def test_fit_input_over_replays_that_spread_widely_gets_an_interval_that_holds_their_spread():
    """Times of one real run (a MobileNetV2 `fit` on 2 logical CPU devices, ms): the window's step calls and the
    same step replayed on one batch. The machine's speed changed from second to second, so the replays spread
    from 146 to 194 ms; a second run of the same script put the window at 149 ms and input at 0%."""
    from rich.console import Console
    from tfdoctor.profile.breakdown import with_unsteady_reference
    from tfdoctor.profile.report import render

    calls = [259, 185, 177, 175, 194, 170, 167, 179, 178, 152]
    replays = [194, 184, 152, 185, 160, 187, 169, 146, 149, 163]
    _, _, plain = _fit_window(calls, replays)
    assert plain.share_interval("input")[0] > 0.01  # the bootstrap of the calls alone rules 0% out
    result = with_unsteady_reference(plain, [r * MS for r in replays])
    low, high = result.share_interval("input")
    assert low == 0.0 and high > 0.15 and result.shares() == plain.shares()
    assert result.share_interval("compute")[1] > plain.share_interval("compute")[1]  # compute gets it back
    report = Report(mode="script", requested=2, device_kind="cpu", device_names=[], workload={"name": "x"},
                    breakdown=result, verdict=judge(result), suggestions=[])
    spread = report.to_json()["replayed_step_spread_s"]
    assert spread["part"] == "input" and 0.146 <= spread["p10"] < 0.150 and 0.187 < spread["p90"] <= 0.194
    console = Console(record=True, width=300)
    render(report, console)
    assert (f"unsteady: the same step replayed on one batch took {spread['p10'] * 1000:.0f}-{spread['p90'] * 1000:.0f}"
            f" ms (p10-p90; the machine's speed changed from second to second), so input, measured as the step calls' "
            f"excess over it, can be anywhere in 0%-{high:.0%}") in console.export_text()
    steady = with_unsteady_reference(plain, [(165 + i % 3) * MS for i in range(10)])
    assert steady == plain  # replays within 10% of each other: the bootstrap's interval stands


def test_fit_input_measured_in_turns_replaces_the_calls_excess_over_replays_timed_after_the_window():
    """A MobileNetV2 fit on 2 logical CPU devices (ms, as measured on this host): the window's calls took ~605 ms
    against replays of ~486 ms timed after it, so input read 20%; the same model's step on batches of its own
    pipeline and on one captured batch, in blocks taken in turns, differ by a few ms, as the script with a
    cached batch runs. Input is then that difference, compute takes the rest back, and the note says what the
    window had said."""
    from tfdoctor.profile.breakdown import with_input_in_turns
    from tfdoctor.profile.protocol import InputTurns, PhaseTimes, ScriptMeasured
    from tfdoctor.profile.script.join import fit_input_notes

    calls = [598, 612, 590, 605, 620, 601, 607, 595, 611, 604]
    replays = [481, 492, 486, 478, 490, 488, 483, 495, 480, 487]
    full, on_device, window = _fit_window(calls, replays)
    assert window.shares()["input"] > 0.18
    fed = [497, 470, 512, 488, 530, 479]
    captured = [490, 466, 505, 492, 520, 470]  # the machine's speed moved 10% between rounds, both sides with it
    turns = with_input_in_turns(window, [f * MS for f in fed], [c * MS for c in captured])
    low, high = turns.share_interval("input")
    assert turns.input == pytest.approx(7 * MS) and 0.0 <= low <= turns.shares()["input"] <= high < 0.03
    assert sum(turns.seconds().values()) == pytest.approx(sum(window.seconds().values()))
    assert turns.compute > window.compute and "input" not in turns.drift
    result = ScriptMeasured(PhaseTimes(full, [0.0] * 10, on_device), [c * MS for c in calls], "fit", [], 40, [],
                            replay_steps=[r * MS for r in replays],
                            input_turns=InputTurns([f * MS for f in fed], [c * MS for c in captured], 5))
    assert fit_input_notes(result, turns) == [
        "fit's step calls fetch their own input, measured in turns: 6 rounds of 5 steps on a copy of the script's "
        "pipeline (492.5 ms a step) and on a captured batch (491.0 ms); the window's calls against replays timed "
        "after it said 20%: the machine's speed changed between them"]
    assert with_input_in_turns(window, [0.5], [0.4]) == window  # one round is no interval


def test_fit_input_interval_holds_the_uncertainty_of_the_replayed_step_it_is_measured_against():
    """Steady step calls of 159-162 ms against ten replays of 146-156 ms (within 10% of each other, so not
    'unsteady'): input is the calls' excess over the replays' median, and that median is a sample too. Split the
    replays in two, as another launch might have timed them: the input against either half lies inside the
    reported interval, though outside the one a bootstrap of the calls alone gives."""
    from tfdoctor.profile.breakdown import with_sampled_reference

    calls = [160, 161, 159, 160, 162, 160, 159, 161, 160, 160]
    replays = [146, 153, 149, 156, 147, 151, 155, 148, 152, 150]
    full, _, plain = _fit_window(calls, replays)
    result = with_sampled_reference(plain, full, [c * MS for c in calls], [r * MS for r in replays])
    assert result.shares() == plain.shares()
    low, high = result.share_interval("input")
    for half in (replays[:5], replays[5:]):
        other = statistics.median(max(c - statistics.median(half), 0) for c in calls) / statistics.median(full) * MS
        assert low <= other <= high
        assert not plain.share_interval("input")[0] <= other <= plain.share_interval("input")[1]
    assert result.share_interval("compute")[0] < plain.share_interval("compute")[0]  # compute gives it back


def test_the_typical_launch_is_reported_with_intervals_that_hold_every_launch():
    """Three launches of one real script (a Keras 2 `fit` on a Python `Sequence`, 2 logical CPU devices) gave
    input 37% (10-46%), 35% (22-44%) and 64% (55-75%): no launch's interval held the third. The report is the
    launch nearest the middle, its input interval widened to 10-75%, and says the launches disagree."""
    from rich.console import Console
    from tfdoctor.profile.breakdown import Breakdown, StepTime, across_launches, typical
    from tfdoctor.profile.report import render

    def launch(input_share: float, low: float, high: float) -> Breakdown:
        step = 0.040
        other = (1 - input_share) * step
        shares = {"input": (low, high), "sync": (0.0, 0.0), "host": (0.0, 0.15),
                  "compute": (0.9 * (1 - high), 0.9 * (1 - low))}  # compute mirrors input
        return Breakdown(step=StepTime(step, step, step), input=input_share * step, sync=0.0, host=0.1 * other,
                         compute=0.9 * other, share_intervals=shares,
                         intervals={part: (a * step, b * step) for part, (a, b) in shares.items()})

    launches = [launch(0.37, 0.10, 0.46), launch(0.35, 0.22, 0.44), launch(0.64, 0.55, 0.75)]
    chosen = typical(launches)
    assert chosen == 0
    result = across_launches(launches[chosen], launches)
    assert result.shares() == launches[0].shares()
    assert result.share_interval("input") == pytest.approx((0.10, 0.75))
    assert result.launches_apart() == ["input", "compute"]
    report = Report(mode="script", requested=2, device_kind="cpu", device_names=[], workload={"name": "x"},
                    breakdown=result, verdict=judge(result), suggestions=[])
    assert [launch["shares"]["input"] for launch in report.to_json()["launches"]] == pytest.approx([0.37, 0.35, 0.64])
    assert report.verdict.borderline  # 10-75% straddles the 20% cut-off
    console = Console(record=True, width=300)
    render(report, console)
    text = console.export_text()
    assert "launch 3: input 64% (55%-75%)" in text
    assert "unstable between launches: input and compute moved from launch to launch" in text
    alike = across_launches(launches[1], launches[:2])
    assert alike.launches_apart() == []


def test_a_share_whose_interval_straddles_the_cut_off_is_called_borderline():
    result = _rounds([14, 17, 19, 21, 22, 23, 26, 28] * 3)  # input about 21.5%, the cut-off at 20%
    verdict = judge(result)
    assert verdict.primary == "input-bound" and verdict.borderline
    assert "Borderline: the interval" in verdict.statement and "straddles the 20% cut-off" in verdict.statement
    below = judge(_rounds([12, 14, 16, 18, 19, 20, 23, 25] * 3))  # input about 18.5%: compute-bound, for now
    assert below.primary == "compute-bound" and below.borderline
    assert "Secondary: borderline moderately input-bound (input 19%, 16%-20%)." in below.statement
    assert "reaches the 20% cut-off, so another run may call it input-bound" in below.statement
    clear = judge(_rounds([38, 39, 40, 41, 42] * 4))
    assert clear.primary == "input-bound" and not clear.borderline and "Borderline" not in clear.statement


def test_a_part_within_the_noise_gets_no_suggestion():
    noisy = _rounds([-3, -2, -1, 1, 1, 2, 3] * 3)  # input 1 ms, its interval reaching below zero
    assert noisy.input == pytest.approx(0.001) and noisy.intervals["input"][0] <= 0
    assert not [s for s in suggest(noisy, [], 2) if "tf.data" in s.title]
    tiny = _rounds([0.3] * 20)  # steady, but it would read "saves ~0 ms/step"
    assert not [s for s in suggest(tiny, [], 2) if "tf.data" in s.title]
    clear = _rounds([9, 10, 11] * 7)
    assert [s.estimated_saving_s for s in suggest(clear, [], 2) if "tf.data" in s.title] == [pytest.approx(0.010)]


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


def test_suggestions_do_not_ask_for_what_the_script_already_does():
    input_bound = _breakdown(a=100, b=40, h=40, g=30, r=30)  # input 60%
    plain, = suggest(input_bound, [], 2)
    on_tf_data, = suggest(input_bound, [], 2, Seen(input_kind="tf.data"))
    assert "Build the batches with tf.data" in plain.change
    assert on_tf_data.title == "Make the script's tf.data pipeline keep up with the step"
    assert "Build the batches" not in on_tf_data.change and "num_parallel_calls" in on_tf_data.change
    compute_bound = _breakdown(a=100, b=100, h=100, g=90, r=90)  # all compute
    assert "mixed precision" in suggest(compute_bound, [], 2)[0].change
    mixed, = suggest(compute_bound, [], 2, Seen(precision="mixed_float16"))
    assert "mixed precision" not in mixed.change and "already runs the mixed_float16 policy" in mixed.change


def test_a_suggestion_without_a_finding_says_that_no_rule_fired():
    from rich.console import Console

    from tfdoctor.profile.report import render

    result = _breakdown(a=100, b=40, h=40, g=30, r=30)
    for causes, line in (([], "lint rules that look for this: TFD201, TFD103, TFD202 (none fired on the code)"),
                         ([Cause("TFD201", "train.py", 41)], "lint: TFD201 at train.py:41")):
        report = Report(mode="script", requested=2, device_kind="cpu", device_names=[], workload={"name": "x"},
                        breakdown=result, verdict=judge(result), suggestions=suggest(result, causes, 2))
        console = Console(record=True, width=200)
        render(report, console)
        assert f"   {line}\n" in console.export_text()


@pytest.mark.tf
def test_the_recorder_reads_a_mixed_keras_policy():
    import keras

    from tfdoctor.profile.script.recorder import _mixed_precision

    assert _mixed_precision() == ""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        assert _mixed_precision() == "mixed_float16"
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_report_json_has_the_documented_shape():
    result = _breakdown(a=100, b=70, h=60, g=30, r=40)
    report = Report(mode="reference", requested=2, device_kind="cpu", device_names=["/cpu:0", "/cpu:1"],
                    workload={"name": "x"}, breakdown=result, verdict=judge(result),
                    suggestions=suggest(result, [], 2), examples_per_s=640.0, one_replica_examples_per_s=400.0)
    document = report.to_json()
    assert {"version", "mode", "devices", "workload", "step_time_s", "throughput", "breakdown_s", "shares",
            "intervals", "verdict", "suggestions", "trace"} <= set(document)
    assert set(document["intervals"]["input"]) == {"s", "share"} and len(document["intervals"]["input"]["s"]) == 2
    assert {"secondary", "borderline"} <= set(document["verdict"])
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

def _profile(inject: str, steps: int = 20, what_if: tuple[str, ...] = (), **params):
    from tfdoctor.profile.measure import Options, profile

    options = Options(gpus=2, steps=steps, warmup=3, workload="tests.profile.workloads:build", one_replica=False,
                      params={"inject": inject, **params}, timeout_s=300, what_if=what_if)
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
@pytest.mark.parametrize(("waits_ms", "settle"), [
    ([40, 41, 40], 1),          # nothing buffered (no prefetch): the first step after the others waits in full
    ([1, 1, 30, 42, 41], 4),    # two buffered batches, one made in part, and a step to spare
    ([1] * 9, 8),               # still buffered after every step tried: the most
])
def test_a_round_settles_until_the_batches_buffered_while_the_others_ran_are_taken(waits_ms, settle):
    from tfdoctor.profile.phases import SETTLE_MAX, settle_steps

    assert settle_steps([ms / 1000 for ms in waits_ms], 0.042) == settle <= SETTLE_MAX


@pytest.mark.parametrize("waits_ms, first", [
    ([1, 1, 1, 1, 1, 1], 0),             # the pipeline keeps up: every step
    ([40, 41, 39, 40, 42, 40], 1),       # nothing buffered: after the first, whose batch was part made
    ([1, 1, 15, 40, 41, 39], 4),         # two buffered, one part made: after the first full wait
    ([3.5, 1, 1, 18, 40, 40], 5),        # a buffered step's next() slow by 2.5 ms is not a wait (CI, 2026-12-06)
    ([1, 1, 1, 1, 1, 30], 5),            # only the last waited: it alone
])
def test_a_blocks_steps_at_the_pipelines_pace_start_after_the_first_full_wait(waits_ms, first):
    from tfdoctor.profile.trials import first_steady

    waits = [ms / 1000 for ms in waits_ms]
    assert first_steady(waits, [wait + 0.019 for wait in waits]) == first


@pytest.mark.tf
def test_a_prefetching_pipeline_slower_than_the_step_is_timed_as_a_loop_of_steps_waits_for_it():
    """`distribute_datasets_from_function` prefetches, so it buffers batches while the other phases run, and a
    round's first steps take them at once. Each replica's batch takes 30 ms to make, 60 ms a step, against a
    step of about 18 ms on the devices: timed on buffered batches, the step read as 20 ms and sync-bound, and
    the input on the devices as 1.3x; steps in a row take 62 ms each."""
    report = _profile("input_delay", steps=8, what_if=("input-on-device",), input_delay=0.03, input="distributed")
    assert report.verdict.primary == "input-bound" and report.breakdown.shares()["input"] > 0.4
    # Timed at the pace of steps in a row. Whether a round's first step found a buffered batch (and the report's
    # note on how many steps the round took first) depends on how fast the other phases ran: a 2-core host once
    # had none buffered, so the note is not asserted (2026-12-06).
    assert report.breakdown.step.median > 0.8 * 2 * 0.03
    on_device = next(outcome for outcome in report.what_if if outcome.change == "input-on-device")
    assert on_device.speedup > 2.0, on_device


@pytest.mark.tf
def test_a_worker_killed_while_it_traces_keeps_its_measurements(tmp_path):
    from tfdoctor.profile import protocol
    from tfdoctor.profile.measure import Options, profile

    killed = []

    def on_event(event):  # SIGABRT as the trace begins, as TensorFlow's profiler does when it corrupts its heap
        if isinstance(event, protocol.Progress) and event.phase == "trace" and not killed:
            killed.extend(children_running("tfdoctor.profile.worker"))
            for pid in killed:
                os.kill(pid, signal.SIGABRT)

    # Each step waits 0.3 s for its input, so the traced steps last far longer than the signal takes to land: a
    # 7 ms trace once finished first, on a busy machine.
    options = Options(gpus=2, steps=8, warmup=2, workload="tests.profile.workloads:build", one_replica=False,
                      params={"inject": "input_delay", "input_delay": 0.3}, timeout_s=300, logdir=tmp_path)
    report = profile(options, on_event)
    assert len(killed) == 1
    assert report.breakdown is not None and report.breakdown.step.median > 0 and report.verdict.primary
    assert "the trace is missing: the process was killed by SIGABRT before it was written" in report.notes
    assert report.trace == {"logdir": None, "xprof": None}


@pytest.mark.tf
def test_injected_all_reduce_payload_is_measured_as_sync():
    # A 2-core machine's speed wanders by about 10% from second to second; 120 steps average that out. The
    # added sync is a difference of two profiles run one after the other, and the truth is timed in a third
    # window: CI runs measured 28.7 ms against 28.8 and 23.5 against 20.0 (+17%); with 24 MB on a slower host,
    # 48.5 against 46.4 and 47.9 against 54.4 (-12%), in 90 s where 48 MB took 140 s. Half again as much is
    # kept as margin; an all-reduce counted as compute (about 0 added) or twice (2x) still fails.
    baseline = _profile("none", steps=120)
    report = _profile("payload", steps=120, payload_mb=24)
    assert report.verdict.primary == "sync-bound"
    added = report.breakdown.sync - baseline.breakdown.sync
    assert added == pytest.approx(_truth(report, "sync"), rel=0.35)


@pytest.mark.tf
def test_eager_distributed_step_is_host_bound_and_measured():
    report = _profile("eager")
    assert report.verdict.primary == "host-bound"
    # the truth was timed before the profile: scale it by how much faster or slower the machine is now
    speed = report.breakdown.step.median / _truth(report, "host-step")
    assert report.breakdown.host == pytest.approx(_truth(report, "host") * speed, rel=0.15)


@pytest.mark.untimed
@pytest.mark.tf
def test_out_of_memory_reports_the_batch_and_what_fits():
    from tfdoctor.profile.measure import Options, profile

    options = Options(gpus=2, steps=3, warmup=1, batch_per_replica=32, workload="tests.profile.workloads:build",
                      one_replica=False, params={"inject": "oom", "fits": 8}, timeout_s=300)
    report = profile(options, lambda event: None)
    assert report.verdict.primary == "out-of-memory"
    assert "per-replica batch of 32" in report.verdict.statement and "batch of 8 fits" in report.verdict.statement
    assert report.workload["fits_per_replica_batch"] == 8


@pytest.mark.untimed
@pytest.mark.tf
@pytest.mark.parametrize("variant", ["naive", "tuned"])
def test_both_pipelines_in_text_when_one_runs_out_of_memory(tmp_path, variant):
    output = tmp_path / "both.txt"
    result = run_cli("profile", "--gpus", "2", "--pipeline", "both", "--steps", "3", "--warmup", "1",
                     "--batch-per-replica", "16", "--workload", "tests.profile.workloads:build",
                     "--workload-param", "inject=oom", "--workload-param", "fits=8",
                     "--workload-param", f"oom_variant={variant}", "--format", "text", "--output", str(output),
                     "--logdir", str(tmp_path / "logs"))
    assert result.returncode == 0, result.stderr[-2000:]
    text = output.read_text()
    assert text.count("Verdict: ") == 1 and ("Verdict: Out of memory" in text) == (variant == "naive")
    assert (f"Tuned pipeline: no speed-up measured ({variant} ran out of memory: Out of memory at a per-replica "
            "batch of 16") in text


@pytest.mark.tf
def test_wait_reads_every_output_on_every_replica():
    # On TensorFlow's asynchronous executor, as on a GPU, the step returns at once and its outputs become
    # ready one after the other; the last, on the second replica's device, 0.5 s after the loss.
    result = subprocess.run([sys.executable, str(ROOT / "tests" / "profile" / "late_outputs.py")], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    assert measured["call_s"] < measured["late_s"] / 2  # the call itself returned before the work was done
    assert measured["timed_s"] >= measured["late_s"] * 0.95


@pytest.mark.slow
@pytest.mark.tf
def test_reference_naive_pipeline_is_input_bound_and_the_tuned_one_is_not_and_an_input_change_measures_best(
        tmp_path):
    # Width 0.25 (not the CPU default 0.75) keeps naive's input share far above the 20% cut-off (decoding
    # stays, compute shrinks) and the tuned one's far below it; it also makes the two profiles quicker. At width
    # 0.5 a slower 2-core host measured the input-on-device what-if at 1.23x; at 0.25 it measured naive's input
    # 39%, tuned's 7%, and the input what-ifs 1.74x and 1.71x.
    result = run_cli("profile", "--gpus", "2", "--pipeline", "both", "--steps", "10", "--width", "0.25",
                     "--what-if", "input-on-device,tf-data-tuned", "--format", "json", "--logdir", str(tmp_path),
                     timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    naive = json.loads(result.stdout)
    tuned = naive["comparison"]["tuned"]
    assert (naive["verdict"]["primary"], naive["verdict"]["level"]) == ("input-bound", "high")
    assert {"TFD201", "TFD206", "TFD103"} <= set(naive["suggestions"][0]["rules"])
    assert any(l.startswith("TFD201 at") and "pipelines.py:" in l for l in naive["suggestions"][0]["locations"])
    # 10 rounds keep the test short; the input share of a tuned run is then known to about +-2%. With other work
    # on both cores a fresh-clone CI measured 8% against naive's 22%, more than a third of it.
    assert tuned["verdict"]["primary"] != "input-bound" and tuned["shares"]["input"] < naive["shares"]["input"] / 2
    # A quiet 2-core machine measures about 1.9; other work on the machine during one of the two runs gave
    # 1.16. The shares above carry the verdicts; here only the direction is asserted, far from both.
    assert naive["comparison"]["speedup_tuned_over_naive"] > 1.0
    assert (tmp_path / "naive").is_dir() and (tmp_path / "tuned").is_dir()
    # The measured what-if ranks an input change first on the naive pipeline, at well over 1.3x. (Under a load
    # average of 16 the tuned pipeline's own speed-up was lost in the noise, its threads and the step fighting
    # for two cores with other work; the ceiling, input on the devices, still measured far above 1.3.)
    first = naive["what_if"][0]
    assert first["change"] in ("input-on-device", "tf-data-tuned") and first["speedup"] >= 1.3, first
    tuned_input = next(row for row in naive["what_if"] if row["change"] == "tf-data-tuned")
    assert tuned_input["applied"] and any(l.startswith("TFD201 at") for l in tuned_input["locations"])
    assert "Best measured change: " in naive["verdict"]["statement"]


@pytest.mark.tf
def test_the_replays_wait_for_the_scripts_input_threads_to_go_idle(monkeypatch):
    """A pipeline still refilling its buffers when the window closes would slow the replays by a different
    amount in every run: the replays start once the process's own threads are idle, or say they never were."""
    import threading
    import time

    from tfdoctor.profile.script import replay

    def burn(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass

    refilling = threading.Thread(target=burn, args=(1.0,))
    started = time.monotonic()
    refilling.start()
    assert replay.settle() == 0.0
    assert time.monotonic() - started >= 1.0  # it waited for the thread's work to end
    refilling.join()
    monkeypatch.setattr(replay, "SETTLE_S", 1.0)
    busy = threading.Thread(target=burn, args=(3.0,))
    busy.start()
    assert replay.settle() >= replay.IDLE_CORES  # never idle within SETTLE_S: the cores it kept busy
    busy.join()


def test_script_step_calls_slower_than_their_idle_replay_are_pipeline_contention_on_cpu_only():
    from rich.console import Console

    from tfdoctor.profile.protocol import PhaseTimes, ScriptMeasured
    from tfdoctor.profile.report import render
    from tfdoctor.profile.script.join import build

    calls = [0.110, 0.115, 0.120, 0.120, 0.120, 0.120, 0.120, 0.125, 0.130, 0.135]  # 30 ms slower than alone
    replays = [0.090] * 10
    times = PhaseTimes([0.125] * 10, [0.0] * 10, calls, [0.120], [0.120] * 10, [0.120] * 10)  # scaled to the calls

    def report(kind: str, source: str = "tf.function") -> Report:
        measured = ScriptMeasured(times, calls, source, [], 13, [], 64, 2, True, replays)
        return build(measured, [], 2, kind, [], "train.py", [])

    on_cpu = report("cpu")
    assert on_cpu.breakdown.contention == pytest.approx(0.030)
    assert on_cpu.to_json()["pipeline_contention_s"] == pytest.approx(0.030)
    low, high = on_cpu.to_json()["pipeline_contention_interval_s"]  # the calls' spread, resampled
    assert 0.020 <= low <= 0.030 <= high <= 0.045 and high > low
    assert on_cpu.breakdown.compute == pytest.approx(0.120)  # contention stays compute: a GPU never feels it
    console = Console(record=True, width=300)
    render(on_cpu, console)
    assert (f"of compute, 30.0 ms (interval {low * 1000:.1f}-{high * 1000:.1f} ms) is the step running slower than "
            "on the same step replayed once the script's input threads were idle") in console.export_text()
    assert report("gpu").breakdown.contention is None
    assert report("cpu", "fit").breakdown.contention is None  # fit's calls hold their own input


def test_script_mode_checks_the_opt_in_host_sync_rule_that_plain_lint_leaves_off(tmp_path, monkeypatch):
    """TFD301 is opt-in for `lint` (what a sync costs turns on the step's length); the profile, which measures
    the host's share of the step, lints the script it runs with it, so a host-bound verdict can cite it."""
    from tfdoctor.config import Overrides
    from tfdoctor.lint.engine import lint_paths
    from tfdoctor.profile.script.join import lint_findings

    (tmp_path / "train.py").write_text(
        "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n\n\n@tf.function\ndef step(x):\n"
        "    return strategy.run(replica, args=(x,))\n\n\nfor x in dist:\n    loss = step(x)\n"
        "    print(float(loss))\n")
    monkeypatch.chdir(tmp_path)
    assert lint_paths(["train.py"]).findings == []
    assert [(f.code, f.line) for f in lint_paths(["train.py"], Overrides(select=("TFD301",))).findings] == [
        ("TFD301", 12)]
    assert [(f.code, f.line) for f in lint_findings(tmp_path / "train.py")] == [("TFD301", 12)]


def test_script_mode_checks_a_single_device_pipeline_that_plain_lint_leaves_alone(tmp_path, monkeypatch):
    """TFD202 and TFD203 check only programs on several devices (on one, the cost turns on what the code does
    not show); the profile measures that cost, so it lints the script it runs whatever its devices."""
    from tfdoctor.config import Overrides
    from tfdoctor.lint.engine import lint_paths
    from tfdoctor.profile.script.join import lint_findings

    (tmp_path / "train.py").write_text(
        "import tensorflow as tf\nds = tf.data.TFRecordDataset(files).map(parse).batch(32)\nmodel.fit(ds, epochs=2)\n")
    (tmp_path / "pyproject.toml").write_text('[tool.tfdoctor]\ntarget-tensorflow = "2.6"\n')
    monkeypatch.chdir(tmp_path)
    assert lint_paths(["train.py"]).findings == []
    assert [(f.code, f.line) for f in lint_findings(tmp_path / "train.py")] == [("TFD202", 2), ("TFD203", 2)]


def test_script_mode_checks_the_opt_in_unscaled_batch_rule_that_plain_lint_leaves_off(tmp_path, monkeypatch):
    """TFD114 is opt-in for `lint` (a batch given to a strategy is the global one by convention); the profile,
    which measures the all-reduce's share of the step, lints the script it runs with it, so a sync-bound verdict
    can cite it."""
    from tfdoctor.config import Overrides
    from tfdoctor.lint.engine import lint_paths
    from tfdoctor.profile.script.join import lint_findings

    (tmp_path / "train.py").write_text(
        "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n"
        "ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1000).batch(32)\n"
        "with strategy.scope():\n    model = build()\n    model.compile(optimizer='adam', loss='mse')\n"
        "model.fit(ds, epochs=2)\n")
    monkeypatch.chdir(tmp_path)
    assert lint_paths(["train.py"]).findings == []
    assert [(f.code, f.line) for f in lint_findings(tmp_path / "train.py")] == [("TFD114", 3)]
