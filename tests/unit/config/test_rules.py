"""Config rules (hvdkeras.config.rules): impossible values and world-size rules, each one line naming its source."""
import dataclasses
import glob
import os

import pytest

from hvdkeras import config as config_lib
from hvdkeras.common.errors import ConfigError
from tests.unit.helpers import REPO, write_yaml


@pytest.mark.parametrize("override, fragment", [
    ("trainer.epochs=0", "trainer.epochs in --set trainer.epochs=0 must be > 0; received: 0"),
    ("optimizer.weight_decay=0.1",
     "optimizer.weight_decay in --set optimizer.weight_decay=0.1 must be 0 with optimizer.name=sgd"),
    ("schedule.name=step", "schedule.boundaries in the defaults must list at least one epoch"),
    ("schedule.warmup_epochs=-1", "schedule.warmup_epochs in --set schedule.warmup_epochs=-1 must be >= 0"),
])
def test_impossible_values(override, fragment):
    with pytest.raises(ConfigError) as err:
        config_lib.load(None, [override])
    assert fragment in str(err.value)


def test_global_batch_must_divide_over_ranks(tmp_path):
    path = write_yaml(tmp_path, "data: {global_batch_size: 63}\n")
    cfg = config_lib.load(path)
    config_lib.validate_for_world(cfg, 1)
    config_lib.validate_for_world(cfg, 3)
    with pytest.raises(ConfigError) as err:
        config_lib.validate_for_world(cfg, 2)
    assert str(err.value) == (f"data.global_batch_size in {path} must be divisible by the 2 ranks (e.g. 62);"
                              " received: 63")


def test_elastic_rules():
    with pytest.raises(ConfigError, match="elastic.max_np in --set elastic.max_np=0 must be null or >= elastic.min_np"):
        config_lib.load(None, ["elastic.max_np=0"])
    with pytest.raises(ConfigError, match="elastic.enabled .* must be false with trainer.api=estimator"):
        config_lib.load(None, ["elastic.enabled=true", "trainer.api=estimator"])


def test_stall_shutdown_must_come_after_the_warning():
    with pytest.raises(ConfigError, match="longer than horovod.stall_warning_seconds"):
        config_lib.load(None, ["horovod.stall_warning_seconds=60", "horovod.stall_shutdown_seconds=30"])


def test_tensorboard_defaults_off_and_is_keras_only():
    assert config_lib.load().trainer.tensorboard is False
    assert config_lib.load(None, ["trainer.tensorboard=true"]).trainer.tensorboard is True
    with pytest.raises(ConfigError, match="trainer.tensorboard .* must be false with trainer.api=estimator"):
        config_lib.load(None, ["trainer.tensorboard=true", "trainer.api=estimator"])


def test_a_replaced_value_is_reported_with_the_source_of_its_key():
    cfg = config_lib.load(None, ["trainer.epochs=3"])
    bad = dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, epochs=0))
    with pytest.raises(ConfigError) as err:
        config_lib.validate(bad)
    assert str(err.value) == "trainer.epochs in --set trainer.epochs=3 must be > 0; received: 0"


def test_source_of_and_locate(tmp_path):
    path = write_yaml(tmp_path, "model: {name: vgg}\n")
    cfg = config_lib.load(path, ["trainer.epochs=3"])  # names are checked where they are built, not here
    assert config_lib.source_of(cfg, "model.name") == path
    assert config_lib.source_of(cfg, "trainer.epochs") == "--set trainer.epochs=3"
    assert config_lib.source_of(cfg, "optimizer.name") == "the defaults"
    located = config_lib.locate(cfg, ConfigError.for_key("model.name", "be one of a, b", "vgg"))
    assert isinstance(located, ConfigError) and located.key == "model.name"
    assert str(located) == f"model.name in {path} must be one of a, b; received: 'vgg'"
    keyless = ConfigError("something without a key")
    assert config_lib.locate(cfg, keyless) is keyless


