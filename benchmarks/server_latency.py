"""Time from an edit to its diagnostics, on a warm `tfdoctor server` and a 1,000-line training file.

Starts the real server over stdio with pygls' own client, opens a 1,000-line file built from the bundled
example programs (every copy renamed, so it has findings throughout), waits for its first diagnostics
(warm: rules imported, engine process started), then makes ROUNDS edits, one line each, and measures from
sending each `didChange` to receiving the diagnostics published for that version. The time includes the
server's debounce (`DEBOUNCE_S`), which is printed too. Target: the median <= 300 ms on this machine.

    python benchmarks/server_latency.py [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from tfdoctor.server.server import DEBOUNCE_S

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 0.300
LINES = 1000


def thousand_lines() -> str:
    """The example programs, each copy's names suffixed, repeated to LINES lines."""
    seeds = [path.read_text() for path in sorted((ROOT / "fixtures" / "seeds").glob("*.py"))]
    lines: list[str] = []
    copy = 0
    while len(lines) < LINES:
        for seed in seeds:
            for line in seed.splitlines():
                lines.append(line.replace("def ", f"def c{copy}_") if line.startswith("def ") else line)
        copy += 1
    return "\n".join(lines[:LINES]) + "\n"


async def measure(rounds: int) -> list[float]:
    client = LanguageClient("latency-benchmark", "1")
    published: dict[int | None, float] = {}
    arrived = asyncio.Event()

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def on_diagnostics(params: types.PublishDiagnosticsParams) -> None:
        published[params.version] = time.perf_counter()
        arrived.set()

    await client.start_io(sys.executable, "-m", "tfdoctor", "server")
    folder = Path(tempfile.mkdtemp(prefix="tfdoctor-latency-"))
    await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities(),
                                                         root_uri=folder.as_uri()))
    client.initialized(types.InitializedParams())
    text = thousand_lines()
    path = folder / "train.py"
    path.write_text(text)
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    await _wait(published, arrived, 1)
    times = []
    for version in range(2, rounds + 2):
        line = 10 + version % 50
        edit = types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=line, character=0), end=types.Position(line=line, character=0)),
            text=f"# edit {version}\n")
        sent = time.perf_counter()
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version), content_changes=[edit]))
        await _wait(published, arrived, version)
        times.append(published[version] - sent)
        await asyncio.sleep(0.3)  # a pause, as between bursts of typing
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return times


async def _wait(published: dict[int | None, float], arrived: asyncio.Event, version: int) -> None:
    while version not in published:
        arrived.clear()
        await asyncio.wait_for(arrived.wait(), 60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    times = sorted(asyncio.run(measure(args.rounds)))
    median, p90 = statistics.median(times), times[int(0.9 * (len(times) - 1))]
    print(f"{LINES}-line file, {len(times)} edits: edit to diagnostics median {median * 1000:.0f} ms, "
          f"p90 {p90 * 1000:.0f} ms, best {times[0] * 1000:.0f} ms (of which debounce {DEBOUNCE_S * 1000:.0f} ms); "
          f"median / target {median / TARGET_S:.2f} (target <= 1.00 at {TARGET_S * 1000:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
