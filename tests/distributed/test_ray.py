"""hvdkeras.ray on a real Ray cluster: a head and two worker nodes, each started with ``ray start`` in one of the
lab's emulated hosts (``lab/ray.py``, network namespaces, one logical CPU each), the drivers run on the head.

On it: Horovod's Ray example switched by its import lines (``examples/ray/tensorflow2_mnist_ray.py``), on two nodes
with Horovod 0.21's names (keras3) and as docs/ray.md's quick start writes it, with the trainer's line (keras2);
a script for Ray Train's removed ``HorovodTrainer`` switched by its import (``scripts/ray_train_check.py``): on
keras2 a fit that starts again from its last checkpoint after a worker is lost mid-fit, on keras3 an elastic group
that grows when a stopped node joins again; ``RayExecutor.run``'s callbacks (keras3);
the config trainer (``python -m hvdkeras.train --launcher ray``) fits, refuses a changed config and a job the cluster
cannot hold in one line, as a node whose Python has no hvdkeras (keras2); and once per ``make test``, a worker
node's raylet SIGKILLed mid-fit: the fit starts again, resumes, and ends with the weights of the fit nobody
disturbed; Horovod's elastic Keras example on
``ElasticRayExecutor`` goes on without a node whose raylet is SIGKILLed (last: it leaves the cluster a node short).
The cluster goes down whatever happens, and no raylet, GCS or worker outlives it.
"""
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from typing import NamedTuple

import pytest

from lab import hosts as hosts_lib
from tests.harness.ranks import REPO, SCRIPTS, OutputWatch, launch, read_jsonl, results
from tests.harness.stacks import once_here

pytest.importorskip("ray", reason="the [ray] extra is not installed (pip install 'hvdkeras[ray]')")
from lab import ray as ray_lab  # noqa: E402 - after the skip: it needs Ray's command line

pytestmark = pytest.mark.lab

EXAMPLE = os.path.join(REPO, "examples", "ray", "tensorflow2_mnist_ray.py")
DIGITS = os.path.join(REPO, "configs", "digits.yaml")
EPOCHS = 4
EXAMPLE_ONCE = ("Horovod's Ray example with Horovod 0.21's names on two nodes", 0.5, "keras3")
QUICK_START_ONCE = ("docs/ray.md's quick start as written", 0.7, "keras2")
KILL_ONCE = ("a worker node lost mid-fit: the retry's start, resume and weights do not depend on the stack", 1.0,
             "keras3")
GROW_ONCE = ("Ray Train's elastic group growing when a node joins: Ray's side does not depend on the stack", 1.0,
             "keras3")
FAIL_ONCE = ("Ray Train's restart of a fixed group after a lost worker: Ray's side does not depend on the stack",
             0.7, "keras2")
