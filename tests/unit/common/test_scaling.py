"""hvdkeras.common.scaling: the global batch, its split over ranks, and the learning rate as a function of it."""
import pytest

from hvdkeras import config as config_lib
from hvdkeras.common import scaling
from hvdkeras.common.errors import ConfigError


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


def test_the_global_batch_is_fixed_or_grows_with_the_ranks():
    fixed = config_lib.DataConfig(global_batch_size=64)
    per_rank = config_lib.DataConfig(global_batch_size=None, per_rank_batch_size=32)
    assert [scaling.global_batch(fixed, n) for n in (1, 2, 8)] == [64, 64, 64]
    assert [scaling.global_batch(per_rank, n) for n in (1, 2, 8)] == [32, 64, 256]
    assert scaling.eval_global_batch(per_rank, 4) == 128
    assert scaling.eval_global_batch(config_lib.DataConfig(eval_global_batch_size=16), 4) == 16
    world = scaling.for_world(per_rank, 4)
    assert (world.global_batch_size, world.eval_global_batch_size, world.per_rank_batch_size) == (128, 128, None)


@pytest.mark.parametrize("ranks", [1, 2, 4, 8])
def test_the_same_global_batch_gets_the_same_rate_and_warmup_on_any_number_of_ranks(ranks):
    opt = config_lib.OptimizerConfig(learning_rate=0.05, lr_scaling="global_batch", base_batch_size=32)
    data = config_lib.DataConfig(global_batch_size=64)
    scaled = scaling.scaled_learning_rate(opt, data, scaling.global_batch(data, ranks))
    assert scaled == pytest.approx(0.1)
    assert scaling.warmup_start_lr(opt, scaled) == pytest.approx(0.05)  # the rate of the reference batch


@pytest.mark.parametrize("ranks", [1, 2, 8])
def test_horovods_convention_gives_lr_times_size_and_horovods_warmup(ranks):
    opt = config_lib.OptimizerConfig(learning_rate=0.001, lr_scaling="ranks")
    data = config_lib.DataConfig(global_batch_size=None, per_rank_batch_size=128)
    scaled = scaling.scaled_learning_rate(opt, data, scaling.global_batch(data, ranks))
    assert scaled == pytest.approx(0.001 * ranks)
    assert scaling.warmup_start_lr(opt, scaled) == pytest.approx(scaled / ranks)  # Horovod's start
    # global_batch with base = the per-rank batch is the same rule
    same = config_lib.OptimizerConfig(learning_rate=0.001, lr_scaling="global_batch", base_batch_size=128)
    assert scaling.scaled_learning_rate(same, data, scaling.global_batch(data, ranks)) == pytest.approx(scaled)


def test_goyal_et_al():
    opt = config_lib.OptimizerConfig(learning_rate=0.1, lr_scaling="global_batch", base_batch_size=256)
    data = config_lib.DataConfig(global_batch_size=8192)
    scaled = scaling.scaled_learning_rate(opt, data, 8192)
    assert scaled == pytest.approx(3.2)  # their k = 256 workers x 32
    assert scaling.warmup_start_lr(opt, scaled) == pytest.approx(0.1)  # "start from eta" (their section 2.2)


def test_a_smaller_global_batch_than_the_reference_scales_down_and_warms_up_from_there():
    opt = config_lib.OptimizerConfig(learning_rate=0.1, lr_scaling="global_batch", base_batch_size=256)
    scaled = scaling.scaled_learning_rate(opt, config_lib.DataConfig(global_batch_size=64), 64)
    assert scaled == pytest.approx(0.025) and scaling.warmup_start_lr(opt, scaled) == pytest.approx(0.025)


def test_none_leaves_the_rate():
    opt = config_lib.OptimizerConfig(learning_rate=0.1, lr_scaling="none")
    assert scaling.scaled_learning_rate(opt, config_lib.DataConfig(global_batch_size=64), 64) == 0.1


def test_ranks_with_a_fixed_global_batch_is_refused_by_the_function_too():
    opt = config_lib.OptimizerConfig(learning_rate=0.1, lr_scaling="ranks")
    with pytest.raises(ConfigError, match="optimizer.lr_scaling must be global_batch or none with"):
        scaling.scaled_learning_rate(opt, config_lib.DataConfig(global_batch_size=64), 64)


def test_the_formula_shows_the_numbers():
    opt = config_lib.OptimizerConfig(learning_rate=0.05, lr_scaling="global_batch", base_batch_size=32)
    assert scaling.formula(opt, config_lib.DataConfig(global_batch_size=64), 4) == (
        "0.1 = 0.05 x global batch 64 / optimizer.base_batch_size 32")
    horovod = config_lib.OptimizerConfig(learning_rate=0.001, lr_scaling="ranks")
    per_rank = config_lib.DataConfig(global_batch_size=None, per_rank_batch_size=128)
    assert scaling.formula(horovod, per_rank, 4) == (
        "0.004 = 0.001 x global batch 512 (= 128 per rank x 4 ranks) / data.per_rank_batch_size 128"
        " (Horovod's lr x 4 ranks)")


def test_resized_gives_the_elastic_rules_batch_and_rate_for_a_loop_of_ones_own():
    resized = scaling.resized
    assert resized(96, 0.05, "keep_global_batch", initial_size=3, size=2) == (48, 0.05)
    assert resized(96, 0.05, "keep_rank_batch", initial_size=3, size=2) == (32, pytest.approx(0.05 * 2 / 3))
    assert resized(96, 0.05, "keep_rank_batch", initial_size=3, size=3) == (32, 0.05)
    with pytest.raises(ConfigError, match=r"^data.global_batch_size=96 is not divisible by the 5 ranks$"):
        resized(96, 0.05, "keep_global_batch", initial_size=3, size=5)
    with pytest.raises(ConfigError, match=r"^on_resize must be keep_global_batch or keep_rank_batch \(Received:"):
        resized(96, 0.05, "linear", initial_size=3, size=2)
