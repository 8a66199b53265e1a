"""Fixtures shared by the distributed test files."""
import os
import shutil
import subprocess
import sys

import pytest

from lab.spark import FAST_START
from tests.harness import lab_lock, spark_driver
from tests.harness.ranks import MPI_ENV, REPO, SCRIPTS, horovodrun, train_args
from tests.harness.reports import EXACT, tell
from tests.harness.shared_job import run_scripts


def pytest_addoption(parser):
    parser.addoption("--lab-modules", choices=lab_lock.WHERE, default="in-place",
                     help="run the modules marked lab first or last (the Makefile's ORDER chooses; "
                          "tests/harness/lab_lock.py says why)")


def pytest_collection_modifyitems(config, items):
    items[:] = lab_lock.place_lab_modules(items, lambda item: item.get_closest_marker("lab") is not None,
                                          config.getoption("--lab-modules"))


@pytest.fixture(scope="module", autouse=True)
def _the_lab_alone(request):
    """A module marked ``lab`` (it brings up the lab's hosts) holds the machine's lab lock for all its tests
    (``tests/harness/lab_lock.py``): the other stack's suite, running beside this one, may want the lab too."""
    if request.node.get_closest_marker("lab") is None:
        yield
        return
    with lab_lock.held() as waited:
        if waited > 1:
            tell(request, f"{request.node.name}: waited {waited:.0f}s for the lab (the other suite had it)")
        yield


@pytest.fixture(scope="session", autouse=True)
def _spark_drivers_start_fast():
    """Every Spark driver that pyspark launches here (keras2's shared ``local[2]`` driver, Spark Connect's local server)
    runs its JVM as ``lab/spark.py`` runs the standalone cluster's: the client compiler alone and the serial collector
    (``SPARK_SUBMIT_OPTS``, which spark-submit adds to the driver's JVM). Those JVMs plan many small jobs on little
    data, and C2's compiler threads spent about half their CPU time: keras2's shared driver alone took 94 CPU-s in its
    JVM against 170, and 394 against 468 in all (docs/records/test-timings.md). Nothing else changes: the flags say
    how the JVM compiles, not what Spark does. A ``SPARK_SUBMIT_OPTS`` set outside is kept."""
    os.environ.setdefault("SPARK_SUBMIT_OPTS", FAST_START)
    yield


# The settings of the shared two-epoch run (besides no progress bars): every checkpoint kept.
TWO_EPOCHS = ("trainer.epochs=2", "checkpoint.keep=0")


@pytest.fixture(scope="session")
def digits_two_epochs(tmp_path_factory):
    """The digits job trained for two epochs on two ranks, once per session (settings ``TWO_EPOCHS``).

    Returns ``copy_to(workdir)``, which copies that finished workdir (config.yaml, metrics.jsonl and
    the checkpoints of epochs 1 and 2) to ``workdir`` and returns it as a ``pathlib.Path``: a test that
    starts from a written checkpoint resumes, damages or measures its own copy instead of training
    the same two epochs again.
    """
    original = tmp_path_factory.mktemp("digits-two-epochs") / "work"
    horovodrun(train_args(original, *TWO_EPOCHS), timeout=240)

    def copy_to(workdir):
        shutil.copytree(original, workdir)
        return workdir

    return copy_to


@pytest.fixture(scope="session")
def soak_quiet_run(tmp_path_factory):
    """The short soaks' quiet run, once per session: ``python -m benchmarks.soak --short --quiet-only`` (the digits
    job of ``--short`` on two local ranks to the end, no fault). Returns its ``--out``, which each short soak takes
    as ``--quiet-from``: the local one (``test_soak.py``) and Slurm's on two nodes (``test_slurm.py``) pay for one
    quiet run, and Slurm's job is held to what two local ranks train, bit for bit."""
    out = tmp_path_factory.mktemp("soak-quiet-run")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.soak", "--short", "--quiet-only", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **MPI_ENV))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return out


@pytest.fixture(scope="session")
def uninterrupted_exact(tmp_path_factory):
    """The digits job trained with ``EXACT`` on two ranks without interruption, once per session: its last
    checkpoint's folder, which an interrupted and resumed run of the same settings must equal."""
    workdir = tmp_path_factory.mktemp("uninterrupted") / "work"
    horovodrun(train_args(workdir, *EXACT), timeout=240)
    return workdir / "checkpoints" / "epoch-0006"


@pytest.fixture(scope="session")
def api_and_gradients(tmp_path_factory):
    """One job for two files' checks (one start of two ranks instead of two), in the same two processes set up first
    as the digits trainer sets them up (``scripts/trainer_process.py``): ``scripts/gradient_check.py`` (the gradient
    arithmetic, then the default digits job with fp16 compression; ``test_gradient_exchange.py``), then
    ``scripts/horovod_keras_api.py`` (Horovod's Keras API; ``test_horovod_keras_api.py``). The training comes
    before the API's checks: after their collectives (``collectives()``: allgather, broadcast, reducescatter), the
    digits job trained about twice as slowly in the same processes (keras3, 55-59 s against 30-31 s for 15 epochs; it
    now trains 6).
    Returns ``(ScriptsJob, base folder)``; the scripts' names are ``gradient_check`` and ``horovod_keras_api``,
    their folders ``base/fp16`` and ``base/api``."""
    base = tmp_path_factory.mktemp("api_and_gradients")
    (base / "api").mkdir()
    digits = os.path.join(REPO, "configs", "digits.yaml")
    jobs = {"trainer_process": [os.path.join(SCRIPTS, "trainer_process.py"), digits, "horovod.compression=fp16"],
            "gradient_check": [os.path.join(SCRIPTS, "gradient_check.py"), str(base / "fp16")],
            "horovod_keras_api": [os.path.join(SCRIPTS, "horovod_keras_api.py"), str(base / "api")]}
    return run_scripts(jobs, timeout=600), base


@pytest.fixture(scope="session")
def spark_local(request, tmp_path_factory):
    """The shared local[2] Spark driver's result (tests/harness/spark_driver.py), run once per session.

    Each Spark test module says which part of it it needs in ``SPARK_LOCAL`` (``estimator``, ``tuning``, ``stream``,
    ``scenarios``, ``examples``, ``quick_start``; empty where its tests skip on this stack); the driver runs the parts
    of the modules this session collected.
    """
    parts = {"estimator": False, "tuning": False, "stream": False, "quick_start": False, "scenarios": [],
             "examples": []}
    for module in sorted({item.module for item in request.session.items}, key=lambda m: m.__name__):
        for key, value in getattr(module, "SPARK_LOCAL", {}).items():
            parts[key] = parts[key] + list(value) if key in ("scenarios", "examples") else parts[key] or value
    work = str(tmp_path_factory.mktemp("spark_local"))
    result = spark_driver.run(work, parts["estimator"], parts["scenarios"], parts["examples"], parts["tuning"],
                              parts["stream"], parts["quick_start"])
    laps = result.get("seconds", {})
    tell(request, f"the shared Spark driver ran {sorted(result)}; its laps (s): {laps}; the estimator part's (s):"
                  f" {result.get('estimator', {}).get('seconds', {})}")
    return result
