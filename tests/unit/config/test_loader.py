"""hvdkeras.config.loader: defaults -> file -> --set, strict keys, types and choices, one-line errors."""
import os

import pytest
import yaml

from hvdkeras import config as config_lib
from hvdkeras.common.errors import ConfigError
from tests.unit.helpers import CONFIGS, write_yaml


def test_defaults_without_file():
    cfg = config_lib.load()
    assert cfg == config_lib.Config()


def test_file_overrides_defaults_and_set_overrides_file(tmp_path):
    path = write_yaml(tmp_path, """
        optimizer: {learning_rate: 0.2, name: adam}
        trainer: {epochs: 7}
    """)
    cfg = config_lib.load(path, ["optimizer.learning_rate=0.3", "data.global_batch_size=32"])
    assert cfg.optimizer.learning_rate == 0.3  # --set beats the file
    assert cfg.optimizer.name == "adam"  # from the file
    assert cfg.trainer.epochs == 7
    assert cfg.data.global_batch_size == 32
    assert cfg.model == config_lib.ModelConfig()  # untouched section keeps defaults


def test_later_override_wins():
    cfg = config_lib.load(None, ["trainer.epochs=3", "trainer.epochs=5"])
    assert cfg.trainer.epochs == 5


def test_override_values_are_yaml_typed():
    cfg = config_lib.load(None, [
        "optimizer.learning_rate=1e-3",  # YAML 1.1 reads this as a string; a float field accepts it
        "optimizer.nesterov=true",
        "trainer.steps_per_epoch=null",
        "data.image_shape=[32, 32, 3]",
        "schedule.name=step", "schedule.boundaries=[3, 6]", "trainer.epochs=8",
        "optimizer.clipnorm=1",  # int accepted for a float field
    ])
    assert cfg.optimizer.learning_rate == pytest.approx(1e-3)
    assert cfg.optimizer.nesterov is True
    assert cfg.trainer.steps_per_epoch is None
    assert cfg.data.image_shape == (32, 32, 3)
    assert cfg.schedule.boundaries == (3.0, 6.0)
    assert cfg.optimizer.clipnorm == 1.0 and isinstance(cfg.optimizer.clipnorm, float)


def test_unknown_key_in_file_names_key_file_and_valid_keys(tmp_path):
    path = write_yaml(tmp_path, "optimizer:\n  lr: 0.1\n")
    with pytest.raises(ConfigError) as err:
        config_lib.load(path)
    msg = str(err.value)
    assert "'optimizer.lr'" in msg and path in msg
    assert "learning_rate" in msg and "momentum" in msg  # the valid keys
    assert "\n" not in msg


def test_unknown_key_in_override_suggests_close_match():
    with pytest.raises(ConfigError) as err:
        config_lib.load(None, ["trainer.epochz=3"])
    msg = str(err.value)
    assert "--set trainer.epochz=3" in msg and "did you mean trainer.epochs" in msg


def test_unknown_section(tmp_path):
    path = write_yaml(tmp_path, "trainr: {epochs: 2}\n")
    with pytest.raises(ConfigError, match=r"unknown key 'trainr'.*valid keys in the top level: data, model"):
        config_lib.load(path)


@pytest.mark.parametrize("override, fragment", [
    ("trainer.epochs=2.5", "trainer.epochs in --set trainer.epochs=2.5 must be int; received: 2.5"),
    ("trainer.epochs=true", "must be int; received: True"),
    ("optimizer.nesterov=1", "optimizer.nesterov in --set optimizer.nesterov=1 must be bool"),
    ("optimizer.learning_rate=fast", "must be float; received: 'fast'"),
    ("data.image_shape=5", "must be list of int"),
    ("data.name=7", "data.name in --set data.name=7 must be str"),
    ("trainer=3", "trainer in --set trainer=3 must be a mapping"),
])
def test_wrong_types(override, fragment):
    with pytest.raises(ConfigError) as err:
        config_lib.load(None, [override])
    assert fragment in str(err.value)


@pytest.mark.parametrize("override, fragment", [
    ("optimizer.lr_scaling=sqrt",
     "optimizer.lr_scaling in --set optimizer.lr_scaling=sqrt must be one of global_batch, ranks, none"),
    ("data.pipeline=vgg", "data.pipeline in --set data.pipeline=vgg must be one of auto, imagenet, cifar, mnist"),
    ("runtime.mixed_precision=fp8", "must be one of none, mixed_float16, mixed_bfloat16"),
])
def test_values_outside_the_choices(override, fragment):
    with pytest.raises(ConfigError) as err:
        config_lib.load(None, [override])
    assert fragment in str(err.value)