def test_lr_scaling_ranks_with_a_fixed_global_batch_is_refused_naming_both_keys(tmp_path):
    path = write_yaml(tmp_path, "data: {global_batch_size: 64}\noptimizer: {lr_scaling: ranks}\n")
    with pytest.raises(ConfigError) as err:
        config_lib.load(path)
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"optimizer.lr_scaling in {path} must not be ranks with data.global_batch_size=64 ({path}):")
    assert "change the rate with the rank count alone" in line and "set data.per_rank_batch_size" in line
    assert line.endswith("received: 'ranks'")


def test_horovods_convention_is_said_with_per_rank_batch_size():
    cfg = config_lib.load(None, ["data.per_rank_batch_size=32", "optimizer.lr_scaling=ranks"])
    assert (cfg.data.global_batch_size, cfg.data.per_rank_batch_size) == (None, 32)
    config_lib.validate_for_world(cfg, 3)  # 32 x 3 always splits


def test_both_batch_conventions_at_once_are_refused_naming_both(tmp_path):
    path = write_yaml(tmp_path, "data: {global_batch_size: 64, per_rank_batch_size: 32}\n")
    with pytest.raises(ConfigError) as err:
        config_lib.load(path)
    assert str(err.value) == (
        "set one of data.global_batch_size (the same global batch on any number of ranks) and"
        " data.per_rank_batch_size (Horovod's convention: the global batch grows with the ranks); received"
        f" data.global_batch_size=64 ({path}) and data.per_rank_batch_size=32 ({path})")


def test_warmup_needs_a_rule_that_scales():
    with pytest.raises(ConfigError, match="schedule.warmup_epochs .* must be 0 with optimizer.lr_scaling=none"):
        config_lib.load(None, ["optimizer.lr_scaling=none", "schedule.warmup_epochs=2"])


def test_auto_compression_is_refused_for_elastic_jobs():
    with pytest.raises(ConfigError, match="horovod.compression .* must be none or fp16 with elastic.enabled"):
        config_lib.load(None, ["elastic.enabled=true", "horovod.compression=auto"])


def test_every_shipped_config_loads_under_the_new_rules():
    import os

    from tests.unit.helpers import REPO
    for path in sorted(glob.glob(os.path.join(REPO, "configs", "*.yaml"))):
        config_lib.load(path)


@pytest.mark.parametrize("override", ["checkpoint.preemption=false", "runtime.mixed_precision=mixed_float16",
                                      "optimizer.clipnorm=1.0", "trainer.terminate_on_nan=false"])
def test_a_key_the_estimator_path_does_not_honour_is_refused_for_it(override):
    key = override.split("=")[0]
    config_lib.load(None, [override])  # the Keras trainer honours it
    with pytest.raises(ConfigError) as err:
        config_lib.load(None, ["trainer.api=estimator", override])
    line = str(err.value)
    assert line.startswith(f"{key} in --set {override} must stay at its default") and "\n" not in line
    assert "with trainer.api=estimator, which does not honour it" in line
    config_lib.load(os.path.join(REPO, "configs", "estimator_digits.yaml"))  # the shipped one sets none of them


