"""The generated sbatch script on a real two-node Slurm (lab/slurm.py, on the two namespace hosts).

The script comes from ``python -m hvdkeras.train --dry_run --launcher slurm`` and is submitted as
it is, from the checkout, with ``sbatch``; only its output file is redirected into the test's
folder (``sbatch --output``). Needs root, slurm-wlm and munge; elsewhere the module skips with the
reason. Every wait has a deadline: a job that hangs fails the test and is cancelled.

Most of it is the soak on this cluster (``python -m benchmarks.soak --slurm --short``, about 2
minutes): the script under four faults in a row with Slurm's requeue as its restart loop (the second test),
its last run resumed and trained to the end (the first), and its end held, bit for bit, to the quiet run of
two local ranks the local soak shares (``soak_quiet_run``, tests/distributed/conftest.py).
"""
import json
import os
import re
import subprocess
import sys
import time

import pytest

from lab import slurm
from tests.harness.command_lines import CommandLines
from tests.harness.ranks import REPO, read_jsonl
from tests.harness.reports import tell
from tests.harness.stacks import once_per_make_test

# The path under test (the generated script, sbatch, horovodrun over ssh, the SIGTERM) does not
# depend on the stack.
pytestmark = [once_per_make_test("the Slurm cluster tests", 2.0), pytest.mark.lab]

DIGITS = os.path.join("configs", "digits.yaml")
# The soak's plan: a kill, the time limit's signal 2.8 s after the requeue (sent as the job starts), a damaged
# checkpoint, a node down 1.6 s after the requeue (while the job is pending, held by Slurm).
SEED = 40


@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory):
    ok, reason = slurm.can_run()
    if not ok:
        pytest.skip(f"the Slurm test cluster cannot run here: {reason}")
    tic = time.time()
    info = slurm.up(tmp_path_factory.mktemp("slurm"))
    tell(request, f"Slurm test cluster (two hosts, munged, slurmctld, two slurmd) up in {time.time() - tic:.1f}s")
    try:
        yield info
    finally:
        slurm.down(info)
        assert not slurm._daemon_pids()


def _script(cluster, tmp_path, workdir, *sets, launcher="slurm"):
    """The dry run's sbatch script for the digits job on the two nodes (written to tmp_path/job.sbatch)."""
    path = tmp_path / "job.sbatch"
    args = [sys.executable, "-m", "hvdkeras.train", "--config", DIGITS, "--dry_run", "--launcher", launcher,
            "--np", "2", "--hosts", ",".join(f"{n}:1" for n in cluster.nodes), "--workdir", str(workdir),
            "--dry_run_output", str(path)]
    for s in sets:
        args += ["--set", s]
    subprocess.run(args, cwd=REPO, check=True, capture_output=True, timeout=120)
    return path


