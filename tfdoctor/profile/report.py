"""The profile report: one JSON object (the documented schema) and its terminal rendering."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tfdoctor.profile.breakdown import PARTS, Breakdown
from tfdoctor.profile.cluster.job import NO_STRAGGLER, UNKNOWN_STRAGGLER
from tfdoctor.profile.gpus import machine_gpus, unused_gpus_note
from tfdoctor.profile.protocol import ClockCheck
from tfdoctor.profile.suggest import Suggestion
from tfdoctor.profile.verdict import Verdict
from tfdoctor.profile.what_if import Outcome, sentence

COLOURS = {"input": "yellow", "sync": "magenta", "host": "cyan", "compute": "green"}
UNSEPARATED = "step call (host, sync, compute not separated)"
CPU_NOTE = ("No GPU: the replicas are logical CPU devices sharing this machine's cores, so absolute times and "
            "scaling are not GPU figures; the split between input, all-reduce, host and compute still holds.")
VIRTUAL_GPU_NOTE = ("One GPU split into logical GPUs: NCCL does not support virtual GPUs and TensorFlow falls back "
                    "to reducing on one device (TFD111), so all-reduce timings do not predict real multi-GPU runs.")
DEVICE_NOTES = {"cpu": CPU_NOTE, "virtual-gpu": VIRTUAL_GPU_NOTE}  # what a report must say about its devices


def device_notes(kind: str, notes: list[str]) -> list[str]:
    """A report's notes: GPUs that TensorFlow did not use first, then `notes`, then what the devices mean."""
    return [*filter(None, [unused_gpus_note(kind, machine_gpus())]), *notes, *filter(None, [DEVICE_NOTES.get(kind)])]


@dataclass
class Report:
    mode: str
    requested: int
    device_kind: str
    device_names: list[str]
    workload: dict[str, Any]
    breakdown: Breakdown | None
    verdict: Verdict
    suggestions: list[Suggestion]
    examples_per_s: float | None = None
    one_replica_examples_per_s: float | None = None
    trace: dict[str, Any] = field(default_factory=lambda: {"logdir": None, "xprof": None})
    scaling: list[dict[str, float]] | None = None
    notes: list[str] = field(default_factory=list)
    comparison: dict[str, Any] | None = None
    workers: list[dict[str, Any]] | None = None  # a multi-worker job: one row per worker (cluster/job.py)
    straggler: dict[str, Any] | None = None
    clock: ClockCheck | None = None
    what_if: list[Outcome] | None = None  # the tried changes, best first (None: --what-if was not given)

    def to_json(self) -> dict[str, Any]:
        result = self.breakdown
        out: dict[str, Any] = {
            "version": 1,
            "mode": self.mode,
            "devices": {"requested": self.requested, "kind": self.device_kind, "names": self.device_names},
            "workload": self.workload,
            "step_time_s": ({"median": result.step.median, "p10": result.step.p10, "p90": result.step.p90}
                            if result else None),
            "throughput": {"examples_per_s": self.examples_per_s},
            "breakdown_s": result.reported(result.seconds()) if result else None,
            "shares": result.reported(result.shares()) if result else None,
            "separated": result.separated if result else None,
            "input_inside_calls": result.input_inside if result else None,
            "intervals": ({part: {"s": list(result.intervals[part]), "share": list(result.share_intervals[part])}
                           for part in result.measured()} if result and result.intervals else None),
            "verdict": {"primary": self.verdict.primary, "level": self.verdict.level,
                        "statement": self.statement(), "borderline": self.verdict.borderline,
                        "secondary": [f.to_json() for f in self.verdict.secondary]},
            "suggestions": [s.to_json() for s in self.suggestions],
            "trace": {"logdir": self.trace.get("logdir"), "xprof": self.trace.get("xprof")},
            "notes": self.notes,
        }
        if result and result.contention is not None:
            out["pipeline_contention_s"] = result.contention
            if result.contention_interval is not None:
                out["pipeline_contention_interval_s"] = list(result.contention_interval)
        if result and result.drift:
            out["unstable"] = {part: {"first_half": first, "second_half": second}
                               for part, (first, second) in result.drift.items() if part in result.measured()}
        if result and result.unsteady:
            part, fast, slow = result.unsteady
            out["replayed_step_spread_s"] = {"part": part, "p10": fast, "p90": slow}
        if result and result.launches:
            out["launches"] = [{"shares": result.reported(launch.shares),
                                "share_intervals": result.reported({part: list(interval) for part, interval
                                                                    in launch.share_intervals.items()})}
                               for launch in result.launches]
            out["launches_apart"] = result.launches_apart()
        if self.one_replica_examples_per_s:
            out["throughput"]["one_replica_examples_per_s"] = self.one_replica_examples_per_s
            out["throughput"]["scaling_efficiency"] = self.efficiency()
        if self.scaling is not None:
            out["scaling"] = self.scaling
        if self.comparison is not None:
            out["comparison"] = self.comparison
        if self.workers is not None:
            out["workers"] = self.workers
            out["straggler"] = self.straggler
        if self.what_if is not None:
            out["what_if"] = [outcome.to_json() for outcome in self.what_if]
        if self.clock is not None:
            out["clock_check"] = {"steps": self.clock.steps, "waited_s": self.clock.waited,
                                  "synced_s": self.clock.synced, "clock": self.clock.clock,
                                  "trace_step_ms": self.clock.trace_ms}
        return out

    def statement(self) -> str:
        """The verdict, and the best measured change when changes were tried."""
        input_share = self.breakdown.shares()["input"] if self.breakdown else 0.0
        closing = sentence(self.what_if, input_share) if self.what_if is not None else None
        return f"{self.verdict.statement} {closing}" if closing else self.verdict.statement

    def efficiency(self) -> float | None:
        if not (self.examples_per_s and self.one_replica_examples_per_s):
            return None
        return self.examples_per_s / (self.requested * self.one_replica_examples_per_s)


