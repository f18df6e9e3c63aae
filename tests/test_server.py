"""`tfdoctor server` end to end: pytest-lsp's client drives the real server process over stdio, as an
editor does, and every edit a code action returns is applied to the text and parsed again."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Sequence

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from tests.conftest import ROOT, run_cli

on_one_server = pytest.mark.asyncio(loop_scope="module")  # the tests share one server process

TRAIN = '''import tensorflow as tf
from tensorflow.keras.utils import multi_gpu_model

strategy = tf.distribute.MirroredStrategy()
ds = tf.data.TFRecordDataset(["a.tfrecord"])
ds = ds.map(parse)
ds = ds.batch(32 * strategy.num_replicas_in_sync).prefetch(2)
for batch in strategy.experimental_distribute_dataset(ds):
    train_step(batch)
label = "\N{GRINNING FACE}"; parallel = multi_gpu_model(template, gpus=2)


def parse(record):  # random: tf.data cannot run it in parallel by itself
    return tf.io.parse_tensor(record, tf.float32) + tf.random.normal([])
'''
# `multi_gpu_model` is TF <= 2.3 code, whose AUTOTUNE is `tf.data.experimental.AUTOTUNE` (version evidence)
MAP_MESSAGE = "`map` in a training pipeline runs on one core; add `num_parallel_calls=tf.data.experimental.AUTOTUNE`"


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(
    server_command=[sys.executable, "-m", "tfdoctor", "server"],
    server_env={**os.environ, "XDG_CACHE_HOME": str(Path(tempfile.gettempdir()) / "tfdoctor-test-cache")}))
async def client(lsp_client: LanguageClient, tmp_path_factory: pytest.TempPathFactory):
    registered: list[types.Registration] = []
    lsp_client.feature(types.CLIENT_REGISTER_CAPABILITY)(lambda params: registered.extend(params.registrations))
    lsp_client.registered = registered  # type: ignore[attr-defined]
    capabilities = client_capabilities("visual-studio-code")
    capabilities.notebook_document = types.NotebookDocumentClientCapabilities(
        synchronization=types.NotebookDocumentSyncClientCapabilities())
    result = await lsp_client.initialize_session(types.InitializeParams(
        capabilities=capabilities, root_uri=tmp_path_factory.getbasetemp().as_uri()))
    assert result.capabilities.notebook_document_sync is not None
    yield
    await lsp_client.shutdown_session()


async def _eventually(client: LanguageClient, uri: str, check: Callable[[Sequence[types.Diagnostic]], bool],
                      seconds: float = 30) -> list[types.Diagnostic]:
    """The diagnostics of `uri` once they pass `check` (the server lints after a debounce)."""
    for _ in range(int(seconds / 0.02)):
        if uri in client.diagnostics and check(client.diagnostics[uri]):
            return list(client.diagnostics[uri])
        await asyncio.sleep(0.02)
    raise AssertionError(f"diagnostics of {uri}: {client.diagnostics.get(uri)}")


def _open(client: LanguageClient, path: Path, text: str, language: str = "python") -> str:
    path.write_text(text, encoding="utf-8")
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)))
    return uri


def _change(client: LanguageClient, uri: str, version: int, text: str) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))


def _codes(diagnostics: Sequence[types.Diagnostic]) -> list[str]:
    return sorted(str(d.code) for d in diagnostics)


def _offset(text: str, position: types.Position) -> int:
    """A UTF-16 position (the client's default) as an index into `text`."""
    lines = text.split("\n")
    line = lines[position.line] if position.line < len(lines) else ""
    units, index = 0, 0
    while units < position.character and index < len(line):
        units += 2 if ord(line[index]) > 0xFFFF else 1
        index += 1
    return sum(len(row) + 1 for row in lines[:position.line]) + index


def _apply(text: str, edits: Sequence[types.TextEdit]) -> str:
    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[:_offset(text, edit.range.start)] + edit.new_text + text[_offset(text, edit.range.end):]
    return text


def _edits(action: types.CodeAction) -> dict[str, list[types.TextEdit]]:
    assert action.edit is not None and action.edit.document_changes, action
    return {change.text_document.uri: list(change.edits) for change in action.edit.document_changes}


async def _actions(client: LanguageClient, uri: str, diagnostics: list[types.Diagnostic]) -> dict[str, types.CodeAction]:
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=diagnostics[0].range if diagnostics else types.Range(start=types.Position(line=0, character=0),
                                                                      end=types.Position(line=0, character=0)),
        context=types.CodeActionContext(diagnostics=diagnostics)))
    return {action.title: action for action in actions or []}


