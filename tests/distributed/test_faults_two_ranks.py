"""Faults on two real ranks: a rank that dies, ranks that disagree. No hang, no lost checkpoint."""
import os
import signal
import subprocess
import sys
import time

import psutil

from tests.harness.ranks import HOROVODRUN, REPO, horovodrun, read_jsonl

DIGITS = os.path.join(REPO, "configs", "digits.yaml")


def _rank_pid(rank: int, marker: str):
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if marker in " ".join(proc.info["cmdline"] or []) and proc.environ().get("HOROVOD_RANK") == str(rank):
                return proc.pid
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


def test_killed_rank_ends_the_job_quickly_and_the_rerun_resumes(tmp_path):
    workdir = tmp_path / "work"
    cmd = [HOROVODRUN, "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, "-m", "hvdkeras.train",
           "--config", DIGITS, "--workdir", str(workdir), "--set", "trainer.epochs=400", "--set", "trainer.verbose=0"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and len(read_jsonl(workdir / "metrics.jsonl")
                                             if (workdir / "metrics.jsonl").exists() else []) < 3:
            time.sleep(0.2)
        pid = _rank_pid(1, str(workdir))
        assert pid is not None, "rank 1 not found"
        os.kill(pid, signal.SIGKILL)  # mid-epoch, without warning
        killed_at = time.time()
        out, _ = proc.communicate(timeout=90)
        took = time.time() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()
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