def render(report: Report, console: Console) -> None:
    name = report.workload.get("name", "")
    workers = f"{len(report.workers)} workers, " if report.workers else ""
    replicas = (f"{report.requested} replica{'s' if report.requested != 1 else ''}" if report.requested
                else "replicas not known")
    console.print(Text(f"tfdoctor profile: {name} on {workers}{replicas} ({report.device_kind})",
                       style="bold"))
    for note in report.notes:
        console.print(Text(f"note: {note}", style="dim"))
    result = report.breakdown
    if result is not None:
        console.print(_bar(result))
        table = Table(show_header=True, header_style="bold")
        for column in ("part", "ms / step", "share", "90% interval"):
            table.add_column(column, justify="right" if column != "part" else "left")
        shares = result.shares()
        for part in result.measured():
            low, high = result.share_interval(part)
            table.add_row(Text(part, style=COLOURS[part]), f"{getattr(result, part) * 1000:.1f}", f"{shares[part]:.0%}",
                          f"{low:.0%}-{high:.0%}" if result.intervals else "")
        if not result.separated:
            table.add_row(UNSEPARATED, f"{(result.step.median - result.input) * 1000:.1f}",
                          f"{1 - shares['input']:.0%}", "")
        table.add_row("step (median)", f"{result.step.median * 1000:.1f}", "",
                      f"p10 {result.step.p10 * 1000:.0f} / p90 {result.step.p90 * 1000:.0f} ms")
        console.print(table)
        for part, (first, second) in result.drift.items():
            if part in result.measured():
                console.print(f"unstable: {part} was {first:.0%} of the step in the first half of the window and "
                              f"{second:.0%} in the second: its rounds are not alike (noise, or a change of speed during "
                              "the run), so another run may give either; its interval holds both", highlight=False)
        if result.unsteady:
            part, fast, slow = result.unsteady
            low, high = result.share_interval(part)
            console.print(f"unsteady: the same step replayed on one batch took {fast * 1000:.0f}-{slow * 1000:.0f} ms "
                          f"(p10-p90; the machine's speed changed from second to second), so {part}, measured as the "
                          f"step calls' excess over it, can be anywhere in {low:.0%}-{high:.0%}; its interval holds that "
                          "range. More --steps narrow it", highlight=False)
        if result.launches:
            _print_launches(result, console)
        if result.contention:
            than = ("the same step replayed once the script's input threads were idle" if report.mode == "script"
                    else "batches made earlier")
            spread = (f" (interval {result.contention_interval[0] * 1000:.1f}-{result.contention_interval[1] * 1000:.1f}"
                      " ms)" if result.contention_interval else "")
            console.print(f"of compute, {result.contention * 1000:.1f} ms{spread} is the step running slower than on "
                          f"{than}, while the input pipeline works on the same host cores (not input: on GPUs that "
                          "work runs beside the devices)", highlight=False)
        if report.workers:
            _print_workers(report, console)
        _print_throughput(report, console)
        _print_trace(report, console)
        _print_clock(report, console)
    style = "bold red" if report.verdict.primary != "compute-bound" else "bold green"
    if report.what_if is not None:
        _print_what_if(report.what_if, console)
    console.print(Text(f"Verdict: {report.statement()}", style=style))
    for rank, suggestion in enumerate(report.suggestions, 1):
        saving = f"saves ~{suggestion.estimated_saving_s * 1000:.0f} ms/step" if suggestion.estimated_saving_s else ""
        console.print(Text(f"{rank}. {suggestion.title} {saving}", style="bold"))
        console.print(f"   evidence: {suggestion.evidence}", highlight=False)
        console.print(f"   change: {suggestion.change}", highlight=False)
        console.print(f"   lint: {'; '.join(suggestion.locations)}" if suggestion.locations else
                      f"   lint rules that look for this: {', '.join(suggestion.rules)} (none fired on the code)",
                      highlight=False)
    if report.comparison:
        console.print(Text(_comparison(report), style="bold"))


