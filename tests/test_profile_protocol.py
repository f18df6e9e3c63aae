"""The parent-child protocol and the runner that follows children: typed events, a dedicated event channel,
a real deadline, one line for every failure (no TensorFlow: the children here are small Python programs)."""

from __future__ import annotations

import sys
import textwrap
import time

import pytest

from tfdoctor.profile import protocol
from tfdoctor.profile.gpus import machine_gpus, unused_gpus_note
from tfdoctor.profile.protocol import (ClockCheck, FewerReplicas, Measured, PhaseTimes, ProtocolError, ScriptConfig,
                                       WorkerConfig)
from tfdoctor.profile.runner import ProfileError, raise_failure, run_child, trace_of

EVENTS = [
    protocol.Devices("cpu", ["/device:CPU:0", "/device:CPU:1"]),
    protocol.WorkloadReady("mlp", 64, 32, ["a note"], [["TFD201", "train.py", 4]]),
    protocol.Progress("A/B/G/R in rounds", 3, 20),
    Measured(PhaseTimes([0.1, 0.2], [0.0, 0.01], [0.09, 0.1], [0.08], [0.05, 0.05], [0.06, 0.06]), 12.5,
             [FewerReplicas(1, 32, [0.05])], ClockCheck(6, 0.1, 0.11, "tf.test.experimental.sync_devices", None)),
    protocol.Traced({"logdir": "/tmp/x", "xprof": {"step_ms": 41.5}}),
    protocol.NoStep(0, ["Model.fit batches"], "ran 5 s"),
    protocol.Crash(1, "FileNotFoundError: x at train.py:7"),
    protocol.OutOfMemory("OOM when allocating tensor"),
    protocol.Failed("ValueError: bad"),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.NAME)
def test_every_event_survives_its_encoding(event):
    line = protocol.encode(event)
    assert "\n" not in line and protocol.decode(line) == event


def test_configurations_survive_their_encoding_and_name_the_replicas_alike():
    worker = WorkerConfig(replicas=3, steps=5, width=0.5, fewer_replicas=[1, 2], params={"inject": "payload"})
    script = ScriptConfig(replicas=3, max_seconds=5.0, trace_dir=None)
    assert protocol.decode_config(protocol.encode(worker), WorkerConfig) == worker
    assert protocol.decode_config(protocol.encode(script), ScriptConfig) == script
    with pytest.raises(ProtocolError, match="unknown field 'gpus'"):
        protocol.decode_config('{"gpus": 2}', ScriptConfig)


@pytest.mark.parametrize(("line", "message"), [
    ("TFDOCTOR_EVENT {", "not JSON"),
    ('{"event": "nonsense"}', "not an event"),
    ('["devices"]', "not an event"),
    ('{"event": "devices", "kind": "cpu"}', "missing field 'names'"),
    ('{"event": "progress", "phase": "A", "done": "3", "total": 20}', "progress.done: expected int, got str"),
    ('{"event": "result", "times": {"full": ["x"], "input_wait": []}, "elapsed_s": 1}', "expected float, got str"),
    ('{"event": "oom", "message": "x", "extra": 1}', "unknown field 'extra'"),
])
def test_a_line_that_is_not_an_event_is_a_protocol_error(line, message):
    with pytest.raises(ProtocolError, match=message):
        protocol.decode(line)


