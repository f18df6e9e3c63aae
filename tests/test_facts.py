"""Module facts: each spelling and code shape the rules rely on."""

from __future__ import annotations

import libcst as cst
import pytest

from tfdoctor.lint.analysis import tensorflow as tensorflow_facts
from tfdoctor.lint.analysis.tensorflow import _MAX_CHAIN_DEPTH
from tfdoctor.lint.facts import ModuleFacts


def facts_of(code: str) -> ModuleFacts:
    return ModuleFacts(cst.parse_module(code), "example.py", code.splitlines())


@pytest.mark.parametrize(("code", "expression", "expected"), [
    ("import tensorflow as T", "T.split", "tensorflow.split"),
    ("from tensorflow import distribute as d", "d.MirroredStrategy", "tensorflow.distribute.MirroredStrategy"),
    ("from tensorflow.keras.utils import multi_gpu_model as mgm", "mgm", "keras.utils.multi_gpu_model"),
    ("import tensorflow.compat.v1 as tf", "tf.keras.utils.multi_gpu_model", "keras.utils.multi_gpu_model"),
    ("import tensorflow.compat.v1 as tf", "tf.split", "tensorflow.split"),
    ("import keras", "keras.optimizers.Adam", "keras.optimizers.Adam"),
    ("from tensorflow import keras", "keras.layers.Dense", "keras.layers.Dense"),
    ("import tensorflow", "tensorflow.data.Dataset", "tensorflow.data.Dataset"),
    ("import tf_keras as keras", "keras.losses.MSE", "keras.losses.MSE"),
    ("from tensorflow.contrib.distribute import MirroredStrategy", "MirroredStrategy",
     "tensorflow.distribute.MirroredStrategy"),
    ("import numpy as np", "np.zeros", "numpy.zeros"),
    ("import tensorflow as tf", "os.path", None),
])
def test_import_aliases_resolve_to_canonical_names(code, expression, expected):
    assert facts_of(code).resolve(expression) == expected


STRATEGIES = """
import tensorflow as tf
from tensorflow.distribute import MirroredStrategy
s1 = MirroredStrategy()
s2 = tf.distribute.get_strategy()
s3 = s1
class Trainer:
    def __init__(self, strat: tf.distribute.Strategy, dist_strategy=None):
        self.strat = strat
        self.other = dist_strategy
def make(strategy):
    return strategy
not_a_strategy = "mirrored"
"""


def test_strategy_objects():
    names = facts_of(STRATEGIES).strategy_names
    assert {"s1", "s2", "s3", "strat", "self.strat", "dist_strategy", "self.other", "strategy"} <= names
    assert "not_a_strategy" not in names


REPLICAS = """
import functools
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def by_name(x): return x
def via_partial(x, k): return x
def via_lambda(x): return x
def outer():
    def nested(x): return x
    return strategy.run(nested, args=(1,))
class T:
    def method(self, x): return x
    def go(self):
        return strategy.run(self.method, args=(1,))
strategy.run(by_name, args=(1,))
strategy.run(functools.partial(via_partial, k=2), args=(1,))
wrapped = functools.partial(via_partial, k=3)
strategy.experimental_run_v2(wrapped, args=(1,))
strategy.run(lambda v: via_lambda(v), args=(1,))
strategy.extended.call_for_each_replica(by_name, args=(1,))
"""


def test_replica_functions_in_every_shape():
    facts = facts_of(REPLICAS)
    assert len(facts.run_calls) == 7
    names = sorted(s.qualname for s in facts.replica_functions)
    assert names == ["<lambda>", "T.method", "by_name", "outer.nested", "via_lambda", "via_partial"]


TF_FUNCTIONS = """
import tensorflow as tf
from tensorflow import function
@tf.function
def a(x): return x
@tf.function(jit_compile=True)
def b(x): return x
@function
def c(x): return x
def d(x): return x
d_graph = tf.function(d)
lam = tf.function(lambda x: x)
def e(x): return x
"""


def test_tf_function_wrapped_functions():
    facts = facts_of(TF_FUNCTIONS)
    assert sorted(s.name for s in facts.tf_functions) == ["<lambda>", "a", "b", "c", "d"]


SCOPES = """
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()
def build():
    return helper()
def helper():
    return tf.keras.Sequential()
def unrelated():
    return tf.keras.Sequential()
with strategy.scope():
    model = build()
"""


def test_scope_blocks_and_functions_called_from_them():
    facts = facts_of(SCOPES)
    assert len(facts.scope_blocks) == 1
    assert sorted(s.name for s in facts.scoped_functions) == ["build", "helper"]


