"""Geometry shared by model, targets and loss: input size, classes, output strides and anchors."""

from __future__ import annotations

from dataclasses import dataclass

# Darknet anchors (w, h) in pixels for a 416 px input, one tuple per output scale, coarse to fine.
YOLOV3_ANCHORS = (
    ((116, 90), (156, 198), (373, 326)),
    ((30, 61), (62, 45), (59, 119)),
    ((10, 13), (16, 30), (33, 23)),
)
YOLOV3_TINY_ANCHORS = (
    ((81, 82), (135, 169), (344, 319)),
    ((10, 14), (23, 27), (37, 58)),
)
MODEL_STRIDES = {"yolov3": (32, 16, 8), "yolov3-tiny": (32, 16)}
MODEL_ANCHORS = {"yolov3": YOLOV3_ANCHORS, "yolov3-tiny": YOLOV3_TINY_ANCHORS}
MAX_STRIDE = 32


@dataclass(frozen=True)
class YoloSpec:
    """Everything targets and loss need to know about a YOLO head.

    ``anchors[s]`` are the (w, h) anchors in pixels of output scale ``s``, whose cells are
    ``strides[s]`` pixels wide. Every scale has the same number of anchors.
    """

    img_size: int
    num_classes: int
    strides: tuple[int, ...]
    anchors: tuple[tuple[tuple[float, float], ...], ...]
    iou_threshold: float = 0.3  # also assign a box to every anchor whose shape IoU exceeds this
    ignore_threshold: float = 0.5  # no objectness penalty where a prediction overlaps a box this much
    label_smoothing: float = 0.05

    def __post_init__(self) -> None:
        if len(self.strides) != len(self.anchors):
            raise ValueError("one anchor set per stride")
        if len({len(a) for a in self.anchors}) != 1:
            raise ValueError("every scale needs the same number of anchors")
        for stride in self.strides:
            if self.img_size % stride:
                raise ValueError(f"image size {self.img_size} is not a multiple of stride {stride}")

    @property
    def grids(self) -> tuple[int, ...]:
        return tuple(self.img_size // s for s in self.strides)

    @property
    def anchors_per_scale(self) -> int:
        return len(self.anchors[0])


def spec_for(model: str, img_size: int, num_classes: int) -> YoloSpec:
    """The spec of a named model, its 416 px Darknet anchors scaled to ``img_size``."""
    if model not in MODEL_STRIDES:
        raise ValueError(f"unknown model {model!r}; choose from {', '.join(MODEL_STRIDES)}")
    scale = img_size / 416
    anchors = tuple(tuple((w * scale, h * scale) for w, h in level) for level in MODEL_ANCHORS[model])
    return YoloSpec(img_size, num_classes, MODEL_STRIDES[model], anchors)