@on_one_server
async def test_diagnostics_appear_with_code_severity_exact_range_and_rule_page(client: LanguageClient, tmp_path):
    uri = _open(client, tmp_path / "train.py", TRAIN)
    diagnostics = await _eventually(client, uri, lambda found: len(found) == 2)
    by_code = {str(d.code): d for d in diagnostics}
    assert sorted(by_code) == ["TFD101", "TFD202"]
    mapped = by_code["TFD202"]
    assert mapped.severity == types.DiagnosticSeverity.Warning and mapped.source == "tfdoctor"
    assert mapped.message == MAP_MESSAGE
    assert (mapped.range.start.line, mapped.range.start.character, mapped.range.end.line,
            mapped.range.end.character) == (5, 8, 5, 11)  # `.map` on line 6, 1-based columns 9-12
    removed = by_code["TFD101"]
    assert removed.severity == types.DiagnosticSeverity.Error
    # after an emoji: 24 code points before the call, 25 UTF-16 units
    assert (removed.range.start.line, removed.range.start.character, removed.range.end.character) == (9, 25, 58)
    page = Path(removed.code_description.href.removeprefix("file://"))
    assert page.read_text(encoding="utf-8").startswith("# TFD101: multi-gpu-model\n")


@on_one_server
async def test_a_python_file_without_a_language_id_is_linted(client: LanguageClient, tmp_path):
    """Neovim without `filetype on` sends an empty language id; a `.py` file is still Python."""
    uri = _open(client, tmp_path / "untyped.py", TRAIN, language="")
    assert _codes(await _eventually(client, uri, lambda found: len(found) == 2)) == ["TFD101", "TFD202"]


@on_one_server
async def test_diagnostics_follow_an_edit_and_clear_after_the_fix(client: LanguageClient, tmp_path):
    text = TRAIN.replace('label = "\N{GRINNING FACE}"; parallel = multi_gpu_model(template, gpus=2)\n', "")
    uri = _open(client, tmp_path / "pipeline.py", text)
    found = await _eventually(client, uri, lambda found: _codes(found) == ["TFD202"])
    assert found[0].range.start.line == 5
    text = "# a comment moves the pipeline down one line\n" + text
    _change(client, uri, 2, text)
    found = await _eventually(client, uri, lambda found: [d.range.start.line for d in found] == [6])
    actions = await _actions(client, uri, found)
    fix = actions["Fix TFD202: add num_parallel_calls=AUTOTUNE"]
    assert fix.kind == types.CodeActionKind.QuickFix and fix.is_preferred
    text = _apply(text, _edits(fix)[uri])
    ast.parse(text)
    assert "ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)\n" in text
    _change(client, uri, 3, text)
    await _eventually(client, uri, lambda found: not found)


@on_one_server
async def test_fix_all_and_noqa_actions_apply_and_parse(client: LanguageClient, tmp_path):
    text = TRAIN.replace("ds = ds.map(parse)\n", "ds = ds.map(parse)\nds = ds.map(tf.io.decode_jpeg)\n")
    uri = _open(client, tmp_path / "both.py", text)
    found = await _eventually(client, uri, lambda found: _codes(found) == ["TFD101", "TFD202", "TFD202"])
    removed = next(d for d in found if d.code == "TFD101")
    actions = await _actions(client, uri, [removed])
    assert sorted(actions) == ["Fix all safe tfdoctor findings in file", "Suppress with `# noqa: TFD101`"]
    suppressed = _apply(text, _edits(actions["Suppress with `# noqa: TFD101`"])[uri])
    assert suppressed.splitlines()[10].endswith("multi_gpu_model(template, gpus=2)  # noqa: TFD101")
    ast.parse(suppressed)
    fixed = _apply(suppressed, _edits(actions["Fix all safe tfdoctor findings in file"])[uri])
    ast.parse(fixed)
    _change(client, uri, 2, fixed)
    await _eventually(client, uri, lambda found: not found)
    assert "ds = ds.map(parse, num_parallel_calls=tf.data.experimental.AUTOTUNE)\n" in fixed
    assert "ds = ds.map(tf.io.decode_jpeg, num_parallel_calls=tf.data.experimental.AUTOTUNE)\n" in fixed


