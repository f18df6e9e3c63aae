"""``tfdoctor reference``: train the reference YOLOv3 workload, naive or tuned, and report throughput.

Imports nothing heavy at module level: the linter builds its parser from this module.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HELP = "Train the reference YOLOv3 workload (naive or tuned) on N replicas and report images/s and loss."
MAX_REPLICAS = 64


def _bounded_int(low: int, high: int | None = None, multiple: int = 1):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {value}")
        if value % multiple:
            raise argparse.ArgumentTypeError(f"must be a multiple of {multiple}, got {value}")
        return value

    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--variant", choices=("naive", "tuned"), required=True, help="training loop to run")
    parser.add_argument(
        "--replicas", type=_bounded_int(1, MAX_REPLICAS), default=1, help="number of replicas N (default 1)"
    )
    parser.add_argument("--steps", type=_bounded_int(1), default=20, help="training steps (default 20)")
    parser.add_argument("--model", choices=("yolov3", "yolov3-tiny"), default="yolov3-tiny")
    parser.add_argument(
        "--img-size", type=_bounded_int(32, 1024, multiple=32), default=160, help="input side in px (default 160)"
    )
    parser.add_argument("--batch-per-replica", type=_bounded_int(1), default=4, help="images per replica (default 4)")
    parser.add_argument("--width", type=_positive_float, default=1.0, help="model width multiplier (default 1.0)")
    parser.add_argument(
        "--source-size", type=_bounded_int(32, 4096), default=1024,
        help="side of the synthetic photos, resized to --img-size when loaded (default 1024)",
    )
    parser.add_argument("--num-classes", type=_bounded_int(1, 1000), default=3, help="synthetic classes (default 3)")
    parser.add_argument(
        "--num-images", type=_bounded_int(1), default=256, help="synthetic images to draw (default 256)"
    )
    parser.add_argument("--annotations", type=Path, help="train on this annotation file instead of synthetic data")
    parser.add_argument("--seed", type=int, default=0, help="data, augmentation and weight seed (default 0)")
    parser.add_argument("--learning-rate", type=_positive_float, default=1e-3)
    parser.add_argument("--no-augment", action="store_true", help="turn random augmentation off")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def run(args: argparse.Namespace) -> int:
    from tfdoctor.reference.annotations import AnnotationError, read_annotations
    from tfdoctor.reference.data import ensure_dataset

    try:  # check the data before TensorFlow starts, so bad input fails fast
        path = args.annotations or ensure_dataset(
            args.num_images, max(args.source_size, args.img_size), args.seed, args.num_classes
        )
        examples = read_annotations(path, args.num_classes)
    except AnnotationError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"error: cannot write the synthetic dataset: {error}", file=sys.stderr)
        return 2

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from tfdoctor.reference.devices import ReplicaSetupError
    from tfdoctor.reference.train import TrainConfig, run_training

    tf.get_logger().setLevel("ERROR")
    config = TrainConfig(
        model=args.model,
        img_size=args.img_size,
        batch_per_replica=args.batch_per_replica,
        num_classes=args.num_classes,
        width=args.width,
        learning_rate=args.learning_rate,
        seed=args.seed,
        augment=not args.no_augment,
    )
    try:
        result = run_training(args.variant, args.replicas, args.steps, config, examples)
    except ReplicaSetupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except tf.errors.ResourceExhaustedError:
        print(
            f"error: out of memory at {args.batch_per_replica} images per replica "
            f"({args.model}, {args.img_size} px); lower --batch-per-replica",
            file=sys.stderr,
        )
        return 2
    if args.json:
        keys = ("variant", "replicas", "steps", "images_per_s", "loss_first", "loss_last")
        print(json.dumps({key: getattr(result, key) for key in keys}))
    else:
        print(
            f"{result.variant}: {result.replicas} replica(s) on {result.device_kind}, {result.steps} steps, "
            f"{result.images_per_s:.1f} images/s, loss {result.loss_first:.4g} -> {result.loss_last:.4g}"
        )
    return 0
