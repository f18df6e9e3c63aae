"""`tfdoctor profile`: measure where each distributed step's time goes, say what bounds it, rank the fixes."""

from __future__ import annotations

import argparse
import io
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tfdoctor.profile import protocol
from tfdoctor.profile.protocol import Event
from tfdoctor.profile.report import Report, render
from tfdoctor.profile.runner import ProfileError

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
                        help="where the TensorFlow profiler trace goes (tensorboard --logdir DIR)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--output", type=Path, help="write the report here (a PNG of the breakdown goes beside it)")
    parser.add_argument("--warmup", type=_positive, default=2, help="steps before the measured ones (default: 2)")
    parser.add_argument("--max-seconds", type=_positive, default=600,
                        help="script mode: give up when no measured window is complete by then (default: 600)")
    parser.add_argument("script_command", nargs="*", metavar="-- python train.py ARGS",
                        help="profile your own training script instead of the reference workload")


def run(args: argparse.Namespace) -> int:
    try:
        report = _script_report(args) if args.script_command else _reference_report(args)
    except ProfileError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return _write(report, args)


def _reference_report(args: argparse.Namespace, workload: str = "reference",
                      params: dict[str, Any] | None = None) -> Report:
    """The reference workload, one variant or both (then the first report carries the comparison).
    `workload` and `params`: another workload in the same places (the tests' injected ones)."""
    from tfdoctor.profile.measure import Options, profile

    options = Options(gpus=args.gpus, model=args.model, img_size=args.img_size,
                      batch_per_replica=args.batch_per_replica, width=args.width, steps=args.steps or 20,
                      warmup=args.warmup, scaling=args.scaling, logdir=args.logdir.resolve(), workload=workload,
                      params=params)
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
                            warmup=args.warmup, max_seconds=args.max_seconds, logdir=args.logdir.resolve())
    with _progress(Console(stderr=True)) as progress:
        task = progress.add_task("script: starting", total=None)
        return profile_script(options, _follow(progress, task, "script"))


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), console=console, transient=True)


def _follow(progress: Progress, task: Any, variant: str) -> Callable[[Event], None]:
    def on_event(event: Event) -> None:
        if isinstance(event, protocol.Progress):
            progress.update(task, description=f"{variant}: {event.phase}", completed=event.done, total=event.total)
        elif isinstance(event, protocol.Devices):
            progress.update(task, description=f"{variant}: {len(event.names)} {event.kind} replicas ready")
    return on_event


def _write(report: Report, args: argparse.Namespace) -> int:
    from tfdoctor.profile.image import write_png

    png = None
    if report.breakdown is not None:
        base = args.output if args.output else args.logdir / "breakdown"
        try:
            png = write_png(base.with_suffix(".png"), f"tfdoctor profile: {report.workload.get('name', '')}",
                            report.breakdown, report.verdict.primary)
        except OSError as error:
            print(f"warning: cannot write the breakdown image: {error}", file=sys.stderr)
    if args.format == "json":
        document = report.to_json()
        document["image"] = str(png) if png else None
        text = json.dumps(document, indent=2) + "\n"
    else:
        buffer = io.StringIO()
        console = Console(file=buffer, width=110) if args.output else Console()
        render(report, console)
        if png:
            console.print(f"breakdown image: {png}", highlight=False)
        text = buffer.getvalue()
    if args.output:
        try:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(text, encoding="utf-8")
        except OSError as error:
            print(f"error: cannot write {args.output}: {error.strerror or error}", file=sys.stderr)
            return 2
        print(f"report written to {args.output}", file=sys.stderr)
    elif text:
        sys.stdout.write(text)
    return 0
