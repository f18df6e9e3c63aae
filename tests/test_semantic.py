"""The semantic model's one lookup: what an expression can hold at a point, in every shape it follows."""

from __future__ import annotations

import libcst as cst
import pytest

from tfdoctor.lint.facts import ModuleFacts

CODE = """
import tensorflow as tf

def make(n):
    return tf.data.Dataset.range(n), n + 1

class Trainer:
    def __init__(self, strategy=None):
        self.strategy = strategy or tf.distribute.MirroredStrategy()

    def go(self):
        return self.strategy

def run(flag, items):
    data, size = make(8)
    pair = make(3)
    picked = data if flag else tf.data.Dataset.range(2)
    if flag:
        chosen = 1
    else:
        chosen = 2
    late = 0
    late = 3
    parts = []
    parts.append(tf.constant(1))
    parts.append(tf.constant(2))
    use(data, size, picked, chosen, late, parts, items)

run(True, [1, 2])
"""


def _values(facts: ModuleFacts, function: str, name: str) -> list[str]:
    scope = next(s for s in facts.scopes if s.name == function)
    call = next(c for c in scope.calls if c.func == "use") if function == "run" else None
    before = call.order if call else 1 << 62
    origins = facts.values_of(cst.parse_expression(name), scope, before)
    return sorted(f"{o.kind}:{cst.Module([]).code_for_node(o.expr)}{list(o.path) if o.path else ''}" for o in origins)


@pytest.fixture(scope="module")
def facts() -> ModuleFacts:
    return ModuleFacts(cst.parse_module(CODE), "example.py", CODE.splitlines())


@pytest.mark.parametrize(("name", "expected"), [
    ("data", ["value:tf.data.Dataset.range(n)"]),  # a return value, unpacked
    ("size", ["value:n + 1"]),
    ("picked", ["value:tf.data.Dataset.range(2)", "value:tf.data.Dataset.range(n)"]),  # both sides of if-else
    ("chosen", ["value:1", "value:2"]),  # both branches reach the use
    ("late", ["value:3"]),  # a later plain assignment replaces the earlier one
    ("items", ["value:[1, 2]"]),  # a parameter, bound at the call site
    ("pair[0]", ["value:tf.data.Dataset.range(n)"]),  # an item taken by a literal index from a returned tuple
    ("pair[1]", ["value:n + 1"]),
])
def test_values_of_names_in_a_function(facts: ModuleFacts, name: str, expected: list[str]):
    assert _values(facts, "run", name) == expected


def test_attribute_set_with_or_in_another_method(facts: ModuleFacts):
    assert _values(facts, "go", "self.strategy") == ["parameter:strategy", "value:tf.distribute.MirroredStrategy()"]
    assert "self.strategy" in facts.strategy_names


def test_items_appended_to_a_list(facts: ModuleFacts):
    scope = next(s for s in facts.scopes if s.name == "run")
    call = next(c for c in scope.calls if c.func == "use")
    items = [cst.Module([]).code_for_node(o.expr) for o in facts.items_of("parts", scope, call.order)]
    assert items == ["tf.constant(1)", "tf.constant(2)"]


def test_call_graph_through_a_wrapped_parameter_does_not_ask_for_itself():
    code = """
import tensorflow as tf

def compile_step(fn):
    step = tf.function(fn)
    return step(1)

def user():
    return compile_step(lambda x: x)
"""
    facts = ModuleFacts(cst.parse_module(code), "example.py", code.splitlines())
    compile_step = next(s for s in facts.scopes if s.name == "compile_step")
    assert [c.scope.name for c in facts.callers_of(compile_step)] == ["user"]


def test_lookups_nested_through_instance_methods_of_functions_that_call_each_other_end():
    """`head` returns a method of what `tail` returns, and `tail` of what `head` returns: each method is
    looked up by a lookup of its receiver inside the first, and those nested lookups once recursed without
    end (a RecursionError on TensorFlow's own tensor_util.py)."""
    source = (
        "def head():\n    tail_part = tail()\n    return tail_part.method()\n\n\n"
        "def tail():\n    head_part = head()\n    return head_part.value()\n"
    )
    model = ModuleFacts(cst.parse_module(source), "loop.py", source.splitlines())
    head = next(s for s in model.scopes if s.name == "head")
    (origin,) = model.values_of(head.returns[0].value, head)
    assert origin.kind == "value" and isinstance(origin.expr, cst.Call)


