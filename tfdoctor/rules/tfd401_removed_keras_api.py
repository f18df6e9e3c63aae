from __future__ import annotations

from pathlib import Path
from typing import Iterator

import libcst as cst

from tfdoctor.lint.facts import CallFact, ModuleFacts
from tfdoctor.lint.findings import Fix, Severity, Violation
from tfdoctor.lint.names import dotted
from tfdoctor.lint.rule import Context, Rule
from tfdoctor.lint.versions import Target

_GENERATOR_METHODS = {"fit_generator": "fit", "evaluate_generator": "evaluate", "predict_generator": "predict"}
_REMOVED_ARGUMENTS = ("workers", "use_multiprocessing", "max_queue_size")


class RemovedKerasApi(Rule):
    """
    ## What it does
    When the target is Keras 3, finds `fit_generator`, `evaluate_generator` and `predict_generator`
    (deprecated since TF 2.1 / Keras 2.4, removed in Keras 3), and `workers=`, `use_multiprocessing=` and
    `max_queue_size=` on `fit`/`evaluate`/`predict` (removed there; they moved to `PyDataset`). The target is
    Keras 3 where you choose it (`--target-keras`, `[tool.tfdoctor]`), your project pins it, the code uses
    Keras 3 APIs, or the code shows no Keras 2 but these calls and the newest or installed Keras is 3 (they
    are then a warning: the code may be meant for Keras 2, and the message says that Keras 3 is assumed
    because nothing but these calls shows Keras 2), unless it is standalone Keras (`import keras`),
    whose `fit` takes no generator before 2.4. Code that shows or pins Keras 2 otherwise (`lr=`, `model.optimizer.lr`,
    `keras.optimizers.legacy`, `keras==2.10`), or TensorFlow before 2.1, is not flagged: there these calls
    run (deprecated aliases, which TensorFlow warns about when they run), and the one note of the run says
    what Keras 3 would break, which `--target-keras 3` lists. A model another library builds (DeepChem's
    `KerasModel`) and a class of the project's own (ktrain's `self.predict_generator`) have methods of their
    own by these names, and are left alone; so is a call in a branch taken by the Keras version
    (`if keras.__version__ ...`).

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
        only_these = _only_these_calls_show(keras)
        keras_2 = keras.below(3) and (not only_these or _standalone(facts))
        if keras_2 or _tensorflow_1(context, facts):
            return  # Keras 2 runs them (deprecated aliases); the run's note says what Keras 3 would break
        for call in facts.calls:
            if _another_librarys_model(facts, call) or _own_method(facts, call) or _version_branch(call):
                continue
            removed = [a.keyword.value for a in call.node.args if a.keyword and a.keyword.value in _REMOVED_ARGUMENTS]
            if call.attr in _GENERATOR_METHODS:
                replacement = _GENERATOR_METHODS[call.attr]
                fix = None if removed else Fix(call.node.func, call.node.func.with_changes(
                    attr=cst.Name(replacement)), f"rename {call.attr} to {replacement}")
                assumed = _KERAS_3_MET if only_these and keras.below(3) else self.assumed(
                    context, "keras", facts, call.node)
                yield self.report(call.node.func, "method", statement=call.statement, fix=fix,
                                  assumed=assumed, construct=call.node,
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


# What a finding says it assumes when only these calls told Keras 2: not them, but the Keras the code meets
_KERAS_3_MET = "Keras 3 assumed: nothing but these generator methods shows Keras 2"
_THESE_CALLS = tuple(f"`{method}`" for method in _GENERATOR_METHODS)  # how version evidence cites them


def _only_these_calls_show(keras: Target) -> bool:
    """Whether a Keras 2 target rests only on `fit_generator` & co. themselves: code that shows nothing else of
    Keras 2 runs on the Keras it meets, 3 today, where they fail."""
    return keras.kind == "code" and bool(keras.sightings) and all(
        cited.startswith(_THESE_CALLS) for cited, _, _ in keras.sightings)


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


_TF_KERAS_MODELS = ("tensorflow.keras.models", "tensorflow.keras.layers", "tensorflow.keras.applications")


def _standalone(facts: ModuleFacts) -> bool:
    """Whether the module builds its models with standalone Keras (`import keras`, `from keras.models import
    ...`), not with `tf.keras` (`from tensorflow import keras`, `tensorflow.keras.models`); an optimizer taken
    from `tf.keras` does not make the model one."""
    names = [(fact.module, fact.symbol) for fact in facts.imports if fact.level == 0]
    tf_keras = any(module == "tensorflow.keras" or module.startswith(_TF_KERAS_MODELS)
                   or (module == "tensorflow" and symbol == "keras") for module, symbol in names)
    return not tf_keras and any(module == "keras" or module.startswith("keras.") for module, _ in names)
