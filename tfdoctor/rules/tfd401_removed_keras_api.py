from __future__ import annotations

from pathlib import Path
from typing import Iterator

import libcst as cst

from tfdoctor.lint.facts import CallFact, ModuleFacts
from tfdoctor.lint.findings import Fix, Severity, Violation
from tfdoctor.lint.names import dotted
from tfdoctor.lint.rule import Context, Rule

_GENERATOR_METHODS = {"fit_generator": "fit", "evaluate_generator": "evaluate", "predict_generator": "predict"}
_REMOVED_ARGUMENTS = ("workers", "use_multiprocessing", "max_queue_size")


class RemovedKerasApi(Rule):
    """
    ## What it does
    When the target is Keras 3, finds `fit_generator`, `evaluate_generator` and `predict_generator`
    (deprecated since TF 2.1 / Keras 2.4, removed in Keras 3), and `workers=`, `use_multiprocessing=` and
    `max_queue_size=` on `fit`/`evaluate`/`predict` (removed there; they moved to `PyDataset`). The target is
    Keras 3 where you choose it (`--target-keras`, `[tool.tfdoctor]`), your project pins it, or the code uses
    Keras 3 APIs. Code that shows or pins Keras 2 (`lr=`, `model.optimizer.lr`, `keras.optimizers.legacy`,
    `keras==2.10`, or these generator methods themselves, which only Keras 2 has), or TensorFlow before 2.1, is
    not flagged: there these calls run (deprecated aliases, which TensorFlow warns about when they run), and
    the one note of the run says that the code is Keras 2 and what Keras 3 would break, which `--target-keras
    3` lists. A model another library builds (DeepChem's `KerasModel`) and a class of the project's own
    (ktrain's `self.predict_generator`) have methods of their own by these names, and are left alone; so is a
    call in a branch taken by the Keras version (`if keras.__version__ ...`).

    ## Why it is bad
    Under Keras 3 these calls raise `AttributeError`/`TypeError`: `fit`, `evaluate` and `predict` accept
    generators and `Sequence`s directly.

    ## Example
    ```python
    import tensorflow as tf
    model.fit_generator(train_gen, steps_per_epoch=100, epochs=10)  # TFD401
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    model.fit(train_gen, steps_per_epoch=100, epochs=10)
    ```

    Fix (safe): renames `fit_generator` to `fit` (and the others alike) when none of the removed arguments
    remain in the call.
    """

    code = "TFD401"
    name = "removed-keras-api"
    severity = Severity.WARNING
    summary = "`fit_generator` & co., or `workers=`/`use_multiprocessing=` on `fit`, under Keras 3 (removed there)."
    MESSAGES = {
        "method": "`{method}` is removed in Keras 3; use `{replacement}`",
        "arguments": "`{method}` arguments {arguments} are removed in Keras 3; pass them to a `keras.utils.PyDataset`",
    }
    OUTRANKS = ("TFD201",)  # on a `fit_generator(...)` call: renaming it is the first step
    triggers = ("_generator", "workers", "use_multiprocessing", "max_queue_size")
    INVALID = (
        """import keras
history = model.fit_generator(gen(), steps_per_epoch=10, workers=4)  # TFD401
scores = model.evaluate_generator(val_gen)  # TFD401
""",
        """import tensorflow as tf
model.fit(seq, epochs=3, use_multiprocessing=True, workers=8)  # TFD401
""",
        # a Keras model another library builds, compiled here
        """import segmentation_models as sm
import tensorflow as tf
model = sm.Unet("resnet34")
model.compile("adam", "binary_crossentropy")
model.fit_generator(batches, epochs=3)  # TFD401
""",
    )
    VALID = (
        # a branch for the Keras version the code runs under
        """import keras
if int(keras.__version__.split(".")[0]) == 1:
    model.fit_generator(generator, steps_per_epoch=n, epochs=epochs)
else:
    model.fit(generator, steps_per_epoch=n, epochs=epochs)
""",
        # TF 1 code (its `tf.Session` shows it): its Keras trains generators with fit_generator
        """# tfdoctor: target-tensorflow=1.15
import tensorflow as tf
from tensorflow.python.keras.optimizers import Adam
sess = tf.Session(config=config)
model.compile(optimizer=Adam(lr=1e-3), loss="mse")
model.fit_generator(train_generator, epochs=10)
""",
        # a method of the project's own class that bears the name (ktrain's predictor)
        """import tensorflow as tf
class ImagePredictor:
    def predict(self, data):
        return self.predict_generator(self.preprocess(data))
    def predict_generator(self, generator, steps=None):
        return self.model.predict(generator, steps=steps)
""",
        """import tensorflow as tf
model.fit(seq, epochs=3)
""",
        # Keras 2: fit still takes workers=, and predict_generator still runs (a deprecated alias)
        """# tfdoctor: target-keras=2.15
import tensorflow as tf
model.fit(seq, epochs=3, workers=4, use_multiprocessing=True)
model.predict_generator(test_seq)
""",
        # Keras 2.2 with TF 1.x: fit_generator is the way to train on a generator
        """# tfdoctor: target-keras=2.2.4 target-tensorflow=1.12
import keras
model.fit_generator(gen(), steps_per_epoch=10)
""",
        # DeepChem's model wrapper: `fit_generator` and `evaluate_generator` are its own methods
        """import deepchem as dc
import tensorflow as tf
model = dc.models.KerasModel(tf.keras.Sequential(layers), dc.models.losses.L2Loss())
model.fit_generator(batches(train, epochs=10))
print(model.evaluate_generator(batches(valid), [metric], transformers))
""",
        # standalone Keras 2.3: not deprecated there, whatever the TensorFlow
        """# tfdoctor: target-keras=2.3.1 target-tensorflow=2.2
import keras
model.fit_generator(gen(), steps_per_epoch=10)
""",
    )

    def severity_for(self, context: Context) -> Severity:
        return Severity.ERROR if context.targets.keras.at_least(3) else Severity.WARNING

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        keras = context.targets.keras
        if keras.below(3) or _tensorflow_1(context, facts):
            return  # Keras 2 runs them (deprecated aliases); the run's note says what Keras 3 would break
        for call in facts.calls:
            if _another_librarys_model(facts, call) or _own_method(facts, call) or _version_branch(call):
                continue
            removed = [a.keyword.value for a in call.node.args if a.keyword and a.keyword.value in _REMOVED_ARGUMENTS]
            if call.attr in _GENERATOR_METHODS:
                replacement = _GENERATOR_METHODS[call.attr]
                fix = None if removed else Fix(call.node.func, call.node.func.with_changes(
                    attr=cst.Name(replacement)), f"rename {call.attr} to {replacement}")
                yield self.report(call.node.func, "method", statement=call.statement, fix=fix,
                                  assumed=self.assumed(context, "keras", facts, call.node), construct=call.node,
                                  method=call.attr, replacement=replacement)
            elif call.attr in ("fit", "evaluate", "predict") and removed and keras.at_least(3):
                yield self.report(call, "arguments", assumed=self.assumed(context, "keras", facts, call.node),
                                  method=call.attr,
                                  arguments=", ".join(f"`{name}`" for name in removed))


