"""Elastic training with real processes: a worker killed mid-epoch, then a worker added back; a SIGTERM."""
import os
import signal
import socket
import subprocess
import sys
import time

import psutil

from hvdkeras.common import processes
from hvdkeras.runtime import checkpointing
from tests.harness.command_lines import CommandLines
from tests.harness.ranks import (
    DISCOVER_HOSTS,
    HOROVODRUN,
    REPO,
    epochs_logged,
    finish,
    kill_tree,
    read_jsonl,
    start,
    wait_for_epochs,
)
from tests.harness.stacks import once_per_make_test

# Long enough that the new worker joins well before the end, short because every epoch after the join is
# spent waiting (about 1 s each on 2 cores). With the kill after epoch 3 and the hosts file changed after 2
# epochs alone, the new worker joined after epoch 7 to 12 (5 runs on 2 cores, keras2 and keras3, 3 of them
# beside a busy core: joining and training both run on the CPU, so load slows both alike); 20 leaves 8 to
# spare, and the test fails, not hangs, if the job ends before the join.
EPOCHS = 20


def _wait_for(predicate, timeout, what, log=None, proc=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the job ended (status {proc.returncode}) before {what}\n"
                                 + (log.read_text()[-6000:] if log is not None else ""))
        time.sleep(0.2)
    tail = log.read_text()[-6000:] if log is not None and log.exists() else ""
    raise AssertionError(f"timed out waiting for {what}\n{tail}")


def _worker_on(host: str, marker: str):
    for proc in processes.scan(["pid", "cmdline"]):
        try:
            if marker in " ".join(proc.info["cmdline"] or []) and proc.environ().get("HOROVOD_HOSTNAME") == host:
                return proc.pid
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


def _elastic_job(hosts, workdir, epochs, *sets):
    """An elastic digits job on two "hosts" of this machine (no ssh): (command, environment)."""
    hosts.write_text("localhost:1\n127.0.0.1:1\n")
    cmd = [HOROVODRUN, "-np", "2", "--min-np", "1", "--max-np", "2", "--gloo",
           "--host-discovery-script", DISCOVER_HOSTS,
           sys.executable, "-m", "hvdkeras.train", "--config", os.path.join(REPO, "configs", "digits.yaml"),
           "--workdir", str(workdir), "--set", "elastic.enabled=true", "--set", "elastic.commit_every_batches=5",
           "--set", f"trainer.epochs={epochs}", "--set", "trainer.verbose=0"]
    for s in sets:
        cmd += ["--set", s]
    return cmd, dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", HVDKERAS_HOSTS_FILE=str(hosts))


