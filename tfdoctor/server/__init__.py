"""`tfdoctor server`: the linter's findings in an editor, as a language server (LSP over stdio, on pygls).

`command` is the CLI entry (light at import); `server` holds the protocol handlers; `documents` reads open
documents and notebooks into what the engine lints; `diagnostics` and `actions` turn findings into LSP
diagnostics and code actions; `edits` turns a rewritten text into minimal text edits.
"""
