"""One finding per smell: when two findings are about the same construct, the more specific one stays.

A rule declares the codes it outranks (`Rule.OUTRANKS`: TFD401 on a `fit_generator` call outranks TFD201 on
that call). A finding is about its construct (`Violation.construct`, else the node it points at), and two
findings are about the same construct when one construct's source range lies within the other's. A rule
that outranks itself reports nested constructs once, at the innermost: TFD201 on a `fit_generator(...)`
call and on its generator argument is one smell, and the argument says more (two removed APIs nested in one
expression stay two TFD403 findings). This module is the one place that decides; rules do not look at each
other's findings.
"""

from __future__ import annotations

from dataclasses import dataclass

Point = tuple[int, int]  # (line, column)


@dataclass(frozen=True)
class Candidate:
    """A finding as precedence sees it: its rule, the codes that rule outranks, and its construct's span."""

    code: str
    outranks: frozenset[str]
    start: Point
    end: Point

    def within(self, other: Candidate) -> bool:
        return other.start <= self.start and self.end <= other.end


def survivors(candidates: list[Candidate]) -> list[bool]:
    """For each candidate, whether it is reported: False when another finding on the same construct comes
    from a rule that outranks it (for a rule that outranks itself: on a construct strictly inside it)."""
    return [not any(_beats(other, candidate) for other in candidates if other is not candidate)
            for candidate in candidates]


def _beats(winner: Candidate, loser: Candidate) -> bool:
    if loser.code not in winner.outranks:
        return False
    if winner.code == loser.code:
        return winner.within(loser) and (winner.start, winner.end) != (loser.start, loser.end)
    return winner.within(loser) or loser.within(winner)