# Horovod's elastic driver: a host gone from discovery, its worker killed, another added; hvdkeras.elastic's
# state and run under an elastic launch are also the Keras elastic example's, on both stacks
# (test_horovod_examples.py).
@once_per_make_test("a worker killed and one added to an elastic job", 0.6, stack="keras3")
def test_kill_a_worker_then_add_one_back(tmp_path):
    hosts, workdir, log = tmp_path / "hosts", tmp_path / "work", tmp_path / "job.log"
    cmd, env = _elastic_job(hosts, workdir, EPOCHS)
    with CommandLines() as seen:  # the rendezvous secret of every worker, the one added back too
        out = open(log, "w")
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        text = lambda: log.read_text()  # noqa: E731
        try:
            _wait_for(lambda: epochs_logged(workdir) >= 3, 180, "three epochs on two ranks", log)
            victim = _worker_on("127.0.0.1", str(workdir))
            assert victim is not None
            os.kill(victim, signal.SIGKILL)  # mid-epoch, without warning
            before = epochs_logged(workdir)
            _wait_for(lambda: "rank 0/1: elastic resuming" in text(), 120, "the survivor to continue alone", log)
            resumed_line = [ln for ln in text().splitlines() if "rank 0/1: elastic resuming" in ln][0]
            resumed_epoch = int(resumed_line.split("at epoch ")[1].split(",")[0])
            assert before - 1 <= resumed_epoch <= before + 1  # from the last commit, not from scratch
            # keep_global_batch (the default): the survivor takes the whole global batch at the same rate
            assert "(global batch 64 = 1 x 64, lr 0.1)" in resumed_line, resumed_line
            _wait_for(lambda: epochs_logged(workdir) >= resumed_epoch + 2, 120, "training on one rank", log, proc)

            hosts.write_text(f"localhost:1\n{socket.gethostname()}:1\n")  # a worker comes back
            _wait_for(lambda: "rank 1/2: elastic resuming" in text(), 180, "the new worker to join", log, proc)
            print(f"\nthe new worker joined after epoch {epochs_logged(workdir)} of {EPOCHS}")
            joined = [ln for ln in text().splitlines() if "rank 1/2: elastic resuming" in ln][0]
            assert "(global batch 64 = 2 x 32, lr 0.1)" in joined, joined
            proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                kill_tree(proc.pid)
            out.close()
    output = text()
    assert proc.returncode == 0, output[-4000:]
    records = read_jsonl(workdir / "metrics.jsonl")
    assert [r["epoch"] for r in records] == list(range(1, EPOCHS + 1))  # none missing, none repeated
    # both ranks finished together: the end-of-run weight check (a broadcast hash) passed on 2 ranks
    final = [ln for ln in output.splitlines() if "final validation" in ln]
    assert len(final) == 1 and "(2 ranks" in final[0]
    assert sorted(os.listdir(workdir / "checkpoints"))[-1] == f"epoch-{EPOCHS:04d}"
    assert seen.secrets and seen.exposed() == []  # no worker's secret on any command line


# The preemption's stop at one batch and its checkpoint are the trainer's on both stacks (test_preemption_two_ranks.py),
# and hvdkeras.elastic's state on both stacks is the kill-and-join test's; what is left here, Horovod's elastic driver
# ending the job when every worker leaves with status 75, does not depend on the stack.
@once_per_make_test("the SIGTERM to an elastic job (Horovod's elastic driver)", 0.4, stack="keras3")
def test_sigterm_stops_an_elastic_job_at_one_batch_and_the_rerun_resumes_there(tmp_path):
    """Preemption in elastic mode is preemption, not a lost host: both workers stop at one batch with a
    checkpoint and status 75, Horovod's driver ends the job (every worker failed) instead of waiting for
    replacement hosts, and the rerun continues at that batch."""
    hosts, workdir = tmp_path / "hosts", tmp_path / "work"
    cmd, env = _elastic_job(hosts, workdir, 400)
    proc = start(cmd, env=env)
    wait_for_epochs(proc, workdir, 2)
    os.kill(proc.pid, signal.SIGTERM)  # the launcher: it forwards the signal, and kills the workers 5 s later
    signalled = time.time()
    out = finish(proc, timeout=90)
    took = time.time() - signalled
    stopped = [ln for ln in out.splitlines() if "hvdkeras: preempted at" in ln]
    assert len(stopped) == 2, out[-4000:]  # one line per worker
    position = stopped[0].split("hvdkeras: preempted at ")[1]
    assert all(ln.endswith(position) for ln in stopped), stopped  # the same batch and checkpoint on both
    found = checkpointing.CheckpointStore(str(workdir / "checkpoints")).latest_intact()
    assert found is not None and position.endswith(found.path)
    epoch, batch = found.position
    print(f"\nSIGTERM to the elastic launcher -> both workers stopped in {took:.1f}s at epoch {epoch} batch {batch}")

    cmd, env = _elastic_job(hosts, workdir, epoch + 2)
    rerun = finish(start(cmd, env=env), timeout=300)
    at = f"epoch {epoch + 1}, batch {batch}"
    assert sum(f"elastic resuming at {at}" in ln for ln in rerun.splitlines()) == 2, rerun[-4000:]
    epochs = [r["epoch"] for r in read_jsonl(workdir / "metrics.jsonl")]
    assert epochs == list(range(1, epoch + 3))  # none missing, none repeated
