"""BroadcastGlobalVariablesCallback in one process: optimizer slots exist and are broadcast before step one."""
from hvdkeras.callbacks import BroadcastGlobalVariablesCallback
from hvdkeras.runtime import compat
from tests.unit.helpers import attach, small_bn_model


def test_broadcast_builds_optimizer_slots_before_the_first_step(hvd_single):
    model = small_bn_model()
    assert not compat.momentum_buffers(model.optimizer)
    before = len(model.optimizer.variables)
    cb = attach(BroadcastGlobalVariablesCallback(0), model)
    cb.on_train_begin()
    # one momentum slot per trainable variable exists (and was broadcast) before step one
    slots = compat.momentum_buffers(model.optimizer)
    assert [tuple(s.shape) for s in slots] == [tuple(v.shape) for v in model.trainable_variables]
    assert len(model.optimizer.variables) >= before + len(slots)
    assert int(model.optimizer.iterations.numpy()) == 0


def _recorded_broadcasts(monkeypatch):
    from hvdkeras.runtime import distributed

    sent = []
    monkeypatch.setattr(distributed, "broadcast_variables", lambda variables, root_rank=0: sent.append(list(variables)))
    return sent


def test_a_model_without_weights_is_broadcast_after_its_first_step_not_before(hvd_single, monkeypatch):
    keras = compat.keras
    model = keras.Sequential([keras.layers.Dense(3)])  # no Input: the first step creates the weights
    model.compile(keras.optimizers.Adam(0.1), "mse")
    sent = _recorded_broadcasts(monkeypatch)
    cb = attach(BroadcastGlobalVariablesCallback(0), model)
    cb.on_train_begin()
    assert sent == [] and not compat.optimizer_built(model.optimizer)  # nothing built on an empty variable list
    model.train_on_batch(compat.tf.ones((2, 4)), compat.tf.ones((2, 3)))
    cb.on_train_batch_end(0)
    assert [len(s) for s in sent] == [2, len(compat.optimizer_variables(model.optimizer))]
    cb.on_train_batch_end(1)
    assert len(sent) == 2  # once


def test_local_variables_are_not_broadcast(hvd_single, monkeypatch):
    model = small_bn_model()
    local = model.trainable_variables[0]
    sent = _recorded_broadcasts(monkeypatch)
    cb = attach(BroadcastGlobalVariablesCallback(0, local_variables=local), model)
    cb.register_local_var(model.trainable_variables[1])
    cb.on_train_begin()
    keys = {compat.variable_key(v) for s in sent for v in s}
    assert compat.variable_key(local) not in keys and compat.variable_key(model.trainable_variables[1]) not in keys
    assert compat.variable_key(model.trainable_variables[2]) in keys


def test_a_local_variable_must_be_a_variable():
    import pytest

    with pytest.raises(ValueError, match="local variables must be variables.*Received: 'kernel'"):
        BroadcastGlobalVariablesCallback(0, local_variables=["kernel"])
