"""Other all-reduce options for a step traced while they are on: every `ReplicaContext.all_reduce` call that
names no options of its own gets the given `CommunicationOptions` (Keras optimizers sum gradients with one
such call). A MultiWorkerMirroredStrategy can be made once per process, so the measured what-if tries its
options this way, not through a second strategy. Imported only where TensorFlow is."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from tensorflow.python.distribute import distribute_lib


@contextlib.contextmanager
def communication_options(chosen: Any) -> Iterator[None]:
    """While inside, all-reduce calls without options use `chosen` (trace the step inside)."""
    original = distribute_lib.ReplicaContextBase.all_reduce

    def all_reduce(self: Any, reduce_op: Any, value: Any, options: Any = None) -> Any:
        return original(self, reduce_op, value, options or chosen)

    distribute_lib.ReplicaContextBase.all_reduce = all_reduce
    try:
        yield
    finally:
        distribute_lib.ReplicaContextBase.all_reduce = original
