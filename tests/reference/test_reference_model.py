"""Model builders: output shapes per scale, Darknet parameter counts, input checks."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.tf, pytest.mark.untimed]

tf = pytest.importorskip("tensorflow")

from tfdoctor.reference.model import build_yolov3, build_yolov3_tiny  # noqa: E402


@pytest.mark.parametrize(
    "build, grids", [(build_yolov3, (5, 10, 20)), (build_yolov3_tiny, (5, 10))], ids=["yolov3", "yolov3-tiny"]
)
def test_output_shapes(build, grids):
    model = build(img_size=160, num_classes=3, width=0.25)
    outputs = model(tf.zeros((2, 160, 160, 3)), training=False)
    assert [tuple(o.shape) for o in outputs] == [(2, g, g, 3, 8) for g in grids]


def test_parameter_counts_match_darknet_at_full_width():
    # The published Keras ports of YOLOv3 / YOLOv3-tiny (80 classes, 416 px) have exactly these counts.
    assert build_yolov3(416, 80).count_params() == 62_001_757
    assert build_yolov3_tiny(416, 80).count_params() == 8_858_734


def test_width_multiplier_shrinks_the_model():
    assert build_yolov3_tiny(160, 3, width=0.5).count_params() < build_yolov3_tiny(160, 3).count_params() / 3


@pytest.mark.parametrize("img_size, width", [(100, 1.0), (0, 1.0), (160, 0.0)])
def test_bad_size_or_width(img_size, width):
    with pytest.raises(ValueError):
        build_yolov3_tiny(img_size, 3, width=width)
