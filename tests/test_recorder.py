"""The step window of script mode's Recorder, driven with step times of its own: where the window opens."""

from __future__ import annotations

import pytest

from tfdoctor.profile.protocol import ScriptMeasured

pytestmark = pytest.mark.tf  # the recorder replays steps with TensorFlow


def _window(epochs_left: int, epoch_steps: int | None, step_s: float, steps: int = 3) -> ScriptMeasured:
    """Feeds one fit of `epochs_left` epochs of `epoch_steps` steps (None: one endless epoch) of `step_s`
    seconds each to a Recorder (warm-up 2), until it reports."""
    from tfdoctor.profile.script.recorder import Recorder

    results: list[ScriptMeasured] = []
    recorder = Recorder(steps, 2, results.append, lambda *_: None)
    recorder.epoch_begins(epochs_left)
    for index in range(1000):
        if results:
            break
        recorder.step("fit", index * step_s, (index + 0.5) * step_s)
        if epoch_steps and (index + 1) % epoch_steps == 0:
            recorder.epoch_ended()
            recorder.epoch_begins(epochs_left - (index + 1) // epoch_steps)
    assert results
    return results[0]


def test_the_window_opens_after_a_first_epoch_when_more_follow():
    result = _window(epochs_left=3, epoch_steps=7, step_s=0.1)
    assert result.warmup_steps == 7 and len(result.times.full) == 3
    assert "the window opened in fit's second epoch: the first (7 steps) was the warm-up" in result.notes[0]


def test_a_single_epoch_is_measured_after_the_warm_up_alone():
    result = _window(epochs_left=1, epoch_steps=None, step_s=0.1)
    assert result.warmup_steps == 2
    assert not any("epoch" in note for note in result.notes)


def test_a_first_epoch_longer_than_a_minute_opens_the_window_inside_it():
    result = _window(epochs_left=2, epoch_steps=None, step_s=10.0)  # the 60 s pass at the 7th step's end
    assert result.warmup_steps == 6
    assert any(note.startswith("fit's first epoch ran longer than 60 s: the window opened inside it")
               for note in result.notes)
