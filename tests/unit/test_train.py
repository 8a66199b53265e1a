"""python -m hvdkeras.train: every error a user can fix is one line on stderr, exit status 2, nothing written."""
import json
import os
import subprocess
import sys

from tests.harness.stacks import once_per_make_test
from tests.unit.common.test_workdir import TORN
from tests.unit.helpers import REPO, write_yaml


def run_train(*args):
    return subprocess.run([sys.executable, "-m", "hvdkeras.train", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))


def error_lines(proc):
    return [line for line in proc.stderr.splitlines() if line.strip()]


def test_cli_prints_one_line_and_no_traceback(tmp_path):
    path = write_yaml(tmp_path, "optimizer: {lr: 0.1}\n")
    proc = run_train("--config", path, "--workdir", str(tmp_path / "w"))
    assert proc.returncode == 2
    lines = error_lines(proc)
    assert lines == [lines[0]] and lines[0].startswith("hvdkeras: error: unknown key 'optimizer.lr'")
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "w").exists()


def test_dry_run_flags_without_dry_run_are_refused(tmp_path):
    proc = run_train("--config", "configs/digits.yaml", "--np", "4", "--hosts", "a:4", "--workdir",
                     str(tmp_path / "w"))
    assert proc.returncode == 2
    assert error_lines(proc) == ["hvdkeras: error: --np, --hosts only apply with --dry_run (without it, a launcher"
                                 " starts the processes)"]
    assert not (tmp_path / "w").exists()


def test_config_is_required_and_overrides_go_through_set():
    proc = run_train()
    assert proc.returncode == 2 and error_lines(proc) == ["hvdkeras: error: --config is required, e.g. --config"
                                                          " configs/digits.yaml"]
    proc = run_train("--config", "configs/digits.yaml", "trainer.epochs=3")
    assert proc.returncode == 2 and error_lines(proc) == ["hvdkeras: error: unexpected arguments trainer.epochs=3;"
                                                          " overrides go through --set section.key=value"]


def test_a_flag_absl_cannot_parse_is_one_line_with_status_2(tmp_path):
    for args, says in ((("--confg", "configs/digits.yaml"),
                        "Unknown command line flag 'confg'. Did you mean: config ?"),
                       (("--config", "configs/digits.yaml", "--resume=maybe"),
                        "flag --resume=maybe: value should be one of <auto|force>")):
        proc = run_train(*args, "--workdir", str(tmp_path / "w"))
        assert proc.returncode == 2
        assert error_lines(proc) == [f"hvdkeras: error: {says}; --helpshort lists the flags"]
    assert not (tmp_path / "w").exists()


