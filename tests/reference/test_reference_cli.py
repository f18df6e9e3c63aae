"""``tfdoctor reference`` through the real command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.reference.conftest import ROOT, run_reference


def test_command_module_imports_no_tensorflow_or_opencv():
    code = "import sys, tfdoctor.reference.command; print(sorted({'tensorflow', 'cv2', 'keras'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--replicas", "0"], "--replicas: must be between 1 and 64, got 0"),
        (["--replicas", "two"], "--replicas: expected a whole number, got 'two'"),
        (["--img-size", "100"], "--img-size: must be a multiple of 32, got 100"),
        (["--batch-per-replica", "0"], "--batch-per-replica: must be at least 1, got 0"),
    ],
)
def test_bad_flags_give_one_line(tmp_path, args, message):
    result = run_reference("--variant", "tuned", *args, cache=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_bad_annotation_file_names_the_line(tmp_path):
    annotations = tmp_path / "annotations.txt"
    annotations.write_text("# header\nmissing.jpg 1,2,3,4,0\n")
    result = run_reference("--variant", "naive", "--annotations", str(annotations), cache=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {annotations}:2: image file not found: {tmp_path / 'missing.jpg'}"


@pytest.mark.tf
@pytest.mark.untimed
@pytest.mark.parametrize("variant", ["naive", "tuned"])
def test_json_run_on_two_replicas(cache_home, variant):
    result = run_reference(
        "--variant", variant, "--replicas", "2", "--steps", "2", "--batch-per-replica", "2", "--width", "0.25",
        "--num-images", "16", "--json", cache=cache_home,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == {"variant", "replicas", "steps", "images_per_s", "loss_first", "loss_last"}
    assert (report["variant"], report["replicas"], report["steps"]) == (variant, 2, 2)
    assert report["images_per_s"] > 0 and report["loss_first"] > 0 and report["loss_last"] > 0


@pytest.mark.tf
@pytest.mark.untimed
def test_text_run_names_the_devices(cache_home):
    result = run_reference(
        "--variant", "tuned", "--steps", "1", "--batch-per-replica", "1", "--width", "0.25", "--num-images", "8",
        cache=cache_home,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("tuned: 1 replica(s) on ") and "images/s, loss " in result.stdout


@pytest.mark.tf
@pytest.mark.untimed
def test_out_of_memory_is_one_line(monkeypatch, capsys, examples):
    import tensorflow as tf

    from tfdoctor.cli import main
    from tfdoctor.reference import train

    def exhausted(*args, **kwargs):
        raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")

    monkeypatch.setattr(train, "run_training", exhausted)
    code = main(["reference", "--variant", "tuned", "--batch-per-replica", "512", "--num-images", "64"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: out of memory at 512 images per replica (yolov3-tiny, 160 px); lower --batch-per-replica"
