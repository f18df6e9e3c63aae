from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule


class MultiGpuModel(Rule):
    """
    ## What it does
    Finds calls to `keras.utils.multi_gpu_model`, in any import spelling (`tf.keras.utils`, standalone
    `keras`, `keras.utils.training_utils`, or an alias).

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
                            "`tf.distribute.MirroredStrategy`")}
    triggers = ("multi_gpu_model",)
    INVALID = (
        "import tensorflow as tf\nparallel = tf.keras.utils.multi_gpu_model(model, gpus=4)  # TFD101\n",
        "import keras\nfrom keras.utils import multi_gpu_model as mgm\nm = mgm(base, 2)  # TFD101\n",
        "from keras.utils.training_utils import multi_gpu_model\n"
        "def build(base, n):\n    return multi_gpu_model(base, gpus=n)  # TFD101\n",
        "import tensorflow.compat.v1 as tf\nm = tf.keras.utils.multi_gpu_model(base, gpus=2, cpu_merge=False)  # TFD101\n",
    )
    VALID = (
        "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\nwith strategy.scope():\n"
        "    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])\n",
        "import tensorflow as tf\ndef multi_gpu_model(m):\n    return m\nmodel = multi_gpu_model(tf.keras.Sequential())\n",
        "import keras\n# multi_gpu_model was removed; see the migration notes\nmodel = keras.Sequential()\n",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for call in facts.calls:
            name = facts.resolve(call.func)
            if name is not None and name.startswith("keras.") and name.endswith(".multi_gpu_model"):
                yield self.report(call)
