"""The config schema (hvdkeras.config.schema): frozen sections, derived values, provenance kept by replace."""
import dataclasses

import pytest

from hvdkeras import config as config_lib


def test_config_is_frozen():
    cfg = config_lib.load()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.trainer.epochs = 3


def test_defaults_are_exact_and_the_same_on_any_layout():
    cfg = config_lib.load()
    assert cfg.horovod.compression == "none"  # as in Horovod and PyTorch DDP; fp16 is the user's choice
    assert cfg.optimizer.lr_scaling == "global_batch"  # a function of the global batch alone
    assert (cfg.data.global_batch_size, cfg.data.per_rank_batch_size) == (64, None)


def test_sources_survive_replace_and_do_not_count_in_equality():
    cfg = config_lib.load(None, ["trainer.epochs=3"])
    again = dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, verbose=0))
    assert again.sources == cfg.sources and again.sources["trainer.epochs"] == "--set trainer.epochs=3"
    assert config_lib.load(None, ["trainer.epochs=3"]) == dataclasses.replace(cfg, sources={})
    assert "sources" not in config_lib.to_dict(cfg)  # not a config key
