"""Synthetic detection data: coloured shapes on textured backgrounds, cached as JPEGs plus annotations."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path

import cv2
import numpy as np

from tfdoctor.reference.annotations import format_line

SHAPES = ("rectangle", "ellipse", "triangle")
GENERATOR_VERSION = 1  # bump when drawing changes, so cached datasets are rebuilt
MAX_OBJECTS = 6
JPEG_QUALITY = 90


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/tfdoctor`` or ``~/.cache/tfdoctor``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tfdoctor"


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    """Low-frequency colour texture plus fine noise, uint8 BGR."""
    coarse = rng.uniform(0, 255, (rng.integers(3, 9), rng.integers(3, 9), 3)).astype(np.float32)
    image = cv2.resize(coarse, (size, size), interpolation=cv2.INTER_CUBIC) * rng.uniform(0.3, 0.8)
    image += rng.normal(0, rng.uniform(4, 16), (size, size, 3))
    return np.clip(image, 0, 255).astype(np.uint8)


def _colour(rng: np.random.Generator, cls: int, num_classes: int) -> tuple[int, int, int]:
    """A vivid BGR colour; with more than three classes the hue band tells classes of one shape apart."""
    bands = math.ceil(num_classes / len(SHAPES))
    band = cls // len(SHAPES)
    hue = rng.uniform(band * 180 / bands, (band + 1) * 180 / bands)
    hsv = np.array([[[hue, rng.uniform(150, 255), rng.uniform(150, 255)]]], np.uint8)
    return tuple(int(c) for c in cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)[0, 0])


def _overlaps(box: np.ndarray, others: list[np.ndarray], limit: float = 0.2) -> bool:
    for other in others:
        iw = min(box[2], other[2]) - max(box[0], other[0])
        ih = min(box[3], other[3]) - max(box[1], other[1])
        if iw > 0 and ih > 0:
            inter = iw * ih
            union = np.prod(box[2:] - box[:2]) + np.prod(other[2:] - other[:2]) - inter
            if inter / union > limit:
                return True
    return False


def draw_image(seed: int, index: int, size: int, num_classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Image ``index`` of the dataset for ``seed``: (BGR uint8 image, (k, 4) int boxes, (k,) classes)."""
    rng = np.random.default_rng([seed, index])
    image = _background(rng, size)
    boxes: list[np.ndarray] = []
    classes: list[int] = []
    for _ in range(rng.integers(1, MAX_OBJECTS + 1)):
        for _attempt in range(10):
            w, h = rng.integers(int(0.12 * size), int(0.5 * size), 2)
            x1, y1 = rng.integers(0, size - w), rng.integers(0, size - h)
            box = np.array([x1, y1, x1 + w, y1 + h])
            if not _overlaps(box, boxes):
                break
        else:
            continue
        cls = int(rng.integers(num_classes))
        colour = _colour(rng, cls, num_classes)
        x2, y2 = x1 + w - 1, y1 + h - 1  # last covered pixel
        shape = SHAPES[cls % len(SHAPES)]
        if shape == "rectangle":
            cv2.rectangle(image, (int(x1), int(y1)), (int(x2), int(y2)), colour, thickness=-1)
        elif shape == "ellipse":
            centre = (int(x1 + x2) // 2, int(y1 + y2) // 2)
            cv2.ellipse(image, centre, (int(x2 - x1) // 2, int(y2 - y1) // 2), 0, 0, 360, colour, thickness=-1)
        else:
            apex = int(rng.integers(x1, x2 + 1))
            points = np.array([[x1, y2], [x2, y2], [apex, y1]], np.int32)
            cv2.fillPoly(image, [points], colour)
        boxes.append(box)
        classes.append(cls)
    noise = rng.normal(0, 6, image.shape)
    image = np.clip(image + noise, 0, 255).astype(np.uint8)
    return image, np.array(boxes, np.int64).reshape(-1, 4), np.array(classes, np.int64)


def write_dataset(folder: Path, num_images: int, img_size: int, seed: int, num_classes: int) -> Path:
    """Draw the dataset into ``folder`` (images/NNNNNN.jpg plus annotations.txt); return the annotation path."""
    (folder / "images").mkdir(parents=True, exist_ok=True)
    lines = []
    for index in range(num_images):
        image, boxes, classes = draw_image(seed, index, img_size, num_classes)
        name = f"images/{index:06d}.jpg"
        if not cv2.imwrite(str(folder / name), image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY]):
            raise OSError(f"could not write {folder / name}")
        lines.append(format_line(name, boxes.tolist(), classes.tolist()))
    annotations = folder / "annotations.txt"
    annotations.write_text("\n".join(lines) + "\n")
    return annotations


def ensure_dataset(num_images: int = 256, img_size: int = 160, seed: int = 0, num_classes: int = 3) -> Path:
    """Path of the cached annotation file for these parameters, drawing the dataset first if needed.

    The dataset is drawn in a temporary folder next to its final place and renamed into place, so an
    interrupted run never leaves a half dataset behind.
    """
    if num_images < 1 or img_size < 32 or not 1 <= num_classes:
        raise ValueError("need at least one image, 32 px and one class")
    root = cache_root() / "reference"
    final = root / f"shapes-v{GENERATOR_VERSION}-n{num_images}-s{img_size}-c{num_classes}-seed{seed}"
    annotations = final / "annotations.txt"
    if annotations.is_file():
        return annotations
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
    try:
        write_dataset(staging, num_images, img_size, seed, num_classes)
        try:
            staging.rename(final)
        except OSError:  # another process finished first
            if not annotations.is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return annotations