def _print_launches(result: Breakdown, console: Console) -> None:
    """Each launch's shares, and the parts on which launches disagree beyond their own intervals."""
    for index, launch in enumerate(result.launches, 1):
        parts = ", ".join(f"{part} {launch.shares[part]:.0%} ({launch.share_intervals[part][0]:.0%}-"
                          f"{launch.share_intervals[part][1]:.0%})" for part in result.measured())
        console.print(f"launch {index}: {parts}", highlight=False)
    apart = result.launches_apart()
    if apart:
        named = " and ".join([", ".join(apart[:-1]), apart[-1]] if len(apart) > 1 else apart)
        console.print(f"unstable between launches: {named} moved from launch to launch by more than one "
                      "launch's steps vary (something set at launch: the input's start, thread placement, the "
                      "machine's load), so a single launch's interval does not hold the next; the intervals above hold "
                      "every launch", highlight=False)


def _print_what_if(outcomes: list[Outcome], console: Console) -> None:
    """The "What-if, measured" table: each tried change, best first, beside today."""
    table = Table(title="What-if, measured", show_header=True, header_style="bold", title_justify="left")
    for column in ("change", "examples/s today", "with it", "ms / step", "speed-up", "90% interval", "effect"):
        table.add_column(column, justify="left" if column in ("change", "effect") else "right")
    for outcome in outcomes:
        low, high = outcome.interval or (None, None)
        table.add_row(outcome.change,
                      f"{outcome.today_examples_per_s:.1f}" if outcome.today_examples_per_s else "-",
                      f"{outcome.examples_per_s:.1f}" if outcome.examples_per_s else "-",
                      f"{outcome.step_time_s * 1000:.1f}" if outcome.step_time_s else "-",
                      f"{outcome.speedup:.2f}x" if outcome.speedup else "-",
                      f"{low:.2f}-{high:.2f}" if low is not None else "", outcome.effect())
    console.print(table)
    for outcome in outcomes:
        where = f" ({'; '.join(outcome.locations)})" if outcome.locations else ""
        rules = f" [{', '.join(outcome.rules)}{where}]" if outcome.rules else ""
        if outcome.applied and outcome.note:
            console.print(f"  {outcome.change}: {outcome.note}{rules}", highlight=False)


