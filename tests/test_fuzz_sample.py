"""A small sample of the fuzz run (`benchmarks/fuzz_lint.py` runs 10,000 inputs): generated programs and
mutated fixtures through the real command line give findings or TFD000, never a crash, and `--fix` output
parses and is stable."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import fuzz_lint  # noqa: E402  (a script folder, not a package)


@pytest.mark.slow
def test_a_fuzz_sample_never_crashes_and_fixes_are_stable():
    outcome = fuzz_lint.run(count=100, seed=20261201, hypothesmith_share=0.25)
    assert sum(outcome.inputs.values()) == 100 and set(fuzz_lint.MUTATIONS) <= {
        name for origin in outcome.inputs for name in origin.split("+")} | {"hypothesmith"}
    assert outcome.failures == [] and outcome.fix_failures == []
    assert outcome.parse_errors > 0  # the mutations do reach TFD000