BARE_NODE_ONCE = ("a node whose Python has no hvdkeras: Ray's side does not depend on the stack", 0.3, "keras2")
ELASTIC_ONCE = ("Horovod's elastic Keras example on ElasticRayExecutor, a node lost mid-fit: Ray's side does not"
                " depend on the stack (tests/distributed/test_elastic.py runs the elastic state on both)", 1.3,
                "keras2")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The three nodes; afterwards no process of theirs and no host is left."""
    ok, reason = ray_lab.can_run()
    if not ok:
        pytest.skip(f"the Ray cluster test needs network namespaces and Ray: {reason}")
    with ray_lab.running(tmp_path_factory.mktemp("ray_cluster")) as info:
        yield info
    assert ray_lab._ray_pids() == []
    assert not hosts_lib.any_up()


def on_head(info, argv, timeout=240, check=True, command_lines=False):
    """``argv`` run with this Python on the head node, as a Ray driver; its Job (with ``command_lines``, every
    process's arguments sampled meanwhile)."""
    return launch(info.driver_command([sys.executable, *argv]), env=info.env(), timeout=timeout, check=check,
                  command_lines=command_lines)


def train(workdir, *args):
    """The digits job's arguments on two ranks of the cluster, without dropout: a resumed fit then ends bit for bit
    where an undisturbed one does."""
    return ["-m", "hvdkeras.train", "--config", DIGITS, "--launcher", "ray", "--np", "2", "--workdir", str(workdir),
            "--set", f"trainer.epochs={EPOCHS}", "--set", "trainer.verbose=0", "--set", "model.dropout=0", *args]


@pytest.fixture(scope="module")
def quiet(cluster):
    """The digits job on two ranks of the cluster, nobody disturbing it: its workdir and output."""
    workdir = os.path.join(cluster.folder, "quiet")
    return workdir, on_head(cluster, train(workdir)).output


@pytest.mark.skipif(not once_here(GROW_ONCE[2]), reason=f"{GROW_ONCE[0]}: once per `make test`, on {GROW_ONCE[2]}")
def test_an_elastic_ray_train_group_grows_when_a_node_joins_from_its_last_checkpoint_with_no_epoch_lost(cluster):
    """A script for Ray Train's removed ``HorovodTrainer``, switched by its import, on Ray Train's current API
    (``ScalingConfig(num_workers=(2, 3))``, ``RunConfig``, ``FailureConfig(max_failures=1)``, ``report``,
    ``get_checkpoint``), on the cluster with a worker node stopped: the group starts with two workers; when the node
    joins again after epoch 1 began, Ray Train starts the group again with three from the last checkpoint, each
    start taking the per-rank batch and learning rate of the trainer's rule for a resized world. (A lost worker's
    restart is the next test's, on a group of fixed size.)

    First of the module's Ray Train runs: Ray's autoscaling coordinator, which the first one starts and which
    counts the nodes every 20 s, then knows from the start that the node is gone."""
    folder = os.path.join(cluster.folder, "ray-train-grow")
    os.makedirs(folder)
    node = cluster.hosts.hosts[-1].name
    ray_lab.stop_node(cluster, node)
    proc = subprocess.Popen(cluster.driver_command([sys.executable, os.path.join(SCRIPTS, "ray_train_check.py"),
                                                    folder, "--elastic", "--grow"]), cwd=REPO,
                            env=dict(cluster.env(), TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    job = OutputWatch(proc)
    begun = os.path.join(folder, "begun")
    deadline = time.monotonic() + 180
    while not (os.path.exists(begun) and any(line.split()[0] == "1" for line in open(begun))):
        assert proc.poll() is None and time.monotonic() < deadline, job.finish(timeout=30)[-3000:]
        time.sleep(0.1)
    ray_lab.start_node(cluster, node)
    out = job.finish(timeout=240)
    assert proc.returncode == 0, out[-4000:]
    report = json.JSONDecoder().raw_decode(out, out.rindex("RESULT {") + len("RESULT "))[0]
    assert report["error"] is None and report["metrics"]["epoch"] == 4, report
    begun = [(int(e), int(size), int(batch), float(lr)) for e, size, batch, lr in report["begun"]]
    sizes = [size for _, size, _, _ in begun]
    assert 3 in sizes, begun
    grown = sizes.index(3)
    assert grown >= 2 and set(sizes[:grown]) == {2} and set(sizes[grown:]) == {3}, begun  # one resize: 2, then 3
    assert {(size, batch) for _, size, batch, _ in begun} == {(2, 48), (3, 32)}, begun  # the global batch kept
    assert {lr for *_, lr in begun} == {0.05}, begun  # keep_global_batch keeps the rate
    before, after = [e for e, *_ in begun[:grown]], [e for e, *_ in begun[grown:]]
    assert before == list(range(len(before))), begun
    assert 1 <= after[0] <= before[-1] + 1, begun  # resumed from a checkpoint of the smaller group: none lost
    assert after == list(range(after[0], 5)), begun  # each epoch begun once after the resize
    assert len(report["digests"]) == 3 and len(set(report["digests"])) == 1, report  # three ranks, one model


@pytest.mark.skipif(once_here(GROW_ONCE[2]) and not once_here(FAIL_ONCE[2]), reason=f"on {GROW_ONCE[2]} the elastic"
                    " script's run above is the HorovodTrainer fit")
def test_a_script_for_ray_trains_removed_horovodtrainer_switched_by_its_import_fits(cluster):
    """Ray Train's current API with hvdkeras's HorovodTrainer: two workers, three epochs, one model. Where a lost
    worker is tested (``FailureConfig(max_failures=1)``), rank 1's process exits in epoch 1 and the group starts
    again from epoch 0's checkpoint: epoch 1 is begun again, none before it."""
    folder = os.path.join(cluster.folder, "ray-train")
    os.makedirs(folder)
    fail = once_here(FAIL_ONCE[2])
    (report,) = results(on_head(cluster, [os.path.join(SCRIPTS, "ray_train_check.py"), folder,
                                          *(["--fail-at", "1"] if fail else [])], timeout=300))
    assert report["error"] is None and report["metrics"]["epoch"] == 2, report
    assert len(report["digests"]) == 2 and len(set(report["digests"])) == 1, report  # both ranks, one model
    assert report["begun"] == ([0, 1, 1, 2] if fail else [0, 1, 2]), report


@pytest.mark.skipif(not once_here(EXAMPLE_ONCE[2]), reason=f"{EXAMPLE_ONCE[0]}: on {EXAMPLE_ONCE[2]}; keras2 runs the"
                    " same example through docs/ray.md's quick start")
def test_horovods_ray_example_switched_trains_one_model_on_two_nodes_with_one_writer(cluster):
    checkpoints = os.path.join(cluster.folder, "example")
    os.makedirs(checkpoints)
    out = on_head(cluster, [EXAMPLE, "--address", cluster.address, "--num-hosts", "2", "--num-slots", "1",
                            "--cpus-per-slot", "1", "--steps-per-epoch", "40", "--checkpoint-dir", checkpoints]).output
    finals = [line for line in out.splitlines() if line.startswith("rank ") and "sum of weights" in line]
    assert len(finals) == 2 and len({line.split(": ", 1)[1] for line in finals}) == 1, out[-3000:]  # one model
    assert "num_slots= is Horovod 0.21's name for num_workers_per_host=" in out
    assert os.listdir(checkpoints) == ["checkpoint-1.keras"]  # rank 0 alone wrote
    nodes = {line.split("ip=", 1)[1].split(")", 1)[0] for line in out.splitlines() if "RankWorker pid=" in line
             and "ip=" in line}
    head = cluster.hosts.hosts[0].addr
    assert len(nodes | {head}) >= 2, out[-2000:]  # STRICT_SPREAD: a rank on each of two nodes


def quick_start_commands():
    """The ``python`` lines of docs/ray.md's quick start, as written (the cluster's own lines left to the fixture)."""
    with open(os.path.join(REPO, "docs", "ray.md")) as f:
        text = f.read()
    block = text.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [shlex.split(line) for line in block.splitlines() if line.startswith("python ")]


@pytest.fixture(scope="module")
def quick_start(cluster, tmp_path_factory):
    """docs/ray.md's quick start run as written, in a folder that sees the checkout's examples/ and configs/, so what
    they write (runs/, the example's checkpoint) lands there; ``--address auto`` finds the cluster through
    RAY_ADDRESS, as on one of its nodes. Its folder, commands and outputs."""
    folder = tmp_path_factory.mktemp("quick_start")
    commands = quick_start_commands()
    assert [c[:2] for c in commands] == [["python", "examples/ray/tensorflow2_mnist_ray.py"],
                                         ["python", "-m"]], commands
    for name in ("examples", "configs"):
        os.symlink(os.path.join(REPO, name), folder / name)
    outputs = [launch(cluster.driver_command([sys.executable, *argv[1:]]), env=cluster.env(), timeout=240,
                      cwd=str(folder)).output for argv in commands]
    return folder, commands, outputs


@pytest.mark.skipif(not once_here(QUICK_START_ONCE[2]), reason=f"{QUICK_START_ONCE[0]}: on {QUICK_START_ONCE[2]}")
def test_the_quick_start_of_docs_ray_md_runs_as_written(quick_start):
    folder, _, outputs = quick_start
    finals = [line for line in outputs[0].splitlines() if line.startswith("rank ") and "sum of weights" in line]
    assert len(finals) == 2 and len({line.split(": ", 1)[1] for line in finals}) == 1, outputs[0][-3000:]
    assert os.listdir(folder / "runs") == ["digits"] and (folder / "checkpoint-1.keras").exists()
    assert [m["epoch"] for m in read_jsonl(folder / "runs" / "digits" / "metrics.jsonl")] == [1, 2]


class Fit(NamedTuple):
    """A config trainer's fit on the cluster, and how to run its command line again."""

    workdir: str
    output: str
    epochs: int
    command: list
    cwd: str


@pytest.fixture(scope="module")
def fitted(request) -> Fit:
    """A config trainer's fit on the cluster that the module runs anyway: the quick start's where it runs, else
    the undisturbed fit the raylet test compares with."""
    if once_here(QUICK_START_ONCE[2]):
        folder, commands, outputs = request.getfixturevalue("quick_start")
        again = request.getfixturevalue("cluster").driver_command([sys.executable, *commands[1][1:]])
        return Fit(str(folder / "runs" / "digits"), outputs[1], 2, again, str(folder))
    cluster = request.getfixturevalue("cluster")
    workdir, out = request.getfixturevalue("quiet")
    return Fit(workdir, out, EPOCHS, cluster.driver_command([sys.executable, *train(workdir)]), REPO)


def test_the_config_trainer_fits_on_the_cluster_and_keeps_the_workdirs_rules(cluster, fitted):
    epochs = [m["epoch"] for m in read_jsonl(os.path.join(fitted.workdir, "metrics.jsonl"))]
    assert epochs == list(range(1, fitted.epochs + 1))
    assert "final validation (2 ranks, every example once)" in fitted.output
    tic = time.monotonic()
    changed = launch(fitted.command + ["--set", "optimizer.learning_rate=0.01"], env=cluster.env(), timeout=120,
                     check=False, cwd=fitted.cwd)
    assert changed.returncode == 2
    last = changed.output.strip().splitlines()[-1]
    assert last.startswith("hvdkeras: error:") and "optimizer.learning_rate" in last, changed.output[-2000:]
    assert time.monotonic() - tic < 60  # refused by the driver, before the cluster starts a rank


@pytest.mark.skipif(not once_here("keras3"), reason="Ray's side of the callbacks does not depend on the stack: keras3")
def test_run_hands_each_value_a_rank_logs_to_the_drivers_callbacks_and_no_command_line_has_the_secret(cluster):
    job = on_head(cluster, [os.path.join(SCRIPTS, "ray_callbacks_check.py")], timeout=120, command_lines=True)
    (report,) = results(job)
    assert [rank for rank, _ in report["returned"]] == [0, 1], report
    # Ray's actors get the secret in a call, not their starting environment: the ranks say what they were given
    # (other jobs on the machine, another stack's suite among them, may add theirs from their environments)
    given = {secret.encode() for _, secret in report["returned"]}
    assert len(given) == 1 and b"" not in given, report
    seen = job.command_lines  # every process on the machine, the three nodes' Ray workers and raylets among them
    seen.secrets.update(given)
    assert seen.scans > 10, seen.scans
    assert seen.exposed() == []
    seen = report["seen"]  # through hvdkeras' ray_logger and Horovod's alike, each rank's in its order
    assert sorted((v["rank"], v["step"]) for v in seen) == [(r, s) for r in (0, 1) for s in range(3)], report
    for rank in (0, 1):
        assert [v["step"] for v in seen if v["rank"] == rank] == [0, 1, 2], report


@pytest.mark.skipif(not once_here(BARE_NODE_ONCE[2]), reason=f"{BARE_NODE_ONCE[0]}: once per `make test`, on"
                    f" {BARE_NODE_ONCE[2]}")
def test_a_node_whose_python_has_no_hvdkeras_is_one_line_naming_the_fix(cluster, tmp_path):
    """A worker node started again with an interpreter that has Ray, TensorFlow and Horovod but not hvdkeras, as on
    a node nobody installed it on: the config trainer on all three nodes ends in one line that says what to install
    where, before any rank trains. The driver runs outside the checkout (Ray puts the driver's folder on its
    workers' path, which would find hvdkeras there)."""
    host, address = cluster.hosts.hosts[-1].name, cluster.hosts.hosts[-1].addr
    ray_lab.stop_node(cluster, host)
    try:
        ray_lab.start_node(cluster, host, python=ray_lab.python_without_hvdkeras(str(tmp_path / "bare")))
        tic = time.monotonic()
        job = launch(cluster.driver_command([sys.executable, *train(tmp_path / "w", "--np", "3")]), env=cluster.env(),
                     timeout=120, check=False, cwd=str(tmp_path))
        assert job.returncode == 2, job.output[-3000:]
        last = job.output.strip().splitlines()[-1]
        assert last.startswith(f"hvdkeras: error: a Ray worker on node {address} could not start a rank's actor"
                               " (ModuleNotFoundError: No module named 'hvdkeras'): install hvdkeras"), \
            job.output[-3000:]
        assert "on every Ray node" in last, last
        assert not os.path.exists(tmp_path / "w" / "metrics.jsonl")  # no rank trained
        assert time.monotonic() - tic < 90
    finally:  # the node as the module's later tests need it
        ray_lab.stop_node(cluster, host)
        ray_lab.start_node(cluster, host)


def test_more_ranks_than_the_cluster_has_cpus_is_one_line_not_a_wait(cluster, tmp_path):
    tic = time.monotonic()
    job = on_head(cluster, train(tmp_path / "w", "--np", "4"), timeout=120, check=False)
    assert job.returncode == 2
    assert job.output.strip().splitlines()[-1].startswith(
        "hvdkeras: error: this Ray cluster cannot hold 4 workers of 1 CPU each"), job.output[-2000:]
    assert time.monotonic() - tic < 60


@pytest.mark.skipif(not once_here(KILL_ONCE[2]), reason=f"{KILL_ONCE[0]}: once per `make test`, on {KILL_ONCE[2]}")
def test_a_worker_nodes_raylet_killed_mid_fit_restarts_resumes_and_ends_with_the_undisturbed_weights(cluster, quiet):
    workdir = os.path.join(cluster.folder, "disturbed")
    proc = subprocess.Popen(cluster.driver_command([sys.executable, *train(workdir)]), cwd=REPO,
                            env=dict(cluster.env(), TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    job = OutputWatch(proc)
    metrics = os.path.join(workdir, "metrics.jsonl")
    deadline = time.monotonic() + 180
    while not (os.path.exists(metrics) and len(read_jsonl(metrics)) >= 2):
        assert proc.poll() is None and time.monotonic() < deadline, job.finish(timeout=30)[-3000:]
        time.sleep(0.1)
    workers = [h.name for h in cluster.hosts.hosts[1:] if ray_lab.ranks_on(cluster, h.name)]
    assert workers, "no rank on a worker node"
    raylet = ray_lab.raylet_of(cluster, workers[0])
    os.kill(raylet, signal.SIGKILL)
    out = job.finish(timeout=240)
    assert proc.returncode == 0, out[-4000:]
    assert "starting the ranks again, retry 1 of 2 (the ranks resume from the workdir's last checkpoint)" in out
    resumed = [int(n) for n in re.findall(r"resuming after epoch (\d+)", out)]
    assert resumed and resumed[-1] >= 2, out[-3000:]  # from the last checkpoint before the kill
    assert [m["epoch"] for m in read_jsonl(metrics)] == list(range(1, EPOCHS + 1))  # no epoch lost or repeated
    (compared,) = results(launch([sys.executable, os.path.join(SCRIPTS, "compare_exports.py"), quiet[0], workdir],
                                 timeout=120))
    assert compared["max_diff"] == 0.0, compared  # bit for bit the fit nobody disturbed
    print(f"\nkilled the raylet of {workers[0]}; " + json.dumps(compared))


@pytest.mark.skipif(not once_here(ELASTIC_ONCE[2]), reason=f"{ELASTIC_ONCE[0]}: once per `make test`, on"
                    f" {ELASTIC_ONCE[2]}")
def test_horovods_elastic_example_on_elastic_ray_executor_goes_on_without_a_node_lost_mid_fit(cluster):
    """Between one and two ranks of one CPU: when the raylet of a node holding a rank is SIGKILLed after epoch 1,
    Horovod's driver drops that node, the rank left rolls back to its last commit, the free node joins, and the
    job ends its epochs on two ranks with one model, the learning rate the example's reset rule gives; what the
    ranks log reaches the driver's callback."""
    folder = os.path.join(cluster.folder, "elastic")
    os.makedirs(folder)
    script = os.path.join(SCRIPTS, "ray_elastic_check.py")
    proc = subprocess.Popen(cluster.driver_command([sys.executable, script, folder, "--epochs", "3",
                                                    "--steps-per-epoch", "16"]), cwd=REPO,
                            env=dict(cluster.env(), TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    job = OutputWatch(proc)
    deadline = time.monotonic() + 180
    while not os.path.exists(os.path.join(folder, "checkpoint-1.keras")):
        assert proc.poll() is None and time.monotonic() < deadline, job.finish(timeout=30)[-3000:]
        time.sleep(0.1)
    held = [h for h in cluster.hosts.hosts[1:] if ray_lab.ranks_on(cluster, h.name)]
    assert held, "no rank on a worker node"
    os.kill(ray_lab.raylet_of(cluster, held[0].name), signal.SIGKILL)
    out = job.finish(timeout=240)
    assert proc.returncode == 0, out[-4000:]
    report = json.JSONDecoder().raw_decode(out, out.rindex("RESULT {") + len("RESULT "))[0]
    assert report["error"] is None, (report, out[-4000:])
    ranks = report["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and {r["size"] for r in ranks} == {2}, report
    assert held[0].addr not in {r["host"] for r in ranks}, report  # the job went on without the lost node
    assert {r["epoch"] for r in ranks} == {3} and len({r["digest"] for r in ranks}) == 1, report
    assert all(abs(r["learning_rate"] - 0.001 * r["size"]) < 1e-9 for r in ranks), report
    # what each finishing rank logged reached the driver's callback (the queue lives on the driver's node: the lost
    # node cannot take it along)
    assert sorted((v["rank"], v["size"]) for v in report["logged"]) == [(0, 2), (1, 2)], report
    print(f"\nkilled the raylet of {held[0].name}; " + json.dumps(ranks))
