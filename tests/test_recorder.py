"""The step window of script mode's Recorder, driven with step times of its own: where the window opens."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tfdoctor.profile.protocol import ScriptMeasured

pytestmark = pytest.mark.tf  # the recorder replays steps with TensorFlow


def _window(epochs_left: int, epoch_steps: int | None, step_s: float, steps: int = 3,
            between: tuple[float, float] = (0.0, 0.0)) -> ScriptMeasured:
    """Feeds one fit of `epochs_left` epochs of `epoch_steps` steps (None: one endless epoch) of `step_s`
    seconds each to a Recorder (warm-up 2), until it reports; `between`: the seconds from an epoch's last step
    to its end, and from there to the next epoch's first step."""
    from tfdoctor.profile.script.recorder import Recorder

    results: list[ScriptMeasured] = []
    recorder = Recorder(steps, 2, results.append, lambda *_: None)
    recorder.epoch_begins(epochs_left)
    now = 0.0
    for index in range(1000):
        if results:
            break
        recorder.step("fit", now, now + step_s / 2)
        now += step_s
        if epoch_steps and (index + 1) % epoch_steps == 0:
            recorder.epoch_ended(now - step_s / 2 + between[0])
            recorder.epoch_begins(epochs_left - (index + 1) // epoch_steps)
            now += sum(between) - step_s / 2  # the next step starts that long after the last ended
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


def test_the_time_between_fits_epochs_is_reported_apart_from_the_steps():
    from tfdoctor.profile.script.join import between_epochs

    result = _window(epochs_left=3, epoch_steps=7, step_s=0.1, between=(0.2, 1.5))
    assert [(round(b.end_s, 6), round(b.start_s, 6)) for b in result.between_epochs] == [(0.2, 1.5)]
    assert result.epoch_steps == 7
    share, note = between_epochs(result, 0.1)
    assert share == pytest.approx(1.7 / 2.4)
    assert note == ("between fit's epochs: 1.7 s from one epoch's last step to the next one's first (0.2 s to the "
                    "epoch's end: the end of its data, validation, callbacks; 1.5 s to start the next: its callbacks "
                    "and data), against 0.7 s for an epoch's 7 steps: 71% of the training time, outside the steps "
                    "measured above")
    fresh = replace(result, new_iterator_each_epoch=True)
    assert between_epochs(fresh, 0.1)[1].endswith(
        "; fit's dataset ends each epoch, so every epoch starts a new iterator over it: `dataset.repeat()` with "
        "`steps_per_epoch` keeps one")
    quick = _window(epochs_left=3, epoch_steps=7, step_s=0.1, between=(0.002, 0.003))
    assert between_epochs(quick, 0.1) is None  # 5 ms against a 0.7 s epoch: not worth a line
