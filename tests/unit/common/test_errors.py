"""hvdkeras.common.errors: the user-fixable errors, their one-line messages and where each is importable."""
import pytest

from hvdkeras import config as config_lib
from hvdkeras import launch, report
from hvdkeras.common import errors


def test_for_key_names_key_source_rule_and_value():
    err = errors.ConfigError.for_key("trainer.epochs", "be > 0", 0, source="--set trainer.epochs=0")
    assert str(err) == "trainer.epochs in --set trainer.epochs=0 must be > 0; received: 0"
    assert (err.key, err.rule, err.received) == ("trainer.epochs", "be > 0", 0)
    assert str(errors.ConfigError.for_key("data.name", "be str", 7)) == "data.name must be str; received: 7"


def test_with_source_adds_the_source_and_keeps_the_class():
    err = errors.LaunchError.for_key("model.name", "be one of a, b", "vgg")
    located = err.with_source("c.yaml")
    assert type(located) is errors.LaunchError
    assert str(located) == "model.name in c.yaml must be one of a, b; received: 'vgg'"
    keyless = errors.ConfigError("no key")
    assert keyless.with_source("c.yaml") is keyless


@pytest.mark.parametrize("cls, builtin", [
    (errors.ConfigError, ValueError), (errors.LaunchError, errors.ConfigError), (errors.SetupError, RuntimeError),
    (errors.PreflightError, errors.SetupError), (errors.CheckpointError, RuntimeError),
    (errors.ReportError, errors.HvdkerasError),
])
def test_every_error_is_an_hvdkeras_error(cls, builtin):
    assert issubclass(cls, errors.HvdkerasError) and issubclass(cls, builtin)


def test_the_errors_are_the_same_classes_where_modules_re_export_them():
    assert config_lib.ConfigError is errors.ConfigError
    assert launch.LaunchError is errors.LaunchError
    assert report.ReportError is errors.ReportError
