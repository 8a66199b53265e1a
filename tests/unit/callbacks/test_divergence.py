"""The divergence guard in one process: the fingerprint, the one-line stop, once per step, local variables left out,
and the checkpoint writers that compare before they write. Two ranks are faked: this process is rank 0, and
rank 1's fingerprints are this rank's, changed where a test says."""
import os

import numpy as np
import pytest
import tensorflow as tf

from hvdkeras import callbacks as hc
from hvdkeras.callbacks import divergence
from hvdkeras.common.errors import DivergenceError
from hvdkeras.runtime import compat, distributed
from tests.unit.helpers import attach, callback_names, config_file, hand_built_trainer, small_bn_model, xy


@pytest.fixture
def two_ranks(hvd_single, monkeypatch):
    """Rank 0 of two. ``ranks.differ = i``: rank 1's fingerprint of compared variable ``i`` differs;
    ``ranks.calls``: the names of the allgathers run."""

    class Ranks:
        differ = None
        calls = []

    def allgather(values, name):
        Ranks.calls.append(name)
        other = np.array(values, dtype=np.float64)
        if Ranks.differ is not None:
            other[2 * Ranks.differ + 1] += 1.0
        return np.vstack([values, other])

    monkeypatch.setattr(distributed, "size", lambda: 2)
    monkeypatch.setattr(distributed, "allgather_array", allgather)
    return Ranks


def trained_model():
    model = small_bn_model()
    model.fit(*xy(16, 0), batch_size=8, epochs=1, verbose=0)  # slots built, a few steps taken
    return model


# --------------------------------------------------------------------------- the fingerprint


def test_the_fingerprint_sees_a_change_of_one_value_by_its_last_bit():
    kernel = tf.Variable(np.random.RandomState(0).randn(16, 12).astype("float32"))
    tiny = tf.Variable(np.array([1.0, 1e-30, 0.0], dtype="float32"))
    fingerprint = divergence.Fingerprint([kernel, tiny])
    before = fingerprint()
    assert before.shape == (2, 2)
    np.testing.assert_array_equal(before, divergence.Fingerprint([kernel, tiny])())  # the same weights, the same
    for variable, index in ((kernel, (3, 5)), (tiny, (1,)), (tiny, (2,))):  # a small value, and zero
        values = variable.numpy()
        changed = values.copy()
        changed[index] = np.nextafter(changed[index], np.float32(1))
        variable.assign(changed)
        after = fingerprint()
        which = 0 if variable is kernel else 1
        assert after[which, 0] != before[which, 0] and after[which, 1] != before[which, 1]
        np.testing.assert_array_equal(after[1 - which], before[1 - which])
        variable.assign(values)
    np.testing.assert_array_equal(fingerprint(), before)


def test_values_swapped_between_blocks_change_the_position_weighted_sum():
    values = np.arange(4096, dtype="float32")
    variable = tf.Variable(values)
    before = divergence.Fingerprint([variable])()
    swapped = values.copy()
    swapped[[0, 3000]] = swapped[[3000, 0]]  # the same values in other blocks of 1024: the plain sum cannot tell
    variable.assign(swapped)
    after = divergence.Fingerprint([variable])()
    assert after[0, 0] == before[0, 0] and after[0, 1] != before[0, 1]


@pytest.mark.parametrize("dtype", ["float64", "float16", "int32"])
def test_other_dtypes_are_fingerprinted_by_their_bits(dtype):
    values = np.linspace(-2, 2, 10).astype(dtype)
    variable = tf.Variable(values)
    before = divergence.Fingerprint([variable])()
    changed = values.copy()
    changed[4] = changed[4] + 1 if dtype == "int32" else np.nextafter(changed[4], changed.dtype.type(3))
    variable.assign(changed)
    assert divergence.Fingerprint([variable])()[0, 0] != before[0, 0]


# --------------------------------------------------------------------------- the check


