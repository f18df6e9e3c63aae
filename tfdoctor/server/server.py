"""The language server: lint open documents and notebooks on open, change (debounced) and save, publish the
findings as diagnostics, and answer code actions.

Each lint reads the settings exactly as `tfdoctor lint` does for that file (`settings_for`: the nearest
`[tool.tfdoctor]`, then the pins above the file), every time, so an edited `pyproject.toml` or requirements
file counts from the next lint on; saving one re-lints every open document. So does saving a Python file
(another open file's findings may rest on it), and any change the client's file watcher reports: the
engine then reads the projects' files afresh (their version evidence, file lists and texts). Lints run on
the event loop, one at a time, on the text as it is when the debounce ends. Nothing the client sends stops the server: a
file that cannot be parsed is one TFD000 diagnostic, and a failure of tfdoctor itself is logged.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any, Callable, TypeVar

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from tfdoctor import __version__
from tfdoctor.config import ConfigError
from tfdoctor.lint.engine import forget_files_read, parse_error
from tfdoctor.lint.findings import Finding
from tfdoctor.server.actions import FIX_ALL_KIND, Options, code_actions
from tfdoctor.server.diagnostics import diagnostic, file_lines, rule_pages
from tfdoctor.server.documents import Snapshot, lint_snapshot, notebook_snapshot, path_of, text_snapshot
from tfdoctor.server.isolation import Isolated, WorkerLost

DEBOUNCE_S = 0.05  # a change waits this long for the next keystroke before it is linted
ENGINE_DEADLINE_S = 60.0  # a lint or code action taking longer is given up (and its process restarted)
CONFIG_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "environment.yml")  # and requirements*.txt
WATCHED = ("**/*.py", "**/*.ipynb", "**/requirements*.txt", *(f"**/{name}" for name in CONFIG_FILES))
logger = logging.getLogger(__name__)
Result = TypeVar("Result")


class TfdoctorServer(LanguageServer):
    """The pygls server with tfdoctor's state: pending lints, the client's options, what was published."""

    def __init__(self) -> None:
        super().__init__(
            "tfdoctor", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=types.NotebookDocumentSyncOptions(notebook_selector=[
                types.NotebookDocumentFilterWithNotebook(notebook="*", cells=[types.NotebookCellLanguage(language="python")])
            ], save=True),
        )
        self.options = Options()
        self.pending: dict[str, asyncio.Task[None]] = {}
        self.findings: dict[str, list[Finding]] = {}  # by document or notebook URI, as last published
        self.published: dict[str, set[str]] = {}  # the part URIs last given diagnostics, by the same URI
        self.notebooks: set[str] = set()
        self.last_error = ""
        self.engine = Isolated(ENGINE_DEADLINE_S)

    # Linting ----------------------------------------------------------------------------------------
    def snapshot(self, uri: str) -> Snapshot | None:
        if uri in self.notebooks:
            return notebook_snapshot(self.workspace, uri)
        return text_snapshot(self.workspace, uri)

    def schedule(self, uri: str, delay: float = DEBOUNCE_S) -> None:
        """Lint `uri` after `delay` seconds, replacing a lint already waiting for it."""
        waiting = self.pending.pop(uri, None)
        if waiting is not None:
            waiting.cancel()
        self.pending[uri] = asyncio.get_running_loop().create_task(self._lint_later(uri, delay))

    async def _lint_later(self, uri: str, delay: float) -> None:
        await asyncio.sleep(delay)
        if self.pending.get(uri) is asyncio.current_task():
            del self.pending[uri]  # from here on a newer change schedules another lint, never cancels this one
        await self.lint(uri)

    async def lint(self, uri: str) -> None:
        snapshot = self.snapshot(uri)
        if snapshot is None or not _is_python(self, snapshot):
            return
        findings = await self.engine_call(snapshot, lint_snapshot, snapshot)
        current = self.snapshot(uri)
        if findings is None or current is None or current.source != snapshot.source:
            return  # tfdoctor failed (and said so), or the text changed meanwhile: a newer lint is coming
        self.findings[uri] = findings
        by_part: dict[str, list[types.Diagnostic]] = {part.uri: [] for part in snapshot.parts}
        for finding in findings:
            part = snapshot.part(finding.cell)
            if part is not None:
                by_part[part.uri].append(diagnostic(finding, part, snapshot.codec, self.lines_of, snapshot.part))
        for gone in self.published.get(uri, set()) - set(by_part):
            self.publish(gone, [], None)
        for part in snapshot.parts:
            self.publish(part.uri, by_part[part.uri], part.version)
        self.published[uri] = set(by_part)

    async def engine_call(self, snapshot: Snapshot, function: Callable[..., Result], *args: Any) -> Result | None:
        """`function(*args)` in the engine's process; None when it failed, which is said to the user. A lint
        that takes the process down gives the file one TFD000 instead."""
        try:
            return await self.engine.run(function, *args)
        except WorkerLost as error:
            if function is lint_snapshot:
                return [parse_error(str(snapshot.path), str(error))]  # type: ignore[return-value]
            self.tell(f"tfdoctor: {snapshot.path}: {error}")
        except ConfigError as error:
            self.tell(f"tfdoctor: {error}")
        except RuntimeError as error:
            self.tell(f"tfdoctor: {snapshot.path}: {error} (please report)")
        return None

    def publish(self, uri: str, diagnostics: list[types.Diagnostic], version: int | None) -> None:
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=version))

    def forget(self, uri: str) -> None:
        waiting = self.pending.pop(uri, None)
        if waiting is not None:
            waiting.cancel()
        for part in self.published.pop(uri, set()):
            self.publish(part, [], None)
        self.findings.pop(uri, None)

    def lines_of(self, uri: str) -> list[str] | None:
        """A related file's lines: the editor's text when it is open, else the file on disk."""
        snapshot = text_snapshot(self.workspace, uri)
        return snapshot.parts[0].lines if snapshot else file_lines(path_of(uri))

    def tell(self, message: str) -> None:
        """Show a problem once (until it changes) and log it every time."""
        logger.warning(message)
        self.window_log_message(types.LogMessageParams(type=types.MessageType.Error, message=message))
        if message != self.last_error:
            self.last_error = message
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=message))

    async def refresh(self) -> None:
        """Files changed on disk: the engine forgets what it read of them, then every open document is linted."""
        try:
            await self.engine.run(forget_files_read)
        except (WorkerLost, RuntimeError) as error:  # a fresh engine process has read nothing yet
            logger.warning("could not refresh the engine: %s", error)
        self.relint_all()

    def relint_all(self) -> None:
        for uri in list(self.findings) + [uri for uri in self.workspace.text_documents if uri not in self.findings]:
            self.schedule(uri, 0)


def _is_python(server: TfdoctorServer, snapshot: Snapshot) -> bool:
    if snapshot.notebook:
        return True
    document = server.workspace.text_documents.get(snapshot.parts[0].uri)
    language = document.language_id if document is not None else None
    # An editor that knows no file type (Neovim without `filetype on`) sends an empty language id.
    return language == "python" or (not language and snapshot.path.suffix in (".py", ".pyi"))


def _is_config(uri: str) -> bool:
    name = Path(path_of(uri)).name
    return name in CONFIG_FILES or (name.startswith("requirements") and name.endswith(".txt"))


server = TfdoctorServer()


@server.feature(types.INITIALIZE)
def initialize(ls: TfdoctorServer, params: types.InitializeParams) -> None:
    ls.options = Options.parse(params.initialization_options)
    root = ls.workspace.root_path
    if root and Path(root).is_dir():
        os.chdir(root)  # paths in messages are relative to the workspace, as `tfdoctor lint` run there says them
    rule_pages()  # written once, before the first diagnostic links to them
    ls.engine.start()


@server.feature(types.INITIALIZED)
async def initialized(ls: TfdoctorServer, params: types.InitializedParams) -> None:
    """Ask the client to report changes of Python and settings files made outside it (a `git checkout`)."""
    workspace = ls.client_capabilities.workspace
    watching = workspace.did_change_watched_files if workspace else None
    if not (watching and watching.dynamic_registration):
        return
    try:
        await ls.client_register_capability_async(types.RegistrationParams(registrations=[types.Registration(
            id="tfdoctor-watched-files", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
            register_options=types.DidChangeWatchedFilesRegistrationOptions(
                watchers=[types.FileSystemWatcher(glob_pattern=pattern) for pattern in WATCHED]))]))
    except Exception as error:  # noqa: BLE001 - a client that refuses still gets diagnostics
        logger.warning("the client did not accept the file watchers: %s", error)


@server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
async def did_change_watched_files(ls: TfdoctorServer, params: types.DidChangeWatchedFilesParams) -> None:
    await ls.refresh()


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
def did_change_configuration(ls: TfdoctorServer, params: types.DidChangeConfigurationParams) -> None:
    if isinstance(params.settings, dict) and params.settings:
        ls.options = Options.parse(params.settings)
    ls.relint_all()


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: TfdoctorServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.schedule(params.text_document.uri, 0)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: TfdoctorServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.schedule(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))
async def did_save(ls: TfdoctorServer, params: types.DidSaveTextDocumentParams) -> None:
    if _is_config(params.text_document.uri) or path_of(params.text_document.uri).suffix in (".py", ".pyi"):
        await ls.refresh()
    else:
        ls.schedule(params.text_document.uri, 0)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: TfdoctorServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.forget(params.text_document.uri)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
def notebook_did_open(ls: TfdoctorServer, params: types.DidOpenNotebookDocumentParams) -> None:
    ls.notebooks.add(params.notebook_document.uri)
    ls.schedule(params.notebook_document.uri, 0)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
def notebook_did_change(ls: TfdoctorServer, params: types.DidChangeNotebookDocumentParams) -> None:
    ls.schedule(params.notebook_document.uri)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
def notebook_did_save(ls: TfdoctorServer, params: types.DidSaveNotebookDocumentParams) -> None:
    ls.schedule(params.notebook_document.uri, 0)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
def notebook_did_close(ls: TfdoctorServer, params: types.DidCloseNotebookDocumentParams) -> None:
    ls.notebooks.discard(params.notebook_document.uri)
    ls.forget(params.notebook_document.uri)


@server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
    code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND]))
async def code_action(ls: TfdoctorServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    notebook = ls.workspace.get_notebook_document(cell_uri=uri)
    owner = notebook.uri if notebook is not None and notebook.uri in ls.notebooks else uri
    snapshot = ls.snapshot(owner)
    if snapshot is None or owner not in ls.findings:
        return []
    edits = ls.client_capabilities.workspace.workspace_edit if ls.client_capabilities.workspace else None
    versioned = bool(edits and edits.document_changes)
    actions = await ls.engine_call(snapshot, code_actions, snapshot, params, ls.findings[owner], ls.options, versioned)
    return actions or []


def serve() -> None:
    """Run the server on standard input and output until the client ends it."""
    logging.basicConfig(level=logging.WARNING, format="tfdoctor server: %(message)s")
    server.start_io()


__all__ = ["TfdoctorServer", "serve", "server"]
