"""The findings cache: an unchanged re-run reads it, any change that matters misses it, damage is ignored."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.conftest import FIXTURES, run_cli
from tfdoctor.config import Overrides
from tfdoctor.lint import cache as cache_module
from tfdoctor.lint.engine import lint_paths

BAD = "import tensorflow as tf\nfrom tensorflow.keras.utils import multi_gpu_model\nparallel = multi_gpu_model(model, gpus=2)\n"


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.tfdoctor]\n")  # the cache lives next to the configuration
    shutil.copytree(FIXTURES / "seeds", tmp_path / "seeds")
    shutil.copy(FIXTURES / "notebooks" / "two_gpu_training.ipynb", tmp_path / "seeds")
    (tmp_path / "seeds" / "train.py").write_text(BAD)
    return tmp_path


def test_rerun_reads_the_cache_and_gives_the_same_report(project):
    cold = lint_paths([str(project / "seeds")], cache=True)
    assert cold.cached == 0 and cold.findings
    assert (project / ".tfdoctor_cache" / "CACHEDIR.TAG").is_file()
    assert (project / ".tfdoctor_cache" / ".gitignore").read_text() == "*\n"
    warm = lint_paths([str(project / "seeds")], cache=True)
    assert warm.cached == warm.files - warm.skipped == cold.files - cold.skipped
    assert warm.findings == cold.findings
    assert [f.statement_line for f in warm.findings] == [f.statement_line for f in cold.findings]


def test_changes_that_matter_miss_the_cache(project, monkeypatch):
    lint_paths([str(project / "seeds")], cache=True)
    (project / "seeds" / "train.py").write_text(BAD + "# edited\n")
    files = lint_paths([str(project / "seeds")], cache=True)
    # all but the edited file and the four whose findings rest on a search of the project: for the callers
    # of a function (also of one the file calls itself: another module may call it too), or for modules that
    # train on a pipeline built there (their `batch` or `map`)
    assert files.cached == files.files - files.skipped - 5
    ignored = lint_paths([str(project / "seeds")], Overrides(ignore=("TFD101",)), cache=True)
    assert ignored.cached == 0 and "TFD101" not in {f.code for f in ignored.findings}
    monkeypatch.setattr(cache_module, "_code_digest", lambda: "a rule was edited")
    assert lint_paths([str(project / "seeds")], cache=True).cached == 0


def test_a_call_added_in_another_file_misses_the_cache_of_the_file_it_reaches(tmp_path, monkeypatch):
    """trainer.py's TFD103 rests on the call in main.py: a cached trainer.py linted before main.py existed
    must not hide it, and once main.py's call is there the entry is valid again."""
    project = FIXTURES / "projects" / "train_from_main"
    for name in ("setup.cfg", "trainer.py"):
        shutil.copy(project / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    alone = lint_paths(["trainer.py"], cache=True)
    assert alone.cached == 0 and "TFD103" not in {f.code for f in alone.findings}
    shutil.copy(project / "main.py", tmp_path / "main.py")
    called = lint_paths(["trainer.py"], cache=True)
    assert called.cached == 0 and [(f.code, f.related[0].path) for f in called.findings if f.code == "TFD103"] == \
        [("TFD103", "main.py")]
    again = lint_paths(["trainer.py"], cache=True)
    assert again.cached == 1 and again.findings == called.findings


def test_corrupt_entries_are_ignored_and_an_unwritable_cache_is_one_warning(project):
    cold = lint_paths([str(project / "seeds")], cache=True)
    for entry in (project / ".tfdoctor_cache").rglob("*.json"):
        entry.write_bytes(b'[{"line": "oops"')
    again = lint_paths([str(project / "seeds")], cache=True)
    assert again.cached == 0 and again.findings == cold.findings and not again.errors
    shutil.rmtree(project / ".tfdoctor_cache")
    (project / ".tfdoctor_cache").write_text("not a folder")
    blocked = lint_paths([str(project / "seeds")], cache=True)
    assert blocked.findings == cold.findings and not blocked.errors
    assert len(blocked.warnings) == 1 and "cannot write the cache" in blocked.warnings[0]


def test_no_cache_flag_and_clean_command(project):
    assert run_cli("lint", "--no-cache", str(project / "seeds"), cwd=project).returncode == 1
    assert not (project / ".tfdoctor_cache").exists()
    assert run_cli("lint", str(project / "seeds"), cwd=project).returncode == 1
    assert (project / ".tfdoctor_cache").is_dir()
    cleaned = run_cli("clean", str(project / "seeds"))
    assert cleaned.returncode == 0 and "removed" in cleaned.stdout and not (project / ".tfdoctor_cache").exists()
    assert run_cli("clean", str(project)).stdout.startswith("no cache at")
    assert run_cli("clean", str(project / "missing")).returncode == 2


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_read_only_cache_folder(project):
    (project / ".tfdoctor_cache").mkdir()
    (project / ".tfdoctor_cache").chmod(0o500)
    report = lint_paths([str(project / "seeds")], cache=True)
    assert report.findings and len(report.warnings) == 1
