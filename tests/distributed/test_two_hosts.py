"""Two real hosts on this machine: horovodrun launches the trainer over ssh into two network namespaces.

lab/hosts.py builds them (bridge + veths named ``hvdtest0``, 198.18.213.1 for the launcher,
.2 and .3 for the hosts, an sshd in each host namespace with its own hostname) and removes them
again. Needs root; elsewhere the module is skipped with the reason. An outsider on the hosts' network (the lab's
outsider namespace, 198.18.213.250) sends the launcher's ports what an attacker would while a Gloo job and an
elastic job train, and must get nothing (Horovod patch 0010).
"""
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest

from hvdkeras.common import peers
from hvdkeras.common.processes import kill_group
from lab import hosts as two_hosts
from tests.harness.ranks import (
    DISCOVER_HOSTS,
    HOROVODRUN,
    REPO,
    SCRIPTS,
    epochs_logged,
    finish,
    launch,
    read_jsonl,
    start,
    wait_for_epochs,
)
from tests.harness.stacks import once_per_make_test

# What these add to the two-rank tests (ssh launching across hosts, a link going down) does not
# depend on the stack; the training itself is the same code the local two-rank tests run on both.
pytestmark = [once_per_make_test("the two-host tests", 1.6, stack="keras3"), pytest.mark.lab]

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
        assert not two_hosts.any_up()
        assert not os.path.exists(f"/sys/class/net/{info.iface}")


def _report_command(hosts, base, where=None, sets=()):
    """The digits job over the two hosts, each rank reporting where it ran and its weights into ``base/report``;
    ``where``: horovodrun's host arguments (default ``hosts.horovodrun_args()``, a fixed host list)."""
    where = hosts.horovodrun_args() if where is None else where
    return [HOROVODRUN, "-np", "2", *where, "--gloo", "--disable-cache",
            sys.executable, SCRIPT, str(base / "report"), str(base / "work"), DIGITS,
            "trainer.epochs=2", "trainer.verbose=0", "checkpoint.keep=0", "runtime.intra_op_threads=1", *sets]


def _elastic_where(hosts, host_file):
    """horovodrun's arguments for an elastic job over the two hosts, one slot each, which the host discovery script
    reads from ``host_file`` (``HVDKERAS_HOSTS_FILE``); writes that file."""
    host_file.write_text("".join(f"{h.addr}:1\n" for h in hosts.hosts))
    return ["--min-np", "1", "--max-np", "2", "--network-interfaces", hosts.iface,
            "--ssh-identity-file", hosts.identity_file, "--host-discovery-script", DISCOVER_HOSTS]


def _reports(report_dir):
    """Each rank's report (``host_and_report.py``): its results, where it ran, its weights."""
    reps = []
    for r in range(2):
        with open(report_dir / f"rank{r}.json") as f:
            rep = json.load(f)
        with open(report_dir / f"host{r}.json") as f:
            rep["host"] = json.load(f)
        with np.load(report_dir / f"rank{r}.npz") as z:
            rep["weights"] = [z[k] for k in sorted(z.files, key=lambda k: int(k.split("_")[1]))]
        reps.append(rep)
    return reps


@pytest.fixture(scope="module")
def run(hosts, tmp_path_factory):
    base = tmp_path_factory.mktemp("two_hosts_run")
    job = launch(_report_command(hosts, base), env=hosts.env(), timeout=180, command_lines=True)
    return job, base / "work", _reports(base / "report")


def test_no_process_on_either_host_has_the_secret_on_its_command_line(run):
    # the remote rank's shell reads the secret from ssh's input: neither the ssh client nor a shell shows it
    seen = run[0].command_lines
    assert seen.secrets and seen.scans > 10, (seen.secrets, seen.scans)
    assert seen.exposed() == []
    assert any(b"ssh" in cmdline.split(b"\0")[0] for _, cmdline in seen.cmdlines)  # a rank was started over ssh


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
    assert sorted(os.listdir(workdir)) == ["checkpoints", "config.yaml", "export", "metrics.jsonl"]
    assert sorted(os.listdir(workdir / "checkpoints")) == ["epoch-0001", "epoch-0002"]


# ------------------------------------------------------------------ an outsider on the job's network

OUTSIDER = os.path.join(SCRIPTS, "outsider.py")