@on_one_server
async def test_unsafe_fixes_only_when_the_client_settings_ask(client: LanguageClient, tmp_path):
    text = ("import tensorflow as tf\nds = tf.data.TFRecordDataset(files).shuffle(100).cache()\n"
            "ds = ds.batch(8 * strategy.num_replicas_in_sync).prefetch(tf.data.AUTOTUNE)\n"
            "for batch in strategy.experimental_distribute_dataset(ds):\n    step(batch)\n")
    uri = _open(client, tmp_path / "cache.py", text)
    found = await _eventually(client, uri, lambda found: _codes(found) == ["TFD204"])
    assert not [title for title in await _actions(client, uri, found) if title.startswith("Fix")]
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"tfdoctor": {"unsafeFixes": True}}))
    try:
        actions = await _actions(client, uri, found)
        fix = next(action for title, action in actions.items() if title.startswith("Fix TFD204"))
        fixed = _apply(text, _edits(fix)[uri])
        ast.parse(fixed)
        assert ".cache().shuffle(100)" in fixed
    finally:
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
            settings={"tfdoctor": {"unsafeFixes": False}}))


LOSS = '''import tensorflow as tf
from tensorflow.keras.utils import multi_gpu_model
loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
def replica(x, y):
    with tf.GradientTape() as tape:
        loss = loss_obj(y, model(x))
    grads = tape.gradient(loss, model.trainable_variables)
@tf.function
def step(x, y):
    strategy.run(replica, args=(x, y))
parallel = multi_gpu_model(template, gpus=2)
'''


@on_one_server
async def test_the_project_config_and_pins_give_what_the_command_line_gives(client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.tfdoctor]\nignore = ["TFD101"]\n')
    (tmp_path / "requirements.txt").write_text("tensorflow==2.15.0\nkeras==2.15.0\n")
    (tmp_path / "src").mkdir()
    uri = _open(client, tmp_path / "src" / "loss.py", LOSS)
    found = await _eventually(client, uri, lambda found: bool(found))
    workspace = tmp_path.parent  # the client's root: the command line is run there, as the server is
    cli = run_cli("lint", "--no-cache", "--format", "json", f"{tmp_path.name}/src/loss.py", cwd=workspace)
    expected = json.loads(cli.stdout)["findings"]
    assert [f["code"] for f in expected] == ["TFD104"] and "requirements.txt: keras==2.15.0" in expected[0]["message"]
    assert [(str(d.code), d.range.start.line + 1, d.range.start.character + 1, d.range.end.line + 1,
             d.range.end.character + 1, d.message) for d in found] == [
        (f["code"], f["line"], f["column"], f["end_line"], f["end_column"], f["message"]) for f in expected]
    (tmp_path / "pyproject.toml").write_text('[tool.tfdoctor]\nignore = ["TFD104"]\n')
    client.text_document_did_save(types.DidSaveTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=(tmp_path / "pyproject.toml").as_uri())))
    await _eventually(client, uri, lambda found: _codes(found) == ["TFD101"])