def test_ranks_that_differ_stop_with_one_line_naming_the_first_differing_variable(two_ranks):
    model = trained_model()
    two_ranks.differ = 2
    guard = attach(hc.DivergenceGuard(), model)
    guard.on_train_begin()
    with pytest.raises(DivergenceError) as err:
        guard.on_epoch_end(1)
    message = str(err.value)
    name = divergence.variable_name(model.trainable_variables[2])
    step = int(model.optimizer.iterations.numpy())
    assert "\n" not in message
    assert message.startswith(f"trainable weights differ between ranks at the end of epoch 2 (step {step}): {name}"
                              f" is the first of 1 differing variables (rank 1 differs from rank 0); the ranks are"
                              f" training apart, likely because of a custom train_step whose apply_gradients"
                              f" bypasses the distributed optimizer (Keras 2), an optimizer not wrapped in"
                              f" DistributedOptimizer,")
    assert message.endswith("(to turn this check off: trainer.check_divergence=false, or check_divergence=False in"
                            " the callbacks)")


def test_equal_ranks_pass_and_each_step_is_compared_once(two_ranks, tmp_path):
    model = trained_model()
    guard = attach(hc.DivergenceGuard(), model)
    broadcast = attach(hc.BroadcastGlobalVariablesCallback(0), model)
    checkpoint = attach(hc.ModelCheckpoint(str(tmp_path / "w.weights.h5"), save_weights_only=True), model)
    for cb in (guard, broadcast, checkpoint):
        cb.on_train_begin()
    for cb in (guard, broadcast, checkpoint):
        cb.on_epoch_end(0, {})
    assert len(two_ranks.calls) == 1 and os.path.exists(tmp_path / "w.weights.h5")
    model.train_on_batch(*xy(8, 1))  # a step: the next epoch end compares again
    broadcast.on_epoch_end(1, {})
    guard.on_epoch_end(1, {})
    assert len(two_ranks.calls) == 2 and two_ranks.calls[0] != two_ranks.calls[1]  # alternating names
    divergence.start(model)  # a new fit forgets the last check
    guard.on_epoch_end(1, {})
    assert len(two_ranks.calls) == 3


def test_one_process_compares_nothing(hvd_single, monkeypatch):
    monkeypatch.setattr(distributed, "allgather_array", lambda *a, **k: pytest.fail("no collective in one process"))
    model = trained_model()
    assert divergence.check(model, "at the end of epoch 1")  # nothing to compare with: passes


def test_broadcast_callback_compares_at_epoch_end_unless_told_not_to(two_ranks):
    from hvdkeras.keras import callbacks as horovod_callbacks  # the path of `import hvdkeras.keras as hvd`

    model = trained_model()
    two_ranks.differ = 0
    quiet = attach(horovod_callbacks.BroadcastGlobalVariablesCallback(0, check_divergence=False), model)
    quiet.on_epoch_end(0)
    assert two_ranks.calls == []
    with pytest.raises(DivergenceError, match="at the end of epoch 1 "):
        attach(horovod_callbacks.BroadcastGlobalVariablesCallback(0), model).on_epoch_end(0)


def test_local_variables_are_left_out(two_ranks):
    from hvdkeras import PartialDistributedOptimizer
    from hvdkeras.runtime.compat import keras

    keras.utils.set_random_seed(0)
    local = keras.layers.Dense(5)
    own = keras.layers.Dense(4)
    model = keras.Sequential([keras.Input((4,)), local, own, keras.layers.Dense(3)])
    model.compile(PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=[local]), "mse")
    model.fit(*xy(8, 0)[:1], np.zeros((8, 3), "float32"), verbose=0)  # Keras 2 registers the local layer here
    keys = lambda variables: {compat.variable_key(v) for v in variables}  # noqa: E731
    compared = keys(divergence.compared_variables(model))
    assert not compared & keys(local.trainable_weights) and keys(own.trainable_weights) <= compared
    broadcast = attach(hc.BroadcastGlobalVariablesCallback(0, local_variables=own.kernel), model)
    broadcast.on_train_begin()
    guard = attach(hc.DivergenceGuard(local_variables=[own.bias]), model)
    guard.on_train_begin()
    compared = keys(divergence.compared_variables(model))
    assert compared == keys(model.layers[-1].trainable_weights)
    two_ranks.differ = 0
    with pytest.raises(DivergenceError, match=f"{divergence.variable_name(model.layers[-1].kernel)} is the first"):
        guard.on_epoch_end(0)


