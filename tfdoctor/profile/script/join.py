"""Script mode's measurements joined with the lint findings of the script and the modules it imports from
its own folder, as the same Report as reference mode (no TensorFlow here)."""

from __future__ import annotations

import ast
import bisect
import os
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from tfdoctor.config import Overrides
from tfdoctor.lint.engine import lint_paths
from tfdoctor.lint.findings import Finding
from tfdoctor.profile.breakdown import (Breakdown, across_launches, breakdown, clamp, difference_interval,
                                        with_input_in_turns, with_sampled_reference, with_unsteady_reference)
from tfdoctor.profile.protocol import ScriptMeasured
from tfdoctor.profile.report import Report, device_notes
from tfdoctor.profile.suggest import RULES_FOR, Cause, Seen, suggest
from tfdoctor.profile.verdict import judge

SLOWER_REPLAY = 1.05  # a replayed step this much slower than the real calls cannot bound the input inside them
PART_OF = {"input-bound": "input", "sync-bound": "sync", "host-bound": "host", "compute-bound": "compute",
           "not-separated": None}


def local_modules(script: Path) -> list[Path]:
    """The script and the `.py` modules (or packages) of its folder that it imports, transitively."""
    folder, found, todo = script.parent, [script], [script]
    while todo:
        try:
            tree = ast.parse(todo.pop().read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            for name in names:
                head = folder / name.split(".")[0]
                path = head.with_suffix(".py") if head.with_suffix(".py").is_file() else head
                if path.exists() and path not in found:
                    found.append(path)
                    if path.suffix == ".py":
                        todo.append(path)
    return found


def lint_findings(script: Path, package: Path | None = None) -> list[Finding]:
    """Findings in the script and its local modules (or, for a module run with `-m`, in its whole top-level
    package), paths as given relative to the working folder. Only those files show the versions the code was
    written for: a copy of the script lying beside it (`original.py`) is not part of the run. They are the
    run's own code, so a `tests/` folder around them does not make them test code. The rules that name a cause
    the profile measures are checked even when opt-in (TFD301's host syncs: their cost is measured here)."""
    paths = [package] if package else local_modules(script)
    targets = [os.path.relpath(p) if not os.path.relpath(p).startswith("..") else str(p) for p in paths]
    run = tuple(file for p in paths for file in ([p] if p.is_file() else sorted(p.rglob("*.py"))))
    causes = tuple(sorted({code for codes in RULES_FOR.values() for code in codes}))  # opt-in ones too: measured here
    return lint_paths(targets, Overrides(evidence_files=run, run_code=True, also_checked=causes),
                      cache=False).findings  # it trains


def split_by_run(findings: list[Finding], lines_run: dict[str, list[int]]) -> tuple[list[Finding], list[Finding]]:
    """The findings that may be cited as causes, and those in a branch the run did not take: the innermost
    `if`/`else` block around the finding was reached (its `if` line ran) but none of its lines ran before the
    window. Code that ran only through AutoGraph (a `tf.function`'s body runs as a converted copy) records no
    line of its own, so it is never judged untaken."""
    cited: list[Finding] = []
    skipped: list[Finding] = []
    for finding in findings:
        lines = lines_run.get(os.path.abspath(finding.path))
        block = _innermost_branch(Path(finding.path), min(finding.line, finding.statement_line or finding.line),
                                  finding.end_line) if lines else None
        untaken = block is not None and block[0] in lines and not _any_between(lines, block[1], block[2])
        (skipped if untaken else cited).append(finding)
    return cited, skipped


def _innermost_branch(path: Path, first: int, last: int) -> tuple[int, int, int] | None:
    """(the `if` line, first line, last line) of the innermost `if` body or `else` around lines first..last."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    found = None
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            for block in (node.body, node.orelse):
                if block and block[0].lineno <= first and last <= (block[-1].end_lineno or block[-1].lineno):
                    span = (node.lineno, block[0].lineno, block[-1].end_lineno or block[-1].lineno)
                    if found is None or span[1] >= found[1]:
                        found = span
    return found


def _any_between(lines: list[int], first: int, last: int) -> bool:
    index = bisect.bisect_left(lines, first)
    return index < len(lines) and lines[index] <= last


def skipped_note(skipped: list[Finding]) -> str:
    """What the report says of the findings in code the run did not execute."""
    places = ", ".join(f"{f.code} at {f.path}:{f.line}" for f in skipped[:3]) + (" and more" if len(skipped) > 3 else "")
    return (f"not cited: {len(skipped)} lint finding{'s are' if len(skipped) > 1 else ' is'} in code the run did not "
            f"execute before its measured steps ({places})")


def with_contention(result: ScriptMeasured, kind: str, measured: Breakdown) -> Breakdown:
    """On logical CPU devices, the breakdown with how much longer the window's step calls took than the same step
    replayed once the script's input threads had gone idle, and its interval: the input pipeline taking the
    replicas' cores, which a GPU's compute never feels; part of compute. Unchanged on GPUs, for `fit` (its
    calls fetch their own input, so their excess over the replay is input), for calls that run many steps, or
    with no replay."""
    if (kind != "cpu" or result.source in ("fit", "marker") or not result.replayed or not result.replay_steps
            or result.looped):
        return measured
    slower = statistics.median(result.step_calls) - statistics.median(result.replay_steps)
    low, high = difference_interval(result.step_calls, result.replay_steps)
    return replace(measured, contention=clamp(slower, measured.compute),
                   contention_interval=(clamp(low, measured.compute), clamp(high, measured.compute)))


BETWEEN_EPOCHS = 0.10  # fit's time between epochs, as a share of an epoch's time, that the report mentions


def between_epochs(result: ScriptMeasured, step: float) -> tuple[float, str] | None:
    """The share of the training time that `Model.fit` spent between epochs, outside every step (the
    breakdown's window holds none of it), and the report's note on it, when it reached BETWEEN_EPOCHS of the
    first epoch's steps and that time."""
    if not result.between_epochs or not result.epoch_steps:
        return None
    end = statistics.median(boundary.end_s for boundary in result.between_epochs)
    start = statistics.median(boundary.start_s for boundary in result.between_epochs)
    epoch = result.epoch_steps * step
    share = (end + start) / (end + start + epoch)
    if share < BETWEEN_EPOCHS:
        return None
    note = (f"between fit's epochs: {end + start:.1f} s from one epoch's last step to the next one's first "
            f"({end:.1f} s to the epoch's end: the end of its data, validation, callbacks; {start:.1f} s to start "
            f"the next: its callbacks and data), against {epoch:.1f} s for an epoch's {result.epoch_steps} steps: "
            f"{share:.0%} of the training time, outside the steps measured above")
    if result.new_iterator_each_epoch and start >= end:
        note += ("; fit's dataset ends each epoch, so every epoch starts a new iterator over it: `dataset.repeat()` "
                 "with `steps_per_epoch` keeps one")
    return share, note


def breakdown_of(result: ScriptMeasured, kind: str) -> Breakdown:
    """The breakdown of one script-mode measurement. The window's steps and their replays are paired (the i-th
    interval and the i-th step call; each turn's replays), so it takes paired differences."""
    times = result.times
    measured = replace(breakdown(times.full, times.on_device, times.looped, times.gradients, times.reduced,
                                 paired=True), separated=result.replayed, input_inside=bool(result.looped))
    measured = with_contention(result, kind, measured)
    if result.source == "fit" and result.replayed and result.input_turns is not None:  # fit's input, in turns
        measured = with_input_in_turns(measured, result.input_turns.fed, result.input_turns.captured)
    elif result.source == "fit" and result.replayed:  # fit's input: the calls' excess over the replays
        measured = with_sampled_reference(measured, times.full, result.step_calls[:len(times.full)],
                                          result.replay_steps)
        measured = with_unsteady_reference(measured, result.replay_steps)
    return measured


def fit_input_notes(result: ScriptMeasured, measured: Breakdown) -> list[str]:
    """How fit's input, read inside its step calls, was measured: in turns (with the window's own value where
    it lies outside the interval), or as the calls' excess over the replays (with a note when the replays ran
    slower than the calls, so that they could not bound it)."""
    if result.source != "fit" or not result.replayed or not result.replay_steps:
        return []
    step, calls = statistics.median(result.replay_steps), statistics.median(result.step_calls)
    turns = result.input_turns
    if turns is not None:
        note = (f"fit's step calls fetch their own input, measured in turns: {len(turns.fed)} rounds of {turns.block} "
                f"steps on a copy of the script's pipeline ({statistics.median(turns.fed) * 1e3:.1f} ms a step) and "
                f"on a captured batch ({statistics.median(turns.captured) * 1e3:.1f} ms)")
        window = max(calls - step, 0.0) / (statistics.median(result.times.full) or 1.0)
        low, high = measured.share_interval("input")
        if not low <= window <= high:
            note += (f"; the window's calls against replays timed after it said {window:.0%}: the machine's speed "
                     "changed between them")
        return [note]
    notes = [f"the step calls fetch their own input: input = the calls' excess over the replayed step "
             f"({step * 1e3:.1f} ms)"]
    if step > SLOWER_REPLAY * calls:
        notes.append(f"the replayed step ({step * 1e3:.1f} ms) is slower than the step calls it replays "
                     f"({calls * 1e3:.1f} ms), so it cannot bound the input inside them: input may be more than shown")
    return notes


def build(result: ScriptMeasured, findings: list[Finding], requested: int, kind: str, names: list[str],
          script: str, notes: list[str], trace: dict[str, Any] | None = None,
          launches: list[Breakdown] | None = None) -> Report:
    """The report of one script-mode (or API) measurement; with `launches` (every launch's breakdown, this
    one's among them), its intervals widened to hold theirs."""
    times = result.times
    measured = breakdown_of(result, kind)
    if launches:
        measured = across_launches(measured, launches)
    verdict = judge(measured)
    part = PART_OF[verdict.primary]
    rank = {code: index for index, code in enumerate(RULES_FOR[part] if part else ())}
    findings = sorted(findings, key=lambda f: rank.get(f.code, len(rank)))  # the verdict's rules first
    causes = [Cause(f.code, f.path, f.line) for f in findings]
    global_batch = result.global_batch
    joined = [f for f in findings if f.code in rank]
    if joined:
        first = joined[0]
        verdict = replace(verdict, statement=(
            f"{verdict.statement} {verdict.primary} {measured.shares()[part]:.0%}: {first.code} at "
            f"{first.path}:{first.line} {first.message}."))
    between = between_epochs(result, measured.step.median)
    if between:
        verdict = replace(verdict, statement=f"{verdict.statement} Besides the steps, {between[0]:.0%} of the "
                          "training time passed between fit's epochs (see the notes).")
    waits = times.input_wait
    extra = [(f"steps seen through {result.source} ({result.steps_seen} in all); input = the time between "
              "step calls plus any input inside them, i.e. step-to-step time minus the step on a batch already on "
              "the devices")]
    if waits:
        extra.append(f"hooked input waits: {sum(waits) / len(waits) * 1000:.1f} ms per step")
    extra += fit_input_notes(result, measured)
    replicas = result.replicas or requested
    if result.replicas and result.replicas < requested:
        extra.append(f"the step ran on {result.replicas} replica{'s' if result.replicas > 1 else ''}, not the "
                     f"{requested} devices made for it: the script's strategy uses fewer (or it has none)")
    return Report(
        mode="script", requested=replicas, device_kind=kind, device_names=names,
        workload={"name": script, "global_batch": global_batch or None,  # None: not known (no replay)
                  "per_replica_batch": global_batch // max(replicas, 1) if global_batch else None,
                  "steps": len(times.full), "warmup_steps": result.warmup_steps,
                  "step_source": result.source, "epoch_steps": result.epoch_steps or None,
                  "between_epochs_s": [[b.end_s, b.start_s] for b in result.between_epochs]},
        breakdown=measured, verdict=verdict,
        suggestions=suggest(measured, causes, replicas, Seen(result.input_kind, result.precision)),
        examples_per_s=global_batch / measured.step.median if global_batch else None,
        trace=trace or {"logdir": None, "xprof": None},
        notes=device_notes(kind, [*extra, *result.notes, *notes, *([between[1]] if between else [])]),
    )
