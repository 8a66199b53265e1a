"""Two real hosts on this machine: horovodrun launches the trainer over ssh into two network namespaces.

hvdkeras/bench/lab/hosts.py builds them (bridge + veths named ``hvdtest0``, 198.18.213.1 for the launcher,
.2 and .3 for the hosts, an sshd in each host namespace with its own hostname) and removes them
again. Needs root; elsewhere the module is skipped with the reason.
"""
import json
import os
import sys

import numpy as np
import pytest

from hvdkeras.bench.lab import hosts as two_hosts
from tests.harness.ranks import HOROVODRUN, REPO, SCRIPTS, launch, read_jsonl

DIGITS = os.path.join(REPO, "configs", "digits.yaml")
SCRIPT = os.path.join(SCRIPTS, "host_and_report.py")




@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    ok, reason = two_hosts.can_run()
    if not ok:
        pytest.skip(f"two-host test needs network namespaces and sshd: {reason}")
    info = two_hosts.up(tmp_path_factory.mktemp("two_hosts"))
    try:
        yield info
    finally:
        two_hosts.down(info)
        assert not any(os.path.exists(f"/run/netns/{h.netns}") for h in info.hosts)
        assert not os.path.exists(f"/sys/class/net/{info.iface}")


@pytest.fixture(scope="module")
def run(hosts, tmp_path_factory):
    base = tmp_path_factory.mktemp("two_hosts_run")
    workdir, report_dir = base / "work", base / "report"
    cmd = [HOROVODRUN, "-np", "2", *hosts.horovodrun_args(), "--gloo", "--disable-cache",
           sys.executable, SCRIPT, str(report_dir), str(workdir), DIGITS,
           "trainer.epochs=2", "trainer.verbose=0", "checkpoint.keep=0", "runtime.intra_op_threads=1"]
    job = launch(cmd, env=hosts.env(), timeout=180)
    reps = []
    for r in range(2):
        with open(report_dir / f"rank{r}.json") as f:
            rep = json.load(f)
        with open(report_dir / f"host{r}.json") as f:
            rep["host"] = json.load(f)
        with np.load(report_dir / f"rank{r}.npz") as z:
            rep["weights"] = [z[k] for k in sorted(z.files, key=lambda k: int(k.split("_")[1]))]
        reps.append(rep)
    return job, workdir, reps


def test_ranks_ran_on_two_different_hosts(hosts, run):
    job, _, reps = run
    assert job.returncode == 0
    own_netns = os.readlink("/proc/self/ns/net")
    for host, rep in zip(hosts.hosts, reps):
        where = rep["host"]
        assert where["hostname"] == host.name  # hvd-host-a for rank 0, hvd-host-b for rank 1
        assert where["hostname_resolves_to"] == host.addr
        assert where["iface"] == hosts.iface and where["iface_addrs"] == [host.addr]
        assert where["horovod_hostname"] == host.addr and where["cwd"] == REPO
        assert where["netns"] != own_netns
    assert reps[0]["host"]["netns"] != reps[1]["host"]["netns"]


def test_run_succeeded_and_rank_0_printed_the_result(run):
    job, workdir, reps = run
    final_lines = [line for line in job.output.splitlines() if "final validation" in line]
    assert len(final_lines) == 1 and final_lines[0].startswith("[0]<stdout>:")
    assert [r["epoch"] for r in read_jsonl(workdir / "metrics.jsonl")] == [1, 2]
    assert reps[0]["final"] == reps[1]["final"] and reps[0]["final"]["val_accuracy"] > 0.5


def test_weights_identical_on_both_hosts(run):
    _, _, reps = run
    assert len(reps[0]["weights"]) == len(reps[1]["weights"]) > 0
    for a, b in zip(reps[0]["weights"], reps[1]["weights"]):
        assert np.array_equal(a, b)


def test_only_rank_0_wrote_checkpoints(run):
    _, workdir, reps = run
    root = str(workdir)
    written = [[p for p in rep["written"] if p == root or p.startswith(root + os.sep)] for rep in reps]
    assert written[1] == []
    assert any("/checkpoints/" in p and p.endswith("ckpt") for p in written[0])
    assert sorted(os.listdir(workdir)) == ["checkpoints", "config.yaml", "metrics.jsonl"]
    assert sorted(os.listdir(workdir / "checkpoints")) == ["epoch-0001", "epoch-0002"]