_KERAS_HOMES = frozenset({"keras", "tensorflow", "tf_keras"})


def _another_librarys_model(facts: ModuleFacts, call: CallFact) -> bool:
    """Whether the receiver of a call is, by every value it may hold, an object another installed library built
    and that this module never compiles (DeepChem's `dc.models.KerasModel(...)`: its `fit_generator` is its own
    method, not Keras')."""
    if call.attr not in _GENERATOR_METHODS and call.attr not in ("fit", "evaluate", "predict") or call.receiver is None:
        return False
    receiver = dotted(call.receiver)
    if any(c.attr == "compile" and dotted(c.receiver) == receiver for c in facts.calls):
        return False  # a Keras model another library built (`deepcell.model_zoo.PanopticNet(...)`), compiled here
    origins = facts.values_of(call.receiver, call.scope, call.order)
    return bool(origins) and all(_library_call(origin.model, origin.expr) for origin in origins)


def _tensorflow_1(context: Context, facts: ModuleFacts) -> bool:
    """Whether the target is TensorFlow before 2.1, set by a pin or the user, or shown by this file's own code
    (`tf.Session` at its top): a sibling's `tf.Session` may be a leftover of another program."""
    tensorflow = context.targets.tensorflow
    if not tensorflow.below(2, 1):
        return False
    return tensorflow.kind != "code" or any(Path(path).resolve() == Path(facts.path).resolve()
                                            for _, path, _ in tensorflow.sightings[:1])


def _version_branch(call: CallFact) -> bool:
    """A call in a branch the code takes by the version it runs under (`if int(keras.__version__[0]) == 1:`):
    the author wrote it for that version."""
    return any("__version__" in cst.Module([]).code_for_node(branch.test) for branch in call.ifs)


def _own_method(facts: ModuleFacts, call: CallFact) -> bool:
    """`self.predict_generator(...)` in a class that defines that method (ktrain's `Predictor`): the project's
    own method, not Keras'."""
    if dotted(call.receiver) != "self" or call.attr not in _GENERATOR_METHODS:
        return False
    class_name = facts.enclosing_class(call.scope)
    return class_name is not None and facts.method_named(class_name, call.attr, cross_module=True) is not None


def _library_call(model: object, expr: cst.CSTNode) -> bool:
    """A call of an installed library other than Keras and TensorFlow (not of a project module)."""
    if not isinstance(expr, cst.Call) or not isinstance(model, ModuleFacts):
        return False
    name, resolved = dotted(expr.func), model.resolve(expr.func)
    return (name is not None and resolved is not None and resolved.partition(".")[0] not in _KERAS_HOMES
            and model.imported(name.partition(".")[0]) is None)