def _sbatch(cluster, script, out):
    res = subprocess.run(["sbatch", "--parsable", f"--output={out}", str(script)], cwd=REPO, env=cluster.env(),
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().split(";")[0]


def _job(cluster, job_id) -> dict:
    res = subprocess.run(["scontrol", "show", "job", "-o", job_id], env=cluster.env(), capture_output=True,
                         text=True, timeout=30)
    return dict(kv.split("=", 1) for kv in res.stdout.split() if "=" in kv)


def _wait(cluster, job_id, until, timeout, what, out=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = _job(cluster, job_id)
        if until(job):
            return job
        time.sleep(1)
    job = _job(cluster, job_id)
    subprocess.run(["scancel", job_id], env=cluster.env(), timeout=30)
    tail = out.read_text()[-4000:] if out is not None and out.exists() else ""
    pytest.fail(f"job {job_id}: no {what} within {timeout}s (state {job.get('JobState')}, reason {job.get('Reason')},"
                f" exit code {job.get('ExitCode')}, restarts {job.get('Restarts')})\n{tail}\n"
                + _daemon_lines(cluster, job_id))


def _daemon_lines(cluster, job_id) -> str:
    """What slurmctld and each slurmd logged about ``job_id``: a failure report names the cause, not only the state."""
    said = []
    for name in ["slurmctld"] + [f"slurmd-{node}" for node in cluster.nodes]:
        path = os.path.join(cluster.folder, f"{name}.log")
        if os.path.exists(path):
            mark = re.compile(rf"(JobId={job_id}\b|job {job_id}\b|StepId={job_id}\.|\[{job_id}\.|JOB {job_id}\b)")
            lines = open(path, errors="replace").read().splitlines()
            said += [f"{name}: {line}" for line in lines if mark.search(line)]
    return "\n".join(said[-60:])


def _ended(job):
    return job.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                                   "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


@pytest.fixture(scope="module")
def soak(cluster, tmp_path_factory, soak_quiet_run):
    """``python -m benchmarks.soak --slurm --short`` on the module's cluster, against the quiet run of two local ranks
    (``soak_quiet_run``, which the local soak shares): its report, its ``--out`` folder."""
    out = tmp_path_factory.mktemp("soak")
    with CommandLines() as seen:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.soak", "--slurm-cluster",
                               os.path.join(cluster.folder, "cluster.json"), "--short", "--seed", str(SEED), "--out",
                               str(out), "--quiet-from", str(soak_quiet_run)], cwd=REPO, capture_output=True,
                              text=True, timeout=900, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    tail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert (out / "soak.json").exists(), tail
    return json.loads((out / "soak.json").read_text()), out, proc.returncode, tail, seen


def test_the_generated_script_trains_the_digits_job_on_two_nodes(cluster, soak):
    # The soaked job's last run: the dry run's sbatch script, submitted as it is, requeued after each fault, resumed
    # and trained to the end.
    report, out, _, tail, _ = soak
    job = _job(cluster, report["settings"]["slurm_jobs"]["job"])
    assert (job["JobState"], job["ExitCode"]) == ("COMPLETED", "0:0"), tail
    assert job["NodeList"] in ("hvd-host-[a-b]", "hvd-host-a,hvd-host-b")
    # the soak's log of that run: each line of the job's output after the seconds since the soak began
    log = (out / "logs" / f"attempt-{len(report['attempts']) - 1:03d}.log").read_text()
    text = re.sub(r"^ *[0-9.]+ ", "", log, flags=re.M)
    # one rank on each node: each is local rank 0 of 1
    starts = re.findall(r"^\[(\d)\]<stdout>:\[hvdkeras\] rank (\d)/2 \(local 0/1,", text, re.M)
    assert sorted(starts) == [("0", "0"), ("1", "1")], text[-4000:]
    final = [line for line in text.splitlines() if "final validation" in line]
    assert len(final) == 1 and final[0].startswith("[0]<stdout>:") and "(2 ranks" in final[0]  # weights agreed
    assert float(final[0].split("val_accuracy=")[1].split(",")[0]) >= 0.90
    workdir = out / "disk" / "work"  # the soaked job's (on no tmpfs of its own: a Slurm soak fills no disk)
    # rank 0 alone writes; a rank a fault left without its launcher logs beside it (logs/after-launcher-*)
    assert sorted(p for p in os.listdir(workdir) if p != "logs") == ["checkpoints", "config.yaml", "metrics.jsonl"]
    logs = os.listdir(workdir / "logs") if (workdir / "logs").exists() else []
    assert all(p.startswith("after-launcher-") for p in logs), logs
    epochs = report["settings"]["epochs"]
    assert [r["epoch"] for r in read_jsonl(workdir / "metrics.jsonl")] == list(range(1, epochs + 1))


def test_faults_in_a_row_while_the_job_is_requeued_lose_nothing_beyond_the_promise(cluster, soak):
    # The Slurm soak: Slurm's requeue is the restart loop; a kill, then the time limit's signal as the
    # requeued job starts, a damaged checkpoint, then a node down while the job is requeued (it waits for it).
    report, out, status, tail, _ = soak
    assert status == 0, tail
    assert report["faults"] == report["survived"] == 4 and report["not_injected"] == 0, tail
    assert set(report["by_kind"]) == {"kill_rank", "preempt", "damage_checkpoint", "node_fail"}, tail
    assert report["hangs"] == 0 and report["left_behind"] == [] and report["checkpoints_lost"] == [], tail
    assert report["unprompted_failures"] == [], tail
    by_kind = {f["kind"]: f for f in report["per_fault"]}
    for fault in report["per_fault"]:
        assert fault["held"] and (fault["lost"] or 0) <= (fault["allowed"] or 0), (fault, tail)
    attempts = {a["index"]: a for a in report["attempts"]}
    preempt = by_kind["preempt"]
    # the signal as the requeued job started: the script requeued the job itself (75), nothing was lost
    assert preempt["lost"] == 0 and attempts[preempt["attempt"]]["status"] == 75, (preempt, tail)
    node = by_kind["node_fail"]
    assert node["phase"] == "start-up" and node["note"].endswith("the requeued job waited for the node"), tail
    assert attempts[by_kind["kill_rank"]["attempt"]]["status"] == 1  # failed; the soak requeued it, as a retry
    assert report["settings"]["total_wall_s"] < 600
    job = _job(cluster, report["settings"]["slurm_jobs"]["job"])
    assert job["JobState"] == "COMPLETED" and int(job["Restarts"]) == len(report["attempts"]) - 1, job
    final = report["final"]
    assert final["same_variables"] and final["trainable_max_abs_diff"] == 0.0, (final, tail)
    assert final["soaked_val_accuracy"] == final["quiet_val_accuracy"] >= 0.9, (final, tail)


def test_no_process_on_the_nodes_has_the_secret_or_the_jobs_key_on_its_command_line(soak):
    # horovodrun on the first node finds the nodes' interfaces with Horovod's task function over ssh (its settings
    # hold the job's key) and starts the ranks over ssh (the secret): both on ssh's input, neither in an argument
    seen = soak[-1]
    assert seen.secrets and seen.scans > 10, (seen.secrets, seen.scans)
    assert any(b"horovod.runner.task_fn" in cmdline for _, cmdline in seen.cmdlines)
    assert seen.exposed() == []


def test_the_srun_form_trains_on_two_nodes_with_horovods_mpi_controller(cluster, tmp_path):
    from horovod.common.util import mpi_built

    if not mpi_built():
        pytest.skip("--launcher slurm-srun needs Horovod built with MPI (make install-mpi; OpenMPI with PMIx)")
    workdir, out = tmp_path / "work", tmp_path / "job.out"
    script = _script(cluster, tmp_path, workdir, "trainer.epochs=3", launcher="slurm-srun")
    assert "srun --mpi=pmix python -m hvdkeras.train" in script.read_text()
    tic = time.time()
    job_id = _sbatch(cluster, script, out)
    job = _wait(cluster, job_id, _ended, 300, "end", out)
    print(f"\nsbatch (srun --mpi=pmix) -> {job['JobState']} in {time.time() - tic:.1f}s on {job.get('NodeList')}")
    text = out.read_text()
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", text[-4000:]
    starts = sorted(re.findall(r"^\[hvdkeras\] rank (\d)/2 \(local 0/1,", text, re.M))
    assert starts == ["0", "1"], text[-4000:]  # no horovodrun: srun started one rank on each node
    for node in cluster.nodes:  # ... as each node's slurmd says
        log = open(os.path.join(cluster.folder, f"slurmd-{node}.log")).read()
        assert f"launch task StepId={job_id}.0" in log, node
    final = [line for line in text.splitlines() if "final validation" in line]
    assert len(final) == 1 and "(2 ranks" in final[0]  # weights agreed, rank 0 reports
    assert float(final[0].split("val_accuracy=")[1].split(",")[0]) >= 0.90
    assert sorted(os.listdir(workdir)) == ["checkpoints", "config.yaml", "export", "metrics.jsonl"]
