"""The config schema (hvdkeras.config.schema): frozen sections, derived values, provenance kept by replace."""
import dataclasses

import pytest

from hvdkeras import config as config_lib


def test_config_is_frozen():
    cfg = config_lib.load()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.trainer.epochs = 3


def test_eval_global_batch_defaults_to_the_training_batch():
    assert config_lib.DataConfig(global_batch_size=64).eval_global_batch == 64
    assert config_lib.DataConfig(global_batch_size=64, eval_global_batch_size=32).eval_global_batch == 32


def test_sources_survive_replace_and_do_not_count_in_equality():
    cfg = config_lib.load(None, ["trainer.epochs=3"])
    again = dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, verbose=0))
    assert again.sources == cfg.sources and again.sources["trainer.epochs"] == "--set trainer.epochs=3"
    assert config_lib.load(None, ["trainer.epochs=3"]) == dataclasses.replace(cfg, sources={})
    assert "sources" not in config_lib.to_dict(cfg)  # not a config key