def _launcher_ports(pid):
    """The TCP ports horovodrun's process listens on where the hosts reach it (its rendezvous, its services)."""
    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return []
    return sorted({c.laddr.port for c in conns
                   if c.status == psutil.CONN_LISTEN and c.laddr.ip in (two_hosts.LAUNCHER_ADDR, "0.0.0.0", "::")})


def _beacon_ports(hosts, ranks_marker):
    """``addr:port`` of each TCP port that a process whose command line holds ``ranks_marker`` (the job's ranks)
    listens on in its host with the beacon's backlog (``hvdkeras.common.peers.BACKLOG``): the ranks' beacons.

    Never a Gloo port: each Gloo pair listens with a backlog of 1024 while it connects, and Gloo reads what
    reaches it unauthenticated (16 random bytes there once ended an elastic job before its second epoch)."""
    found = []
    for host in hosts.hosts:
        ranks = set(_ranks_running_in(host.netns, ranks_marker))
        out = subprocess.run(["ip", "netns", "exec", host.netns, "ss", "-ltnpH"], capture_output=True,
                             text=True).stdout
        for line in out.splitlines():  # LISTEN 0 1024 198.18.213.2:41234 0.0.0.0:* users:(("python",pid=7,fd=9))
            fields = line.split()
            pids = {int(p) for p in re.findall(r"pid=(\d+)", line)}
            if len(fields) >= 4 and pids & ranks and fields[2] == str(peers.BACKLOG):
                found.append(fields[3])
    return sorted(set(found))


@contextlib.contextmanager
def _outsider_at_the_launcher(hosts, proc, marker, ranks_marker=None):
    """While the block runs, about once a second, the lab's outsider sends ``scripts/outsider.py``'s requests (a
    GET, a PUT and a DELETE of a rendezvous key, the elastic rank-and-size GET, a crafted pickle) to every port the
    launcher ``proc`` listens on, and with ``ranks_marker`` a probe with a wrong token to each rank's beacon
    (:func:`_beacon_ports`); yields the rounds' results, collected until the job ends."""
    rounds, stop = [], threading.Event()
    with two_hosts.outsider(hosts) as outsider:
        def attack():
            while not stop.is_set() and proc.poll() is None:
                ports = _launcher_ports(proc.pid)
                beacons = _beacon_ports(hosts, ranks_marker) if ranks_marker else []
                if ports or beacons:
                    out = subprocess.run(outsider.command([sys.executable, OUTSIDER, str(marker)] +
                                                          [f"{two_hosts.LAUNCHER_ADDR}:{p}" for p in ports] +
                                                          (["--raw", *beacons] if beacons else []),
                                                          own_sysfs=False),
                                         capture_output=True, text=True, timeout=60, cwd=REPO)
                    if out.returncode == 0 and out.stdout.strip():
                        rounds.append(json.loads(out.stdout.strip().splitlines()[-1]))
                stop.wait(1.0)

        thread = threading.Thread(target=attack, name="outsider", daemon=True)
        thread.start()
        try:
            yield rounds
        finally:
            stop.set()
            thread.join(timeout=90)


def _nothing_answered(rounds):
    """Every request of every round refused: 403 from the rendezvous (at least once), no HTTP from the rest, and a
    beacon probed with a wrong token closed unanswered."""
    answers = [status for found in rounds for port in found.values() for kind, status in port.items()
               if kind != "token"]
    assert answers and 403 in answers, rounds
    assert set(answers) <= {403, "no-http", "refused"}, rounds  # never 200, 404 or 400: nothing read or stored
    tokens = [port["token"] for found in rounds for port in found.values() if "token" in port]
    assert set(tokens) <= {"closed", "refused"}, rounds  # never the beacon's answer


def test_an_outsider_gets_nothing_from_the_rendezvous_and_the_job_trains_as_an_undisturbed_one(hosts, run, tmp_path):
    # Horovod patch 0010: the rendezvous listens on the launcher's address on the job's network and refuses every
    # request without the job's secret; the run fixture's job, the same, trained with nobody on the network.
    # Each rank's beacon listens on its host's address on the job's network, and answers only the job's token.
    marker = tmp_path / "MARKER"
    proc = start(_report_command(hosts, tmp_path), env=hosts.env())
    with _outsider_at_the_launcher(hosts, proc, marker, ranks_marker=str(tmp_path / "report")) as rounds:
        out = finish(proc, timeout=180)
    assert proc.returncode == 0, out[-3000:]
    print(f"\nthe outsider sent {len(rounds)} rounds to the job's ports {sorted(set().union(*rounds))}")
    _nothing_answered(rounds)
    beacons = {target for found in rounds for target, port in found.items() if port.get("token") == "closed"}
    assert {b.rsplit(":", 1)[0] for b in beacons} == {h.addr for h in hosts.hosts}, rounds  # each rank's, probed
    assert not marker.exists()
    quiet, attacked = run[2], _reports(tmp_path / "report")
    for a, b in zip(quiet[0]["weights"], attacked[0]["weights"]):
        assert np.array_equal(a, b)  # bit for bit the job nobody disturbed