def _comparison(report: Report) -> str:
    """The tuned variant against the naive one; either may have run out of memory (no throughput)."""
    tuned = report.comparison["tuned"]
    speedup = report.comparison.get("speedup_tuned_over_naive")
    if speedup is not None:
        return (f"Tuned pipeline: {speedup:.1f}x the naive throughput ({tuned['throughput']['examples_per_s']:.1f} "
                f"vs {report.examples_per_s:.1f} examples/s).")
    out = [name for name, verdict in (("naive", report.verdict.primary), ("tuned", tuned["verdict"]["primary"]))
           if verdict == "out-of-memory"]
    return (f"Tuned pipeline: no speed-up measured ({' and '.join(out) or 'a variant'} ran out of memory: "
            f"{tuned['verdict']['statement'] if 'tuned' in out else report.verdict.statement})")


def _bar(result: Breakdown, width: int = 60) -> Text:
    bar = Text()
    shares = result.shares()
    for part in PARTS:
        cells = round(shares[part] * width)
        if cells:
            bar.append("█" * cells, style=COLOURS[part] if part in result.measured() else "dim")
    labels = [f"{part} {shares[part]:.0%}" for part in result.measured()]
    if not result.separated:
        labels.append(f"{UNSEPARATED} {1 - shares['input']:.0%}")
    bar.append("  " + "  ".join(labels))
    return bar


def _print_workers(report: Report, console: Console) -> None:
    table = Table(show_header=True, header_style="bold")
    for column in ("worker", "step ms", *PARTS, "of sync, waiting"):
        table.add_column(column, justify="left" if column == "worker" else "right")
    for row in report.workers or []:
        seconds, shares = row["breakdown_s"], row["shares"]
        table.add_row(row["task"], f"{row['step_time_s']['median'] * 1000:.1f}",
                      *(f"{seconds[part] * 1000:.1f} ({shares[part]:.0%})" if shares[part] is not None
                        else "not separated" for part in PARTS),
                      f"{row['waiting_for_others_s'] * 1000:.1f}" if row["waiting_for_others_s"] is not None
                      else "not separated")
    console.print(table)
    straggler = report.straggler
    separated = all(row["waiting_for_others_s"] is not None for row in report.workers or [])
    console.print(straggler["statement"] if straggler else NO_STRAGGLER if separated else UNKNOWN_STRAGGLER,
                  highlight=False)


def _print_throughput(report: Report, console: Console) -> None:
    if report.examples_per_s is None:
        return
    line = f"throughput {report.examples_per_s:.1f} examples/s"
    if report.one_replica_examples_per_s:
        line += (f"; one replica {report.one_replica_examples_per_s:.1f} examples/s; scaling efficiency "
                 f"{report.efficiency():.0%}")
    console.print(line, highlight=False)
    if report.scaling:
        console.print("scaling: " + ", ".join(
            (f"{row['workers']:.0f} worker{'s' if row['workers'] > 1 else ''}, " if "workers" in row else "")
            + f"{row['replicas']:.0f} replica{'s' if row['replicas'] > 1 else ''} {row['examples_per_s']:.1f}/s "
            f"({row['efficiency']:.0%})"
            + (f", all-reduce {row['sync_share']:.0%} of the step" if "sync_share" in row else "")
            for row in report.scaling), highlight=False)


def _print_clock(report: Report, console: Console) -> None:
    """The clock check, when it disagrees with the phases' timing (a GPU whose work outlives the outputs)."""
    clock = report.clock
    if clock is None or clock.synced is None:
        return
    gap = clock.synced - clock.waited
    if gap > max(0.02 * clock.waited, 0.001):
        console.print(f"clock check: with every device synchronised ({clock.clock}) a step takes "
                      f"{clock.synced * 1000:.1f} ms, {gap * 1000:.1f} ms more than once its outputs are back: "
                      "work that outlives the outputs (an optimizer update) runs into the next step",
                      highlight=False)


def _print_trace(report: Report, console: Console) -> None:
    xprof = report.trace.get("xprof")
    if report.trace.get("logdir"):
        console.print(f"trace: xprof --logdir {report.trace['logdir']}  (then open http://localhost:8791)",
                      highlight=False)
    if xprof:
        categories = ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in xprof["ms_per_step"].items() if v)
        console.print(f"xprof ({xprof.get('hardware_type')}), ms per step: {categories}", highlight=False)
