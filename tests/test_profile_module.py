"""Script mode on a module (`tfdoctor profile -- python -m pkg.module ARGS`), and the trace viewer the report
names (`xprof --logdir DIR`) serving that run's trace."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_cli
from tfdoctor.profile.runner import ProfileError
from tfdoctor.profile.script.parent import split_command

SCRIPTS = ROOT / "tests" / "scripts"


@pytest.fixture(scope="module")
def module_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One profile of `python -m trainpkg.train 60`: the module hands the loop to `trainpkg.data`."""
    logdir = tmp_path_factory.mktemp("logdir")
    result = run_cli("profile", "--gpus", "2", "--steps", "6", "--warmup", "2", "--format", "json", "--logdir",
                     str(logdir), "--", "python", "-m", "trainpkg.train", "60", cwd=SCRIPTS)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def test_a_module_is_found_as_python_m_finds_it_without_importing_it(monkeypatch):
    monkeypatch.chdir(SCRIPTS)
    target = split_command(("python", "-m", "trainpkg.train", "60"))
    assert (str(target.path), target.module, str(target.package), target.args) == (
        "trainpkg/train.py", "trainpkg.train", "trainpkg", ("60",))
    assert target.launch_args == ["-m", "trainpkg.train", "60"]
    assert "trainpkg" not in sys.modules  # found, not imported (it imports TensorFlow)
    with pytest.raises(ProfileError, match=r"^module not found: trainpkg\.missing \(looked in "):
        split_command(("python", "-m", "trainpkg.missing"))
    with pytest.raises(ProfileError, match="not -c: code given on the command line has no source to lint"):
        split_command(("python", "-c", "import train"))


@pytest.mark.tf
def test_a_module_profiles_with_its_whole_package_linted(module_run):
    assert module_run["mode"] == "script" and module_run["workload"]["name"] == "-m trainpkg.train"
    assert module_run["verdict"]["primary"] == "input-bound", module_run["shares"]
    # the loop lives in trainpkg/data.py, which the module imports as `trainpkg.data`: only linting the
    # package finds it (a script's own folder holds no `trainpkg`)
    assert "TFD201 at trainpkg/data.py:35" in module_run["verdict"]["statement"]
    assert module_run["suggestions"][0]["locations"][0] == "TFD201 at trainpkg/data.py:35"


@pytest.mark.tf
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare for a private network")
def test_the_viewer_the_report_names_serves_the_run_and_its_tools(module_run):
    logdir = module_run["trace"]["logdir"]
    assert logdir and module_run["trace"]["xprof"]["steps"] >= 1
    probe = subprocess.run(["unshare", "-rn", sys.executable, str(ROOT / "tests" / "profile" / "viewer_probe.py"),
                            logdir], capture_output=True, text=True, timeout=240, check=False)
    answer = json.loads(probe.stdout.strip().splitlines()[-1])
    assert probe.returncode == 0, answer
    assert len(answer["runs"]) == 1
    tools = answer["tools"][answer["runs"][0]]
    assert "trace_viewer" in tools or "trace_viewer@" in tools, tools
    assert "input_pipeline_analyzer" in tools, tools
