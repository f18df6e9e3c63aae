"""Module facts: each spelling and code shape the rules rely on."""

from __future__ import annotations

import libcst as cst
import pytest

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