def test_an_outsider_gets_nothing_from_an_elastic_jobs_rendezvous_and_it_trains_as_an_undisturbed_one(
        hosts, run, tmp_path):
    # The elastic rendezvous listens on every interface (it starts before the job's interfaces are known) and
    # unpickles what workers PUT, so only the job's secret guards it. With its full world all along, the elastic
    # job trains what the run fixture's plain job trained, nobody on the network, bit for bit.
    marker, host_file = tmp_path / "MARKER", tmp_path / "hosts"
    env = dict(hosts.env(), HVDKERAS_HOSTS_FILE=str(host_file))
    proc = start(_report_command(hosts, tmp_path, where=_elastic_where(hosts, host_file),
                                 sets=["elastic.enabled=true", "elastic.commit_every_batches=5"]), env=env)
    with _outsider_at_the_launcher(hosts, proc, marker, ranks_marker=str(tmp_path / "report")) as rounds:
        out = finish(proc, timeout=180)
    assert proc.returncode == 0, out[-3000:]
    assert "rank 0/2: elastic starting at epoch 1, batch 0" in out, out[-3000:]
    print(f"\nthe outsider sent {len(rounds)} rounds to the elastic job's ports {sorted(set().union(*rounds))}")
    _nothing_answered(rounds)
    assert not marker.exists()  # the crafted pickle PUT to worker_addresses was never unpickled
    quiet, attacked = run[2], _reports(tmp_path / "report")
    assert {r["host"]["hostname"] for r in attacked} == {h.name for h in hosts.hosts}  # one rank on each host
    for rank in attacked:
        for a, b in zip(quiet[0]["weights"], rank["weights"]):
            assert np.array_equal(a, b)  # bit for bit the plain job nobody disturbed


# ------------------------------------------------------------------ a link that goes down (runs last here)

GLOO_TIMEOUT_S = 10


def _train_on_hosts(hosts, workdir, *sets, where=None):
    """The digits job on two ranks over the hosts; ``where``: horovodrun's host arguments
    (default ``hosts.horovodrun_args()``, a fixed host list)."""
    where = hosts.horovodrun_args() if where is None else where
    cmd = [HOROVODRUN, "-np", "2", *where, "--gloo", sys.executable, "-m", "hvdkeras.train",
           "--config", DIGITS, "--workdir", str(workdir), "--set", "trainer.verbose=0",
           "--set", "runtime.intra_op_threads=1", *[a for s in sets for a in ("--set", s)]]
    return cmd


def _ranks_running_in(netns, marker):
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout.split()
    found = []
    for pid in out:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def _ranks_on_the_hosts(hosts, marker):
    """The PIDs of the processes whose command line holds ``marker``, on every host of ``hosts``."""
    return [pid for h in hosts.hosts for pid in _ranks_running_in(h.netns, marker)]


@contextlib.contextmanager
def _link_to_cut(host, proc, workdir):
    """Yields ``cut()``, which takes ``host``'s link down and returns when; afterwards, however the
    block ends, the link is up again and the job ``proc`` and its ranks left on ``host`` are gone."""
    root_end = next(end for _, netns, _, end in two_hosts.HOST_SPECS if netns == host.netns)

    def cut() -> float:
        subprocess.run(["ip", "link", "set", root_end, "down"], check=True)
        return time.time()

    try:
        yield cut
    finally:
        subprocess.run(["ip", "link", "set", root_end, "up"], check=False)
        if proc.poll() is None:
            kill_group(proc.pid)
        for pid in _ranks_running_in(host.netns, str(workdir)):
            os.kill(pid, signal.SIGKILL)  # a cut-off rank: it cannot reach the others to be told


