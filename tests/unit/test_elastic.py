"""hvdkeras.elastic pieces that need no second rank: the data section after a resize."""
import pytest

from hvdkeras import config as config_lib
from hvdkeras.common import scaling


def data_config_for(cfg, initial_size, size):
    """The data section for ``size`` ranks under ``elastic.on_resize``, as the elastic driver trains with it."""
    return scaling.for_resized_world(cfg.data, cfg.elastic.on_resize, initial_size, size)


def rate_after_resize(cfg, initial_size, size):
    """(global batch, learning rate) after a resize from ``initial_size`` to ``size`` ranks, as the driver computes."""
    data = data_config_for(cfg, initial_size, size)
    return data.global_batch_size, scaling.scaled_learning_rate(cfg.optimizer, cfg.data, data.global_batch_size)


def test_elastic_resize_policies():
    cfg = config_lib.load(None, ["elastic.enabled=true", "data.global_batch_size=64"])
    assert data_config_for(cfg, initial_size=2, size=1).global_batch_size == 64  # keep_global_batch
    cfg = config_lib.load(None, ["elastic.enabled=true", "elastic.on_resize=keep_rank_batch",
                                 "data.global_batch_size=64", "data.eval_global_batch_size=32"])
    resized = data_config_for(cfg, initial_size=2, size=3)
    assert resized.global_batch_size == 96 and resized.eval_global_batch_size == 48  # 32 and 16 per rank


def test_keep_global_batch_keeps_the_rate_on_every_resize():
    cfg = config_lib.load(None, ["elastic.enabled=true", "data.global_batch_size=64", "optimizer.learning_rate=0.05",
                                 "optimizer.base_batch_size=32"])
    assert [rate_after_resize(cfg, 2, n) for n in (1, 2, 4)] == [(64, 0.1)] * 3


def test_keep_rank_batch_rescales_the_rate_with_the_global_batch():
    cfg = config_lib.load(None, ["elastic.enabled=true", "elastic.on_resize=keep_rank_batch",
                                 "data.global_batch_size=64", "optimizer.learning_rate=0.05",
                                 "optimizer.base_batch_size=32"])
    assert [rate_after_resize(cfg, 2, n) for n in (1, 2, 4)] == [(32, 0.05), (64, 0.1), (128, 0.2)]


def test_horovods_convention_under_both_policies():
    per_rank = ["elastic.enabled=true", "data.per_rank_batch_size=32", "optimizer.learning_rate=0.01",
                "optimizer.lr_scaling=ranks"]
    grows = config_lib.load(None, per_rank + ["elastic.on_resize=keep_rank_batch"])
    assert [rate_after_resize(grows, 2, n) for n in (1, 3)] == [(32, 0.01), (96, pytest.approx(0.03))]
    fixed = config_lib.load(None, per_rank)  # keep_global_batch: the initial world's 64, so the rate stays
    assert [rate_after_resize(fixed, 2, n) for n in (1, 4)] == [(64, 0.02), (64, 0.02)]


def test_keep_rank_batch_without_an_eval_batch_resizes_the_training_batch_for_both():
    cfg = config_lib.load(None, ["elastic.enabled=true", "elastic.on_resize=keep_rank_batch",
                                 "data.global_batch_size=64"])
    resized = data_config_for(cfg, initial_size=4, size=2)
    assert (resized.global_batch_size, resized.eval_global_batch_size) == (32, 32)
    config_lib.validate_for_world(config_lib.Config(data=resized), 2)


