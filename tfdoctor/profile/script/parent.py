"""`tfdoctor profile [flags] -- python train.py ARGS`: run the script under the launcher in a child process,
follow its events, and join the result with the script's lint findings (no TensorFlow here)."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import tfdoctor
from tfdoctor.profile import protocol
from tfdoctor.profile.breakdown import typical
from tfdoctor.profile.protocol import Event, ScriptConfig
from tfdoctor.profile.report import Report
from tfdoctor.profile.runner import Child, OutOfMemory, ProfileError, raise_failure, run_child, trace_of
from tfdoctor.profile.script import join
from tfdoctor.profile.script.target import Target, module_target
from tfdoctor.profile.suggest import Cause
from tfdoctor.profile.verdict import Verdict
from tfdoctor.profile.what_if import tried

OnEvent = Callable[[Event], None]
PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
OUTPUT_LOG = "script-output.log"  # the script's own output (stdout and stderr), under --logdir
MARKER_HINT = ("add `prof = tfdoctor.profile.session()` around the loop and call `prof.step()` once per step, "
               "or `tfdoctor.profile.KerasCallback()` to Model.fit")


@dataclass(frozen=True)
class ScriptOptions:
    command: tuple[str, ...]
    gpus: int = 2
    steps: int = 10
    warmup: int = 2
    max_seconds: float = 600.0
    logdir: Path | None = None
    trace_steps: int = 3
    multi_worker: bool = False  # one task of a multi-worker job (TF_CONFIG is set; the script makes the strategy)
    what_if: tuple[str, ...] = ()  # changes to try on the captured step (what_if.CHANGES)
    launches: int = 1  # launches of the script measured, each in LOGDIR/launch-K when more than one


def split_command(command: tuple[str, ...]) -> Target:
    """What to run, from `python [-X ...] train.py ARGS`, `python -m pkg.module ARGS` or `train.py ARGS`."""
    words = list(command)
    interpreter = sys.executable
    if words and (PYTHON.match(words[0]) or PYTHON.match(Path(words[0]).name)):
        if os.sep in words.pop(0):
            interpreter = command[0]
        while words and words[0].startswith("-"):
            if words[0] == "-c":
                raise ProfileError("script mode runs a file or a module (`-- python train.py ARGS` or `-- python -m "
                                   "pkg.train ARGS`), not -c: code given on the command line has no source to lint")
            if words[0] == "-m":
                if len(words) < 2:
                    raise ProfileError("no module after `-m`: use `tfdoctor profile -- python -m pkg.train ARGS`")
                return module_target(interpreter, words[1], tuple(words[2:]))
            words.pop(0)
    if not words:
        raise ProfileError("no script after `--`: use `tfdoctor profile -- python train.py ARGS`")
    script = Path(words[0])
    if not script.is_file():
        raise ProfileError(f"script not found: {words[0]}")
    return Target(interpreter, script, tuple(words[1:]))


def run_script(options: ScriptOptions, on_event: OnEvent) -> tuple[Child, Target]:
    """Run the script under the launcher until its result; OutOfMemory, or ProfileError saying why not."""
    target = split_command(options.command)
    script = target.path
    config = ScriptConfig(replicas=options.gpus, steps=options.steps, warmup=options.warmup,
                          max_seconds=options.max_seconds, trace_steps=options.trace_steps,
                          trace_dir=str(options.logdir / "script") if options.logdir else None,
                          multi_worker=options.multi_worker, what_if=list(options.what_if))
    root = str(Path(tfdoctor.__file__).resolve().parent.parent)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    log = options.logdir / OUTPUT_LOG if options.logdir else None
    child = run_child([target.interpreter, "-m", "tfdoctor.profile.script.launch", protocol.encode(config),
                       *target.launch_args], on_event, options.max_seconds + 300, env=env, name=f"profiling {script}",
                      log=log)
    try:
        raise_failure(child, protocol.ScriptMeasured)
    except ProfileError as error:
        raise _explain(child, script, error) from None
    return child, target


def profile_script(options: ScriptOptions, on_event: OnEvent) -> Report:
    """Measure the script's training steps on `options.gpus` replicas, in `options.launches` launches (the
    report is the most typical launch's, its intervals widened to hold every launch's); ProfileError says why
    not."""
    runs = []
    for launch in range(options.launches):
        try:
            runs.append(run_script(replace(options, logdir=_launch_logdir(options, launch)), on_event))
        except OutOfMemory as error:
            return _oom_report(options, split_command(options.command).path, error.message)
    measured = [child.last(protocol.ScriptMeasured) for child, _ in runs]
    assert all(measured)  # run_script returns only a child that sent its result
    devices = runs[0][0].last(protocol.Devices)
    kind = devices.kind if devices else "unknown"
    launches = [join.breakdown_of(result, kind) for result in measured] if len(runs) > 1 else None
    chosen = typical(launches) if launches else 0
    (child, target), result = runs[chosen], measured[chosen]
    trace, lost = trace_of(child, options.logdir is not None and options.trace_steps > 0)
    findings, skipped = join.split_by_run(join.lint_findings(target.path, target.package), result.lines_run)
    notes = [*([lost] if lost else []), *([join.skipped_note(skipped)] if skipped else []),
             *([f"the script's output: {child.log}"] if child.log else [])]
    if launches:
        notes.append(f"{len(launches)} launches of the script, measured one after another: this report is launch "
                     f"{chosen + 1}'s, the one nearest every part's median{' (of two, the first)' if len(launches) == 2 else ''}"
                     ", each interval widened to hold every launch's (a line per launch below)")
    report = join.build(result, findings, options.gpus, kind, devices.names if devices else [], target.name, notes,
                        trace, launches)
    report.what_if = tried(child.events, [Cause(f.code, f.path, f.line) for f in findings], options.what_if)
    return report


def _launch_logdir(options: ScriptOptions, index: int) -> Path | None:
    """Where launch `index` (from 0) writes its trace and output: LOGDIR/launch-K when there are several."""
    if options.logdir is None or options.launches <= 1:
        return options.logdir
    return options.logdir / f"launch-{index + 1}"


def _explain(child: Child, script: Path, error: ProfileError) -> ProfileError:
    """The runner's error, said in the script's terms where its events tell more, with the script's last
    line of output and where the rest of it is."""
    crash, nostep = child.last(protocol.Crash), child.last(protocol.NoStep)
    if crash:
        message = f"{script} failed with exit code {crash.code}: {crash.message}"
    elif nostep and nostep.steps_seen:
        message = (f"only {nostep.steps_seen} training steps ran in {script}: the warm-up and at least 2 measured "
                   "steps are needed; lower --warmup or let it train longer")
    elif nostep:
        message = (f"no training step seen in {script} (it {nostep.ended or 'stopped'}); hooked: "
                   f"{', '.join(nostep.hooked)}; {MARKER_HINT}")
    else:
        return error
    last = f"; its last output: {child.tail[-1][:200]!r}" if child.tail and not crash else ""
    where = f"; all of it: {child.log}" if child.log else ""
    return ProfileError(f"{message}{last}{where}")



def _oom_report(options: ScriptOptions, script: Path, detail: str) -> Report:
    verdict = Verdict("out-of-memory", "high", (
        f"Out of memory running {script} on {options.gpus} replicas ({detail}). Lower the per-replica batch, use "
        "mixed precision, or accumulate gradients correctly (TFD303); never multi_gpu_model (TFD101)."))
    return Report(mode="script", requested=options.gpus, device_kind="unknown", device_names=[],
                  workload={"name": str(script)}, breakdown=None, verdict=verdict, suggestions=[])
