"""``RunState``: the weights and the run's position committed, rolled back and synced together, the position kept
in its ``RunPosition`` alone."""
import numpy as np

from hvdkeras.runtime.elastic_state import RunState
from hvdkeras.runtime.position import RunPosition
from tests.unit.helpers import small_bn_model


def test_a_rollback_puts_the_committed_weights_and_position_back(hvd_single):
    model = small_bn_model()
    position = RunPosition()
    position.place(1, 3)
    state = RunState(model, position)
    state.sync()  # as Horovod's run does first: one rank here, its own committed state
    assert position.here == (1, 3)

    position.continue_at(1, 3)
    position.begin_fit()
    position.end_batch(1)  # the fit's second batch: 5 of epoch 2 done
    state.commit()
    kept = [v.numpy() for v in model.trainable_variables]

    position.end_batch(2)
    position.end_epoch(1)
    for v in model.trainable_variables:
        v.assign(v + 1.0)
    assert position.here == (2, 0)
    state.restore()  # a rank was lost: back to the last commit
    assert position.here == (1, 5)
    assert all(np.array_equal(a.numpy(), b) for a, b in zip(model.trainable_variables, kept))
    assert not hasattr(state, "epoch") and not hasattr(state, "batch")  # no copy of the position to keep up
