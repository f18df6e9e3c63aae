"""YOLOv3 (Darknet-53 backbone, three-scale head) and YOLOv3-tiny as Keras 3 functional models.

Each model maps (B, S, S, 3) float images in [0, 1] to raw head outputs, one per scale, coarse to
fine, shaped (B, S / stride, S / stride, anchors, 5 + classes): tx, ty, tw, th, objectness, class logits.
Build them inside ``strategy.scope()`` when training with a distribution strategy.
"""

from __future__ import annotations

from typing import Callable

import keras
from keras import layers

from tfdoctor.reference.spec import MAX_STRIDE


def _filters(count: int, width: float) -> int:
    return max(8, int(round(count * width)))


def _conv(x, filters: int, size: int, stride: int = 1):
    """Darknet convolution: conv without bias, batch norm, leaky ReLU."""
    x = layers.Conv2D(filters, size, strides=stride, padding="same", use_bias=False)(x)
    x = layers.BatchNormalization()(x)
    return layers.LeakyReLU(negative_slope=0.1)(x)


def _residual_stage(x, filters: int, blocks: int):
    x = _conv(x, filters, 3, stride=2)
    for _ in range(blocks):
        shortcut = x
        x = _conv(x, filters // 2, 1)
        x = _conv(x, filters, 3)
        x = layers.Add()([shortcut, x])
    return x


def _output(x, size: int, anchors: int, num_classes: int):
    """1x1 prediction conv reshaped to (grid, grid, anchors, 5 + classes)."""
    x = layers.Conv2D(anchors * (5 + num_classes), 1)(x)
    return layers.Reshape((size, size, anchors, 5 + num_classes))(x)


def _check(img_size: int, width: float) -> None:
    if img_size < MAX_STRIDE or img_size % MAX_STRIDE:
        raise ValueError(f"image size must be a positive multiple of {MAX_STRIDE}, got {img_size}")
    if width <= 0:
        raise ValueError(f"width multiplier must be positive, got {width}")


def build_yolov3(img_size: int = 416, num_classes: int = 80, width: float = 1.0, anchors: int = 3) -> keras.Model:
    """YOLOv3: Darknet-53 and a three-scale head (strides 32, 16, 8); ``width`` scales every layer's filters."""
    _check(img_size, width)
    f = lambda n: _filters(n, width)  # noqa: E731
    inputs = keras.Input((img_size, img_size, 3), name="images")
    x = _conv(inputs, f(32), 3)
    x = _residual_stage(x, f(64), 1)
    x = _residual_stage(x, f(128), 2)
    route8 = x = _residual_stage(x, f(256), 8)
    route16 = x = _residual_stage(x, f(512), 8)
    x = _residual_stage(x, f(1024), 4)

    outputs = []
    for stride, filters, route in ((32, 512, route16), (16, 256, route8), (8, 128, None)):
        for size, n in ((1, filters), (3, filters * 2), (1, filters), (3, filters * 2), (1, filters)):
            x = _conv(x, f(n), size)
        head = _conv(x, f(filters * 2), 3)
        outputs.append(_output(head, img_size // stride, anchors, num_classes))
        if route is not None:
            x = _conv(x, f(filters // 2), 1)
            x = layers.UpSampling2D(2)(x)
            x = layers.Concatenate()([x, route])
    return keras.Model(inputs, outputs, name="yolov3")


def build_yolov3_tiny(img_size: int = 416, num_classes: int = 80, width: float = 1.0, anchors: int = 3) -> keras.Model:
    """YOLOv3-tiny: seven conv/max-pool layers and a two-scale head (strides 32, 16)."""
    _check(img_size, width)
    f = lambda n: _filters(n, width)  # noqa: E731
    inputs = keras.Input((img_size, img_size, 3), name="images")
    x = inputs
    for n in (16, 32, 64, 128):
        x = _conv(x, f(n), 3)
        x = layers.MaxPooling2D(2, 2, padding="same")(x)
    route16 = x = _conv(x, f(256), 3)
    x = layers.MaxPooling2D(2, 2, padding="same")(x)
    x = _conv(x, f(512), 3)
    x = layers.MaxPooling2D(2, 1, padding="same")(x)
    x = _conv(x, f(1024), 3)
    x = _conv(x, f(256), 1)

    coarse = _output(_conv(x, f(512), 3), img_size // 32, anchors, num_classes)
    x = _conv(x, f(128), 1)
    x = layers.UpSampling2D(2)(x)
    x = layers.Concatenate()([x, route16])
    fine = _output(_conv(x, f(256), 3), img_size // 16, anchors, num_classes)
    return keras.Model(inputs, [coarse, fine], name="yolov3-tiny")


MODELS: dict[str, Callable[..., keras.Model]] = {"yolov3": build_yolov3, "yolov3-tiny": build_yolov3_tiny}
