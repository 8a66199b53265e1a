"""A name -> builder table, used for datasets, models and optimizers."""
from __future__ import annotations

from typing import Callable, Dict, List, TypeVar

F = TypeVar("F", bound=Callable)


class Registry:
    """Builders registered by name with ``@registry.register("name")``."""

    def __init__(self, kind: str, config_key: str):
        self.kind = kind
        self.config_key = config_key
        self._builders: Dict[str, Callable] = {}

    def register(self, name: str) -> Callable[[F], F]:
        def decorate(fn: F) -> F:
            if name in self._builders:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._builders[name] = fn
            return fn

        return decorate

    def get(self, name: str) -> Callable:
        from hvdkeras.config import ConfigError

        try:
            return self._builders[name]
        except KeyError:
            raise ConfigError(
                f"{self.config_key} must be one of {', '.join(self.names())}; received: {name!r}"
            ) from None

    def names(self) -> List[str]:
        return sorted(self._builders)