def _child(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def _alive(pid: int, within_s: float = 10.0) -> bool:
    """Still running after `within_s` (SIGKILL takes effect a moment after it is sent; a killed process whose
    parent is gone may stay a zombie until init reaps it)."""
    give_up = time.monotonic() + within_s
    while time.monotonic() < give_up:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return False
        except FileNotFoundError:
            return False
        time.sleep(0.05)
    return True


def test_events_come_on_their_own_channel_and_stdout_stays_the_childs():
    code = """
        import os, sys
        from tfdoctor.profile import protocol
        print('{"event": "oom", "message": "printed on stdout, not an event"}')
        print("TFDOCTOR_EVENT {garbage", file=sys.stderr)
        protocol.Channel().emit(protocol.Devices("cpu", ["/cpu:0"]))
    """
    seen = []
    child = run_child(_child(code), seen.append, timeout_s=60)
    assert seen == [protocol.Devices("cpu", ["/cpu:0"])]
    assert child.process.returncode == 0 and any("printed on stdout" in line for line in child.tail)


def test_a_hanging_child_is_killed_with_its_process_group_at_the_deadline(tmp_path):
    # The child starts a grandchild, reports progress, then hangs with its stdout open.
    pid_file = tmp_path / "grandchild.pid"
    code = f"""
        import subprocess, sys, time
        from tfdoctor.profile import protocol
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pid_file)!r}, "w").write(str(grandchild.pid))
        protocol.Channel().progress("A/B/G/R in rounds", 2, 20)
        time.sleep(600)
    """
    started = time.monotonic()
    with pytest.raises(ProfileError) as error:
        run_child(_child(code), lambda event: None, timeout_s=8)
    assert time.monotonic() - started < 30
    message = str(error.value)
    assert "\n" not in message and "did not finish within its time limit" in message
    assert "last progress: A/B/G/R in rounds 2/20" in message
    assert not _alive(int(pid_file.read_text()))


def test_a_malformed_event_ends_the_child_at_once_as_one_line(tmp_path):
    pid_file = tmp_path / "child.pid"
    code = f"""
        import os, time
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        os.write(int(os.environ["TFDOCTOR_EVENT_FD"]), b'{{"event": "progress", "phase": 1}}\\n')
        time.sleep(600)
    """
    started = time.monotonic()
    with pytest.raises(ProfileError) as error:
        run_child(_child(code), lambda event: None, timeout_s=120)
    assert time.monotonic() - started < 30  # not the deadline: the garbage itself ends it
    message = str(error.value)
    assert "\n" not in message and message.startswith("the measurement sent a malformed event")
    assert "progress.phase: expected str, got int" in message
    assert not _alive(int(pid_file.read_text()))


def test_a_child_that_dies_without_a_result_says_its_exit_code_and_last_line():
    code = """
        import sys
        print("Segmentation fault (core dumped)", file=sys.stderr)
        sys.exit(139)
    """
    child = run_child(_child(code), lambda event: None, timeout_s=60)
    with pytest.raises(ProfileError, match=r"^the measurement exited with code 139: Segmentation fault \(core dumped\)$"):
        raise_failure(child, Measured)


def test_a_child_killed_by_a_signal_says_which():
    code = """
        import os, signal, sys
        print("double free or corruption (out)", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGABRT)
    """
    child = run_child(_child(code), lambda event: None, timeout_s=60)
    with pytest.raises(ProfileError, match=r"^the measurement was killed by SIGABRT: double free or corruption \(out\)$"):
        raise_failure(child, Measured)


RESULT = Measured(PhaseTimes([0.1, 0.2], [0.0, 0.0]), 1.0)


def test_a_child_that_dies_after_its_result_keeps_it_and_says_the_trace_is_missing():
    code = f"""
        import os, signal
        from tfdoctor.profile import protocol
        protocol.Channel().emit(protocol.decode({protocol.encode(RESULT)!r}))
        os.kill(os.getpid(), signal.SIGABRT)  # as TensorFlow's profiler does when its host tracer corrupts the heap
    """
    child = run_child(_child(code), lambda event: None, timeout_s=60)
    raise_failure(child, Measured)  # the result stands
    assert child.last(Measured) == RESULT
    assert trace_of(child, requested=True) == (None, "the trace is missing: the process was killed by SIGABRT before "
                                                     "it was written")
    assert trace_of(child, requested=False) == (None, None)


def test_a_trace_sent_after_the_result_is_the_reports():
    trace = {"logdir": "/tmp/x", "xprof": {"step_ms": 41.5}}
    code = f"""
        from tfdoctor.profile import protocol
        channel = protocol.Channel()
        channel.emit(protocol.decode({protocol.encode(RESULT)!r}))
        channel.emit(protocol.Traced({trace!r}))
    """
    child = run_child(_child(code), lambda event: None, timeout_s=60)
    raise_failure(child, Measured)
    assert trace_of(child, requested=True) == (trace, None)


def test_gpus_on_the_machine_are_found_by_their_device_files(tmp_path):
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    assert machine_gpus(dev=tmp_path, smi="no-such-nvidia-smi") == ["nvidia0", "nvidia1"]
    assert machine_gpus(dev=tmp_path / "missing", smi="no-such-nvidia-smi") == []


@pytest.mark.parametrize(("env", "installed", "cause"), [
    ({"CUDA_VISIBLE_DEVICES": ""}, {"tensorflow"}, "CUDA_VISIBLE_DEVICES='' hides them"),
    ({"CUDA_VISIBLE_DEVICES": "-1"}, {"tensorflow"}, "CUDA_VISIBLE_DEVICES='-1' hides them"),
    ({}, {"tensorflow-cpu"}, "the CPU build of TensorFlow (tensorflow-cpu) is installed"),
    ({}, {"tensorflow"}, "TensorFlow found no CUDA libraries"),
    ({}, {"tensorflow", "nvidia-cudnn-cu12"}, "check that the driver matches"),
])
def test_gpus_that_tensorflow_did_not_use_are_the_first_note_with_the_fix(env, installed, cause):
    note = unused_gpus_note("cpu", ["GPU 0: NVIDIA H200 (UUID: x)"], env, frozenset(installed))
    assert note.startswith("GPUs not used: this machine has 1 GPU (GPU 0: NVIDIA H200")
    assert cause in note
    assert unused_gpus_note("gpu", ["GPU 0: x"], env, frozenset(installed)) is None
    assert unused_gpus_note("cpu", [], env, frozenset(installed)) is None