# --------------------------------------------------------------------------- the writers


def test_checkpoint_writers_compare_before_they_write_and_keep_what_was_written(two_ranks, tmp_path):
    model = trained_model()
    backup = attach(hc.BackupAndRestore(str(tmp_path / "backup"), keep=3), model, epochs=3)
    backup.on_train_begin()
    backup.on_epoch_end(0, {})  # equal: written
    assert sorted(os.listdir(tmp_path / "backup")) == ["epoch-0001"]
    model.train_on_batch(*xy(8, 1))
    two_ranks.differ = 1
    with pytest.raises(DivergenceError, match="at the end of epoch 2, before its checkpoint"):
        backup.on_epoch_end(1, {})
    assert sorted(os.listdir(tmp_path / "backup")) == ["epoch-0001"]  # nothing of the differing weights

    best = attach(hc.ModelCheckpoint(str(tmp_path / "best.keras"), save_best_only=True), model)
    with pytest.raises(DivergenceError, match="at the end of epoch 2, before the checkpoint"):
        best.on_epoch_end(1, {"val_loss": 0.5})
    every = attach(hc.ModelCheckpoint(str(tmp_path / "b{batch}.weights.h5"), save_weights_only=True, save_freq=2),
                   model)
    every.on_train_batch_end(0)
    with pytest.raises(DivergenceError, match="at epoch 1, batch 2, before the checkpoint"):
        every.on_train_batch_end(1)
    assert sorted(os.listdir(tmp_path)) == ["backup"]

    calls = len(two_ranks.calls)
    off = attach(hc.ModelCheckpoint(str(tmp_path / "off.weights.h5"), save_weights_only=True,
                                    check_divergence=False), model)
    off.on_epoch_end(1, {})
    assert os.path.exists(tmp_path / "off.weights.h5") and len(two_ranks.calls) == calls


def test_the_preemption_checkpoint_is_not_written_from_weights_that_differ(two_ranks, tmp_path):
    model = trained_model()
    backup = attach(hc.BackupAndRestore(str(tmp_path), preemption=True), model, epochs=3)
    backup.on_train_begin()
    two_ranks.differ = 0
    with pytest.raises(DivergenceError, match="at epoch 1, batch 3, before the preemption checkpoint"):
        backup._preempt(0, 3, {})
    assert os.listdir(tmp_path) == []
    backup.signal_flag.uninstall()


# --------------------------------------------------------------------------- where it is on


def test_default_callbacks_and_the_trainer_turn_it_on_and_off(hvd_single, tmp_path):
    from hvdkeras import config as config_lib
    from hvdkeras.training import assembly

    on = hc.default_callbacks(backup=str(tmp_path))
    assert callback_names(on)[:3] == ["BroadcastGlobalVariablesCallback", "DivergenceGuard",
                                      "AverageModelStatisticsCallback"]
    assert not on[0].check_divergence and on[-1].check_divergence  # the guard compares; the backup before saving
    off = hc.default_callbacks(backup=str(tmp_path), check_divergence=False)
    assert "DivergenceGuard" not in callback_names(off) and not off[-1].check_divergence

    for value, guarded in (("true", True), ("false", False)):
        cfg = config_lib.load(config_file("digits.yaml"), [f"trainer.check_divergence={value}"])
        backup = assembly.make_backup(cfg, str(tmp_path))
        names = callback_names(hand_built_trainer(cfg, str(tmp_path), size=2, backup=backup).callbacks(0.1, 3, 2))
        assert ("DivergenceGuard" in names) is guarded and backup.check_divergence is guarded
    assert not os.listdir(tmp_path)
