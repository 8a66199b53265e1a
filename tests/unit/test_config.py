"""Config loading: defaults -> file -> --set, strict keys and types, one-line errors."""
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from hvdkeras import config as config_lib
from hvdkeras.config import ConfigError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write(tmp_path, text, name="c.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_defaults_without_file():
    cfg = config_lib.load()
    assert cfg == config_lib.Config()


def test_file_overrides_defaults_and_set_overrides_file(tmp_path):
    path = write(tmp_path, """
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


def test_config_is_frozen():
    cfg = config_lib.load()
    with pytest.raises(Exception):
        cfg.trainer.epochs = 3


def test_unknown_key_in_file_names_key_file_and_valid_keys(tmp_path):
    path = write(tmp_path, "optimizer:\n  lr: 0.1\n")
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
    path = write(tmp_path, "trainr: {epochs: 2}\n")
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
    ("optimizer.lr_scaling=sqrt", "optimizer.lr_scaling in --set optimizer.lr_scaling=sqrt must be one of ranks, global_batch, none"),
    ("data.pipeline=vgg", "data.pipeline in --set data.pipeline=vgg must be one of auto, imagenet, cifar, mnist"),
    ("runtime.mixed_precision=fp8", "must be one of none, mixed_float16, mixed_bfloat16"),
    ("model.name=vgg", "model.name in --set model.name=vgg must be one of"),
    ("optimizer.name=lamb", "must be one of adam, adamw, rmsprop, sgd"),
    ("trainer.epochs=0", "trainer.epochs in --set trainer.epochs=0 must be > 0; received: 0"),
    ("optimizer.weight_decay=0.1", "optimizer.weight_decay in --set optimizer.weight_decay=0.1 must be 0 with optimizer.name=sgd"),
    ("schedule.name=step", "schedule.boundaries in the defaults must list at least one epoch"),
    ("schedule.warmup_epochs=-1", "schedule.warmup_epochs in --set schedule.warmup_epochs=-1 must be >= 0"),
])
def test_impossible_values(override, fragment):
    with pytest.raises(ConfigError) as err:
        config_lib.load(None, [override])
    assert fragment in str(err.value)


def test_global_batch_must_divide_over_ranks(tmp_path):
    path = write(tmp_path, "data: {global_batch_size: 63}\n")
    cfg = config_lib.load(path)
    config_lib.validate_for_world(cfg, 1)
    config_lib.validate_for_world(cfg, 3)
    with pytest.raises(ConfigError) as err:
        config_lib.validate_for_world(cfg, 2)
    assert f"data.global_batch_size in {path} must be divisible by the 2 ranks (e.g. 62); received: 63" == str(err.value)


@pytest.mark.parametrize("text, fragment", [
    ("noequals", "must look like section.key=value"),
    ("a..b=1", "has an empty key"),
    ("trainer.epochs=[1", "the value is not valid YAML"),
])
def test_malformed_overrides(text, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[")):
        config_lib.load(None, [text])


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        config_lib.load(str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match=r"is not valid YAML at line 2"):
        config_lib.load(write(tmp_path, "a: 1\n  b: [\n"))
    with pytest.raises(ConfigError, match="must hold a mapping of sections"):
        config_lib.load(write(tmp_path, "- 1\n- 2\n"))


def test_saved_config_round_trips(tmp_path):
    cfg = config_lib.load(os.path.join(REPO, "configs", "digits.yaml"), ["schedule.boundaries=[5]"])
    out = tmp_path / "config.yaml"
    config_lib.save(cfg, str(out))
    again = config_lib.from_dict(yaml.safe_load(out.read_text()), source=str(out))
    assert again == cfg
    assert not list(tmp_path.glob("*.tmp-*"))


def test_every_shipped_config_loads():
    for name in sorted(os.listdir(os.path.join(REPO, "configs"))):
        path = os.path.join(REPO, "configs", name)
        with open(path) as f:
            tree = yaml.safe_load(f)
        assert isinstance(tree, dict)
        config_lib.load(path)


def test_cli_prints_one_line_and_no_traceback(tmp_path):
    path = write(tmp_path, "optimizer: {lr: 0.1}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "hvdkeras.train", "--config", path, "--workdir", str(tmp_path / "w")],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith("hvdkeras: error: unknown key 'optimizer.lr'")
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "w").exists()


def test_elastic_resize_policies():
    from hvdkeras.trainer import _elastic_data_config

    cfg = config_lib.load(None, ["elastic.enabled=true", "data.global_batch_size=64"])
    assert _elastic_data_config(cfg, initial_size=2, size=1).global_batch_size == 64  # keep_global_batch
    cfg = config_lib.load(None, ["elastic.enabled=true", "elastic.on_resize=keep_rank_batch",
                                 "data.global_batch_size=64", "data.eval_global_batch_size=32"])
    resized = _elastic_data_config(cfg, initial_size=2, size=3)
    assert resized.global_batch_size == 96 and resized.eval_global_batch_size == 48  # 32 and 16 per rank
    with pytest.raises(ConfigError, match="elastic.max_np in --set elastic.max_np=0 must be null or >= elastic.min_np"):
        config_lib.load(None, ["elastic.max_np=0"])
    with pytest.raises(ConfigError, match="elastic.enabled .* must be false with trainer.api=estimator"):
        config_lib.load(None, ["elastic.enabled=true", "trainer.api=estimator"])
