"""`tfdoctor profile`: measure where each distributed step's time goes, say what bounds it, rank the fixes."""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tfdoctor.profile import protocol
from tfdoctor.profile.protocol import Event
from tfdoctor.profile.report import Report, render
from tfdoctor.profile.runner import ProfileError
from tfdoctor.profile.what_if import CHANGES, WhatIfError, parse_changes

if TYPE_CHECKING:
    from tfdoctor.profile.measure import Options

HELP = "Measure input / all-reduce / host / compute time per step of a multi-replica training run."
MODELS = ("yolov3-tiny", "yolov3")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _width(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 4:
        raise argparse.ArgumentTypeError(f"must be in (0, 4]: {text!r}")
    return value


def _image_size(text: str) -> int:
    value = _positive(text)
    if value % 32:
        raise argparse.ArgumentTypeError(f"must be a multiple of 32 (YOLOv3's largest stride): {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpus", type=_positive, default=2, help="replicas to run (default: 2)")
    parser.add_argument("--pipeline", choices=("naive", "tuned", "both"), default="tuned",
                        help="reference input pipeline and step (default: tuned; both compares them)")
    parser.add_argument("--model", choices=MODELS, default="yolov3-tiny", help="reference model")
    parser.add_argument("--img-size", type=_image_size, default=128, help="input size in pixels (default: 128)")
    parser.add_argument("--batch-per-replica", type=_positive, default=4, help="examples per replica per step")
    parser.add_argument("--width", type=_width, help="model width multiplier (default: 1 on GPUs, 0.75 on CPU)")
    parser.add_argument("--steps", type=_positive,
                        help="measured steps per phase (default: 20 on the reference workload, 10 in script mode)")
    parser.add_argument("--scaling", action="store_true", help="also measure throughput on 1..N replicas")
    parser.add_argument("--logdir", type=Path, default=Path("tfdoctor-profile"),
                        help="where the TensorFlow profiler trace goes (view it with xprof --logdir DIR)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--output", type=Path, help="write the report here (a PNG of the breakdown goes beside it)")
    parser.add_argument("--warmup", type=_positive, default=2, help="steps before the measured ones (default: 2)")
    parser.add_argument("--max-seconds", type=_positive, default=600,
                        help="script mode: give up when no measured window is complete by then; a multi-worker "
                             "job: end it when a worker has not finished by then (default: 600)")
    parser.add_argument("--workers", type=_positive, default=1,
                        help="run a MultiWorkerMirroredStrategy job of this many worker processes on this host, "
                             "on loopback ports (default: 1)")
    parser.add_argument("--from-tf-config", action="store_true",
                        help="run as this host's task of a multi-worker job whose cluster sets TF_CONFIG, and write "
                             "its part into --output-dir; then `tfdoctor report DIR` merges the parts")
    parser.add_argument("--output-dir", type=Path,
                        help="the folder every worker writes its part into (a shared file system on a cluster; "
                             "default with --workers: LOGDIR/workers)")
    parser.add_argument("--workload", default="reference", metavar="MODULE:FUNCTION",
                        help="measure your own workload: a function (strategy, params) -> "
                             "tfdoctor.profile.workload.StepFunctions (default: the reference YOLOv3)")
    parser.add_argument("--workload-param", action="append", default=[], type=_param, metavar="KEY=VALUE",
                        help="a parameter for --workload (VALUE read as JSON, else as text); repeatable")
    parser.add_argument("--what-if", type=_changes, default=[], metavar="LIST",
                        help="after the profile, try each change on the measured step and time it beside today's: "
                             f"'all' or some of {', '.join(CHANGES)}, separated by commas (README: What-if)")
    parser.add_argument("--launches", type=_positive, default=1,
                        help="script mode: launch the script this many times and report the most typical launch, "
                             "each interval widened to hold every launch's (default: 1)")
    parser.add_argument("script_command", nargs="*", metavar="-- python train.py ARGS",
                        help="profile your own training script instead of the reference workload")


def _changes(text: str) -> list[str]:
    try:
        return parse_changes(text)
    except WhatIfError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _param(text: str) -> tuple[str, Any]:
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise argparse.ArgumentTypeError(f"not KEY=VALUE: {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with this combination of flags, or None."""
    if args.from_tf_config and args.output_dir is None:
        return "--from-tf-config needs --output-dir DIR, a folder every worker can write (a shared file system)"
    if (args.from_tf_config or args.workers > 1) and args.pipeline == "both":
        return "a multi-worker job measures one --pipeline variant at a time"
    if args.launches > 1 and (not args.script_command or args.workers > 1 or args.from_tf_config):
        return "--launches repeats a script on this host: use it with `-- python train.py` and without --workers"
    if args.launches > 1 and args.what_if:
        return "--launches and --what-if: try the changes in one launch (they are measured beside today's step)"
    if args.from_tf_config and args.workers > 1:
        return "--from-tf-config runs one task of a job that TF_CONFIG describes; --workers starts a local job"
    return None


def run(args: argparse.Namespace) -> int:
    problem = _usage_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        if args.from_tf_config:
            return _job_task(args)
        if args.workers > 1:
            report = _job_report(args)
        elif args.script_command:
            report = _script_report(args)
        else:
            report = _reference_report(args)
    except ProfileError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return write_report(report, args.format, args.output, args.logdir / "breakdown")


def _options(args: argparse.Namespace) -> Options:
    from tfdoctor.profile.measure import Options

    return Options(gpus=args.gpus, variant=args.pipeline, model=args.model, img_size=args.img_size,
                   batch_per_replica=args.batch_per_replica, width=args.width, steps=args.steps or 20,
                   warmup=args.warmup, scaling=args.scaling, logdir=args.logdir.resolve(), workload=args.workload,
                   params=dict(args.workload_param), what_if=tuple(args.what_if))


def _reference_report(args: argparse.Namespace) -> Report:
    """The reference workload (or --workload), one variant or both (then the first report carries the
    comparison)."""
    from tfdoctor.profile.measure import profile

    options = _options(args)
    variants = ("naive", "tuned") if args.pipeline == "both" else (args.pipeline,)
    reports: dict[str, Report] = {}
    with _progress(Console(stderr=True)) as progress:
        for variant in variants:
            task = progress.add_task(f"{variant}: starting", total=None)
            reports[variant] = profile(replace(options, variant=variant), _follow(progress, task, variant))
            progress.update(task, description=f"{variant}: done", completed=1, total=1)
    report = reports[variants[0]]
    if len(variants) == 2:
        tuned = reports["tuned"]
        both = report.examples_per_s and tuned.examples_per_s  # None where a variant ran out of memory
        report.comparison = {"tuned": tuned.to_json(),
                             "speedup_tuned_over_naive": tuned.examples_per_s / report.examples_per_s if both else None}
    return report


def _script_report(args: argparse.Namespace) -> Report:
    """Script mode: `tfdoctor profile [flags] -- python train.py ARGS`."""
    from tfdoctor.profile.script.parent import ScriptOptions, profile_script

    options = ScriptOptions(command=tuple(args.script_command), gpus=args.gpus, steps=args.steps or 10,
                            warmup=args.warmup, max_seconds=args.max_seconds, logdir=args.logdir.resolve(),
                            what_if=tuple(args.what_if), launches=args.launches)
    with _progress(Console(stderr=True)) as progress:
        task = progress.add_task("script: starting", total=None)
        return profile_script(options, _follow(progress, task, "script"))


def _job_task(args: argparse.Namespace) -> int:
    """`--from-tf-config`: this host's task of a multi-worker job; its part goes into --output-dir."""
    from tfdoctor.profile.cluster.parts import write_part
    from tfdoctor.profile.cluster.task import measure_script_task, measure_task
    from tfdoctor.profile.script.parent import ScriptOptions
    from tfdoctor.profile.cluster.tf_config import ClusterConfigError, from_environment

    try:
        cluster = from_environment(os.environ)
    except ClusterConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    options = replace(_options(args), logdir=args.logdir.resolve() / cluster.task.name, one_replica=False,
                      timeout_s=float(args.max_seconds))
    # Run by `--workers`, the task's events go on to the local job's progress; run by hand, to a bar here.
    channel = protocol.Channel() if os.environ.get(protocol.EVENT_FD_ENV) else None
    with _progress(Console(stderr=True), hidden=channel is not None) as progress:
        task = progress.add_task(f"{cluster.task.name}: starting", total=None)
        follow = _follow(progress, task, cluster.task.name)
        forward = channel.emit if channel else follow
        if args.script_command:
            part = measure_script_task(cluster, ScriptOptions(
                command=tuple(args.script_command), gpus=args.gpus, steps=args.steps or 10, warmup=args.warmup,
                max_seconds=args.max_seconds, logdir=options.logdir, multi_worker=True,
                what_if=tuple(args.what_if)), forward)
        else:
            part = measure_task(cluster, options, forward)
    try:
        path = write_part(args.output_dir.resolve(), part)
    except OSError as error:
        print(f"error: cannot write the part into {args.output_dir}: {error.strerror or error}", file=sys.stderr)
        return 2
    if part.error:
        if channel:
            channel.emit(protocol.Failed(part.error))
        print(f"error: {cluster.task.name}: {part.error}", file=sys.stderr)
        return 2
    print(f"{cluster.task.name}: part written to {path}; once every worker has finished: "
          f"tfdoctor report {args.output_dir}", file=sys.stderr)
    return 0


def _job_report(args: argparse.Namespace) -> Report:
    """`--workers W`: a local multi-worker job (and, with --scaling, a one-worker job to compare with)."""
    from tfdoctor.profile.cluster.job_report import job_report, with_scaling
    from tfdoctor.profile.cluster.local import run_local_job
    from tfdoctor.profile.cluster.parts import PartError, read_parts

    folder = (args.output_dir or args.logdir / "workers").resolve()
    counts = (1, args.workers) if args.scaling else (args.workers,)
    reports = {}
    with _progress(Console(stderr=True)) as progress:
        for workers in counts:
            where = folder if workers == args.workers else folder / "one-worker"
            tasks = {f"worker-{index}": progress.add_task(f"{workers} workers: worker-{index} starting", total=None)
                     for index in range(workers)}

            def on_event(name: str, event: Event, tasks: dict[str, Any] = tasks, workers: int = workers) -> None:
                _follow(progress, tasks[name], f"{workers} workers: {name}")(event)

            run_local_job(workers, _task_args(args), where, float(args.max_seconds), on_event)
            try:
                reports[workers] = job_report(read_parts(where))
            except PartError as error:
                raise ProfileError(str(error)) from None
    report = reports[args.workers]
    return with_scaling(report, reports[1]) if args.scaling else report


def _task_args(args: argparse.Namespace) -> list[str]:
    """The flags each local worker's `--from-tf-config` wrapper runs with: this run's own."""
    flags = ["--gpus", str(args.gpus), "--pipeline", args.pipeline, "--model", args.model, "--img-size",
             str(args.img_size), "--batch-per-replica", str(args.batch_per_replica), "--steps",
             str(args.steps or (10 if args.script_command else 20)),
             "--warmup", str(args.warmup), "--logdir", str(args.logdir.resolve()), "--max-seconds",
             str(args.max_seconds), "--workload", args.workload]
    if args.width:
        flags += ["--width", str(args.width)]
    for key, value in args.workload_param:
        flags += ["--workload-param", f"{key}={json.dumps(value)}"]
    if args.what_if:
        flags += ["--what-if", ",".join(args.what_if)]
    return [*flags, "--", *args.script_command] if args.script_command else flags


def _progress(console: Console, hidden: bool = False) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), console=console, transient=True, disable=hidden)