CHAINS = """
import tensorflow as tf
def make():
    ds = tf.data.Dataset.from_tensor_slices(x)
    ds = ds.shuffle(100)
    ds = ds.map(f).batch(8)
    return ds.prefetch(1)
train = make()
more = train.repeat()
"""


def test_dataset_chains_across_assignments_and_returns():
    facts = facts_of(CHAINS)
    more = next(a for a in facts.assigns if a.targets == ("more",))
    chain = facts.dataset_chain(more.value, more.scope, more.order)
    assert chain is not None and chain.source == "tensorflow.data.Dataset.from_tensor_slices"
    assert chain.methods() == ["shuffle", "map", "batch", "prefetch", "repeat"]
    early = next(a for a in facts.assigns if a.targets == ("ds",) and "shuffle" in cst.Module([]).code_for_node(a.value))
    assert facts.dataset_chain(early.value, early.scope, early.order).methods() == ["shuffle"]


def test_a_pipeline_cut_short_deep_in_one_lookup_is_found_whole_from_the_top():
    """A question asked first from deep inside another lookup (one rule's) stops at the depth limit; asked
    again from the top (another rule's), the same question still gets the whole pipeline."""
    facts = facts_of(CHAINS)
    more = next(a for a in facts.assigns if a.targets == ("more",))
    assert facts.dataset_chain(more.value, more.scope, more.order, depth=_MAX_CHAIN_DEPTH - 2) is None
    chain = facts.dataset_chain(more.value, more.scope, more.order)
    assert chain is not None and chain.methods() == ["shuffle", "map", "batch", "prefetch", "repeat"]



def test_a_question_past_its_lookup_bound_has_no_answer(monkeypatch: pytest.MonkeyPatch):
    """An outermost pipeline question that needs more lookups than the bound gets no answer (the rules that ask it
    stay silent) instead of running on: one real decoder of many optional steps took over half an hour."""
    facts = facts_of(CHAINS)
    more = next(a for a in facts.assigns if a.targets == ("more",))
    monkeypatch.setattr(tensorflow_facts, "_MAX_CHAIN_STEPS", 3)
    assert facts.dataset_chain(more.value, more.scope, more.order) is None
    monkeypatch.setattr(tensorflow_facts, "_MAX_CHAIN_STEPS", 30)
    fresh = facts_of(CHAINS)
    more = next(a for a in fresh.assigns if a.targets == ("more",))
    chain = fresh.dataset_chain(more.value, more.scope, more.order)
    assert chain is not None and chain.methods() == ["shuffle", "map", "batch", "prefetch", "repeat"]


def test_a_long_pipeline_and_many_optional_steps_are_followed_to_their_source():
    """Twenty `ds = ds.map(f)` steps are followed back to the source; twenty optional ones (`if flag: ds =
    ds.map(f)`, augmentation switches) make a bounded number of other pipelines, not a million."""
    steps = "".join(f"ds = ds.map(f{i})\n" for i in range(20))
    flags = "".join(f"if c{i}:\n    ds = ds.map(g{i})\n" for i in range(20))
    facts = facts_of(f"import tensorflow as tf\nds = tf.data.TFRecordDataset(files)\n{steps}{flags}out = ds.batch(8)\n")
    out = next(a for a in facts.assigns if a.targets == ("out",))
    chain = facts.dataset_chain(out.value, out.scope, out.order)
    assert chain is not None and chain.source == "tensorflow.data.TFRecordDataset"
    assert chain.methods() == ["map"] * 40 + ["batch"]
    assert 1 < len(chain.alternatives) <= 64

REDEFINED = """
import tensorflow as tf
def input_fn():
    return tf.data.TFRecordDataset(files).map(parse).batch(8)
first = input_fn()
def input_fn():
    return tf.data.TFRecordDataset(files).batch(8).prefetch(1)
second = input_fn()
def later():
    return input_fn()
"""


def test_a_redefined_function_is_the_def_before_the_call():
    """A notebook that defines `input_fn` again in a later cell: each call runs the def last run before it,
    and a call inside a function (run later) the last def."""
    facts = facts_of(REDEFINED)
    first, second = (next(a for a in facts.assigns if a.targets == (name,)) for name in ("first", "second"))
    assert facts.dataset_chain(first.value, first.scope, first.order).methods() == ["map", "batch"]
    assert facts.dataset_chain(second.value, second.scope, second.order).methods() == ["batch", "prefetch"]
    later = facts.function_named("later", facts.module_scope)
    assert later is not None
    returned = later.returns[0].value
    assert facts.dataset_chain(returned, later).methods() == ["batch", "prefetch"]