@on_one_server
async def test_a_file_changed_outside_the_editor_counts_once_the_watcher_reports_it(client: LanguageClient, tmp_path):
    """TF 2.17 is pinned, so tf.keras is Keras 3 (TFD304) until a Keras 2 helper appears in the project
    (a `git checkout`): then the loop is Keras 2 code, whose default loss is a per-replica mean (TFD104)."""
    project = ROOT / "fixtures" / "projects" / "keras2_under_tf217"
    for name in ("setup.cfg", "requirements.txt"):
        (tmp_path / name).write_text((project / name).read_text())
    uri = _open(client, tmp_path / "train.py", (project / "train.py").read_text())
    await _eventually(client, uri, lambda found: _codes(found) == ["TFD304"])
    [watching] = [r for r in client.registered if r.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES]
    assert "**/*.py" in [watcher["globPattern"] for watcher in watching.register_options["watchers"]]
    helper = tmp_path / "scaling.py"
    helper.write_text((project / "scaling.py").read_text())
    client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(
        changes=[types.FileEvent(uri=helper.as_uri(), type=types.FileChangeType.Created)]))
    await _eventually(client, uri, lambda found: _codes(found) == ["TFD104"])


def _cell(uri: str, kind: types.NotebookCellKind = types.NotebookCellKind.Code) -> types.NotebookCell:
    return types.NotebookCell(kind=kind, document=uri)


@on_one_server
async def test_notebook_cells_get_their_own_diagnostics_and_fixes(client: LanguageClient, tmp_path):
    notebook = (tmp_path / "train.ipynb").as_uri()
    cells = [f"{notebook}#cell{n}" for n in range(1, 4)]
    texts = ["import tensorflow as tf\n%matplotlib inline\nstrategy = tf.distribute.MirroredStrategy()\n"
             "parse = lambda record: tf.io.parse_tensor(record, tf.float32) + tf.random.normal([])",
             "# Training data", "ds = tf.data.TFRecordDataset(files).map(parse)\n"
             "ds = ds.batch(8 * strategy.num_replicas_in_sync).prefetch(2)\n"
             "for batch in strategy.experimental_distribute_dataset(ds):\n    step(batch)"]
    languages = ["python", "markdown", "python"]
    client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
        notebook_document=types.NotebookDocument(uri=notebook, notebook_type="jupyter-notebook", version=1, cells=[
            _cell(cells[0]), _cell(cells[1], types.NotebookCellKind.Markup), _cell(cells[2])]),
        cell_text_documents=[types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)
                             for uri, language, text in zip(cells, languages, texts)]))
    found = await _eventually(client, cells[2], lambda found: _codes(found) == ["TFD202"])
    assert (found[0].range.start.line, found[0].range.start.character) == (0, 36)  # `map` after `...(files).`
    assert list(client.diagnostics[cells[0]]) == [] and list(client.diagnostics[cells[1]]) == []
    actions = await _actions(client, cells[2], found)
    fix = actions["Fix TFD202: add num_parallel_calls=AUTOTUNE"]
    edits = _edits(fix)
    assert list(edits) == [cells[2]]
    fixed = _apply(texts[2], edits[cells[2]])
    ast.parse(fixed)
    client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
        notebook_document=types.VersionedNotebookDocumentIdentifier(uri=notebook, version=2),
        change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(text_content=[
            types.NotebookDocumentCellContentChanges(
                document=types.VersionedTextDocumentIdentifier(uri=cells[2], version=2),
                changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)])]))))
    await _eventually(client, cells[2], lambda found: not found)


def _open_python_notebook(client: LanguageClient, notebook: str, texts: list[str]) -> list[str]:
    """Open a notebook of Python code cells, one per text; the cells' URIs."""
    cells = [f"{notebook}#cell{n}" for n in range(1, len(texts) + 1)]
    client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
        notebook_document=types.NotebookDocument(uri=notebook, notebook_type="jupyter-notebook", version=1,
                                                 cells=[_cell(uri) for uri in cells]),
        cell_text_documents=[types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
                             for uri, text in zip(cells, texts)]))
    return cells


@on_one_server
async def test_notebook_evidence_is_cited_by_cell_and_line(client: LanguageClient, tmp_path):
    texts = ["!pip install -q tensorflow==2.6.0\nimport tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()",
             "ds = tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=8).shuffle(256).batch(64)\nmodel.fit(ds, epochs=3)"]
    cells = _open_python_notebook(client, (tmp_path / "legacy.ipynb").as_uri(), texts)
    found = await _eventually(client, cells[1], lambda found: _codes(found) == ["TFD203"])
    assert found[0].range.start.line == 0
    assert "(TF 2.6.0 assumed: `pip install tensorflow==2.6.0` at " in found[0].message
    assert found[0].message.endswith("legacy.ipynb:cell 1:1)")