def _follow(progress: Progress, task: Any, variant: str) -> Callable[[Event], None]:
    def on_event(event: Event) -> None:
        if isinstance(event, protocol.Progress):
            progress.update(task, description=f"{variant}: {event.phase}", completed=event.done, total=event.total)
        elif isinstance(event, protocol.Devices):
            progress.update(task, description=f"{variant}: {len(event.names)} {event.kind} replicas ready")
    return on_event


def write_report(report: Report, format: str, output: Path | None, image_base: Path) -> int:
    """Print the report (or write it to `output`) with a PNG of its breakdown beside it (or at `image_base`)."""
    from tfdoctor.profile.image import write_png

    png = None
    if report.breakdown is not None:
        base = output if output else image_base
        try:
            png = write_png(base.with_suffix(".png"), f"tfdoctor profile: {report.workload.get('name', '')}",
                            report.breakdown, report.verdict.primary, report.what_if)
        except OSError as error:
            print(f"warning: cannot write the breakdown image: {error}", file=sys.stderr)
    if format == "json":
        document = report.to_json()
        document["image"] = str(png) if png else None
        text = json.dumps(document, indent=2) + "\n"
    else:
        buffer = io.StringIO()
        console = Console(file=buffer, width=110) if output else Console()
        render(report, console)
        if png:
            console.print(f"breakdown image: {png}", highlight=False)
        text = buffer.getvalue()
    if output:
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(text, encoding="utf-8")
        except OSError as error:
            print(f"error: cannot write {output}: {error.strerror or error}", file=sys.stderr)
            return 2
        print(f"report written to {output}", file=sys.stderr)
    elif text:
        sys.stdout.write(text)
    return 0
