"""Every number in a config is finite and bounded (hvdkeras/config/schema.py MAXIMA), and no input is a traceback."""
import typing

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hvdkeras import config as config_lib
from hvdkeras import launch
from hvdkeras.common.errors import ConfigError
from hvdkeras.config import loader, schema
from tests.harness.hostile import PROPERTY, hostile_text, one_line
from tests.unit.helpers import config_file

DIGITS = config_file("digits.yaml")


@pytest.mark.parametrize("text", ["optimizer.learning_rate=.inf", "optimizer.learning_rate=-.inf",
                                  "optimizer.learning_rate=.nan", "optimizer.learning_rate=1e400",
                                  "schedule.boundaries=[1, .nan]", "trainer.loss_weights={a: .inf}"])
def test_a_float_that_is_not_finite_is_refused(text):
    with pytest.raises(ConfigError, match="must be a finite number"):
        config_lib.load(DIGITS, [text])


@pytest.mark.parametrize("text, key", [("model.args={x: .nan}", "model.args.x"),
                                       ("model.args={x: [1, {y: -.inf}]}", r"model.args.x\[1\].y"),
                                       ("data.args={scale: .inf}", "data.args.scale")])
def test_a_float_that_is_not_finite_anywhere_in_your_own_pieces_args_is_refused_naming_it(text, key):
    # SECURITY.md: every float in a config must be finite, model.args and data.args included
    own = ["model.name=mypkg.models:build", "data.name=mypkg.data:load"]
    with pytest.raises(ConfigError, match=f"^{key} in --set .* must be a finite number; received: "):
        config_lib.load(DIGITS, [*own, text])


@pytest.mark.parametrize("text, limit", [("data.global_batch_size=99999999999", "16777216"),
                                         ("checkpoint.preemption_grace_s=1e300", "86400"),
                                         ("runtime.seed=4294967296", "2147483647"),
                                         ("data.image_shape=[8, 8, 99999999]", "65536"),
                                         ("trainer.loss_weights={a: 1e9}", "1000000")])
def test_a_number_past_its_maximum_is_refused_naming_it(text, limit):
    key = text.split("=")[0]
    with pytest.raises(ConfigError, match=rf"^{key} in --set .* must be at most {limit}; received: "):
        config_lib.load(DIGITS, [text])


def test_every_maximum_names_a_number_key_and_the_shipped_configs_are_within_them():
    hints = typing.get_type_hints(schema.Config)
    keys = {f"{s.name}.{f.name}" for s in schema.fields(schema.Config) for f in schema.fields(hints[s.name])}
    assert set(schema.MAXIMA) <= keys
    for name in loader.shipped_names():
        config_lib.load(config_file(f"{name}.yaml"))


def test_the_slurm_dry_run_with_an_infinite_grace_is_one_line_not_an_overflow():
    message = one_line(lambda: launch.dry_run(DIGITS, ["checkpoint.preemption_grace_s=.inf"], np=2,
                                              hosts="a:1,b:1", launcher="slurm"))
    assert message.startswith("checkpoint.preemption_grace_s in --set") and "finite" in message


def test_thousands_of_digits_and_deep_nesting_are_one_line():
    assert "cannot be read" in one_line(lambda: config_lib.load(DIGITS, ["trainer.epochs=" + "9" * 5000]))
    assert "cannot be read" in one_line(lambda: config_lib.load(DIGITS, ["trainer.epochs=" + "[" * 5000]))


def test_a_config_file_that_is_a_folder_or_not_text_is_one_line(tmp_path):
    assert "cannot be read" in one_line(lambda: config_lib.load(str(tmp_path)))
    binary = tmp_path / "c.yaml"
    binary.write_bytes(b"data:\n  name: \xd0\xff\n")
    assert "cannot be read as YAML" in one_line(lambda: config_lib.load(str(binary)))


KEYS = sorted(schema.MAXIMA) + ["data.name", "model.args", "trainer.loss", "horovod.timeline", "nope.key"]
NUMBERS = st.one_of(st.integers(), st.floats(), st.sampled_from([".inf", "-.inf", ".nan", "1e400", "9" * 5000]))


@PROPERTY
@given(st.sampled_from(KEYS), st.one_of(NUMBERS.map(str), hostile_text))
def test_any_set_value_loads_within_the_bounds_or_is_one_line(key, value):
    loaded = one_line(lambda: config_lib.load(DIGITS, [f"{key}={value}"]))
    if isinstance(loaded, str):
        return
    section, _, name = key.partition(".")
    got = getattr(getattr(loaded, section), name)
    most = schema.MAXIMA.get(key)
    for v in (got if isinstance(got, tuple) else (got,)):
        if isinstance(v, (int, float)) and most is not None:
            assert v <= most
