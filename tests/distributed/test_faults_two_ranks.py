"""Faults on two real ranks: a rank that dies, ranks that disagree. No hang, no lost checkpoint."""
import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from hvdkeras.runtime import checkpointing
from tests.harness.ranks import (
    REPO,
    SCRIPTS,
    OutputWatch,
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

DIGITS = os.path.join(REPO, "configs", "digits.yaml")
# A frozen or slow rank is met by Horovod's own machinery (Gloo's negotiation, the stall inspector of its
# C++ core, built with patch 0004) and ends in the trainer's one line, the same code on both stacks.
stall = once_per_make_test("the frozen and slow rank tests (Horovod's stall inspector)", 1.9, stack="keras2")
# A lost peer is named by the beacons (hvdkeras/common/peers.py) and ranks that disagree by the pre-flight hash:
# plain Python and sockets around Horovod's collectives, the same on both stacks.
peers = once_per_make_test("the lost-peer and pre-flight tests", 0.4, stack="keras3")


@peers
def test_killed_rank_ends_the_job_quickly_and_the_rerun_resumes(tmp_path):
    workdir = tmp_path / "work"
    proc = start_ranks(["-m", "hvdkeras.train", "--config", DIGITS, "--workdir", str(workdir),
                        "--set", "trainer.epochs=400", "--set", "trainer.verbose=0"])
    wait_for_epochs(proc, workdir, 3)
    pid = rank_pid(1, str(workdir))
    assert pid is not None, "rank 1 not found"
    os.kill(pid, signal.SIGKILL)  # mid-epoch, without warning
    killed_at = time.time()
    out = finish(proc, timeout=90)
    took = time.time() - killed_at
    assert proc.returncode != 0
    assert took < 60, f"the job took {took:.0f}s to end after rank 1 died"
    assert "Process 1 exit with status code" in out or "exit with status code -9" in out, out[-2000:]
    done = read_jsonl(workdir / "metrics.jsonl")[-1]["epoch"]

    job = horovodrun(["-m", "hvdkeras.train", "--config", DIGITS, "--workdir", str(workdir),
                      "--set", f"trainer.epochs={done + 2}", "--set", "trainer.verbose=0"], timeout=240)
    starts = [line for line in job.output.splitlines() if "resuming after epoch" in line]
    assert len(starts) == 2  # the latest checkpoint loads, on both ranks
    resumed = int(starts[0].split("resuming after epoch ")[1].split()[0])
    assert resumed >= done - 1  # at most the epoch that was running is lost
    epochs = [r["epoch"] for r in read_jsonl(workdir / "metrics.jsonl")]
    assert epochs == list(range(1, done + 3))  # none missing, none repeated


@peers
def test_a_second_job_on_a_workdir_in_use_stops_at_once_naming_the_first_which_goes_on(tmp_path):
    # Two digits jobs started on one workdir, the second once the first has trained an epoch (the case:
    # both ran to the end and wrote the same checkpoints). The lock is plain Python around the trainer.
    workdir = tmp_path / "work"
    first = start_ranks(train_args(workdir, "trainer.epochs=6", "checkpoint.keep=0"))
    wait_for_epochs(first, workdir, 1)
    holder = rank_pid(0, str(workdir))
    second = horovodrun(train_args(workdir, "trainer.epochs=6", "checkpoint.keep=0"), timeout=120, check=False)
    assert second.returncode != 0
    errors = [line for line in second.output.splitlines() if "hvdkeras: error:" in line]
    assert errors and f"--workdir {workdir} is in use by another job (job horovodrun " in errors[0], second.output
    assert f", pid {holder}, started " in errors[0] and errors[0].endswith("or pass another --workdir")
    out = finish(first, timeout=120)
    assert first.returncode == 0, out[-3000:]
    assert [r["epoch"] for r in read_jsonl(workdir / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]  # one writer
    assert not (workdir / ".hvdkeras.lock").exists()  # released with the job


@peers
def test_ranks_with_different_configs_stop_with_a_readable_diff(tmp_path):
    script = tmp_path / "one_rank_differs.py"
    script.write_text(
        "import sys, horovod.tensorflow as hvd\n"
        "hvd.init()\n"
        "extra = ['--set', 'optimizer.learning_rate=0.07'] if hvd.rank() == 1 else []\n"
        f"sys.argv = ['train', '--config', {DIGITS!r}, '--workdir', {str(tmp_path / 'w')!r}] + extra\n"
        "from hvdkeras.train import run\n"
        "run()\n")
    job = horovodrun([str(script)], timeout=180, check=False)
    assert job.returncode != 0
    errors = [line for line in job.output.splitlines() if "hvdkeras: error:" in line]
    assert errors, job.output[-3000:]
    assert ("pre-flight check failed: config differs: optimizer.learning_rate=0.05 on rank 0 but 0.07 on rank 1"
            in errors[0])
    assert not (tmp_path / "w" / "checkpoints").exists()


def _stop_rank_one_for(workdir, seconds, *sets):
    """Trains digits on two ranks, freezes rank 1 (SIGSTOP) for ``seconds`` mid-training; (status, output)."""
    args = ["-m", "hvdkeras.train", "--config", DIGITS, "--workdir", str(workdir), "--set", "trainer.verbose=0"]
    for s in sets:
        args += ["--set", s]
    proc = start_ranks(args)
    wait_for_epochs(proc, workdir, 1)
    pid = rank_pid(1, str(workdir))
    assert pid is not None, "rank 1 not found"
    os.kill(pid, signal.SIGSTOP)
    time.sleep(seconds)
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass  # the job was already shut down
    out = finish(proc, timeout=240)
    return proc.returncode, out


# Rank 1 frozen before its step ("stop") or after it ("stop-after"), and rank 0's whole batches then: (epoch, batch).
FROZEN_WHERE = {"frozen-before-its-step": ("stop", (1, 3)), "frozen-after-its-step": ("stop-after", (1, 4))}


@pytest.fixture(scope="module")
def sigterms_while_frozen(tmp_path_factory, uninterrupted_exact):
    """Both cases of :func:`_sigterm_while_frozen`, run together on threads: {case: future}. Each spends most of its
    time waiting with a rank frozen (Gloo's 8 s, the 3 s probe), so together they take about as long as one."""
    with ThreadPoolExecutor(len(FROZEN_WHERE)) as pool:
        yield {case: pool.submit(_sigterm_while_frozen, tmp_path_factory.mktemp(case) / "work", where, position,
                                 uninterrupted_exact)
               for case, (where, position) in FROZEN_WHERE.items()}


@stall
@pytest.mark.parametrize("case", FROZEN_WHERE)
def test_a_sigterm_while_a_rank_is_frozen_saves_rank_0s_last_batch_and_the_rerun_matches_an_uninterrupted_run(
        sigterms_while_frozen, case):
    sigterms_while_frozen[case].result()  # its assertions, on its thread


def _wait_gone(pid, timeout, what):
    """Waits until process ``pid`` (not this process's child) has exited; fails the test naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (pid {pid})")


def _sigterm_while_frozen(workdir, where, position, uninterrupted_exact):
    # The soak's finding: the ranks agree to stop with an allreduce a frozen rank never joins, so the
    # signal ends in the collective's failure. Rank 0, whose step's updates ran all or none (the exchange releases
    # the gradients together), writes its last whole batch alone and leaves as preempted (75: a requeue starts it
    # again), naming the frozen rank and that checkpoint. Rank 1 stops itself in batch 4 of epoch 2
    # (scripts/slow_rank.py). Before its step ("stop"), rank 0 waits in the step's allreduce with 3 whole batches.
    # After it ("stop-after"), rank 0 ran the step too and waits in a callback's collective (the NaN check)
    # before the callbacks counted the batch: 4 whole batches, the batch the soak found counted twice.
    # Gloo gives up after 8 s here, not 30.
    sets = [a for s in EXACT for a in ("--set", s)]
    watch = OutputWatch(start_ranks([os.path.join(SCRIPTS, "slow_rank.py"), where, *train_args(workdir)[2:], *sets],
                                    env=dict(os.environ, HOROVOD_GLOO_TIMEOUT_SECONDS="8")))
    watch.wait_for("rank 1 stops itself", timeout=120, what="rank 1's stop in batch 4 of epoch 2")
    frozen, chief = rank_pid(1, str(workdir)), rank_pid(0, str(workdir))
    assert frozen is not None and chief is not None, "ranks not found"
    while psutil.Process(frozen).status() != psutil.STATUS_STOPPED:
        time.sleep(0.05)
    time.sleep(0.5)  # rank 0 is now waiting for rank 1 in a collective
    os.kill(chief, signal.SIGTERM)
    line = "hvdkeras: preempted (SIGTERM) but the ranks could not stop together: rank 1 on host"
    watch.wait_for(line, timeout=60, what="rank 0's line")
    # Rank 0 leaves on its own after its line (status 75); only then is the frozen rank killed, instead of
    # horovodrun's 10 s for a stopped rank (docs/reliability.md). Killed first, it is the failure horovodrun sees,
    # and horovodrun ends rank 0 (143) before rank 0 has left.
    _wait_gone(chief, timeout=60, what="rank 0 leaving after its line")
    os.kill(frozen, signal.SIGKILL)
    out = watch.finish(timeout=60)
    said = [x for x in out.splitlines() if line in x]
    assert len(said) == 1 and "is not responding" in said[0], out[-3000:]
    assert "Process 0 exit with status code 75" in out, out[-3000:]
    alone = re.search(r"rank 0 wrote the checkpoint of epoch (\d+), batch (\d+) alone: (\S+)", out)
    assert alone is not None, out[-3000:]
    epoch, batch, path = int(alone.group(1)) - 1, int(alone.group(2)), alone.group(3)
    assert (epoch, batch) == position and checkpointing.verify(path) is None
    assert said[0].endswith(f"rerun the same command to resume from the last checkpoint (checkpoint epoch {epoch},"
                            f" batch {batch} of epoch {epoch + 1})"), said[0]

    rerun = horovodrun(train_args(workdir, *EXACT), timeout=240)
    assert sum(f"resuming after epoch {epoch} and batch {batch} of epoch {epoch + 1} from" in x
               for x in rerun.output.splitlines()) == 2, rerun.output[-3000:]
    assert [r["epoch"] for r in read_jsonl(workdir / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    assert_trained_as_uninterrupted(workdir, uninterrupted_exact)


def _slow_rank(folder, seconds, *args_and_sets):
    """:class:`OutputWatch` of ``slow_rank.py SECONDS [args...]`` on the digits job in ``folder/w`` for 3 epochs,
    Horovod's stall check every 5 s unless ``args_and_sets`` (``section.key=value`` items) say otherwise."""
    args = [a for a in args_and_sets if "=" not in a]
    sets = ("trainer.verbose=0", "trainer.epochs=3", "horovod.stall_warning_seconds=5",
            *[a for a in args_and_sets if "=" in a])
    return OutputWatch(start_ranks([os.path.join(SCRIPTS, "slow_rank.py"), str(seconds), *args, "--config", DIGITS,
                                    "--workdir", str(folder / "w"), *[a for s in sets for a in ("--set", s)]]))


def _missing_rank_lines(output, mark=""):
    """Horovod's stall warning lists each missing rank as ``<rank>: [tensor, ...]`` (``1!:`` when shutting down)."""
    return [line for line in output.splitlines() if re.search(rf">:\s*1{re.escape(mark)}: \[", line)]


STALL_WARNING = "waiting for remainder of ranks for more than 5 seconds"
PAUSES = "rank 1 pauses"


def _frozen(folder):
    # SIGSTOP freezes Horovod's background thread too: under Gloo the coordinator then waits in its
    # own negotiation (up to HOROVOD_GLOO_TIMEOUT_SECONDS, 30 s), where no stall check runs, so the
    # frozen rank simply holds everyone; no warning is possible (docs/reliability.md).
    return _stop_rank_one_for(folder / "w", 12, "trainer.epochs=4", "horovod.stall_warning_seconds=5")


def _warned(folder):
    # Needs build patch 0004: without it Horovod 0.28.1's stall inspector is silent under Gloo. It looks every
    # 5 s (the warning time); the gradients are in Horovod's response cache after step one, and a cached tensor
    # waiting over 5 s is first moved out of the cache at one check and only named at a later one (lag counted
    # from the move), so the warning comes 10 to 20 s into the pause. Rank 1 pauses until the warning is seen.
    release = folder / "release"
    job = _slow_rank(folder, 60, str(release))
    job.wait_for(PAUSES, 180, "rank 1's pause")
    job.wait_for(STALL_WARNING, 45, "Horovod's stall warning while rank 1 pauses")
    release.touch()
    out = job.finish(timeout=120)
    return job.proc.returncode, out


def _shut_down(folder):
    # checked every 2 s, shut down once a tensor has waited 5 s; rank 1 would pause for 60 s
    job = _slow_rank(folder, 60, "horovod.stall_warning_seconds=2", "horovod.stall_shutdown_seconds=5")
    job.wait_for(PAUSES, 180, "rank 1's pause")
    paused = time.time()
    out = job.finish(timeout=120)
    return job.proc.returncode, out, time.time() - paused


STALLS = {"frozen": _frozen, "warned": _warned, "shut_down": _shut_down}


@pytest.fixture(scope="module")
def stalls(tmp_path_factory):
    """The three stall jobs of ``STALLS``, run together on threads: {name: future of its result}, each in a folder
    of its own (``<name>/w`` its workdir). Each spends most of its time with a rank paused and the CPU idle (12 s
    frozen; 10 to 20 s until the warning; 5 s and more until the shutdown), and each waits on its own job's
    events, so together they take about as long as the longest; a test's ``.result()`` raises its job's failure."""
    with ThreadPoolExecutor(len(STALLS)) as pool:
        yield {name: (pool.submit(run, folder), folder)
               for name, run in STALLS.items() for folder in [tmp_path_factory.mktemp(name)]}


@stall
def test_a_rank_frozen_for_12s_delays_training_without_an_error(stalls):
    future, folder = stalls["frozen"]
    code, out = future.result()
    assert code == 0, out[-3000:]
    assert [r["epoch"] for r in read_jsonl(folder / "w" / "metrics.jsonl")] == [1, 2, 3, 4]


@stall
def test_a_slow_rank_gets_horovods_stall_warning_naming_it_and_training_continues(stalls):
    future, folder = stalls["warned"]
    code, out = future.result()
    assert code == 0, out[-3000:]
    assert _missing_rank_lines(out), out[-3000:]
    assert [r["epoch"] for r in read_jsonl(folder / "w" / "metrics.jsonl")] == [1, 2, 3]


@stall
def test_a_rank_slow_beyond_stall_shutdown_seconds_stops_the_job_with_one_line(stalls):
    future, folder = stalls["shut_down"]
    code, out, took = future.result()
    assert code != 0
    assert _missing_rank_lines(out, "!"), out[-3000:]
    said = [line for line in out.splitlines() if "hvdkeras: error: Horovod stopped the job" in line]
    assert len(said) == 1, out[-3000:]
    assert "horovod.stall_shutdown_seconds=5" in said[0]
    assert "resume from the last checkpoint (checkpoint epoch 1)" in said[0]
    assert took < 45, f"the job took {took:.0f}s after rank 1's pause: it waited for the slow rank instead of stopping"
    assert [r["epoch"] for r in read_jsonl(folder / "w" / "metrics.jsonl")] == [1]