def test_a_link_down_ends_the_job_on_both_hosts_naming_the_lost_host_and_the_rerun_resumes(hosts, tmp_path):
    workdir = tmp_path / "work"
    # Rank 0 learns of the lost host when its collective times out: Gloo's timeout, 30 s unless set.
    # 10 s here (horovodrun's --gloo-timeout-seconds, as a user would shorten it) saves the suite 20 s;
    # a live rank's Horovod thread answers every cycle (ms), so 10 s is never reached by a slow one.
    where = [*hosts.horovodrun_args(), "--gloo-timeout-seconds", str(GLOO_TIMEOUT_S)]
    proc = subprocess.Popen(_train_on_hosts(hosts, workdir, "trainer.epochs=500", where=where), cwd=REPO,
                            env=dict(hosts.env(), TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    host_b = hosts.hosts[1]
    with _link_to_cut(host_b, proc, workdir) as cut:
        deadline = time.time() + 180
        while time.time() < deadline and not (workdir / "checkpoints" / "epoch-0002").exists():
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            time.sleep(0.2)
        down_at = cut()
        try:
            out, _ = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            pytest.fail("the launcher was still running 90 s after the link went down:\n"
                        + proc.communicate()[0][-3000:])
        launcher_s = time.time() - down_at
        while _ranks_running_in(host_b.netns, str(workdir)) and time.time() < down_at + 60:
            time.sleep(0.5)
        stranded = _ranks_running_in(host_b.netns, str(workdir))
        host_b_s = time.time() - down_at
    print(f"\nlink down -> launcher exited after {launcher_s:.1f}s; host b's rank gone after {host_b_s:.1f}s")
    assert proc.returncode != 0
    assert launcher_s < 60 and not stranded, f"rank 1 still running on {host_b.name} 60 s after the link went down"
    lost = [line for line in out.splitlines() if "hvdkeras: error: lost rank 1 on host" in line]
    assert len(lost) == 1, out[-4000:]
    assert f"lost rank 1 on host {host_b.addr} (unreachable" in lost[0] and "rerun the same command" in lost[0]

    done = len(read_jsonl(workdir / "metrics.jsonl"))
    rerun = launch(_train_on_hosts(hosts, workdir, f"trainer.epochs={done + 1}"), env=hosts.env(), timeout=180)
    resumed = [line for line in rerun.output.splitlines() if "resuming after epoch" in line]
    assert len(resumed) == 2, rerun.output[-3000:]
    assert all(f"resuming after epoch {done} from" in line for line in resumed), resumed
    assert [r["epoch"] for r in read_jsonl(workdir / "metrics.jsonl")] == list(range(1, done + 2))


def test_sigterm_to_the_launcher_stops_both_hosts_ranks_at_one_point_with_a_checkpoint_and_leaves_none_running(
        hosts, tmp_path):
    # horovodrun stops a rank on another host by ending its ssh client: the rank gets no signal and trained on,
    # orphaned (found by the soak on the two hosts). Each rank watches the launcher's end of its output
    # (hvdkeras/common/launcher_watch.py) and stops as on a SIGTERM: at one batch, with rank 0's checkpoint.
    workdir = tmp_path / "work"
    proc = subprocess.Popen(_train_on_hosts(hosts, workdir, "trainer.epochs=500"), cwd=REPO,
                            env=dict(hosts.env(), TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.time() + 180
        while time.time() < deadline and not (workdir / "checkpoints" / "epoch-0002").exists():
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGTERM)  # the launcher alone, as a scheduler or a Ctrl-C on it
        sent = time.time()
        out, _ = proc.communicate(timeout=60)
        running = _ranks_on_the_hosts(hosts, str(workdir))
        while running and time.time() < sent + 30:
            time.sleep(0.2)
            running = _ranks_on_the_hosts(hosts, str(workdir))
        gone_s = time.time() - sent
    finally:
        if proc.poll() is None:
            kill_group(proc.pid)
        for pid in _ranks_on_the_hosts(hosts, str(workdir)):
            os.kill(pid, signal.SIGKILL)
    print(f"\nSIGTERM to the launcher -> both hosts' ranks gone after {gone_s:.1f}s")
    assert not running, f"ranks still running on the hosts 30 s after the launcher's SIGTERM:\n{out[-3000:]}"
    # The stop lands at a batch, or at the end of an epoch when the agreement comes in its last batch
    # (an epoch is about a second here; seen in CI): either way one checkpoint says it was preempted.
    metas = [json.loads((p / "meta.json").read_text()) for p in (workdir / "checkpoints").iterdir()]
    stops = [meta for meta in metas if meta.get("preempted")]
    assert len(stops) == 1, (sorted(os.listdir(workdir / "checkpoints")), out[-3000:])
    meta = stops[0]
    assert not meta.get("alone"), meta  # both ranks agreed on where to stop
    epoch, batch = meta["epoch"], meta["batch"]  # epochs completed, and batches of the next one

    rerun = launch(_train_on_hosts(hosts, workdir, f"trainer.epochs={epoch + 1}"), env=hosts.env(), timeout=180)
    at = f" and batch {batch} of epoch {epoch + 1}" if batch else ""
    resumed = [line for line in rerun.output.splitlines() if f"resuming after epoch {epoch}{at} from" in line]
    assert len(resumed) == 2, rerun.output[-3000:]


# ------------------------------------------------------------------ an elastic job across a cut link


def _ssh_with_keepalive(hosts, tmp_path) -> str:
    """A bin folder whose ``ssh`` is the hosts' wrapper with client keepalives: ssh ends 255 when its
    host has not answered for about 9 s. A cluster's ssh config sets this (``ServerAliveInterval``);
    without it a session over a dead link lives as long as TCP retries (minutes), and Horovod's
    elastic driver, which learns of a lost worker when its ssh ends, waits that long."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec {os.path.join(hosts.bin_dir, "ssh")} -o ServerAliveInterval=3'
                       ' -o ServerAliveCountMax=3 "$@"\n')
    wrapper.chmod(0o755)
    return str(bin_dir)


def test_an_elastic_job_goes_on_alone_when_a_hosts_link_goes_down(hosts, tmp_path):
    """The job over the two hosts loses host b's link mid-epoch; the worker on host a rolls back to its last
    commit and finishes alone, as it does for a killed process (test_elastic.py); an outsider on the job's network
    sends the launcher's ports its requests all along, and gets nothing."""
    host_b = hosts.hosts[1]
    workdir, host_file, epochs = tmp_path / "work", tmp_path / "hosts", 14
    env = hosts.env()
    env["PATH"] = _ssh_with_keepalive(hosts, tmp_path) + os.pathsep + env["PATH"]
    env["HVDKERAS_HOSTS_FILE"] = str(host_file)
    # host a's collective gives up sooner, as above
    elastic = _elastic_where(hosts, host_file) + ["--gloo-timeout-seconds", str(GLOO_TIMEOUT_S)]
    proc = start(_train_on_hosts(hosts, workdir, "elastic.enabled=true", "elastic.commit_every_batches=5",
                                 f"trainer.epochs={epochs}", where=elastic), env=env)
    marker = tmp_path / "MARKER"
    # The lab's outsider at the launcher's ports all along: the elastic rendezvous listens on every interface (it
    # starts before the job's interfaces are known) and unpickles what workers PUT, so only its secret guards it.
    with _outsider_at_the_launcher(hosts, proc, marker, ranks_marker=str(workdir)) as rounds, \
            _link_to_cut(host_b, proc, workdir) as cut:
        wait_for_epochs(proc, workdir, 2, timeout=240)
        before = epochs_logged(workdir)
        down_at = cut()
        out = finish(proc, timeout=240)
        ended_s = time.time() - down_at
    _nothing_answered(rounds)
    assert not marker.exists()  # the crafted pickle PUT to worker_addresses was never unpickled
    resumed = [line for line in out.splitlines() if "rank 0/1: elastic resuming" in line]
    print(f"\nlink down after epoch {before}; the job ended {ended_s:.1f}s later; {resumed[:1]}")
    assert proc.returncode == 0, out[-4000:]
    assert len(resumed) == 1, out[-4000:]
    resumed_epoch = int(resumed[0].split("at epoch ")[1].split(",")[0])
    assert before - 1 <= resumed_epoch <= before + 1, resumed[0]  # from the last commit, not from scratch
    final = [line for line in out.splitlines() if "final validation" in line]
    assert len(final) == 1 and "(1 rank" in final[0], out[-3000:]
    logged = [r["epoch"] for r in read_jsonl(workdir / "metrics.jsonl")]
    assert sorted(set(logged)) == list(range(1, epochs + 1)), logged
