"""hvdkeras.common.workdir_guard: one job per workdir, the training its checkpoints hold, starting over."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import yaml

from hvdkeras import config as config_lib
from hvdkeras.common import workdir_guard
from hvdkeras.common.errors import ConfigError, SetupError
from hvdkeras.common.stack import Stack
from hvdkeras.common.workdir import save_config
from tests.unit.helpers import REPO, config_file

HOLD = textwrap.dedent("""
    import sys, time
    from hvdkeras.common import workdir_guard
    workdir_guard.claim(sys.argv[1])
    print("held", flush=True)
    time.sleep(120)
""")


@pytest.fixture
def holder(tmp_path):
    """Another process holding ``tmp_path/w``: (its Popen, the workdir)."""
    workdir = tmp_path / "w"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(workdir)], cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.stdout.readline().strip() == "held"
    yield proc, workdir
    proc.kill()
    proc.wait()


def test_a_second_claim_names_the_holder_and_the_kernel_frees_the_lock_when_it_dies(holder):
    proc, workdir = holder
    with pytest.raises(SetupError) as err:
        workdir_guard.claim(str(workdir))
    message = str(err.value)
    assert message.startswith(f"--workdir {workdir} is in use by another job (host ")
    assert f", pid {proc.pid}, started 20" in message and message.endswith(
        "): wait for it to end, stop it, or pass another --workdir")
    proc.send_signal(signal.SIGKILL)  # no clean-up at all: the lock file stays, the lock does not
    proc.wait()
    assert (workdir / workdir_guard.LOCK_FILE).exists()
    mine = workdir_guard.claim(str(workdir))
    assert mine.held and f"pid {os.getpid()}" in (workdir / workdir_guard.LOCK_FILE).read_text()
    mine.release()
    assert not (workdir / workdir_guard.LOCK_FILE).exists()


def test_a_process_of_the_holding_job_gets_a_claim_that_holds_nothing(holder, monkeypatch):
    _, workdir = holder
    monkeypatch.setenv("HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.0.0.1")
    monkeypatch.setenv("HOROVOD_GLOO_RENDEZVOUS_PORT", "1234")
    with pytest.raises(SetupError, match=r"in use by another job \(host "):  # the holder says no job: another
        workdir_guard.claim(str(workdir))
    (workdir / workdir_guard.LOCK_FILE).write_text("job horovodrun 10.0.0.1:1234, host h, pid 1, started now\n")
    assert not workdir_guard.claim(str(workdir)).held  # an elastic worker added later, as rank 0


def test_a_claim_that_created_the_workdir_leaves_nothing_if_nothing_was_written(tmp_path):
    workdir_guard.claim(str(tmp_path / "new")).release()
    assert not (tmp_path / "new").exists()


KERAS2 = Stack("2.15.1", "2.15.0", "0.28.1")
KERAS3 = Stack("2.21.0", "3.15.1", "0.28.1")


def _trained(tmp_path, *sets, stack=None):
    """A workdir whose config.yaml records the digits job with ``sets`` (trained on ``stack``, when given, as
    the trainer records it) and which holds a checkpoint."""
    workdir = tmp_path / "run"
    (workdir / "checkpoints" / "epoch-0001").mkdir(parents=True)
    footer = ["Resolved for this job (2 ranks), not config keys:", "  global batch 64 = 2 ranks x 32"]
    save_config(config_lib.load(config_file("digits.yaml"), list(sets)), str(workdir / "config.yaml"),
                footer=footer + ([f"  {stack.line()}"] if stack else []))
    return workdir


def test_a_changed_training_is_refused_with_the_keys_and_the_way_out(tmp_path):
    workdir = _trained(tmp_path)
    changed = config_lib.load(config_file("digits.yaml"), ["optimizer.learning_rate=0.07", "model.dropout=0",
                                                           "data.global_batch_size=32"])
    assert workdir_guard.changed_training(str(workdir), changed) == [
        "data.global_batch_size: 64 -> 32", "model.dropout: 0.25 -> 0.0", "optimizer.learning_rate: 0.05 -> 0.07"]
    with pytest.raises(ConfigError) as err:
        workdir_guard.check_same_training(str(workdir), changed)
    assert str(err.value) == (
        f"--workdir {workdir} holds checkpoints trained with another config (data.global_batch_size: 64 -> 32;"
        " model.dropout: 0.25 -> 0.0; optimizer.learning_rate: 0.05 -> 0.07): rerun with the config it was started"
        f" with ({workdir}/config.yaml), pass --fresh to start over (the old run moves to {workdir}/previous/), or"
        " --resume=force to continue from its weights anyway")


def test_a_workdir_trained_on_keras_2_is_refused_on_keras_3_naming_both_stacks_and_the_ways_out(tmp_path):
    workdir = _trained(tmp_path, stack=KERAS2)
    cfg = config_lib.load(config_file("digits.yaml"), [])
    assert workdir_guard.trained_stack(str(workdir)) == KERAS2
    workdir_guard.check_same_training(str(workdir), cfg, running=KERAS2)  # the same stack: resumes
    with pytest.raises(ConfigError) as err:
        workdir_guard.check_same_training(str(workdir), cfg, running=KERAS3)
    assert str(err.value) == (
        f"--workdir {workdir} holds checkpoints trained on another stack (TensorFlow 2.15.1, Keras 2.15.0, Horovod"
        " 0.28.1; this is TensorFlow 2.21.0, Keras 3.15.1, Horovod 0.28.1): pass another --workdir or --fresh to"
        f" start over (the old run moves to {workdir}/previous/); --resume=force cannot help: Keras 2's checkpoints"
        " do not load in Keras 3")
    with pytest.raises(ConfigError) as err:  # and --resume=force says so before any checkpoint is read
        workdir_guard.forced_changes(str(workdir), cfg, running=KERAS3)
    assert str(err.value) == (
        f"--workdir {workdir} holds checkpoints trained on another stack (TensorFlow 2.15.1, Keras 2.15.0, Horovod"
        " 0.28.1; this is TensorFlow 2.21.0, Keras 3.15.1, Horovod 0.28.1): --resume=force cannot help: Keras 2's"
        f" checkpoints do not load in Keras 3; pass another --workdir or --fresh to start over (the old run moves"
        f" to {workdir}/previous/)")
    with pytest.raises(ConfigError, match=r"evaluate on the stack that trained it \(TensorFlow 2.15.1, "):
        workdir_guard.check_same_training(str(workdir), cfg, training=False, running=KERAS3)


def test_another_stack_of_the_same_keras_may_be_forced_and_a_changed_config_is_named_too(tmp_path):
    workdir = _trained(tmp_path, stack=KERAS3)
    other = Stack("2.16.2", "3.15.1", "0.28.1")
    cfg = config_lib.load(config_file("digits.yaml"), ["optimizer.learning_rate=0.07"])
    with pytest.raises(ConfigError) as err:
        workdir_guard.check_same_training(str(workdir), cfg, running=other)
    assert str(err.value) == (
        f"--workdir {workdir} holds checkpoints trained with another config (optimizer.learning_rate: 0.05 -> 0.07)"
        " on another stack (TensorFlow 2.21.0, Keras 3.15.1, Horovod 0.28.1; this is TensorFlow 2.16.2, Keras"
        f" 3.15.1, Horovod 0.28.1): pass another --workdir, --fresh to start over (the old run moves to"
        f" {workdir}/previous/), or --resume=force to continue from its weights anyway")
    assert workdir_guard.forced_changes(str(workdir), cfg, running=other) == [
        "optimizer.learning_rate: 0.05 -> 0.07",
        "stack: TensorFlow 2.21.0, Keras 3.15.1, Horovod 0.28.1 -> TensorFlow 2.16.2, Keras 3.15.1, Horovod 0.28.1"]


def test_the_stack_counts_only_where_checkpoints_are_and_a_stack_recorded(tmp_path):
    cfg = config_lib.load(config_file("digits.yaml"), [])
    older = _trained(tmp_path)  # an older version's workdir: no stack recorded, nothing to compare
    assert workdir_guard.trained_stack(str(older)) is None
    workdir_guard.check_same_training(str(older), cfg, running=KERAS3)
    (older / "checkpoints" / "epoch-0001").rmdir()  # a run that never saved: nothing to resume
    save_config(cfg, str(older / "config.yaml"), footer=[KERAS2.line()])
    assert workdir_guard.trained_stack(str(older)) is None and workdir_guard.other_stack(str(older), KERAS3) is None
    workdir_guard.check_same_training(str(older), cfg, running=KERAS3)


def test_launcher_and_bookkeeping_keys_may_change(tmp_path):
    workdir = _trained(tmp_path)
    cfg = config_lib.load(config_file("digits.yaml"), [
        "trainer.epochs=30", "runtime.intra_op_threads=1", "checkpoint.keep=0", "horovod.compression=fp16",
        "trainer.verbose=0", "horovod.stall_warning_seconds=5", "data.prefetch=0"])
    workdir_guard.check_same_training(str(workdir), cfg)  # no error
    assert workdir_guard.changed_training(str(tmp_path / "nothing-here"), cfg) == []


def test_own_pieces_args_are_compared_whole(tmp_path):
    workdir = _trained(tmp_path, "model.name=own:model", "model.args.units=8")
    cfg = config_lib.load(config_file("digits.yaml"), ["model.name=own:model", "model.args.units=16"])
    assert workdir_guard.changed_training(str(workdir), cfg) == ["model.args: {'units': 8} -> {'units': 16}"]


def test_the_loss_by_output_and_its_weights_are_compared_whole(tmp_path):
    workdir = _trained(tmp_path, "trainer.loss=mse")
    cfg = config_lib.load(config_file("digits.yaml"), ["trainer.loss={buy: binary_crossentropy, price: mse}",
                                                       "trainer.loss_weights={price: 0.5}"])
    assert workdir_guard.changed_training(str(workdir), cfg) == [
        "trainer.loss: 'mse' -> {'buy': 'binary_crossentropy', 'price': 'mse'}",
        "trainer.loss_weights: None -> {'price': 0.5}"]


def test_start_over_moves_the_run_aside_and_deletes_nothing(tmp_path):
    workdir = _trained(tmp_path)
    (workdir / "metrics.jsonl").write_text('{"epoch": 1}\n')
    (workdir / "notes.txt").write_text("mine")
    moved = workdir_guard.start_over(str(workdir))
    assert os.path.dirname(moved) == str(workdir / "previous")
    assert sorted(os.listdir(moved)) == ["checkpoints", "config.yaml", "metrics.jsonl"]
    assert sorted(os.listdir(workdir)) == ["notes.txt", "previous"]
    assert yaml.safe_load(open(os.path.join(moved, "config.yaml")))["optimizer"]["learning_rate"] == 0.05
    assert workdir_guard.start_over(str(workdir)) is None  # nothing left to move


def test_a_job_that_locks_the_file_its_holder_just_removed_does_not_hold_the_workdir(tmp_path, monkeypatch):
    # The interleaving that let two jobs hold "the" lock: B opens the lock file; A, ending, removes it and unlocks;
    # C creates a new one and locks it; B then locks the removed one. B must find it is no longer the workdir's.
    workdir = str(tmp_path / "w")
    a = workdir_guard.claim(workdir)
    real_flock, hooked, found = workdir_guard.fcntl.flock, [], {}

    class Fcntl:
        LOCK_EX, LOCK_NB = workdir_guard.fcntl.LOCK_EX, workdir_guard.fcntl.LOCK_NB

        @staticmethod
        def flock(fd, op):
            if not hooked:  # B, between its open and its lock
                hooked.append(True)
                a.release()
                found["c"] = workdir_guard.claim(workdir)
            return real_flock(fd, op)

    monkeypatch.setattr(workdir_guard, "fcntl", Fcntl)
    with pytest.raises(SetupError, match=r"is in use by another job \(host .*, pid %d," % os.getpid()):
        workdir_guard.claim(workdir)  # B
    assert found["c"].held
    found["c"].release()


RACE = textwrap.dedent("""
    import os, sys
    from hvdkeras.common import workdir_guard
    from hvdkeras.common.errors import SetupError
    inside, clashes, held = os.path.join(sys.argv[1], "inside"), 0, 0
    for _ in range(int(sys.argv[2])):
        try:
            claim = workdir_guard.claim(os.path.join(sys.argv[1], "w"))
        except SetupError:
            continue
        held += 1
        try:
            os.close(os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            clashes += 1
        else:
            os.remove(inside)
        claim.release()
    print(held, clashes)
""")


def test_two_jobs_racing_for_a_workdir_never_hold_it_together(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", RACE, str(tmp_path), "200"], cwd=REPO, stdout=subprocess.PIPE,
                              text=True, env=dict(os.environ, PYTHONPATH=REPO)) for _ in range(3)]
    results = [tuple(map(int, p.communicate(timeout=120)[0].split())) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(held for held, _ in results) > 0 and [clashes for _, clashes in results] == [0, 0, 0], results


def test_a_symbolic_link_planted_in_the_workdir_is_refused_before_anything_is_written(tmp_path):
    workdir = tmp_path / "w"
    workdir.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    os.symlink(victim, workdir / "metrics.jsonl")
    with pytest.raises(SetupError, match=r"holds metrics.jsonl as a symbolic link, which the run would write through"):
        workdir_guard.claim(str(workdir))
    os.remove(workdir / "metrics.jsonl")
    os.symlink(victim, workdir / workdir_guard.LOCK_FILE)
    with pytest.raises(SetupError, match=r"holds .hvdkeras.lock as a symbolic link"):
        workdir_guard.claim(str(workdir))
    os.remove(workdir / workdir_guard.LOCK_FILE)
    for name in ("previous", "logs", "report.png"):  # --fresh's move, a rank's late output, the report
        os.symlink(tmp_path, workdir / name)
        with pytest.raises(SetupError, match=f"holds {name} as a symbolic link"):
            workdir_guard.claim(str(workdir))
        os.remove(workdir / name)
    assert victim.read_text() == "keep me\n"


def test_the_report_replaces_a_link_planted_at_its_png_and_never_writes_through_it(tmp_path):
    from hvdkeras import report

    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    os.symlink(victim, tmp_path / "report.png")
    report.plot_metrics([{"epoch": 1, "loss": 1.0}], str(tmp_path / "report.png"))
    assert victim.read_text() == "keep me\n" and not os.path.islink(tmp_path / "report.png")


def test_a_workdir_that_is_a_file_is_one_line(tmp_path):
    path = tmp_path / "w"
    path.write_text("not a folder")
    with pytest.raises(SetupError, match=r"^--workdir .*/w is a file, not a folder: pass another --workdir$"):
        workdir_guard.claim(str(path))


def test_a_workdir_removed_by_its_ending_job_as_it_is_claimed_is_made_again(tmp_path, monkeypatch):
    path = str(tmp_path / "w")
    real_open, gone = os.open, []

    def open_after_the_folder_went(name, *args, **kwargs):
        if name.endswith(workdir_guard.LOCK_FILE) and not gone:  # the other job's release: lock file, then folder
            gone.append(True)
            os.rmdir(path)
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(workdir_guard.os, "open", open_after_the_folder_went)
    claim = workdir_guard.claim(path)
    assert gone and claim.held and os.path.isfile(os.path.join(path, workdir_guard.LOCK_FILE))
    claim.release()


def test_check_resumable_refuses_a_changed_config_unless_fresh_or_forced(tmp_path):
    workdir = _trained(tmp_path)
    changed = config_lib.load(config_file("digits.yaml"), ["optimizer.learning_rate=0.07"])
    with pytest.raises(ConfigError, match=r"optimizer\.learning_rate"):
        workdir_guard.check_resumable(str(workdir), changed, fresh=False, resume="auto")
    workdir_guard.check_resumable(str(workdir), changed, fresh=True, resume="auto")  # moves the old run aside
    workdir_guard.check_resumable(str(workdir), changed, fresh=False, resume="force")  # takes its weights
    workdir_guard.check_resumable(str(tmp_path / "absent"), changed, fresh=False, resume="auto")  # nothing to resume
