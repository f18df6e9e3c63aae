"""Synthetic dataset: deterministic, cached atomically; annotation files checked line by line."""

from __future__ import annotations

import hashlib
from pathlib import Path

import cv2
import numpy as np
import pytest

from tfdoctor.reference import data
from tfdoctor.reference.annotations import AnnotationError, image_size, read_annotations
from tfdoctor.reference.data import ensure_dataset, write_dataset


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            h.update(path.relative_to(folder).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    first = write_dataset(tmp_path / "a", 12, 96, seed=7, num_classes=4).parent
    second = write_dataset(tmp_path / "b", 12, 96, seed=7, num_classes=4).parent
    other = write_dataset(tmp_path / "c", 12, 96, seed=8, num_classes=4).parent
    assert _digest(first) == _digest(second)
    assert _digest(first) != _digest(other)


def test_dataset_is_valid_and_uses_every_class(tmp_path):
    examples = read_annotations(write_dataset(tmp_path, 40, 128, seed=1, num_classes=5), num_classes=5)
    assert len(examples) == 40
    for example in examples:
        assert image_size(example.image) == (128, 128)
        assert 1 <= len(example.classes) <= data.MAX_OBJECTS
        assert (example.boxes[:, 2:] > example.boxes[:, :2]).all()
    assert set(np.concatenate([e.classes for e in examples])) == set(range(5))


def test_ensure_dataset_caches_under_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = ensure_dataset(num_images=5, img_size=64, seed=3, num_classes=2)
    assert path.is_relative_to(tmp_path / "tfdoctor")
    assert len(read_annotations(path)) == 5
    monkeypatch.setattr(data, "write_dataset", lambda *a: pytest.fail("cached dataset was drawn again"))
    assert ensure_dataset(num_images=5, img_size=64, seed=3, num_classes=2) == path


def test_interrupted_draw_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    real_imwrite = cv2.imwrite
    written = []

    def crash_on_third(name, *args):
        written.append(name)
        if len(written) == 3:
            raise KeyboardInterrupt
        return real_imwrite(name, *args)

    monkeypatch.setattr(data.cv2, "imwrite", crash_on_third)
    with pytest.raises(KeyboardInterrupt):
        ensure_dataset(num_images=5, img_size=64, seed=4, num_classes=2)
    assert list((tmp_path / "tfdoctor" / "reference").iterdir()) == []
    monkeypatch.setattr(data.cv2, "imwrite", real_imwrite)
    assert len(read_annotations(ensure_dataset(num_images=5, img_size=64, seed=4, num_classes=2))) == 5


def test_image_size_reads_jpeg_and_png_headers(tmp_path):
    image = np.zeros((37, 51, 3), np.uint8)
    for name in ("a.jpg", "b.png"):
        cv2.imwrite(str(tmp_path / name), image)
        assert image_size(tmp_path / name) == (51, 37)


@pytest.fixture
def annotation_file(tmp_path):
    """Write an annotation file next to one 64x48 image; return a function of the second line."""
    cv2.imwrite(str(tmp_path / "img.jpg"), np.zeros((48, 64, 3), np.uint8))

    def write(line: str) -> Path:
        path = tmp_path / "annotations.txt"
        path.write_text(f"img.jpg 1,2,30,40,0\n\n# a comment\n{line}\n")
        return path

    return write


@pytest.mark.parametrize(
    "line, message",
    [
        ("missing.jpg 1,1,5,5,0", "image file not found"),
        ("img.jpg 10,10,70,20,0", "outside the 64x48 image"),
        ("img.jpg -1,10,20,20,0", "outside the 64x48 image"),
        ("img.jpg 1,1,5,5,0 20,10,10,20,1", "box 2 '20,10,10,20,1' has negative or zero size"),
        ("img.jpg 1,1,5,5", "is not x1,y1,x2,y2,cls"),
        ("img.jpg 1,1,5,5,zero", "is not x1,y1,x2,y2,cls"),
        ("img.jpg 1,1,5,5,3", "has class 3, outside 0..2"),
    ],
)
def test_bad_line_names_file_and_line(annotation_file, line, message):
    path = annotation_file(line)
    with pytest.raises(AnnotationError) as caught:
        read_annotations(path, num_classes=3)
    text = str(caught.value)
    assert text.startswith(f"{path}:4: ")
    assert message in text
    assert "\n" not in text


def test_good_file_parses_boxes(annotation_file, tmp_path):
    examples = read_annotations(annotation_file("img.jpg 0,0,64,48,2 3.5,4,10,12,1"), num_classes=3)
    assert [len(e.classes) for e in examples] == [1, 2]
    np.testing.assert_array_equal(examples[1].boxes, [[0, 0, 64, 48], [3.5, 4, 10, 12]])
    np.testing.assert_array_equal(examples[1].classes, [2, 1])
    assert examples[0].image == tmp_path / "img.jpg"
