"""hvdkeras.config.safe_yaml: YAML from outside, refused in one line when its aliases recurse or fan out."""
import time

import pytest
import yaml

from hvdkeras import config as config_lib
from hvdkeras.common.errors import ConfigError
from hvdkeras.config import safe_yaml
from tests.unit.helpers import write_yaml

RECURSIVE = "model: {name: small_cnn, args: &a {x: *a}}\n"
# nine levels of ten aliases: a billion values, in a few hundred bytes
LAUGHS_FLOW = "{" + ", ".join(["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"] + [
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]) + "}"
LAUGHS = f"model: {{name: small_cnn, args: {LAUGHS_FLOW}}}\n"


def test_aliases_that_stay_small_load_as_safe_load_gives_them():
    text = "base: &b {lr: 0.1, decay: [1, 2]}\nfirst: *b\nsecond: {<<: *b, lr: 0.2}\n"
    assert safe_yaml.load(text) == yaml.safe_load(text)
    assert safe_yaml.load("") is None and safe_yaml.load("3") == 3


@pytest.mark.parametrize("text, says", [(RECURSIVE, "recursive alias"), (LAUGHS, "expand to more than 100000"),
                                        ("a: &a [*a]\n", "recursive alias")])
def test_a_recursive_alias_or_a_fan_out_is_refused_at_once(text, says):
    tic = time.perf_counter()
    with pytest.raises(ValueError, match=says):
        safe_yaml.load(text)
    assert time.perf_counter() - tic < 5  # a bound on work, not a speed claim: unbounded it takes hours


@pytest.mark.parametrize("text, value, says", [(RECURSIVE, "&a {x: *a}", "recursive alias"),
                                               (LAUGHS, LAUGHS_FLOW, "expand to more than 100000")])
def test_a_config_file_or_a_set_value_with_them_is_one_short_line(tmp_path, text, value, says):
    path = write_yaml(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        config_lib.load(path)
    message = str(err.value)
    assert message.startswith(f"config file {path} cannot be read as YAML: ") and says in message
    assert "\n" not in message and len(message) < 400
    with pytest.raises(ConfigError, match=f"^--set .*model.args=.*: the value cannot be read \\(.*{says}") as err:
        config_lib.load(None, [f"model.args={value}"])
    assert "\n" not in str(err.value) and len(str(err.value)) < 400
