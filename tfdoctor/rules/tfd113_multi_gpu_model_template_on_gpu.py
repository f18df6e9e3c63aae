from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.dataflow import standalone_keras, template_from_caller, template_on_cpu, trained_multi_gpu_models
from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule


class MultiGpuModelTemplateOnGpu(Rule):
    """
    ## What it does
    Finds a `multi_gpu_model` of standalone multi-backend Keras (`from keras.utils import multi_gpu_model`, up
    to Keras 2.3, the last to have it) whose template model nothing in the module places on the CPU: no
    `tf.device("/cpu:0")` block, no `cpu_relocation=True`. A template given by the caller (a parameter of the
    function) was placed where the caller built it, which the module does not show, and is left alone; so is a
    parallel model that training does not run on (see TFD101). The `multi_gpu_model` of `tf.keras` is TFD101's.

    Off by default: over blind reviews of real repositories most of its findings were true but not worth
    reading, since what GPU 0 holds turns on the model's size (a few megabytes for most models), which the
    code does not show. Select it (`--select TFD113`) when a multi-GPU Keras 2 training runs out of memory on
    GPU 0 first.

    ## Why it is bad
    `multi_gpu_model` keeps the template model's weights, and the optimizer's slots, where the template was
    built: GPU 0 unless it is built under `/cpu:0`. GPU 0 also holds its own replica's activations, so it runs
    out of memory first, and the larger the model, the sooner.

    ## Example
    ```python
    from keras.utils import multi_gpu_model
    model = build_model()
    parallel = multi_gpu_model(model, gpus=2)  # TFD113
    parallel.fit(x, y)
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    from keras.utils import multi_gpu_model
    with tf.device("/cpu:0"):
        model = build_model()
    parallel = multi_gpu_model(model, gpus=2)
    parallel.fit(x, y)
    ```
    """

    code = "TFD113"
    name = "multi-gpu-model-template-on-gpu"
    severity = Severity.WARNING
    summary = "A standalone Keras `multi_gpu_model` template not built on the CPU (GPU 0 holds its weights)."
    MESSAGES = {"default": ("the template of this `multi_gpu_model` is not placed on the CPU, so GPU 0 holds its "
                            "weights; build it under `tf.device(\"/cpu:0\")`")}
    triggers = ("multi_gpu_model",)
    OPT_IN = True  # what GPU 0 holds turns on the model's size, which the code does not show
    INVALID = (
        "import keras\nfrom keras.utils import multi_gpu_model as mgm\nm = mgm(base, 2)  # TFD113\nm.compile(loss='mse')\n",
        # the template built on GPU 0
        "import keras\nmodel = build()\nparallel = keras.utils.multi_gpu_model(model, gpus=2)  # TFD113\n"
        "parallel.fit(x, y)\n",
    )
    VALID = (
        # tf.keras's, removed in TF 2.4: TFD101 reports it
        "import tensorflow as tf\nparallel = tf.keras.utils.multi_gpu_model(model, gpus=4)\nparallel.fit(x, y)\n",
        # the template on the CPU: the supported way in multi-backend Keras
        "import tensorflow as tf\nfrom keras.utils.training_utils import multi_gpu_model\ndef build(n):\n"
        "    with tf.device('/cpu:0'):\n        base = make_model()\n    return multi_gpu_model(base, gpus=n)\n",
        "from keras.utils import multi_gpu_model\nparallel = multi_gpu_model(model, gpus=2, cpu_relocation=True)\n",
        # a template the caller built: where, the module does not show
        "from keras.utils.training_utils import multi_gpu_model\n"
        "def build(base, n):\n    return multi_gpu_model(base, gpus=n)\n",
        # the parallel model is never used: the single-device model is trained
        "from keras.utils import multi_gpu_model\ndef train(model, x, y):\n"
        "    parallel_model = multi_gpu_model(model, gpus=2)\n    model.compile(loss='mse')\n    model.fit(x, y)\n",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        for call in trained_multi_gpu_models(facts):
            if standalone_keras(facts, call) and not template_on_cpu(facts, call) and not template_from_caller(call):
                yield self.report(call)
