from __future__ import annotations

from typing import Callable, Iterator

import libcst as cst

from tfdoctor.lint.facts import CallFact, ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.names import call_arg, literal_str, main_guard
from tfdoctor.lint.rule import Context, Rule

_WEIGHT_MOVES = ("load_weights", "save_weights", "get_weights", "set_weights")  # no training in them


class MultiGpuModel(Rule):
    """
    ## What it does
    Finds calls to `keras.utils.multi_gpu_model`, in any import spelling (`tf.keras.utils`, standalone
    `keras`, `keras.utils.training_utils`, or an alias). A call whose result a function (or a script's
    `if __name__ == "__main__":` block) assigns to a name that nothing reads afterwards
    (`parallel = multi_gpu_model(model, 2)`, then `model.fit(...)`), or one whose result only has weights loaded
    into it or saved from it (a script converting a multi-GPU checkpoint: `parallel.load_weights(path)`, then
    `model.save_weights(out)`), is left alone: the training does not run on it.

    The `multi_gpu_model` of the standalone `keras` package (`from keras.utils import multi_gpu_model`)
    is that of multi-backend Keras up to 2.3, the last to have it, whose models no `tf.distribute` strategy
    drives: there it is the supported way, and it is reported only when nothing in the module places the
    template on the CPU (a `tf.device("/cpu:0")` block, `cpu_relocation=True`), where GPU 0 holds the
    weights; a template given by the caller (a parameter of the function) was placed where the caller built
    it, which the module does not show.

    ## Why it is bad
    `multi_gpu_model` was removed in TensorFlow 2.4. It keeps the template model's weights on one device
    (GPU 0 unless you build it under `/cpu:0`), slices every batch on the host and gathers all outputs back
    on that device, so that device runs out of memory first and the copies limit the speed-up.

    ## Example
    ```python
    from tensorflow.keras.utils import multi_gpu_model
    parallel = multi_gpu_model(model, gpus=2)  # TFD101
    parallel.compile(optimizer="adam", loss="mse")
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = build_model()
        model.compile(optimizer="adam", loss="mse")
    ```
    """

    code = "TFD101"
    name = "multi-gpu-model"
    severity = Severity.ERROR
    summary = "`keras.utils.multi_gpu_model` (removed in TF 2.4; GPU 0 holds the weights and runs out of memory)."
    MESSAGES = {"default": ("`multi_gpu_model` copies the model onto each GPU by hand; use "
                            "`tf.distribute.MirroredStrategy`"),
                "standalone": ("the template of this `multi_gpu_model` is not placed on the CPU, so GPU 0 holds its "
                               "weights; build it under `tf.device(\"/cpu:0\")`")}
    triggers = ("multi_gpu_model",)
    INVALID = (
        "import tensorflow as tf\nparallel = tf.keras.utils.multi_gpu_model(model, gpus=4)  # TFD101\nparallel.fit(x, y)\n",
        "import keras\nfrom keras.utils import multi_gpu_model as mgm\nm = mgm(base, 2)  # TFD101\nm.compile(loss='mse')\n",
        # standalone Keras, the template built on GPU 0
        "import keras\nmodel = build()\nparallel = keras.utils.multi_gpu_model(model, gpus=2)  # TFD101\n"
        "parallel.fit(x, y)\n",
        "import tensorflow.compat.v1 as tf\nm = tf.keras.utils.multi_gpu_model(base, gpus=2, cpu_merge=False)  # TFD101\n"
        "m.fit(x, y)\n",
        # weights loaded, then trained on
        "import tensorflow as tf\nparallel = tf.keras.utils.multi_gpu_model(model, gpus=2)  # TFD101\n"
        "parallel.load_weights(path)\nparallel.fit(x, y)\n",
    )
    VALID = (
        "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\nwith strategy.scope():\n"
        "    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])\n",
        "import tensorflow as tf\ndef multi_gpu_model(m):\n    return m\nmodel = multi_gpu_model(tf.keras.Sequential())\n",
        "import keras\n# multi_gpu_model was removed; see the migration notes\nmodel = keras.Sequential()\n",
        # the parallel model is never used: the single-device model is compiled and trained
        "from keras.utils import multi_gpu_model\ndef train(model, x, y):\n"
        "    parallel_model = multi_gpu_model(model, gpus=2)\n    model.compile(loss='mse')\n    model.fit(x, y)\n",
        "from keras.utils import multi_gpu_model\nif __name__ == '__main__':\n"
        "    parallel = multi_gpu_model(model, gpus=2) if gpus > 1 else model\n    model.fit(x, y)\n",
        # a checkpoint conversion: weights loaded into the parallel model, the template's saved
        "import sys\nimport tensorflow as tf\nparallel = tf.keras.utils.multi_gpu_model(model, gpus=2)\n"
        "parallel.load_weights(sys.argv[1])\nmodel.save_weights(sys.argv[2])\n",
        # standalone Keras with the template on the CPU: the supported way in multi-backend Keras
        "import tensorflow as tf\nfrom keras.utils.training_utils import multi_gpu_model\ndef build(n):\n"
        "    with tf.device('/cpu:0'):\n        base = make_model()\n    return multi_gpu_model(base, gpus=n)\n",
        "from keras.utils import multi_gpu_model\nparallel = multi_gpu_model(model, gpus=2, cpu_relocation=True)\n",
        # standalone Keras, a template the caller built: where, the module does not show
        "from keras.utils.training_utils import multi_gpu_model\n"
        "def build(base, n):\n    return multi_gpu_model(base, gpus=n)\n",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for call in facts.calls:
            name = facts.resolve(call.func)
            if (name is None or not name.startswith("keras.") or not name.endswith(".multi_gpu_model")
                    or _result_unused(facts, call)):
                continue
            if not _standalone_keras(facts, call):
                yield self.report(call)
            elif not _template_on_cpu(facts, call) and not _template_from_caller(call):
                yield self.report(call, "standalone")


def _standalone_keras(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether the call names the standalone `keras` package's function (`from keras.utils import ...`), not
    `tf.keras`'s."""
    head = (call.func or "").split(".")[0]
    return facts.aliases.get(head, "").split(".")[0] == "keras"


def _template_from_caller(call: CallFact) -> bool:
    """Whether the template is a parameter of the function making the parallel model (a wrapper's
    `ModelMGPU(ser_model, gpus)`): where it was built, the caller knows."""
    template = call_arg(call.node, 0, "model")
    return isinstance(template, cst.Name) and template.value in call.scope.value_params()


def _template_on_cpu(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether the module places a template on the CPU: the call's `cpu_relocation=True`, or any
    `tf.device(...)` block on a CPU device (the template is built there, or moved; when unsure, it is)."""
    relocation = call_arg(call.node, None, "cpu_relocation")
    if isinstance(relocation, cst.Name) and relocation.value == "True":
        return True
    return any((facts.resolve(c.func) or "").endswith(".device")
               and "cpu" in (literal_str(call_arg(c.node, 0, "device_name")) or "").lower() for c in facts.calls)


def _result_unused(facts: ModuleFacts, call: CallFact) -> bool:
    """`parallel = multi_gpu_model(...)` (or `... if gpus > 1 else model`) and nothing trains on `parallel`:
    in a function or a script's main block nothing reads it afterwards (nor a function defined there); anywhere,
    it only has weights loaded into it or saved from it (a script converting a multi-GPU checkpoint)."""
    name = _parallel_name(call)
    if name is None:
        return False
    moves = {f"{name}.{method}" for method in _WEIGHT_MOVES}
    in_function = call.scope.parent is not None or any(main_guard(i.test) for i in call.ifs)
    if in_function and not _read_later(facts, name, call, lambda later: False):
        return True
    return (any(later.func in moves and later.order > call.order for later in facts.calls)
            and not _read_later(facts, name, call, lambda later: later.func in moves))


def _read_later(facts: ModuleFacts, name: str, call: CallFact, ignore: Callable[[CallFact], bool]) -> bool:
    """Whether code after the call, or a function defined in its scope, reads `name`, calls `ignore` accepts aside."""
    return facts.read_later(name, call.scope, call.order, ignore) or any(
        facts.read_later(name, child, -1, ignore) for child in call.scope.children)


def _parallel_name(call: CallFact) -> str | None:
    """The name the statement of the call assigns the parallel model to (alone, or in a conditional)."""
    assign = next((small for small in getattr(call.statement, "body", ()) if isinstance(small, cst.Assign)
                   and (small.value is call.node or isinstance(small.value, cst.IfExp)
                        and call.node in (small.value.body, small.value.orelse))), None)
    if assign is None or len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return None
    return assign.targets[0].target.value
