"""hvdkeras.common.command_line: absl flags of a command's own, and one line with exit status 2 for a user's error."""
import pytest
from absl import flags

from hvdkeras.common import command_line
from hvdkeras.common.errors import ConfigError


def _values():
    values = command_line.flag_values()
    flags.DEFINE_string("out", None, "where it goes", flag_values=values)
    flags.DEFINE_multi_string("set", [], "an override; repeatable", flag_values=values)
    flags.DEFINE_integer("rounds", 4, "how many", flag_values=values)
    flags.DEFINE_bool("fast", False, "hurry", flag_values=values)
    return values


def test_flags_are_the_commands_own_and_each_parse_starts_from_the_defaults():
    values = _values()
    assert "out" not in flags.FLAGS and "rounds" not in flags.FLAGS
    rest = command_line.parse(values, ["prog", "w", "--out", "a.png", "--set", "x=1", "--set=y=2", "--fast"])
    assert rest == ["prog", "w"] and values.out == "a.png" and values.set == ["x=1", "y=2"] and values.fast
    assert command_line.parse(values, ["prog", "--rounds=2"]) == ["prog"]
    assert (values.out, values.set, values.rounds, values.fast) == (None, [], 2, False)


@pytest.mark.parametrize("argv, says", [
    (["prog", "--bogus"], "Unknown command line flag 'bogus'"),
    (["prog", "--out"], "Missing value for flag --out"),
    (["prog", "--rounds=many"], "flag --rounds=many: invalid literal for int() with base 10: 'many'"),
])
def test_a_flag_absl_cannot_parse_is_one_line_and_status_2(capsys, argv, says):
    with pytest.raises(SystemExit) as stopped:
        command_line.parse(_values(), argv)
    assert stopped.value.code == 2
    assert capsys.readouterr().err == f"hvdkeras: error: {says}; --help lists the flags\n"


@pytest.mark.parametrize("word", ["--help", "-h", "--helpfull"])
def test_help_prints_the_usage_and_the_flags_and_exits_0(capsys, word):
    with pytest.raises(SystemExit) as stopped:
        command_line.parse(_values(), ["prog", "w", word], "python -m prog <workdir>: does it.")
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("python -m prog <workdir>: does it.\n\nflags:\n")
    assert "  --[no]fast: hurry (default: 'false')\n" in out and "  --rounds: how many (default: '4')\n" in out
    assert "  --set: an override; repeatable\n" in out  # absl's "repeat this option" and [] default left out


def test_help_after_the_end_of_the_flags_is_an_argument():
    assert command_line.parse(_values(), ["prog", "--", "--help"]) == ["prog", "--help"]


def test_a_users_error_is_one_line_and_status_2_anything_else_keeps_its_exception(capsys):
    def refused(argv):
        raise ConfigError("data.name must be a name\nsecond line")

    def broken(argv):
        raise KeyError("a bug")

    values = _values()
    assert command_line.call(refused, values, ["prog"]) == 2
    assert capsys.readouterr().err == "hvdkeras: error: data.name must be a name\n"
    with pytest.raises(KeyError):
        command_line.call(broken, values, ["prog"])
    assert command_line.call(lambda argv: None, values, ["prog"]) == 0
    assert command_line.call(lambda argv: len(argv), values, ["prog", "a", "b"]) == 3


def test_error_line_is_the_first_line_or_the_type():
    assert command_line.error_line(ValueError("one\ntwo")) == "one"
    assert command_line.error_line(ConfigError("")) == "ConfigError"
