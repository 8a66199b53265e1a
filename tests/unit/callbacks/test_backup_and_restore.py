"""BackupAndRestore in one process: what it writes, how often, and how fit continues from it."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from hvdkeras import callbacks as hc
from hvdkeras.runtime.compat import keras
from tests.unit.helpers import attach, epoch_recorder, model_and_data, small_bn_model, xy


def test_backup_writes_atomically_and_keeps_the_newest(hvd_single, tmp_path):
    model = small_bn_model()
    model.fit(*xy(8, 0), epochs=1, verbose=0)
    cb = attach(hc.BackupAndRestore(str(tmp_path), keep=2), model, epochs=4)
    cb.on_train_begin()
    for epoch in range(4):
        cb.on_epoch_end(epoch, {"loss": 1.0 / (epoch + 1)})
    assert sorted(os.listdir(tmp_path)) == ["epoch-0003", "epoch-0004"]
    meta = json.loads((tmp_path / "epoch-0004" / "meta.json").read_text())
    assert meta["epoch"] == 4 and meta["metrics"]["loss"] == 0.25 and meta["num_ranks"] == 1


def test_every_n_epochs_and_always_the_last(hvd_single, tmp_path):
    model = small_bn_model()
    cb = attach(hc.BackupAndRestore(str(tmp_path), every_epochs=2, keep=0), model, epochs=5)
    cb.on_train_begin()
    for epoch in range(5):
        cb.on_epoch_end(epoch, {})
    assert sorted(os.listdir(tmp_path)) == ["epoch-0002", "epoch-0004", "epoch-0005"]


def test_backup_and_restore_continues_fit_at_the_saved_epoch(hvd_single, tmp_path):
    model, x, y = model_and_data()
    seen = epoch_recorder()
    model.fit(x, y, epochs=2, batch_size=8, verbose=0,
              callbacks=[hc.BackupAndRestore(str(tmp_path), delete_checkpoint=False), seen])
    assert seen.epochs == [0, 1] and sorted(os.listdir(tmp_path)) == ["epoch-0002"]
    saved = [v.numpy() for v in model.variables]
    iterations = int(model.optimizer.iterations.numpy())

    fresh, _, _ = model_and_data(lr=0.3)
    fresh.layers[0].kernel.assign(tf.zeros_like(fresh.layers[0].kernel))
    seen = epoch_recorder()

    class AtStart(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.weights = [v.numpy() for v in self.model.variables]
            self.iterations = int(self.model.optimizer.iterations.numpy())

    at_start = AtStart()
    fresh.fit(x, y, epochs=4, batch_size=8, verbose=0,
              callbacks=[hc.BackupAndRestore(str(tmp_path)), at_start, seen])
    assert seen.epochs == [2, 3]
    assert all(np.array_equal(a, b) for a, b in zip(saved, at_start.weights))
    assert at_start.iterations == iterations
    assert not tmp_path.exists()  # delete_checkpoint=True after a finished fit

    again = epoch_recorder()  # no backup left: a new fit starts at 0
    fresh.fit(x, y, epochs=1, batch_size=8, verbose=0, callbacks=[hc.BackupAndRestore(str(tmp_path)), again])
    assert again.epochs == [0]


def test_backup_and_restore_rejects_what_it_cannot_do():
    with pytest.raises(ValueError, match=r"Received: save_freq=100"):
        hc.BackupAndRestore("/tmp/x", save_freq=100)
    with pytest.raises(ValueError, match="save_before_preemption=True"):
        hc.BackupAndRestore("/tmp/x", save_before_preemption=True)
    with pytest.raises(ValueError, match="every_epochs must be >= 1; received: every_epochs=0"):
        hc.BackupAndRestore("/tmp/x", every_epochs=0)


def test_preemption_writes_a_mid_epoch_checkpoint_at_the_batch_of_the_signal(hvd_single, tmp_path, capsys):
    import signal as signal_lib

    from hvdkeras.callbacks.preemption import Preempted

    model = small_bn_model()
    cb = attach(hc.BackupAndRestore(str(tmp_path), preemption=True, delete_checkpoint=False, keep=0), model, epochs=3,
                steps=10)
    cb.check_interval_s = 0  # compare flags at every batch
    before = signal_lib.getsignal(signal_lib.SIGTERM)
    cb.on_train_begin()
    assert cb._implements_train_batch_hooks()
    cb.on_epoch_begin(0)
    for batch in range(10):
        cb.on_train_batch_end(batch)
    cb.on_epoch_end(0, {})
    cb.on_epoch_begin(1)
    cb.on_train_batch_end(0)
    cb.on_train_batch_end(1)
    cb.on_train_batch_end(2)
    os.kill(os.getpid(), signal_lib.SIGTERM)  # during batch 4 of epoch 2: noted, not fatal
    with pytest.raises(Preempted) as caught:
        cb.on_train_batch_end(3)  # the agreed stop: after batch 4
    assert caught.value.code == 75
    path = str(tmp_path / "epoch-0001-batch-0004")
    assert str(caught.value) == f"preempted at epoch 2, batch 4; checkpoint written: {path}"
    assert f"hvdkeras: preempted at epoch 2, batch 4; checkpoint written: {path}" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["epoch-0001", "epoch-0001-batch-0004"]
    meta = json.loads((tmp_path / "epoch-0001-batch-0004" / "meta.json").read_text())
    assert meta["epoch"] == 1 and meta["batch"] == 4 and meta["preempted"] and meta["signal"] == signal_lib.SIGTERM
    cb.signal_flag.uninstall()
    assert signal_lib.getsignal(signal_lib.SIGTERM) == before

    # the next fit learns the position; the trainer continues there with continue_at(epoch, batch)
    again = attach(hc.BackupAndRestore(str(tmp_path), preemption=True), small_bn_model(), epochs=3, steps=10)
    again.restore()
    assert again.restored.position == (1, 4)


def _one_batch(seed):
    """An iterator of one batch of two examples, for a train function."""
    return iter(tf.data.Dataset.from_tensors(xy(2, seed)))


def test_after_a_failed_collective_with_a_sigterm_pending_rank_0_saves_its_last_whole_batch_alone(
        hvd_single, tmp_path, capsys):
    import signal as signal_lib

    model = small_bn_model()
    cb = attach(hc.BackupAndRestore(str(tmp_path), preemption=True, delete_checkpoint=False, keep=0), model, epochs=3,
                steps=10)
    cb.check_interval_s = 3600  # no agreement in this test: the collective that would hold it has failed
    model.make_train_function()  # as fit does before on_train_begin
    cb.on_train_begin()
    step = model.train_function  # counts its returns into the position (compat.count_steps)
    cb.on_epoch_begin(0)
    for batch in range(3):
        step(_one_batch(batch))
        cb.on_train_batch_end(batch)
    assert cb.save_alone() is None  # no signal: a failure stays a failure, nothing written
    try:
        os.kill(os.getpid(), signal_lib.SIGTERM)  # noted; then a collective fails:
        step(_one_batch(3))  # after batch 4's step, in a callback before this one (the NaN check)
        info = cb.save_alone()
        assert info.position == (0, 4) and sorted(os.listdir(tmp_path)) == ["epoch-0000-batch-0004"]
        meta = json.loads((tmp_path / "epoch-0000-batch-0004" / "meta.json").read_text())
        assert meta["alone"] and meta["preempted"] and meta["batch"] == 4
        assert cb.position.resume_point() == "epoch 0, batch 4 of epoch 1"  # what the failure's line names
        assert f"rank 0 wrote the checkpoint of epoch 1, batch 4 alone: {info.path}" in capsys.readouterr().out
        for batch in range(4, 10):
            step(_one_batch(batch))
        assert cb.save_alone() is None  # after an epoch's last batch its validation may have been under way
        cb.on_epoch_end(0, {})
        cb.on_epoch_begin(1)
        assert cb.save_alone() is None  # no batch of the epoch yet: the epoch's checkpoint is the last batch
        step(_one_batch(0))
        model.steps_per_execution = 4  # Keras 3's attribute (Keras 2 reads a variable of its own)
        model._steps_per_execution = tf.Variable(4)
        assert cb.save_alone() is None  # the variables may be ahead of the batches counted
    finally:
        cb.signal_flag.uninstall()
    cb.on_train_end()
    assert model.train_function is not step and not hasattr(model.train_function, "_hvdkeras_counted")


def test_a_fit_sees_a_sigterm_that_came_before_it_on_the_process_flag_and_releases_it_after(hvd_single, tmp_path):
    # The trainer's process notes SIGTERM from its setup on (hvdkeras.common.signals); the callback takes
    # that flag over for the fit instead of installing a fresh one that would miss the earlier signal.
    import signal as signal_lib

    from hvdkeras.callbacks.preemption import Preempted
    from hvdkeras.common import signals

    flag = signals.install_process_flag()
    with pytest.raises(Preempted):  # during start-up: ends the rank (say something swallowed it, and fit began)
        os.kill(os.getpid(), signal_lib.SIGTERM)
    cb = attach(hc.BackupAndRestore(str(tmp_path), preemption=True, delete_checkpoint=False), small_bn_model(),
                epochs=3, steps=10)
    cb.check_interval_s = 0
    cb.continue_at(0)
    cb.on_train_begin()
    assert cb.signal_flag is flag and flag.watched
    cb.on_epoch_begin(0)
    with pytest.raises(Preempted, match="^preempted at epoch 1, batch 1; checkpoint written: .*epoch-0000-batch-0001$"):
        cb.on_train_batch_end(0)  # the first check
    # A fit that ends normally hands the flag back: a SIGTERM after it ends the rank at once again.
    other = attach(hc.BackupAndRestore(str(tmp_path / "b"), preemption=True), small_bn_model(), epochs=1, steps=2)
    signals.install_process_flag()
    other.continue_at(0)
    other.on_train_begin()
    assert other.signal_flag.watched
    other.on_train_end()
    assert not other.signal_flag.watched
    with pytest.raises(Preempted, match="nothing to save"):
        os.kill(os.getpid(), signal_lib.SIGTERM)


def test_preemption_on_an_epochs_last_batch_lets_the_epoch_end_then_leaves(hvd_single, tmp_path):
    from hvdkeras.callbacks.preemption import Preempted

    cb = attach(hc.BackupAndRestore(str(tmp_path), preemption=True, every_epochs=5), small_bn_model(), epochs=3,
                steps=4)
    cb.continue_at(1, 2)  # a fit over the last 2 of the 4 batches of epoch 2
    cb.set_params({"epochs": 2, "steps": 2, "verbose": 0})
    cb.check_interval_s = 0
    cb.on_train_begin()
    cb.on_epoch_begin(1)
    cb.on_train_batch_end(0)  # batch 3 of epoch 2
    cb.signal_flag._handle(15, None)
    cb.on_train_batch_end(1)  # batch 4, the epoch's last: validation and on_epoch_end still to come
    assert cb.model.stop_training and os.listdir(tmp_path) == []
    cb.on_epoch_end(1, {"val_loss": 0.5})  # written although every_epochs=5; the epoch's metrics with it
    meta = json.loads((tmp_path / "epoch-0002" / "meta.json").read_text())
    assert meta["preempted"] and meta["metrics"] == {"val_loss": 0.5} and meta["batch"] == 0
    with pytest.raises(Preempted, match="preempted at the end of epoch 2; checkpoint written: .*epoch-0002$"):
        cb.on_train_end()  # after every callback's on_epoch_end: fit stopped
    assert (tmp_path / "epoch-0002").exists()  # a preempted fit keeps its backup
    cb.signal_flag.uninstall()


def test_save_errors_stop_or_warn_as_configured(hvd_single, tmp_path, capsys):
    from hvdkeras.common.errors import CheckpointError

    (tmp_path / "ckpt").write_text("a file where the folder should be")
    for mode in ("stop", "continue"):
        cb = attach(hc.BackupAndRestore(str(tmp_path / "ckpt"), on_save_error=mode), small_bn_model(), epochs=2)
        cb.continue_at(0)
        cb.on_train_begin()
        if mode == "stop":
            with pytest.raises(CheckpointError, match="cannot write checkpoint epoch 1"):
                cb.on_epoch_end(0, {})
        else:
            cb.on_epoch_end(0, {})
            assert "training continues (checkpoint.on_save_error=continue)" in capsys.readouterr().err
    with pytest.raises(ValueError, match="Received: on_save_error='ignore'|received: on_save_error='ignore'"):
        hc.BackupAndRestore(str(tmp_path), on_save_error="ignore")


@pytest.mark.parametrize("chief", [True, False])
def test_after_a_preemption_only_the_other_ranks_wait_to_leave(hvd_single, tmp_path, monkeypatch, chief):
    # Rank 0 leaves first: a launcher stops the job when its first rank exits (the trainer's wait is for rank 0's
    # process to be gone; alone in a model.fit it is EXIT_STAGGER_S).
    from hvdkeras.runtime import distributed

    cb = attach(hc.BackupAndRestore(str(tmp_path), preemption=True), small_bn_model(), epochs=3, steps=10)
    cb.on_train_begin()
    waits = []
    cb.leave_after(lambda stop: waits.append(stop()))
    monkeypatch.setattr(distributed, "is_chief", lambda: chief)
    cb._preempt(1, 4, {})
    assert waits == ([] if chief else [False])  # no further SIGTERM since the wait began
    cb.signal_flag.uninstall()


def test_a_backup_refuses_a_position_that_keeps_its_checkpoints_elsewhere(tmp_path):
    from hvdkeras.runtime.position import RunPosition

    with pytest.raises(ValueError, match=r"received: backup_dir='.*', a position whose store is None"):
        hc.BackupAndRestore(str(tmp_path), position=RunPosition())
