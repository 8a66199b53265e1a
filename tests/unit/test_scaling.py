"""hvdkeras.scaling: how a global batch splits over ranks and how the learning rate scales with them."""
import pytest

from hvdkeras import config as config_lib
from hvdkeras import scaling
from hvdkeras.errors import ConfigError


def test_steps_are_equal_on_all_ranks():
    # 1438 examples over 2 ranks: shards of 719; 719 // 32 = 22 steps for both
    assert scaling.steps_per_epoch(1438, 64, 2) == 22
    assert scaling.steps_per_epoch(1437, 64, 2) == 22  # shards of 719 and 718: the smaller decides
    assert scaling.steps_per_epoch(1437, 64, 1) == 22
    assert scaling.steps_per_epoch(100, 30, 3) == 3


def test_per_rank_batch_must_divide_evenly():
    assert scaling.per_rank_batch(64, 8) == 8
    with pytest.raises(ConfigError, match="not divisible"):
        scaling.per_rank_batch(10, 3)


@pytest.mark.parametrize("rule, expected", [("ranks", 0.1 * 8), ("global_batch", 0.1 * 1024 / 256), ("none", 0.1)])
def test_scaled_learning_rate_rules(rule, expected):
    cfg = config_lib.OptimizerConfig(learning_rate=0.1, lr_scaling=rule, base_batch_size=256)
    assert scaling.scaled_learning_rate(cfg, 8, 1024) == pytest.approx(expected)
