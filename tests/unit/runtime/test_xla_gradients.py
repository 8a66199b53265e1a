"""hvdkeras.runtime.xla_gradients: an XLA-compiled forward and backward pass with the allreduce outside XLA."""
import numpy as np

from hvdkeras.gradient_exchange import DistributedOptimizer
from hvdkeras.runtime import compat
from hvdkeras.runtime.xla_gradients import use_xla_gradients
from tests.unit.helpers import regression_model


def test_xla_step_under_loss_scaling_trains_and_logs_the_loss(hvd_single):
    """runtime.jit_compile with mixed_float16: the replaced train step updates the weights and the loss metric."""
    compat.set_mixed_precision("mixed_float16")
    try:
        model = regression_model(optimizer=DistributedOptimizer(compat.keras.optimizers.SGD(0.1)))
    finally:
        compat.set_mixed_precision("none")
    use_xla_gradients(model)
    before = [v.numpy().copy() for v in model.trainable_variables]
    x = np.random.RandomState(0).randn(8, 3).astype("float32") * 0.01  # no float16 overflow at the initial scale
    history = model.fit(x, 2 * x[:, :2], batch_size=4, epochs=1, shuffle=False, verbose=0)
    assert history.history["loss"][0] > 0
    assert int(model.optimizer.iterations.numpy()) == 2
    assert all(not np.array_equal(a, v.numpy()) for a, v in zip(before, model.trainable_variables))
