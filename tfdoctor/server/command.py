"""`tfdoctor server`: run the language server on standard input and output (needs the `lsp` extra)."""

from __future__ import annotations

import argparse
import sys

HELP = ("Run the language server for editors: LSP over standard input and output, with the findings as "
        "diagnostics and the fixes as code actions (needs the `lsp` extra: pip install 'tfdoctor[lsp]').")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stdio", action="store_true",
                        help="talk LSP over standard input and output (the default, and the only transport)")


def run(args: argparse.Namespace) -> int:
    try:
        from tfdoctor.server.server import serve
    except ImportError as error:
        if (error.name or "").split(".")[0] not in ("pygls", "lsprotocol"):
            raise
        print("error: the language server needs pygls: pip install 'tfdoctor[lsp]'", file=sys.stderr)
        return 2
    serve()
    return 0
