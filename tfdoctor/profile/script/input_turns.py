"""Fit's input measured in turns. Its step calls fetch their own batch, so the window gives input only as the
calls' excess over the step replayed on a captured batch after the window; on a host whose speed drifts over
seconds that difference moved by a fifth of the step from run to run. Here the same replayed step runs in
alternating blocks on batches of a copy of the script's pipeline and on the captured batch: each round's two
blocks share the machine's drift, so their difference is the input."""

from __future__ import annotations

from typing import Any, Callable

from tfdoctor.profile.phases import timed
from tfdoctor.profile.protocol import InputTurns
from tfdoctor.profile.script.inputs import script_copy
from tfdoctor.profile.script.replay import Progress, Replay
from tfdoctor.profile.trials import BLOCK, DRAIN, MIN_BLOCK_ROUNDS, Side, in_turns

LABEL = "input in turns"
LEAST_ROUNDS = 4  # the rounds stop at trials.TRIAL_SECONDS once this many are done (a slow step's 6 rounds took
# over a minute a launch on a 2-core host); fewer rounds give a wider interval, not a biased one


def measure_in_turns(replay: Replay, source: Any, progress: Progress) -> InputTurns | str:
    """Up to MIN_BLOCK_ROUNDS rounds of BLOCK steps each way (the copy repeated, so it never ends), or why not."""
    batches = script_copy(source, replay.batch, lambda dataset: dataset.repeat())
    if isinstance(batches, str):
        return batches
    fed = Side.warmed(replay.step, batches, DRAIN)
    fed_times, captured_times = in_turns(LABEL, lambda: fed.steady(BLOCK, True), _captured(replay),
                                         MIN_BLOCK_ROUNDS, LEAST_ROUNDS, progress, True)
    return InputTurns(fed_times, captured_times, BLOCK)


def _captured(replay: Replay) -> Callable[[], float]:
    """Seconds per step over BLOCK steps on the captured batch."""
    return lambda: sum(timed(lambda: replay.step(replay.batch)) for _ in range(BLOCK)) / BLOCK
