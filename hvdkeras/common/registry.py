"""A name -> builder table, used for datasets, models and optimizers."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, TypeVar

from hvdkeras.common.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])


class Registry:
    """Builders registered by name with ``@registry.register("name")``.

    ``key`` is the config key that names an entry (``model.name``); an unknown name
    raises ``ConfigError.for_key(key, ...)``, to which the caller can add where the
    name came from (:func:`hvdkeras.config.locate`).
    """

    def __init__(self, kind: str, key: str) -> None:
        self.kind = kind
        self.key = key
        self._builders: Dict[str, Callable[..., Any]] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator registering a builder as ``name``; raises ValueError if ``name`` is taken."""
        def decorate(fn: F) -> F:
            if name in self._builders:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._builders[name] = fn
            return fn

        return decorate

    def get(self, name: str, extra: str = "") -> Callable[..., Any]:
        """The builder registered as ``name``; ``extra`` adds to the list of allowed names in the error."""
        try:
            return self._builders[name]
        except KeyError:
            raise ConfigError.for_key(self.key, f"be one of {', '.join(self.names())}{extra}", name) from None

    def names(self) -> List[str]:
        """The registered names, sorted."""
        return sorted(self._builders)