@pytest.mark.parametrize("sets, message", [
    (["model.args.units=8"], "model.args in --set model.args.units=8 must be empty with the built-in"
                             " model.name='small_cnn' (model.args are the keyword arguments of your own model.name:"
                             " package.module:function; a built-in model takes model.dropout and model.weight_decay);"
                             " received: {'units': 8}"),
    (["data.args.rows=8"], "data.args in --set data.args.rows=8 must be empty with the built-in data.name='digits'"
                           " (data.args are the keyword arguments of your own data.name: package.module:function);"
                           " received: {'rows': 8}"),
    (["trainer.loss=mse", "trainer.label_smoothing=0.1"],
     "trainer.label_smoothing in --set trainer.label_smoothing=0.1 must be 0 with trainer.loss='mse' (label smoothing"
     " belongs to the default loss, sparse_categorical_crossentropy); received: 0.1"),
    (["trainer.metrics=[mae, mae]"], "trainer.metrics in --set trainer.metrics=[mae, mae] must name each metric"
                                     " once; received: ['mae', 'mae']"),
    (["trainer.api=estimator", "model.name=own:model"],
     "model.name in --set model.name=own:model must be a built-in name with trainer.api=estimator (your own"
     " package.module:function pieces are for trainer.api=keras); received: 'own:model'"),
    # by output name
    (["trainer.loss={}"], "trainer.loss in --set trainer.loss={} must map at least one output name to a loss (or be"
                          " one loss for every output); received: {}"),
    (["trainer.loss={buy: ''}"], "trainer.loss in --set trainer.loss={buy: ''} must map each output name to a Keras"
                                 " loss name or your own package.module:function; received: {'buy': ''}"),
    (["trainer.loss={buy: binary_crossentropy}", "trainer.label_smoothing=0.1"],
     "trainer.label_smoothing in --set trainer.label_smoothing=0.1 must be 0 with trainer.loss={'buy':"
     " 'binary_crossentropy'} (label smoothing belongs to the default loss, sparse_categorical_crossentropy);"
     " received: 0.1"),
    (["trainer.metrics={buy: [accuracy], price: [mae, mae]}"],
     "trainer.metrics in --set trainer.metrics={buy: [accuracy], price: [mae, mae]} must name each metric once per"
     " output (output 'price' repeats one); received: {'buy': ['accuracy'], 'price': ['mae', 'mae']}"),
    (["trainer.loss_weights={buy: -1, price: 2}"],
     "trainer.loss_weights in --set trainer.loss_weights={buy: -1, price: 2} must map output names to weights >= 0"
     " (not buy); received: {'buy': -1.0, 'price': 2.0}"),
    (["trainer.loss={buy: binary_crossentropy}", "trainer.loss_weights={buy: 1, price: 0.5}"],
     "trainer.loss_weights in --set trainer.loss_weights={buy: 1, price: 0.5} must weigh only outputs that"
     " trainer.loss names (buy); price has no loss; received: {'buy': 1.0, 'price': 0.5}"),
    (["trainer.api=estimator", "trainer.loss_weights={out: 2}"],
     "trainer.loss_weights in --set trainer.loss_weights={out: 2} must stay at its default (None) with"
     " trainer.api=estimator, whose model function has its own loss and accuracy; received: {'out': 2.0}"),
])
def test_your_own_pieces_rules(sets, message):
    with pytest.raises(ConfigError) as err:
        config_lib.load(None, sets)
    assert str(err.value) == message


def test_a_name_added_to_a_mapping_by_set_is_reported_with_that_set(tmp_path):
    path = write_yaml(tmp_path, "trainer: {loss: {buy: mse, price: mse}, loss_weights: {price: 0.5}}\n")
    with pytest.raises(ConfigError) as err:
        config_lib.load(path, ["trainer.loss_weights.cost=2"])
    assert str(err.value) == ("trainer.loss_weights in --set trainer.loss_weights.cost=2 must weigh only outputs that"
                              " trainer.loss names (buy, price); cost has no loss; received: {'price': 0.5, 'cost':"
                              " 2.0}")


def test_loss_weights_may_weigh_any_output_of_one_loss_for_all():
    cfg = config_lib.load(None, ["trainer.loss=mse", "trainer.loss_weights={buy: 1, price: 0.5}"])
    assert cfg.trainer.loss_weights == {"buy": 1.0, "price": 0.5}  # the outputs are checked against the model


def test_a_tfds_name_with_a_version_is_not_an_import_path():
    assert config_lib.load(None, ["data.name=cifar10:3.0.2"]).data.name == "cifar10:3.0.2"
