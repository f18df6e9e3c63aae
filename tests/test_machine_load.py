"""The machine-load note: a real process burning a core beside the measured one is load; a child of it is not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfdoctor.profile.machine_load import JOB_ROOT_ENV, load_note, others_cores, sample

pytestmark = pytest.mark.skipif(sample() is None, reason="no /proc on this system")

ORPHAN = ("import subprocess, sys\n"
          "print(subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdout=subprocess.DEVNULL,"
          " stderr=subprocess.DEVNULL).pid)\n")
MEASURE = ("import time\nfrom tfdoctor.profile.machine_load import others_cores, sample\n"
           "start = sample()\ntime.sleep(2.0)\nprint(others_cores(start, sample()))\n")
BURN = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end:\n    pass\n"


def _window(seconds: float) -> tuple:
    start = sample()
    time.sleep(seconds)
    return start, sample()


def test_another_process_burning_a_core_is_load():
    # started through a parent that exits at once, so the burner is not in this process's tree
    launcher = subprocess.run([sys.executable, "-c", ORPHAN, BURN], capture_output=True, text=True, check=True)
    burner = int(launcher.stdout)
    try:
        time.sleep(0.5)
        start, end = _window(2.0)
    finally:
        os.kill(burner, signal.SIGKILL)
    assert others_cores(start, end) > 0.8
    note = load_note(start, end)
    assert note is not None and note.startswith("other processes kept ") and "profile again on a quiet machine" in note


def test_a_child_of_the_measured_process_counts_as_its_own_work():
    child = subprocess.Popen([sys.executable, "-c", BURN])  # ours: Keras process workers are the run's own work
    try:
        time.sleep(0.5)
        before = _cpu_seconds(child.pid)
        start, end = _window(2.0)
        burned = _cpu_seconds(child.pid) - before
    finally:
        child.kill()
        child.wait()
    assert burned > 0.2  # it ran, however busy the machine is
    assert end.own - start.own >= burned - 0.05  # all of it counted as the measured tree's, none as load


def test_a_local_jobs_other_worker_is_the_jobs_own_work_not_load():
    # A local job's workers are siblings: the one measuring names the job's root, whose tree holds the other.
    # Two measurers run side by side, one outside the job and one in it, so any other load on the machine
    # touches both alike: what tells them apart is the sibling's CPU, which only the outsider counts as load.
    sibling = subprocess.Popen([sys.executable, "-c", BURN])
    try:
        time.sleep(0.5)
        outside = subprocess.Popen([sys.executable, "-c", MEASURE], stdout=subprocess.PIPE, text=True,
                                   env={k: v for k, v in os.environ.items() if k != JOB_ROOT_ENV})
        in_job = subprocess.Popen([sys.executable, "-c", MEASURE], stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, JOB_ROOT_ENV: str(os.getpid())})
        before = _cpu_seconds(sibling.pid)
        seen_outside, seen_in_job = float(outside.communicate()[0]), float(in_job.communicate()[0])
        burned = (_cpu_seconds(sibling.pid) - before) / 2.0  # cores, over about the measurers' window
    finally:
        sibling.kill()
        sibling.wait()
    assert burned > 0.3  # it ran, however busy the machine is
    assert seen_outside - seen_in_job == pytest.approx(burned, abs=0.25)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