def test_anything_but_a_users_error_keeps_its_traceback(tmp_path):
    """A bug (here an ImportError from a broken install) is not hidden behind one line."""
    code = ("import sys\nimport hvdkeras.train as cli\nimport hvdkeras.train_rank as train_rank\n"
            "def broken(cfg, workdir):\n    raise ImportError('No module named horovod_broken_lib')\n"
            "train_rank.train = broken\n"
            f"sys.argv = ['train', '--config', 'configs/digits.yaml', '--workdir', {str(tmp_path)!r}]\n"
            "cli.run()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" in proc.stderr and "ImportError: No module named horovod_broken_lib" in proc.stderr
    assert "hvdkeras: error:" not in proc.stderr


def test_ray_ranks_that_fail_with_no_retry_left_are_one_line_naming_the_workdir_to_resume(tmp_path):
    code = ("import sys\nimport hvdkeras.train as cli\nfrom hvdkeras.ray import job\n"
            "from hvdkeras.engines.failures import RetriesExhaustedError\n"
            "def lost(*args, **kwargs):\n"
            "    raise RetriesExhaustedError('a rank\\'s Ray worker was lost (node died)')\n"
            "job.run_ranks = lost\n"
            f"sys.argv = ['train', '--config', 'configs/digits.yaml', '--workdir', {str(tmp_path)!r},"
            " '--launcher', 'ray', '--np', '2', '--max_retries', '1']\n"
            "cli.run()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "hvdkeras: error: the ranks on Ray failed with no retry left (--max_retries=1): a rank's Ray worker was lost"
        f" (node died); {tmp_path} keeps the last checkpoint: run the same command again to resume from it"]


def test_a_second_job_on_a_workdir_in_use_stops_before_training_naming_the_holder(tmp_path):
    from tests.unit.common.test_workdir_guard import HOLD

    workdir = tmp_path / "w"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(workdir)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = run_train("--config", "configs/digits.yaml", "--workdir", str(workdir))
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 2
    assert error_lines(proc) == [f"hvdkeras: error: --workdir {workdir} is in use by another job"
                                 f" ({(workdir / '.hvdkeras.lock').read_text().strip()}): wait for it to end, stop"
                                 " it, or pass another --workdir"]
    assert sorted(os.listdir(workdir)) == [".hvdkeras.lock"]  # nothing trained, nothing written


QUICK = ("--set", "trainer.epochs=1", "--set", "trainer.steps_per_epoch=2", "--set", "trainer.verbose=0")
CHANGED = ("--set", "optimizer.learning_rate=0.2")


def _first_run(workdir):
    """One short run of the digits job in ``workdir``: the checkpoints a changed config then meets."""
    first = run_train("--config", "configs/digits.yaml", "--workdir", str(workdir), *QUICK)
    assert first.returncode == 0, first.stderr[-2000:]


# Two tests, each with its own first run, rather than one: the unit tests run on two workers, and the two
# halves (about 8 s each: a run costs a TensorFlow import and a short fit) then run side by side.
# The workdir's config guard and --fresh: plain Python (hvdkeras/common/), each a command line run twice (8-12 s).
workdir_once = once_per_make_test("the command line's config guard and --fresh, two runs each", 0.3, stack="keras3")


@workdir_once
def test_a_changed_config_is_refused_in_one_line_and_force_resumes(tmp_path):
    workdir = tmp_path / "w"
    _first_run(workdir)
    assert sorted(os.listdir(workdir)) == ["checkpoints", "config.yaml", "export", "metrics.jsonl"]  # no lock

    refused = run_train("--config", "configs/digits.yaml", "--workdir", str(workdir), *QUICK, *CHANGED)
    assert refused.returncode == 2
    assert error_lines(refused) == [
        f"hvdkeras: error: --workdir {workdir} holds checkpoints trained with another config"
        " (optimizer.learning_rate: 0.05 -> 0.2): rerun with the config it was started with"
        f" ({workdir}/config.yaml), pass --fresh to start over (the old run moves to {workdir}/previous/), or"
        " --resume=force to continue from its weights anyway"]

    # What a job killed mid-write leaves: staging folders where atomic writes stage, a torn metrics record
    for place in (".", "checkpoints", "export"):
        (workdir / place / ".saving-killed" / "half").mkdir(parents=True)
    with open(workdir / "metrics.jsonl", "ab") as f:
        f.write(TORN)
    forced = run_train("--config", "configs/digits.yaml", "--workdir", str(workdir), *QUICK, *CHANGED,
                       "--set", "trainer.epochs=2", "--resume=force")
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert f"removed 3 unfinished writes a stopped job left in {workdir}" in forced.stdout
    assert not [n for _, dirs, _ in os.walk(workdir) for n in dirs if n.startswith(".saving-")]
    metrics = (workdir / "metrics.jsonl").read_bytes()  # resumed after epoch 1: the torn lines gone, epoch 2 logged
    assert [json.loads(line)["epoch"] for line in metrics.splitlines()] == [1, 2]
    forced_line = "--resume=force: resuming from checkpoints trained with optimizer.learning_rate: 0.05 -> 0.2"
    assert forced_line in forced.stderr
    assert "resuming after epoch 1" in forced.stdout
    assert sorted(os.listdir(workdir / "checkpoints")) == ["epoch-0001", "epoch-0002"]


@workdir_once
def test_fresh_moves_the_previous_run_aside_and_starts_over(tmp_path):
    workdir = tmp_path / "w"
    _first_run(workdir)
    fresh = run_train("--config", "configs/digits.yaml", "--workdir", str(workdir), *QUICK, *CHANGED, "--fresh")
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    previous = os.listdir(workdir / "previous")
    assert len(previous) == 1 and f"the previous run in {workdir} moved to {workdir}/previous/" in fresh.stdout
    moved = workdir / "previous" / previous[0]
    assert sorted(os.listdir(moved / "checkpoints")) == ["epoch-0001"]
    assert "learning_rate: 0.05" in (moved / "config.yaml").read_text()  # the old run's config went with it
    assert "starting fresh" in fresh.stdout
    assert sorted(os.listdir(workdir / "checkpoints")) == ["epoch-0001"]  # the new run's own


def test_everything_the_run_writes_is_whole_after_its_process_ends(tmp_path):
    """The command line ends its process without the last garbage collection (``train._quick_teardown``):
    what the run wrote (TensorBoard's events, metrics.jsonl, the export) is whole when the process is gone."""
    from hvdkeras.common.workdir import read_metrics
    from tests.unit.helpers import tensorboard_scalars

    workdir = tmp_path / "w"
    proc = run_train("--config", "configs/digits.yaml", "--workdir", str(workdir), "--set", "trainer.epochs=2",
                     "--set", "trainer.steps_per_epoch=2", "--set", "trainer.verbose=0",
                     "--set", "trainer.tensorboard=true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for split in ("train", "validation"):
        scalars = tensorboard_scalars(workdir / "tensorboard" / split)
        assert sorted(scalars["epoch_loss"]) == [0, 1], (split, sorted(scalars))
    assert [r["epoch"] for r in read_metrics(str(workdir / "metrics.jsonl"))] == [1, 2]
    assert sorted(os.listdir(workdir / "export")) == ["model.keras", "saved_model"]


def _other_stack():
    """A pinned stack (stacks/<name>/constraints.txt) other than this interpreter's, and that stack's name."""
    from hvdkeras.common import stack
    from tests.unit.common.test_stack import _pinned

    return next((_pinned(name), name) for name in sorted(os.listdir(os.path.join(REPO, "stacks")))
                if _pinned(name) != stack.current())


def test_a_workdir_trained_on_the_other_stack_is_refused_in_one_line_before_training(tmp_path):
    """What `make train` leaves in runs/digits, met by the digits job on the other stack (which `make train
    STACK=...` now sends to its own workdir): one line naming both stacks and the ways out, also with
    --resume=force, since Keras 2's checkpoints do not load in Keras 3; nothing trained."""
    from hvdkeras import config as config_lib
    from hvdkeras.common import stack
    from hvdkeras.common.workdir import save_config

    other, _ = _other_stack()
    workdir = tmp_path / "digits"
    (workdir / "checkpoints" / "epoch-0015").mkdir(parents=True)
    save_config(config_lib.load("configs/digits.yaml", []), str(workdir / "config.yaml"),
                footer=["Resolved for this job (2 ranks), not config keys:", f"  {other.line()}"])
    here = stack.current()
    for force in ((), ("--resume=force",)):
        proc = run_train("--config", "configs/digits.yaml", "--workdir", str(workdir), *force)
        assert proc.returncode == 2
        (line,) = error_lines(proc)
        assert line.startswith(f"hvdkeras: error: --workdir {workdir} holds checkpoints trained on another stack"
                               f" ({other.describe()}; this is {here.describe()}): ")
        assert "pass another --workdir" in line and "--fresh to start over" in line
        assert f"--resume=force cannot help: Keras {other.keras_major}'s checkpoints do not load in Keras" in line
    assert sorted(os.listdir(workdir)) == ["checkpoints", "config.yaml"]  # nothing trained, the lock released


@once_per_make_test("a launcher's rank watched from the command line's start (no TensorFlow import)", 0.1,
                    stack="keras2")
def test_a_rank_whose_launcher_goes_while_it_starts_leaves_before_tensorflow_is_imported(tmp_path):
    """A Slurm soak left a rank behind: its launcher was gone (rank 0 killed, the ssh session ended) while the rank
    imported TensorFlow, and it watched its launcher only from Horovod's init on, 10 s and more later on a busy
    machine. The command line now watches from the start: the rank leaves as preempted, status 75, before
    TensorFlow's import is done (its site module is patched here to take 120 s), its line in its workdir's logs."""
    slow = tmp_path / "slow_site"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(
        "import builtins, time\n"
        "_real = builtins.__import__\n"
        "def _slow(name, *args, **kwargs):\n"
        "    if name == 'tensorflow' or name.startswith('tensorflow.'):\n"
        "        time.sleep(120)\n"
        "    return _real(name, *args, **kwargs)\n"
        "builtins.__import__ = _slow\n")
    workdir = tmp_path / "w"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", HOROVOD_RANK="1", HOROVOD_SIZE="2",
               PYTHONPATH=os.pathsep.join([str(slow), REPO]))
    proc = subprocess.Popen([sys.executable, "-m", "hvdkeras.train", "--config", "configs/digits.yaml", "--workdir",
                             str(workdir)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        import time

        time.sleep(2)  # the command line has parsed its flags and watches its launcher
        proc.stdout.close()  # the launcher goes: its end of the rank's output closes
        proc.stderr.close()
        assert proc.wait(timeout=60) == 75
    finally:
        proc.kill()
        proc.wait()
    (log,) = os.listdir(workdir / "logs")
    text = (workdir / "logs" / log).read_text()
    assert "preempted (SIGTERM) outside training's preemption checks" in text, text[-2000:]


@once_per_make_test("the command line's SIGTERM during start-up (a TensorFlow import)", 0.2, stack="keras3")
def test_a_sigterm_during_start_up_ends_the_rank_as_a_preemption_with_nothing_to_save(tmp_path):
    """A SIGTERM after the process's setup, before fit (here while the model is built), exits with the
    preemption's status and one line, not 143; nothing is written to resume from."""
    (tmp_path / "sigterm_in_build.py").write_text(
        "import os, signal\n"
        "import tensorflow as tf\n\n\n"
        "def model():\n"
        "    os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler would, while the model is being built\n"
        "    return tf.keras.Sequential([tf.keras.Input((8, 8, 1)), tf.keras.layers.Flatten(),"
        " tf.keras.layers.Dense(10, activation='softmax')])\n")
    config = write_yaml(tmp_path, "data: {name: digits, global_batch_size: 64}\n"
                                  "model: {name: 'sigterm_in_build:model'}\n"
                                  "trainer: {epochs: 1, verbose: 0, export: false}\n")
    proc = run_train("--config", config, "--workdir", str(tmp_path / "w"))
    assert proc.returncode == 75, (proc.returncode, proc.stderr[-2000:])
    assert error_lines(proc) == ["hvdkeras: preempted (SIGTERM) outside training's preemption checks (during"
                                 " start-up, or without checkpoint.preemption): nothing to save; rerun the same"
                                 " command to resume from the last checkpoint, if any"]
    assert not os.path.exists(tmp_path / "w" / "checkpoints") or not os.listdir(tmp_path / "w" / "checkpoints")


def test_horovod_ops_that_do_not_load_are_one_line_naming_the_rebuild(tmp_path):
    # A Horovod whose TensorFlow ops were built for another TensorFlow (or not at all), as a TensorFlow upgrade leaves
    # it: Horovod's own package with its ops' import failing the way Horovod's check_extension fails.
    ops = tmp_path / "site" / "horovod" / "tensorflow"
    ops.mkdir(parents=True)
    (ops.parent / "__init__.py").write_text('__version__ = "0.28.1"\n')
    (ops / "__init__.py").write_text(
        "raise ImportError('Extension horovod.tensorflow has not been built: /v/horovod/tensorflow/"
        "mpi_lib.cpython-311-x86_64-linux-gnu.so not found\\nIf this is not expected, reinstall Horovod with"
        " HOROVOD_WITH_TENSORFLOW=1 to debug the build error.')\n")
    proc = subprocess.run([sys.executable, "-m", "hvdkeras.train", "--config", "configs/digits.yaml", "--workdir",
                           str(tmp_path / "w")], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(tmp_path / "site")))
    assert proc.returncode == 2, proc.stderr
    line, = error_lines(proc)
    assert line.startswith("hvdkeras: error: Horovod's TensorFlow ops do not load in TensorFlow ")
    assert line.endswith("rebuild them: python -m hvdkeras.build_horovod --rebuild in this environment"
                         " (docs/troubleshooting.md#horovods-tensorflow-ops-do-not-load)")
