"""The measuring half of tfdoctor: where each distributed training step's time goes.

Flow: devices -> workload -> phases / trace -> breakdown -> verdict -> suggestions -> report. Only
`worker` (run in a child process) imports TensorFlow; everything the user's process runs stays light. The
API (`session()`, `KerasCallback`) imports TensorFlow only when called.
"""

from typing import Any


def session(steps: int = 10, warmup: int = 2) -> Any:
    """`with tfdoctor.profile.session() as prof:` around a training loop (`prof.step()` per step if needed)."""
    from tfdoctor.profile.script.api import session as start

    return start(steps, warmup)


def __getattr__(name: str) -> Any:
    if name == "KerasCallback":  # imports Keras, so only when asked for
        from tfdoctor.profile.script.api import KerasCallback

        return KerasCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
