"""The base class of every rule, and the registry that finds rule modules in `tfdoctor.rules`."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import ClassVar, Iterator, Mapping

import libcst as cst

from tfdoctor.lint.facts import CallFact, ModuleFacts
from tfdoctor.lint.findings import Evidence, Fix, Group, Severity, Violation
from tfdoctor.lint.versions import Targets

DOC_SECTIONS = ("What it does", "Why it is bad", "Example", "Use instead")


@dataclass(frozen=True)
class Context:
    """What a rule may know beyond the file: the versions the user targets, and whether the files are a run's
    own code (the profile's run), which meets the installed versions."""

    targets: Targets
    run_code: bool = False


class Rule:
    """A rule: a stable code, a kebab-case name, a severity, docs and examples, and a check over facts.

    The docstring has four sections (What it does / Why it is bad / Example / Use instead). In `INVALID`
    examples every line that must be reported ends with a `# TFDnnn` comment; `VALID` examples must give
    no finding of this rule. An example whose first line is `# tfdoctor: target-keras=2.15` (or
    `target-tensorflow=`) is checked under that target. A test runs them all, and
    `tfdoctor rules --write-docs` turns them into pages.

    `MESSAGES` holds the rule's message templates (`str.format` fields), each one short sentence saying what
    and where; the why is on the rule page. `report` is the one way to turn a template into a `Violation`.
    `OUTRANKS` names the less specific rules that stay silent when this one reports the same construct
    (`tfdoctor/lint/precedence.py` applies it; the rule pages say it). Test modules (`test_*.py`, a
    `tests/` folder) are checked only by the rules with `IN_TESTS`: a no-op that the test would not notice is
    a mistake there too; a slow pipeline or an old API is usually the point, and a crash shows itself. An
    `OPT_IN` rule (a migration hint that is true of much working code) runs only when the user's `select`
    names it.
    """

    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[Severity]
    summary: ClassVar[str]  # one line for the rule table
    triggers: ClassVar[tuple[str, ...]] = ("tensorflow", "keras")  # words a file must contain to be checked
    VALID: ClassVar[tuple[str, ...]] = ()
    INVALID: ClassVar[tuple[str, ...]] = ()
    MESSAGES: ClassVar[Mapping[str, str]] = {}
    OUTRANKS: ClassVar[tuple[str, ...]] = ()  # codes that stay silent on a construct this rule reports
    IN_TESTS: ClassVar[bool] = False  # also checks test modules: it finds what a test would not notice
    OPT_IN: ClassVar[bool] = False  # a hint most code is better off without: checked only when `select` names it

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        raise NotImplementedError

    def table_summary(self) -> str:
        """The summary as the rule tables show it: an opt-in rule says it is off by default."""
        return f"{self.summary} Off by default." if self.OPT_IN else self.summary

    def severity_for(self, context: Context) -> Severity:
        """The severity under the user's targets (most rules have a fixed one)."""
        return self.severity

    def report(self, where: CallFact | cst.CSTNode, template: str = "default", *, statement: cst.CSTNode | None = None,
               fix: Fix | None = None, assumed: str | None = None, evidence: tuple[Evidence, ...] = (),
               construct: cst.CSTNode | None = None, severity: Severity | None = None, **fields: object) -> Violation:
        """A finding at a call (its statement is the `# noqa` line) or a node, worded by `MESSAGES[template]`.
        `assumed` says which version the finding depends on and why (`Keras 2 assumed: ...`); `evidence`,
        what it relies on in other files of the project; `construct`, what the finding is about when it
        points at a part of it (for precedence); `severity`, the finding's own when its consequence is not the
        one the rule's severity stands for."""
        message = self.MESSAGES[template].format(**fields)
        if assumed is not None:
            message = f"{message} ({assumed})"
        if isinstance(where, CallFact):
            return Violation(where.node, message, statement=statement or where.statement, fix=fix, evidence=evidence,
                             construct=construct, severity=severity)
        return Violation(where, message, statement=statement, fix=fix, evidence=evidence, construct=construct,
                         severity=severity)

    @staticmethod
    def one_for_all(found: list[Violation], what: str) -> list[Violation]:
        """Several places of one problem (the reads of one loop, the towers of one module), reported as one
        finding: at the first of them that is not dead code, the others related to it as `what`."""
        group = Group(what, id(found[0].node))
        return [replace(violation, group=group) for violation in found]

    @staticmethod
    def assumed(context: Context, package: str, facts: ModuleFacts, node: cst.CSTNode) -> str | None:
        """What a finding on `node` says it assumes of a package's version (`Keras 2 assumed: ...`). `node`
        itself is never its evidence: another place the version was read from is cited, or none."""
        target = context.targets.keras if package == "keras" else context.targets.tensorflow
        if not target.sightings:
            return context.targets.assumed(package)
        line, _, end_line, _ = facts.position(node)
        return context.targets.assumed(package, (facts.path, line, end_line))

    @classmethod
    def doc_sections(cls) -> dict[str, str]:
        """The docstring's sections by heading."""
        text = inspect.cleandoc(cls.__doc__ or "")
        sections: dict[str, str] = {}
        current = None
        for line in text.splitlines():
            heading = re.fullmatch(r"## (.+)", line.strip())
            if heading:
                current = heading.group(1)
                sections[current] = ""
            elif current is not None:
                sections[current] += line + "\n"
        return {key: value.strip() for key, value in sections.items()}

    @classmethod
    def doc_code(cls, section: str) -> str:
        """The Python code block of a docstring section."""
        match = re.search(r"```python\n(.*?)```", cls.doc_sections().get(section, ""), re.DOTALL)
        return match.group(1) if match else ""


@lru_cache(maxsize=1)
def all_rules() -> tuple[Rule, ...]:
    """One instance of every rule in `tfdoctor.rules`, ordered by code. Adding a rule is adding a module."""
    import tfdoctor.rules as package

    rules: list[Rule] = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, Rule) and value is not Rule and value.__module__ == module.__name__:
                rules.append(value())
    return tuple(sorted(rules, key=lambda rule: rule.code))


def rule_by_code(code: str) -> Rule | None:
    wanted = code.upper()
    return next((rule for rule in all_rules() if rule.code == wanted or rule.name == code), None)
