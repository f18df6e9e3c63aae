"""Detection annotation files: one image a line, ``path x1,y1,x2,y2,cls x1,y1,x2,y2,cls ...``.

Paths are relative to the annotation file's folder (or absolute). Boxes are pixel corners with
``0 <= x1 < x2 <= width`` and ``0 <= y1 < y2 <= height``. Blank lines and ``#`` comments are skipped.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np


class AnnotationError(ValueError):
    """A bad annotation line; the message names the file and line."""


@dataclass(frozen=True)
class Example:
    """One annotated image: ``boxes`` is (k, 4) float32 x1,y1,x2,y2 in pixels, ``classes`` (k,) int32."""

    image: Path
    boxes: np.ndarray
    classes: np.ndarray


def image_size(path: Path) -> tuple[int, int]:
    """(width, height) of a JPEG or PNG file, read from its header without decoding."""
    with open(path, "rb") as f:
        head = f.read(26)
        if head.startswith(b"\x89PNG\r\n\x1a\n"):
            width, height = struct.unpack(">II", head[16:24])
            return width, height
        if not head.startswith(b"\xff\xd8"):
            raise ValueError("not a JPEG or PNG file")
        f.seek(2)
        while True:
            marker = f.read(2)
            if len(marker) < 2 or marker[0] != 0xFF:
                raise ValueError("corrupt JPEG header")
            if marker[1] in (0xD8, 0x01) or 0xD0 <= marker[1] <= 0xD7:  # markers without a length
                continue
            (length,) = struct.unpack(">H", f.read(2))
            if 0xC0 <= marker[1] <= 0xCF and marker[1] not in (0xC4, 0xC8, 0xCC):  # start of frame
                height, width = struct.unpack(">xHH", f.read(5))
                return width, height
            f.seek(length - 2, 1)


def _parse_line(line: str, folder: Path, num_classes: int | None) -> Example:
    fields = line.split()
    image = Path(fields[0])
    image = image if image.is_absolute() else folder / image
    if not image.is_file():
        raise ValueError(f"image file not found: {image}")
    try:
        width, height = image_size(image)
    except (OSError, ValueError, struct.error) as error:
        raise ValueError(f"cannot read image size of {image}: {error}") from None
    boxes, classes = [], []
    for number, field in enumerate(fields[1:], start=1):
        parts = field.split(",")
        try:
            x1, y1, x2, y2 = (float(p) for p in parts[:4])
            cls = int(parts[4])
            if len(parts) != 5:
                raise ValueError
        except (ValueError, IndexError):
            raise ValueError(f"box {number} {field!r} is not x1,y1,x2,y2,cls") from None
        if x2 <= x1 or y2 <= y1:
            raise ValueError(f"box {number} {field!r} has negative or zero size")
        if x1 < 0 or y1 < 0 or x2 > width or y2 > height:
            raise ValueError(f"box {number} {field!r} is outside the {width}x{height} image")
        if cls < 0 or (num_classes is not None and cls >= num_classes):
            raise ValueError(f"box {number} {field!r} has class {cls}, outside 0..{(num_classes or 1) - 1}")
        boxes.append((x1, y1, x2, y2))
        classes.append(cls)
    return Example(image, np.asarray(boxes, np.float32).reshape(-1, 4), np.asarray(classes, np.int32))


def read_annotations(path: Path, num_classes: int | None = None) -> list[Example]:
    """Parse and check an annotation file; raise AnnotationError naming the first bad line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise AnnotationError(f"cannot read annotation file {path}: {error.strerror}") from None
    examples = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            examples.append(_parse_line(line, path.parent, num_classes))
        except ValueError as error:
            raise AnnotationError(f"{path}:{lineno}: {error}") from None
    if not examples:
        raise AnnotationError(f"{path}: no annotated images")
    return examples


def format_line(image: str, boxes: Iterable[tuple[int, int, int, int]], classes: Iterable[int]) -> str:
    """One annotation line for ``image`` (a path as it should appear in the file)."""
    return " ".join([image, *(f"{x1},{y1},{x2},{y2},{c}" for (x1, y1, x2, y2), c in zip(boxes, classes))])