@pytest.mark.parametrize("text, fragment", [
    ("noequals", "must look like section.key=value"),
    ("a..b=1", "has an empty key"),
    ("trainer.epochs=[1", "the value is not valid YAML"),
])
def test_malformed_overrides(text, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[")):
        config_lib.load(None, [text])


def test_parse_override_reads_the_value_as_yaml():
    assert config_lib.parse_override("data.image_shape=[8, 8, 1]") == (["data", "image_shape"], [8, 8, 1])
    assert config_lib.parse_override("trainer.steps_per_epoch=") == (["trainer", "steps_per_epoch"], None)


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        config_lib.load(str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match=r"is not valid YAML at line 2"):
        config_lib.load(write_yaml(tmp_path, "a: 1\n  b: [\n"))
    with pytest.raises(ConfigError, match="must hold a mapping of sections"):
        config_lib.load(write_yaml(tmp_path, "- 1\n- 2\n"))
    assert config_lib.read_yaml(write_yaml(tmp_path, "", name="empty.yaml")) == {}


def test_to_yaml_is_a_header_comment_line_then_the_keys():
    cfg = config_lib.load(os.path.join(CONFIGS, "digits.yaml"), ["schedule.boundaries=[5]"])
    text = config_lib.to_yaml(cfg)
    assert text.startswith(config_lib.HEADER) and config_lib.HEADER.startswith("# ")
    assert config_lib.HEADER.count("\n") == 1 and config_lib.HEADER.endswith("\n")  # one comment line
    tree = yaml.safe_load(text)
    assert tree == config_lib.to_dict(cfg) and tree["schedule"]["boundaries"] == [5.0]  # tuples become lists


def test_from_dict_checks_keys_and_rules_naming_its_source():
    with pytest.raises(ConfigError, match=r"^unknown key 'trainer\.epoch' in run/config\.yaml"):
        config_lib.from_dict({"trainer": {"epoch": 3}}, source="run/config.yaml")
    with pytest.raises(ConfigError, match=r"^trainer\.epochs in run/config\.yaml must be > 0; received: 0$"):
        config_lib.from_dict({"trainer": {"epochs": 0}}, source="run/config.yaml")


def test_every_shipped_config_loads():
    for name in sorted(os.listdir(CONFIGS)):
        path = os.path.join(CONFIGS, name)
        with open(path) as f:
            tree = yaml.safe_load(f)
        assert isinstance(tree, dict)
        config_lib.load(path)


def test_args_are_a_mapping_merged_key_by_key_and_written_back(tmp_path):
    path = write_yaml(tmp_path, """
        model:
          name: "own:model"
          args: {units: 8, sizes: [1, 2]}
    """)
    cfg = config_lib.load(path, ["model.args.units=16", "data.name=own:data", "data.args.rows=10"])
    assert cfg.model.args == {"units": 16, "sizes": [1, 2]} and cfg.data.args == {"rows": 10}
    assert cfg.sources["model.args.units"] == "--set model.args.units=16"
    assert cfg.sources["model.args.sizes"] == path
    assert cfg.folder == str(tmp_path)  # where your own modules are also looked for
    again = config_lib.from_dict(yaml.safe_load(config_lib.to_yaml(cfg)), "config.yaml")
    assert again == cfg and config_lib.load(None, []).model.args == {}
    with pytest.raises(ConfigError, match=r"^model.args in --set model.args=5 must be a mapping of names to values;"
                                          r" received: 5 \(int\)$"):
        config_lib.load(None, ["model.args=5"])


def test_loss_metrics_and_loss_weights_by_output_name_are_mappings_merged_and_written_back(tmp_path):
    path = write_yaml(tmp_path, """
        trainer:
          loss: {buy: binary_crossentropy, price: mse}
          metrics: {buy: [binary_accuracy], price: [mae, "own:metric"]}
          loss_weights: {buy: 1, price: 0.1}
    """)
    cfg = config_lib.load(path, ["trainer.loss.price=mae"])
    assert cfg.trainer.loss == {"buy": "binary_crossentropy", "price": "mae"}
    assert cfg.trainer.metrics == {"buy": ("binary_accuracy",), "price": ("mae", "own:metric")}
    assert cfg.trainer.loss_weights == {"buy": 1.0, "price": 0.1}
    assert cfg.sources["trainer.loss.price"] == "--set trainer.loss.price=mae" and cfg.sources["trainer.loss"] == path
    assert "  metrics: {buy: [binary_accuracy], price: [mae, 'own:metric']}\n" in config_lib.to_yaml(cfg)
    again = config_lib.from_dict(yaml.safe_load(config_lib.to_yaml(cfg)), "config.yaml")
    assert again == cfg
    # one name and one list still apply as before; no weights by default
    plain = config_lib.load(None, ["trainer.loss=mse", "trainer.metrics=[mae]"])
    assert (plain.trainer.loss, plain.trainer.metrics, plain.trainer.loss_weights) == ("mse", ("mae",), None)
    assert config_lib.load(path, ["trainer.loss=mse"]).trainer.loss == "mse"  # a --set replaces the mapping


@pytest.mark.parametrize("override, message", [
    ("trainer.loss=3", "trainer.loss in --set trainer.loss=3 must be str or a mapping of names to str; received: 3"
                       " (int)"),
    ("trainer.loss={buy: [mse]}", "trainer.loss in --set trainer.loss={buy: [mse]} must be str or a mapping of names"
                                  " to str; received: {'buy': ['mse']} (dict)"),
    ("trainer.metrics={buy: mae}", "trainer.metrics in --set trainer.metrics={buy: mae} must be list of str or a"
                                   " mapping of names to list of str; received: {'buy': 'mae'} (dict)"),
    ("trainer.loss_weights=[1, 2]", "trainer.loss_weights in --set trainer.loss_weights=[1, 2] must be a mapping of"
                                    " names to float; received: [1, 2] (list)"),
    ("trainer.loss_weights={buy: heavy}", "trainer.loss_weights.buy in --set trainer.loss_weights={buy: heavy} must be"
                                          " float; received: 'heavy' (str)"),
])
def test_mappings_by_output_of_the_wrong_type_are_one_line(override, message):
    with pytest.raises(ConfigError) as err:
        config_lib.load(None, [override])
    assert str(err.value) == message
