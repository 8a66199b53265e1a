"""hvdkeras.common.registry: builders by name; an unknown name is a ConfigError on the config key that named it."""
import pytest

from hvdkeras.common.errors import ConfigError
from hvdkeras.common.registry import Registry


def test_registered_names_and_the_error_for_an_unknown_one():
    registry = Registry("widget", "widget.name")

    @registry.register("b")
    def b():
        return "B"

    registry.register("a")(lambda: "A")
    assert registry.names() == ["a", "b"] and registry.get("b") is b
    with pytest.raises(ConfigError) as err:
        registry.get("c", extra=" or custom.<Name>")
    assert str(err.value) == "widget.name must be one of a, b or custom.<Name>; received: 'c'"
    assert (err.value.key, err.value.received) == ("widget.name", "c")
    assert str(err.value.with_source("w.yaml")).startswith("widget.name in w.yaml must be one of a, b")
    with pytest.raises(ValueError, match="widget 'a' is registered twice"):
        registry.register("a")(lambda: None)