@on_one_server
async def test_a_related_place_in_another_cell_points_at_that_cell(client: LanguageClient, tmp_path):
    texts = ["import tensorflow.compat.v1 as tf",
             "for i in range(num_gpus):\n    with tf.device('/gpu:%d' % i):\n        outputs.append(model(inputs[i]))",
             "# the losses\nfor i in range(num_gpus):\n    with tf.device('/gpu:%d' % i):\n"
             "        losses.append(loss_fn(outputs[i]))"]
    (tmp_path / "pyproject.toml").write_text('[tool.tfdoctor]\nselect = ["TFD109"]\n')  # an opt-in rule
    cells = _open_python_notebook(client, (tmp_path / "towers.ipynb").as_uri(), texts)
    found = await _eventually(client, cells[1], lambda found: _codes(found) == ["TFD109"])
    [related] = found[0].related_information
    assert related.location.uri == cells[2]
    assert (related.location.range.start.line, related.location.range.start.character) == (2, 9)
    assert found[0].message.endswith("(another per-GPU loop at cell 3:3)")


GARBAGE = [
    "import tensorflow as tf\ndef broken(:\n    strategy.run(",  # a syntax error
    "import tensorflow as tf\n" + "(" * 5000 + ")" * 5000,  # nested too deeply for the parser
    "import tensorflow as tf\nx = '\ud800'\n",  # a lone surrogate: not encodable text
    "import tensorflow\0\0\x01\x02 strategy",  # a binary file
]


@on_one_server
async def test_garbage_gives_one_parse_error_each_and_the_server_lives_on(client: LanguageClient, tmp_path):
    uris = []
    for number, text in enumerate(GARBAGE):
        uri = (tmp_path / f"garbage{number}.py").as_uri()
        client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        uris.append(uri)
    for uri in uris:
        found = await _eventually(client, uri, lambda found: bool(found))
        assert _codes(found) == ["TFD000"] and found[0].message.startswith("cannot parse: "), found
    broken = uris[0]
    await _actions(client, broken, client.diagnostics[broken])
    _change(client, broken, 2, "import tensorflow as tf\nmodel = tf.keras.utils.multi_gpu_model(m, gpus=2)\n")
    await _eventually(client, broken, lambda found: _codes(found) == ["TFD101"])
    assert client._server.returncode is None  # type: ignore[attr-defined]


def test_without_pygls_the_command_says_how_to_install_it():
    hide_pygls = "import sys; sys.modules['pygls'] = None; from tfdoctor.cli import main; sys.exit(main(['server']))"
    result = subprocess.run([sys.executable, "-c", hide_pygls], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr == "error: the language server needs pygls: pip install 'tfdoctor[lsp]'\n"


def test_related_places_in_other_files_become_related_information(tmp_path):
    from pygls.workspace import PositionCodec

    from tfdoctor.lint.findings import Finding, Related, Severity
    from tfdoctor.server.diagnostics import diagnostic
    from tfdoctor.server.documents import Part

    helper = tmp_path / "helpers.py"
    helper.write_text('label = "\N{GRINNING FACE}"; strategy = tf.distribute.MirroredStrategy()\n')
    place = Related(str(helper), 1, 25, 1, 57, "the strategy is made here")
    finding = Finding(str(tmp_path / "train.py"), 2, 1, 2, 5, "TFD103", "undistributed-input", Severity.ERROR,
                      "message", related=(place,))
    made = diagnostic(finding, Part((tmp_path / "train.py").as_uri(), 1, "x\nstep\n"), PositionCodec(),
                      lambda uri: helper.read_text().split("\n"))
    [related] = made.related_information
    assert related.location.uri == helper.as_uri() and related.message == "the strategy is made here"
    assert (related.location.range.start.character, related.location.range.end.character) == (25, 57)