def test_a_call_of_an_instance_returns_what_its_class_call_method_returns():
    source = (
        "import tensorflow as tf\n\n\nclass Loader:\n    def __call__(self, n):\n"
        "        return tf.data.Dataset.range(n)\n\n\nloader = Loader()\nds = loader(8)\n"
    )
    model = ModuleFacts(cst.parse_module(source), "loader.py", source.splitlines())
    (origin,) = model.values_of(cst.parse_expression("ds"), model.module_scope)
    assert origin.kind == "value" and model.resolve(origin.expr.func) == "tensorflow.data.Dataset.range"


def test_a_method_called_on_an_instance_of_the_modules_class_is_in_its_call_graph():
    source = (
        "class Trainer:\n    def train(self, dataset):\n        return dataset\n\n\n"
        "trainer = Trainer()\ntrainer.train([1, 2])\n"
    )
    assert _callees(source, "trainer.train") == ["Trainer.train"]


def test_a_method_wrapped_in_place_by_tf_function_is_still_the_method():
    """`self.step = tf.function(self.step)` in one method: `self.step` elsewhere is the wrapped method (the
    lookup of the attribute inside its own assignment once found nothing)."""
    source = (
        "import tensorflow as tf\n\n\nclass Trainer:\n    def step(self, x):\n        return x\n\n"
        "    def run(self, strategy, x):\n        return strategy.run(self.step, args=(x,))\n\n"
        "    def fit(self, strategy, x):\n        self.step = tf.function(self.step)\n        self.run(strategy, x)\n"
    )
    model = ModuleFacts(cst.parse_module(source), "trainer.py", source.splitlines())
    run = next(s for s in model.scopes if s.name == "run")
    assert [s.qualname for s in model.callables_of(cst.parse_expression("self.step"), run)] == ["Trainer.step"]


def test_a_method_a_class_inherits_from_a_base_class_of_the_module():
    source = (
        "class Base:\n    def loss(self, x):\n        return x\n\n\nclass Child(Base):\n"
        "    def step(self, x):\n        return self.loss(x)\n"
    )
    assert _callees(source, "self.loss") == ["Base.loss"]


def _callees(source: str, func: str) -> list[str]:
    """What the module's call of `func` may invoke, by qualified name."""
    model = ModuleFacts(cst.parse_module(source), "example.py", source.splitlines())
    call = next(c for c in model.calls if c.func == func)
    return [s.qualname for s in model.callees(call)]


BRANCHES = """
def pick(flag, xs):
    value = 0
    if flag:
        value = 1
        return value
    elif xs:
        value = 2
        use(value)
    else:
        use(value)
    use(value)

def loop(xs):
    value = 0
    for x in xs:
        if x:
            value = 1
        else:
            use(value)
"""


@pytest.mark.parametrize(("function", "use", "expected"), [
    ("pick", 0, ["value:2"]),  # in the `elif` branch: its own binding
    ("pick", 1, ["value:0"]),  # in the `else`: not what the `if` and `elif` branches bind
    ("pick", 2, ["value:0", "value:2"]),  # after the branches: not what a branch that returns binds
    ("loop", 0, ["value:0", "value:1"]),  # a loop repeats the `if`: its binding reaches the `else` next time
])
def test_what_one_branch_binds_reaches_neither_the_other_branch_nor_past_a_return(
        function: str, use: int, expected: list[str]):
    model = ModuleFacts(cst.parse_module(BRANCHES), "example.py", BRANCHES.splitlines())
    scope = next(s for s in model.scopes if s.name == function)
    call = [c for c in scope.calls if c.func == "use"][use]
    origins = model.values_of(cst.parse_expression("value"), scope, call.order)
    assert sorted(f"{o.kind}:{cst.Module([]).code_for_node(o.expr)}" for o in origins) == expected


def _model(source: str) -> ModuleFacts:
    return ModuleFacts(cst.parse_module(source), "m.py", source.splitlines())


def test_a_call_written_as_a_statement_of_its_own_discards_its_result():
    model = _model("ds.shuffle(1)\nds = ds.batch(2)\nuse(ds.map(f))\n")
    assert [(c.attr or c.func, c.discarded) for c in model.calls] == [
        ("shuffle", True), ("batch", False), ("use", True), ("map", False)]


def test_a_loop_counter_is_a_range_target_or_an_enumerate_index_not_rebound_in_the_loop():
    model = _model(
        "for epoch in range(3):\n    for i, x in enumerate(xs):\n        f(epoch, i, x)\n"
        "for k in range(3):\n    k = str(k)\n    f(k)\n"
    )
    first, second = (c for c in model.calls if c.func == "f")
    loops = model.module_scope.loops
    found = [model.loop_counter(a.value, first.scope, first.order) for a in first.node.args]
    assert found == [loops[0], loops[1], None]
    assert model.loop_counter(second.node.args[0].value, second.scope, second.order) is None


