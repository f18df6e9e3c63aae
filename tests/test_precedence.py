"""One finding per smell: the declared precedence between rules, applied in one place (precedence.py)."""

from __future__ import annotations

from tests.conftest import lint_text, run_cli
from tfdoctor.lint.docs import precedence_text
from tfdoctor.lint.precedence import Candidate, survivors
from tfdoctor.lint.rule import all_rules, rule_by_code

GENERATOR = """import tensorflow as tf
def batches():
    while True:
        yield load_batch()
model.fit_generator(batches(), steps_per_epoch=10)
strategy = tf.distribute.MirroredStrategy()
"""
SEQUENCE = """import keras
import horovod.keras as hvd
class Loader(keras.utils.Sequence):
    def __getitem__(self, index):
        return load_batch(index)
model.fit_generator(Loader(), steps_per_epoch=10)
hvd.init()
"""


def _found(code: str, **targets: str) -> list[tuple[int, int, str, str]]:
    return sorted((f.line, f.column, f.code, f.message) for f in lint_text(code, **targets))


def test_survivors_keep_the_outranking_rule_and_the_innermost_of_one_rule():
    itself = frozenset({"TFD201"})
    call = Candidate("TFD201", itself, (5, 0), (5, 50))
    argument = Candidate("TFD201", itself, (5, 20), (5, 29))
    removed = Candidate("TFD401", frozenset({"TFD201"}), (5, 0), (5, 50))
    elsewhere = Candidate("TFD201", itself, (9, 0), (9, 10))
    assert survivors([call, argument, removed, elsewhere]) == [False, False, True, True]
    assert survivors([call, argument]) == [False, True]
    assert survivors([argument, Candidate("TFD203", frozenset(), (5, 20), (5, 29))]) == [True, True]  # undeclared
    outer, inner = Candidate("TFD403", frozenset(), (2, 4), (2, 60)), Candidate("TFD403", frozenset(), (2, 31), (2, 50))
    assert survivors([outer, inner]) == [True, True]  # two removed APIs nested in one expression: two smells


def test_fit_generator_gives_tfd401_alone_and_tfd201_once_where_tfd401_is_silent():
    assert len(lint_text(GENERATOR, select=("TFD201",))) == 1
    assert _found(GENERATOR) == [(5, 1, "TFD401", "`fit_generator` is removed in Keras 3; use `fit` (Keras 3.15 "
                                                  "assumed: newest release)")]
    assert _found(GENERATOR, keras="2.2.4", tensorflow="1.15") == [
        (5, 21, "TFD201", "training is fed by the Python generator `batches`, one Python thread under the GIL; use a "
                          "`tf.data` pipeline")]
    # standalone Keras under Horovod: its `fit` takes no tf.data
    assert [f for f in _found(SEQUENCE, keras="2.3.1", tensorflow="2.2") if f[2] in ("TFD201", "TFD401")] == [
        (6, 21, "TFD201", "training is fed by the Python `Sequence` class `Loader`, one Python thread under the GIL; "
                          "this Keras's `fit` takes no `tf.data`, so try `use_multiprocessing=True`")]


def test_a_noqa_on_the_winner_lets_the_other_rule_speak():
    found = _found(GENERATOR.replace("steps_per_epoch=10)", "steps_per_epoch=10)  # noqa: TFD401"))
    assert [(line, column, code) for line, column, code, _ in found] == [(5, 21, "TFD201")]


def test_a_pipeline_ending_in_batch_or_cache_gets_the_specific_finding_only():
    # under TF 2.11, where nothing injects a prefetch and TFD203 speaks
    batch = ("import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n"
             "ds = tf.data.TFRecordDataset(files).map(parse).batch(64)\n"
             "dist = strategy.experimental_distribute_dataset(ds)\n"
             "local_model.fit(ds)\n")  # split by the strategy (TFD114), and trained on as is (TFD203)
    alone = lint_text(batch, select=("TFD203",), tensorflow="2.11")
    assert [(f.line, f.column) for f in alone] == [(3, 48)]  # alone, it speaks
    together = _found(batch, tensorflow="2.11")
    assert [(line, column, code) for line, column, code, _ in together] == [(3, 48, "TFD114")]
    per_replica = batch.replace("batch(64)", "batch(PER_GPU)").replace("ds = ", "PER_GPU = 64\nds = ", 1)
    assert [(line, code) for line, _, code, _ in _found(per_replica, tensorflow="2.11")] == [(4, "TFD106")]
    cache = ("import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n"
             "ds = tf.data.Dataset.range(9).map(f).shuffle(9).prefetch(2).cache()"
             ".map(g)\nmodel.fit(ds)\n")
    assert [(f.line, f.column) for f in lint_text(cache, select=("TFD203",), tensorflow="2.11")] == [(3, 69)]
    assert [(line, column, code) for line, column, code, _ in _found(cache, tensorflow="2.11")] == [
        (3, 61, "TFD204"), (3, 69, "TFD203")]
    # ending in an in-memory cache, the pipeline reads memory from its second epoch: TFD204 alone speaks
    ended = ("import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n"
             "ds = tf.data.Dataset.range(9).map(f).shuffle(9).prefetch(2).cache()\n"
             "model.fit(ds)\n")
    assert lint_text(ended, select=("TFD203",), tensorflow="2.11") == []
    assert _found(ended, tensorflow="2.11") == [
        (3, 61, "TFD204", "`cache()` after `shuffle` freezes or breaks it; move `cache()` before `shuffle`")]


def test_different_constructs_on_one_chain_keep_both_findings():
    chain = ("import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\n"
             "ds = tf.data.Dataset.range(9).map(f).shuffle(9).cache().map(g).batch(4)\n"
             "model.fit(ds)\n")
    found = _found(chain, tensorflow="2.11")  # where nothing injects a prefetch
    assert [(line, column, code) for line, column, code, _ in found] == [(3, 49, "TFD204"), (3, 64, "TFD203")]


def test_precedence_has_no_cycles_and_names_real_rules():
    beats = {rule.code: set(rule.OUTRANKS) - {rule.code} for rule in all_rules()}  # itself: nested findings
    assert all(outranked <= beats.keys() for outranked in beats.values())

    def walk(code: str, path: tuple[str, ...]) -> None:
        assert code not in path, f"precedence cycle: {path + (code,)}"
        for outranked in beats[code]:
            walk(outranked, path + (code,))

    for code in beats:
        walk(code, ())


def test_rule_pages_say_which_rule_wins():
    assert precedence_text(rule_by_code("TFD203")) == (
        "[TFD106](TFD106.md), [TFD114](TFD114.md) and [TFD204](TFD204.md) report it, and this rule stays silent there: they are more "
        "specific.")
    assert precedence_text(rule_by_code("TFD201")) == (
        "Of this rule's findings on nested constructs, only the innermost is reported. [TFD401](TFD401.md) reports "
        "it, and this rule stays silent there: it is more specific.")
    assert precedence_text(rule_by_code("TFD401")) == (
        "This rule reports it, and [TFD201](TFD201.md) stays silent there: this rule is the more specific.")
    page = run_cli("rule", "TFD204").stdout
    assert "## When another rule sees the same construct" in page and "[TFD203](TFD203.md) stays silent" in page
