"""`tfdoctor profile [flags] -- python train.py ARGS`: run the script under the launcher in a child process,
follow its events, and join the result with the script's lint findings (no TensorFlow here)."""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import tfdoctor
from tfdoctor.profile.report import Report
from tfdoctor.profile.runner import OutOfMemory, ProfileError, run_worker
from tfdoctor.profile.script import join
from tfdoctor.profile.script.target import Target, module_target
from tfdoctor.profile.verdict import Verdict

OnEvent = Callable[[dict[str, Any]], None]
PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
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


def profile_script(options: ScriptOptions, on_event: OnEvent) -> Report:
    """Measure the script's training steps on `options.gpus` replicas; ProfileError says why not."""
    target = split_command(options.command)
    script = target.path
    config = {"gpus": options.gpus, "steps": options.steps, "warmup": options.warmup,
              "max_seconds": options.max_seconds, "trace_steps": options.trace_steps,
              "trace_dir": str(options.logdir / "script") if options.logdir else None}
    seen: dict[str, Any] = {}

    def follow(event: dict[str, Any]) -> None:
        seen[event["event"]] = event
        on_event(event)

    root = str(Path(tfdoctor.__file__).resolve().parent.parent)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    try:
        result = run_worker(config, follow, options.max_seconds + 300,
                            command=[target.interpreter, "-m", "tfdoctor.profile.script.launch", json.dumps(config),
                                     *target.launch_args], env=env)
    except OutOfMemory as error:
        return _oom_report(options, script, error.message)
    except ProfileError as error:
        raise _explain(seen, script, error) from None
    devices = seen.get("devices", {})
    return join.build(result, join.lint_findings(script, target.package), options.gpus,
                      devices.get("kind", "unknown"), devices.get("names", []), target.name, [])


def _explain(seen: dict[str, Any], script: Path, error: ProfileError) -> ProfileError:
    """The runner's error, said in the script's terms where its events tell more."""
    if "crash" in seen:
        crash = seen["crash"]
        return ProfileError(f"{script} failed with exit code {crash['code']}: {crash['message']}")
    if "nostep" in seen and seen["nostep"].get("steps_seen"):
        return ProfileError(f"only {seen['nostep']['steps_seen']} training steps ran in {script}: the warm-up "
                            "and at least 2 measured steps are needed; lower --warmup or let it train longer")
    if "nostep" in seen:
        why = seen["nostep"].get("ended") or "stopped"
        return ProfileError(f"no training step seen in {script} (it {why}); hooked: "
                            f"{', '.join(seen['nostep']['hooked'])}; {MARKER_HINT}")
    return error


def _oom_report(options: ScriptOptions, script: Path, detail: str) -> Report:
    verdict = Verdict("out-of-memory", "high", (
        f"Out of memory running {script} on {options.gpus} replicas ({detail}). Lower the per-replica batch, use "
        "mixed precision, or accumulate gradients correctly (TFD303); never multi_gpu_model (TFD101)."))
    return Report(mode="script", requested=options.gpus, device_kind="unknown", device_names=[],
                  workload={"name": str(script)}, breakdown=None, verdict=verdict, suggestions=[])
