"""hvdkeras.training.optimizers: optimizers by name at the scaled rate, wrapped for data-parallel training."""
import pytest

from hvdkeras import config as config_lib
from hvdkeras.common import scaling
from hvdkeras.common.errors import ConfigError
from hvdkeras.runtime import compat
from hvdkeras.training import optimizers


def test_build_returns_the_named_optimizer_at_the_scaled_rate(hvd_single):
    cfg = config_lib.load(None, ["optimizer.name=adam", "optimizer.learning_rate=0.01", "data.global_batch_size=1024"])
    optimizer, lr = optimizers.build(cfg.optimizer, cfg.horovod, cfg.data, 1024)
    assert lr == pytest.approx(0.04) == scaling.scaled_learning_rate(cfg.optimizer, cfg.data, 1024)  # 0.01 per 256
    assert isinstance(optimizer, compat.keras.optimizers.Adam)
    assert compat.get_learning_rate(optimizer) == pytest.approx(0.04)


def test_unknown_optimizer_name_is_a_config_error_naming_where_the_name_came_from():
    cfg = config_lib.load(None, ["optimizer.name=lamb"])  # config.load does not know the registry's names
    with pytest.raises(ConfigError) as err:
        optimizers.build(cfg.optimizer, cfg.horovod, cfg.data, cfg.data.global_batch_size)
    assert str(err.value) == "optimizer.name must be one of adam, adamw, rmsprop, sgd; received: 'lamb'"
    assert str(config_lib.locate(cfg, err.value)) == (
        "optimizer.name in --set optimizer.name=lamb must be one of adam, adamw, rmsprop, sgd; received: 'lamb'")


def test_the_estimator_paths_optimizers_are_the_same_names_as_tf_compat_v1():
    import tensorflow as tf

    from hvdkeras.config import OptimizerConfig

    sgd = optimizers.build_v1(OptimizerConfig(name="sgd", momentum=0.8, nesterov=True), 0.1)
    assert isinstance(sgd, tf.compat.v1.train.MomentumOptimizer)
    assert sgd._momentum == 0.8 and sgd._use_nesterov
    assert isinstance(optimizers.build_v1(OptimizerConfig(name="adam"), 0.1), tf.compat.v1.train.AdamOptimizer)
    assert set(optimizers.V1.names()) <= set(optimizers.REGISTRY.names())  # one list of names, a subset there
    with pytest.raises(ConfigError, match=r"optimizer.name='adamw' has no tf.compat.v1 optimizer for the Estimator"
                                          r" path; use adam, rmsprop, sgd"):
        optimizers.build_v1(OptimizerConfig(name="adamw"), 0.1)
    with pytest.raises(ConfigError, match="optimizer.name"):
        optimizers.build_v1(OptimizerConfig(name="lamb"), 0.1)