def test_a_name_read_later_counts_calls_assignments_loops_and_returns_after_the_point():
    model = _model("def f(ds):\n    ds.shuffle(1)\n    ds.cache()\n    return ds\n\ndef g(ds):\n    ds.shuffle(1)\n")
    f, g = (s for s in model.scopes if s.name in ("f", "g"))
    shuffle = f.calls[0]
    assert model.read_later("ds", f, shuffle.order)
    assert not model.read_later("ds", g, g.calls[0].order)
    assert not model.read_later("ds", g, g.calls[0].order, ignore=lambda c: c.discarded)
ORDER = """
def first():
    a()

def second():
    b()

def main():
    first()
    second()

def unused():
    c()

if flag:
    d()
else:
    e()
f()
main()
"""


def test_runs_before_follows_the_calls_that_lead_to_each_statement_and_stays_silent_when_it_cannot_tell():
    facts = ModuleFacts(cst.parse_module(ORDER), "order.py", ORDER.splitlines(True))
    call = {c.func: c for c in facts.calls}
    assert facts.runs_before(call["a"], call["b"]) is True
    assert facts.runs_before(call["b"], call["a"]) is False
    assert facts.runs_before(call["d"], call["f"]) is True
    assert facts.runs_before(call["d"], call["e"]) is None  # two branches of one `if`
    assert facts.runs_before(call["a"], call["c"]) is None  # nothing here calls `unused`


def test_calls_in_if_bodies_whose_tests_require_x_and_not_x_never_both_run():
    source = """def build(ds, train, cache, other):
    if train and not cache:
        ds = ds.repeat()
    if train and cache:
        ds = ds.cache()
    if (cache):
        ds = ds.batch(8)
    if train:
        ds = ds.shuffle(8)
    return ds

def elsewhere(ds, cache):
    if cache:
        return ds.take(1)
"""
    model = ModuleFacts(cst.parse_module(source), "m.py", source.splitlines())
    call = {c.attr: c.node for c in model.calls}
    assert model.exclusive_branches(call["repeat"], call["cache"])
    assert model.exclusive_branches(call["repeat"], call["batch"])  # parentheses aside
    assert not model.exclusive_branches(call["repeat"], call["shuffle"])  # `train` both times
    assert not model.exclusive_branches(call["cache"], call["batch"])
    assert not model.exclusive_branches(call["repeat"], call["take"])  # another function's `cache`


def test_an_if_body_and_its_else_or_elif_never_both_run_unless_a_loop_repeats_them():
    source = """def main(flags):
    if flags.do_train and flags.do_eval:
        flags.repeat()
    elif flags.do_train:
        flags.cache()
    else:
        flags.batch(8)
    flags.shuffle(8)
    for step in flags.steps:
        if step:
            flags.take(1)
        else:
            flags.skip(1)
"""
    model = ModuleFacts(cst.parse_module(source), "m.py", source.splitlines())
    call = {c.attr: c.node for c in model.calls}
    assert model.exclusive_branches(call["repeat"], call["cache"])
    assert model.exclusive_branches(call["batch"], call["repeat"])
    assert not model.exclusive_branches(call["repeat"], call["shuffle"])  # after the `if`: runs either way
    assert not model.exclusive_branches(call["take"], call["skip"])  # a loop takes both, on two turns


def test_calls_in_if_bodies_that_pin_one_expression_to_two_literals_never_both_run():
    source = """def main(flags):
    if flags.strategy is None:
        run = flags.repeat()
    elif flags.strategy == "multi_worker":
        run = flags.cache()
    if flags.strategy is None and flags.eval:
        flags.batch(8)
    if flags.strategy == 'multi_worker':
        flags.shuffle(8)
    if flags.steps == 0:
        flags.take(1)
"""
    model = ModuleFacts(cst.parse_module(source), "m.py", source.splitlines())
    call = {c.attr: c.node for c in model.calls}
    assert model.exclusive_branches(call["repeat"], call["cache"])
    assert model.exclusive_branches(call["batch"], call["cache"])  # a part of an `and` chain
    assert not model.exclusive_branches(call["cache"], call["shuffle"])  # one value, quoted two ways
    assert not model.exclusive_branches(call["repeat"], call["take"])  # two expressions
