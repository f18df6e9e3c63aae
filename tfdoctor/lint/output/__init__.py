"""Renderers of a LintReport: one module per format, each exposing `render(report, console/stream)`."""

FORMATS = ("text", "concise", "json", "sarif", "github")
