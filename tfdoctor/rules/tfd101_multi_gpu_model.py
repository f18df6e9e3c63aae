from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.dataflow import keras_mixed, standalone_keras, trained_multi_gpu_models
from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule


class MultiGpuModel(Rule):
    """
    ## What it does
    Finds calls to `keras.utils.multi_gpu_model`, in any import spelling (`tf.keras.utils`, standalone
    `keras`, `keras.utils.training_utils`, or an alias). A call whose result a function (or a script's
    `if __name__ == "__main__":` block) assigns to a name that nothing reads afterwards
    (`parallel = multi_gpu_model(model, 2)`, then `model.fit(...)`), or one whose result only has weights loaded
    into it or saved from it (a script converting a multi-GPU checkpoint: `parallel.load_weights(path)`, then
    `model.save_weights(out)`), is left alone: the training does not run on it.

    The `multi_gpu_model` of the standalone `keras` package (`from keras.utils import multi_gpu_model`) is not
    reported: it is that of multi-backend Keras up to 2.3, the last to have it, whose models no `tf.distribute`
    strategy drives, and there it is the supported way. Where its template is left on GPU 0, the opt-in TFD113
    says so. It is reported where the module takes the rest of its Keras from TensorFlow (`from tensorflow import
    keras`), so that it wraps a `tf.keras` model: from TensorFlow 2.1 on, that call fails. Standalone Keras 2.4 and
    later have no `multi_gpu_model` (an `ImportError`), and Keras 2.3 and earlier look the GPUs up through
    `tf.config.experimental_list_devices`, which TensorFlow 2.1 removed (an `AttributeError`).

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
                "mixed": ("standalone Keras's `multi_gpu_model` on a `tf.keras` model fails from TensorFlow 2.1 on; "
                          "use `tf.distribute.MirroredStrategy`")}
    triggers = ("multi_gpu_model",)
    INVALID = (
        "import tensorflow as tf\nparallel = tf.keras.utils.multi_gpu_model(model, gpus=4)  # TFD101\nparallel.fit(x, y)\n",
        "from tensorflow.keras.utils import multi_gpu_model as mgm\nm = mgm(base, 2)  # TFD101\nm.compile(loss='mse')\n",
        "import tensorflow.compat.v1 as tf\nm = tf.keras.utils.multi_gpu_model(base, gpus=2, cpu_merge=False)  # TFD101\n"
        "m.fit(x, y)\n",
        # weights loaded, then trained on
        "import tensorflow as tf\nparallel = tf.keras.utils.multi_gpu_model(model, gpus=2)  # TFD101\n"
        "parallel.load_weights(path)\nparallel.fit(x, y)\n",
        # standalone Keras's function on the model of a module whose Keras is TensorFlow's
        "from tensorflow import keras\ndef create(model, gpus):\n    from keras.utils import multi_gpu_model\n"
        "    parallel = multi_gpu_model(model, gpus=gpus)  # TFD101\n    parallel.compile(loss='mse')\n"
        "    return parallel\n",
    )
    VALID = (
        "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\nwith strategy.scope():\n"
        "    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])\n",
        "import tensorflow as tf\ndef multi_gpu_model(m):\n    return m\nmodel = multi_gpu_model(tf.keras.Sequential())\n",
        "import keras\n# multi_gpu_model was removed; see the migration notes\nmodel = keras.Sequential()\n",
        # the parallel model is never used: the single-device model is compiled and trained
        "from tensorflow.keras.utils import multi_gpu_model\ndef train(model, x, y):\n"
        "    parallel_model = multi_gpu_model(model, gpus=2)\n    model.compile(loss='mse')\n    model.fit(x, y)\n",
        "from tensorflow.keras.utils import multi_gpu_model\nif __name__ == '__main__':\n"
        "    parallel = multi_gpu_model(model, gpus=2) if gpus > 1 else model\n    model.fit(x, y)\n",
        # a checkpoint conversion: weights loaded into the parallel model, the template's saved
        "import sys\nimport tensorflow as tf\nparallel = tf.keras.utils.multi_gpu_model(model, gpus=2)\n"
        "parallel.load_weights(sys.argv[1])\nmodel.save_weights(sys.argv[2])\n",
        # standalone multi-backend Keras, where it is the supported way (TFD113 says where its template is)
        "import keras\nmodel = build()\nparallel = keras.utils.multi_gpu_model(model, gpus=2)\nparallel.fit(x, y)\n",
        # standalone Keras both for the model and for the function, TensorFlow imported beside it
        "import tensorflow as tf\nfrom keras.layers import Dense\nfrom keras.utils import multi_gpu_model\n"
        "parallel = multi_gpu_model(model, gpus=2)\nparallel.fit(x, y)\n",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for call in trained_multi_gpu_models(facts):
            if keras_mixed(facts, call):
                yield self.report(call, "mixed")
            elif not standalone_keras(facts, call):
                yield self.report(call)
