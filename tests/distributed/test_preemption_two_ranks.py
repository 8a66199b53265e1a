"""Preemption and storage faults on two real ranks: lose at most the batches in flight, never a checkpoint.

Each test runs ``python -m hvdkeras.train`` on the digits job under ``horovodrun -np 2 --gloo`` and
asserts what a user checks afterwards: exit statuses, the one line, the checkpoint that remains and
where the rerun resumes. A job that hangs fails its test (the harness's timeout).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from hvdkeras.runtime import checkpointing
from tests.harness.ranks import (
    HOROVODRUN,
    REPO,
    finish,
    horovodrun,
    rank_pid,
    read_jsonl,
    start_ranks,
    train_args,
    wait_for_epochs,
)
from tests.harness.reports import EXACT, assert_trained_as_uninterrupted
from tests.harness.stacks import once_per_make_test

PREEMPTED = re.compile(r"hvdkeras: preempted at (?:epoch (\d+), batch (\d+)|the end of epoch (\d+));"
                       r" checkpoint written: (\S+)")


def _start(workdir, *sets):
    return start_ranks(train_args(workdir, *sets))


def _preempted_lines(out):
    found = [PREEMPTED.search(line) for line in out.splitlines()]
    return [m for m in found if m]


def _position(match):
    """(completed epochs, batch) from a preempted line."""
    if match.group(3) is not None:
        return int(match.group(3)), 0
    return int(match.group(1)) - 1, int(match.group(2))


def test_sigterm_on_one_rank_stops_both_at_one_batch_and_the_rerun_matches_an_uninterrupted_run(
        tmp_path, uninterrupted_exact):
    workdir = tmp_path / "preempted"
    proc = _start(workdir, *EXACT)
    wait_for_epochs(proc, workdir, 2)
    pid = rank_pid(1, str(workdir))
    assert pid is not None, "rank 1 not found"
    os.kill(pid, signal.SIGTERM)  # rank 1 alone: rank 0 learns it through the agreement
    signalled = time.time()
    out = finish(proc)
    took = time.time() - signalled
    lines = _preempted_lines(out)
    assert len(lines) == 2, out[-3000:]  # one line per rank
    assert len({m.group(0) for m in lines}) == 1  # the same position and path on both ranks
    assert "Process 0 exit with status code 75" in out, out[-3000:]
    # Rank 1 leaves once rank 0's process is gone (it probes rank 0's beacon every 0.1 s, then exits at
    # once, without Horovod's shutdown), and horovodrun terminates the ranks still running as soon as
    # rank 0 has left: rank 1's status is its own 75 when it was quicker, 143 when horovodrun's
    # termination came first (after rank 0's 75, with rank 1's line printed: nothing of it is lost;
    # seen in fc15), or none at all (zero by horovodrun's account). Never a crash, never a SIGKILL after
    # horovodrun's grace (137: rank 1 stuck in Horovod's shutdown, fc16), never rank 0 killed first.
    rank1 = re.findall(r"Process 1 exit with status code (-?\d+)", out)
    assert rank1 in ([], ["75"], ["143"]), out[-3000:]
    if rank1 == ["143"]:
        assert out.index("Process 0 exit with status code 75") < out.index("Process 1 exit with status code 143")
        assert "Terminating remaining workers after failure of Process 0" in out, out[-3000:]
    epoch, batch = _position(lines[0])
    path = lines[0].group(4)
    assert checkpointing.verify(path) is None
    print(f"\nSIGTERM to rank 1 -> both ranks exited in {took:.1f}s; checkpoint after epoch {epoch}, batch {batch}")

    rerun = horovodrun(train_args(workdir, *EXACT), timeout=240)
    at = f" and batch {batch} of epoch {epoch + 1}" if batch else ""
    assert sum(f"resuming after epoch {epoch}{at} from" in line for line in rerun.output.splitlines()) == 2
    assert [r["epoch"] for r in read_jsonl(workdir / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]

    assert_trained_as_uninterrupted(workdir, uninterrupted_exact)


# The manifest check, the skip and the move aside are plain Python (hvdkeras/runtime/checkpointing.py's manifest);
# resuming from the checkpoint before is every resume test's, on both stacks.
@once_per_make_test("the damaged-checkpoint test (the manifest check)", 0.2, stack="keras3")
def test_a_damaged_latest_checkpoint_is_skipped_with_one_warning_and_kept(tmp_path, digits_two_epochs):
    workdir = digits_two_epochs(tmp_path / "work")  # checkpoints of epochs 1 and 2
    bad = workdir / "checkpoints" / "epoch-0002"
    data = next(p for p in bad.iterdir() if p.name.startswith("ckpt.data"))
    with open(data, "r+b") as f:
        f.truncate(100)
    job = horovodrun(train_args(workdir, "trainer.epochs=3", "checkpoint.keep=0"), timeout=240)
    warnings = [line for line in job.output.splitlines() if "is damaged" in line]
    assert len(warnings) == 1, job.output[-3000:]
    assert f"{bad} is damaged ({data.name} has 100 bytes, the manifest says" in warnings[0]
    assert sum("resuming after epoch 1 from" in line for line in job.output.splitlines()) == 2
    assert (workdir / "checkpoints" / "damaged-epoch-0002-1" / data.name).stat().st_size == 100  # kept as found
    assert checkpointing.verify(str(workdir / "checkpoints" / "epoch-0003")) is None


def _in_private_mount(script: str, timeout=240):
    """Runs a bash ``script`` in a private mount namespace (its tmpfs mounts vanish with it)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    proc = subprocess.run(["unshare", "-m", "bash", "-c", script], cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return proc.returncode, proc.stdout


def _horovodrun_line(workdir, *sets):
    return " ".join([HOROVODRUN, "-np", "2", "-H", "localhost:2", "--gloo", sys.executable]
                    + [f"'{a}'" for a in train_args(workdir, *sets)])


def _on_a_small_disk(tmp_path, digits_two_epochs, *sets):
    """Trains on a tmpfs with room for one checkpoint and a half; (status, output, the workdir copied off it)."""
    sizing = digits_two_epochs(tmp_path / "sizing")
    one = sum(p.stat().st_size for p in (sizing / "checkpoints" / "epoch-0001").iterdir())
    room = int(one * 1.5) + 64 * 1024  # the first checkpoint, config.yaml and metrics fit; the second does not
    disk, kept = tmp_path / "small-disk", tmp_path / "kept"
    disk.mkdir()
    code, out = _in_private_mount(
        f"mount -t tmpfs -o size={room} tmpfs {disk} && "
        + _horovodrun_line(disk / "work", "trainer.epochs=4", "checkpoint.keep=0", *sets)
        + f"; status=$?; cp -a {disk / 'work'} {kept}; exit $status")
    return code, out, kept, disk


def _only_epoch_one_intact(kept):
    store = checkpointing.CheckpointStore(str(kept / "checkpoints"))
    assert [c.position for c in store.list()] == [(1, 0)]
    assert checkpointing.verify(store.list()[0].path) is None
    assert not [n for n in os.listdir(kept / "checkpoints") if n.startswith(".saving-")]


# A full disk or an unwritable workdir: the checkpoint writer's error and the one line every rank gives, the same
# Python on both stacks (runtime/checkpointing.py); each stack's save under a full disk is unit-tested
# (tests/unit/runtime/test_checkpointing.py).
disk_once = once_per_make_test("the full-disk and unwritable-workdir tests", 0.6, stack="keras3")


@disk_once
def test_a_full_disk_during_a_save_stops_with_one_line_and_the_previous_checkpoint_intact(tmp_path, digits_two_epochs):
    code, out, kept, disk = _on_a_small_disk(tmp_path, digits_two_epochs)
    assert code != 0
    said = [line for line in out.splitlines() if "hvdkeras: error: no space left on" in line]
    assert len(said) == 1, out[-3000:]
    assert f"no space left on {disk} while writing checkpoint epoch 2; epoch 1 is intact" in said[0]
    _only_epoch_one_intact(kept)


@disk_once
def test_a_full_disk_with_on_save_error_continue_warns_and_finishes(tmp_path, digits_two_epochs):
    code, out, kept, _ = _on_a_small_disk(tmp_path, digits_two_epochs, "checkpoint.on_save_error=continue")
    assert code == 0, out[-3000:]
    warned = [line for line in out.splitlines() if "training continues (checkpoint.on_save_error=continue)" in line]
    assert len(warned) == 3 and all("no space left on" in line for line in warned), out[-3000:]
    assert [r["epoch"] for r in read_jsonl(kept / "metrics.jsonl")] == [1, 2, 3, 4]
    _only_epoch_one_intact(kept)


@disk_once
@pytest.mark.parametrize("kind", ["file", "read-only"])
def test_a_workdir_that_cannot_be_written_fails_in_one_line_before_training(tmp_path, kind):
    workdir = tmp_path / "work"
    if kind == "file":
        workdir.write_text("not a folder")
        tic = time.time()
        job = horovodrun(train_args(workdir), check=False, timeout=120)
        code, out = job.returncode, job.output
        expected = f"hvdkeras: error: --workdir {workdir} is a file, not a folder"
    else:
        workdir.mkdir()
        tic = time.time()
        code, out = _in_private_mount(f"mount -t tmpfs -o ro tmpfs {workdir} && " + _horovodrun_line(workdir))
        expected = f"hvdkeras: error: cannot write in {workdir} (Read-only file system)"
    assert code != 0
    assert sum(expected in line for line in out.splitlines()) == 1, out[-3000:]
    assert "Epoch 1/" not in out and "resuming" not in out and "starting fresh" not in out
    assert time.time() - tic < 60
