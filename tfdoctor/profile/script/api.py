"""The Python API: profile a training loop in the user's own process.

    with tfdoctor.profile.session() as prof:      # custom loop
        for batch in dataset:
            train_step(batch)
            prof.step()                            # only needed when no step is found by the hooks
    model.fit(..., callbacks=[tfdoctor.profile.KerasCallback()])

The same hooks as script mode find the steps; after W warm-up and K measured steps the step is replayed
(a few extra updates on one batch) and the report is printed to stderr and kept as `prof.report`. Under
`tfdoctor profile -- python train.py` the session reports to the launcher instead.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from tfdoctor.profile.protocol import NoStep, ScriptMeasured
from tfdoctor.profile.report import Report
from tfdoctor.profile.script import hooks
from tfdoctor.profile.script.recorder import Recorder
from tfdoctor.profile.script.step_callback import StepCallback


class Session:
    """A profiling window over the training steps run inside `with`."""

    def __init__(self, steps: int = 10, warmup: int = 2) -> None:
        self.report: Report | None = None
        self.result: ScriptMeasured | NoStep | None = None
        launched = hooks.recorder()
        self.owner = launched is None or launched.done
        self.recorder = Recorder(steps, warmup, self._done, lambda *_: None) if self.owner else launched

    def __enter__(self) -> Session:
        if self.owner:
            hooks.install(self.recorder)
        return self

    def step(self) -> None:
        """Mark the end of one training step (needed only when the hooks see none)."""
        now = time.perf_counter()
        self.recorder.step("marker", now, now)

    def __exit__(self, *exc: object) -> None:
        if not self.owner or self.report is not None or exc[0] is not None:
            return
        self.recorder.finish(ended="left the profiling session")

    def _done(self, result: ScriptMeasured | NoStep) -> None:
        from rich.console import Console

        from tfdoctor.profile.report import render
        from tfdoctor.profile.script import join

        self.result = result
        if isinstance(result, NoStep):
            print(f"tfdoctor: no training step seen; hooked: {', '.join(result.hooked)}; call prof.step() once "
                  "per step", file=sys.stderr)
            return
        names = hooks.devices()
        kind = "gpu" if any("GPU" in n.upper() for n in names) else "cpu"
        script = getattr(sys.modules["__main__"], "__file__", None)
        findings = join.lint_findings(Path(script)) if script else []
        self.report = join.build(result, findings, len(names) or 1, kind, names, script or "<interactive>", [])
        render(self.report, Console(stderr=True))


def session(steps: int = 10, warmup: int = 2) -> Session:
    return Session(steps, warmup)


class KerasCallback(StepCallback):
    """`model.fit(..., callbacks=[tfdoctor.profile.KerasCallback()])`: the report when the window closes."""

    def __init__(self, steps: int = 10, warmup: int = 2) -> None:
        self.session = Session(steps, warmup)
        super().__init__(self.session.recorder)

    def on_train_begin(self, logs: Any = None) -> None:
        self.session.__enter__()
        super().on_train_begin(logs)

    def on_train_end(self, logs: Any = None) -> None:
        self.session.__exit__(None, None, None)
