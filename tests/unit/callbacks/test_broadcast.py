"""BroadcastGlobalVariablesCallback in one process: optimizer slots exist and are broadcast before step one."""
from hvdkeras import compat
from hvdkeras.callbacks import BroadcastGlobalVariablesCallback
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
