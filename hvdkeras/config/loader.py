"""Configs in and out: defaults -> YAML file -> ``--set`` overrides, and back to YAML.

:func:`load` merges the YAML file and each ``section.key=value`` override (its value
parsed as YAML) over the defaults of :mod:`hvdkeras.config.schema`, checks every key
and type, records where each value came from in ``Config.sources`` and returns a
frozen :class:`~hvdkeras.config.schema.Config`. The rules across fields are
:mod:`hvdkeras.config.rules`; :func:`hvdkeras.config.load` applies both.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import os
import typing
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import yaml

from hvdkeras.common.errors import ConfigError, shown
from hvdkeras.config import safe_yaml, schema
from hvdkeras.config.schema import Config

HEADER = "# Resolved hvdkeras config: defaults, then the file, then --set overrides.\n"


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        return " or ".join(_type_name(a) for a in inner) + (" or null" if type(None) in args else "")
    if origin in (tuple, list, Tuple, List):
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return "a mapping of names to values" if args[1] is Any else f"a mapping of names to {_type_name(args[1])}"
    return getattr(tp, "__name__", str(tp))


def _source_text(text: str) -> str:
    """A ``--set`` text as messages name its source: as given when it is short and printable, else its repr, cut."""
    return text if text.isprintable() and len(text) <= 80 else shown(text)


def _check_maximum(value: Any, key: str, source: str) -> None:
    """Raises ConfigError if a number of ``key`` (a tuple's elements, a mapping's values) is past its
    :data:`~hvdkeras.config.schema.MAXIMA` entry (loss weights: ``LOSS_WEIGHT_MAX``)."""
    limit = schema.maximum(key)
    if limit is None or value is None:
        return
    values = value.values() if isinstance(value, Mapping) else value if isinstance(value, tuple) else (value,)
    for v in values:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > limit:
            raise ConfigError(f"{key} in {source} must be at most {schema.maximum_text(limit)}; received: {shown(v)}")


def _check_finite(value: Any, key: str, source: str) -> None:
    """Raises ConfigError naming the first float in ``value`` (nested lists and mappings) that is not finite."""
    stack = [(key, value)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            raise ConfigError(f"{where} in {source} must be a finite number; received: {shown(node)}")
        if isinstance(node, Mapping):
            stack.extend((f"{where}.{k}", v) for k, v in node.items())
        elif isinstance(node, (list, tuple)):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(node))


def _coerce(value: Any, tp: Any, key: str, source: str) -> Any:
    """Checks ``value`` against the field type ``tp``; returns the typed value."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)

    def bad() -> ConfigError:
        return ConfigError(f"{key} in {source} must be {_type_name(tp)}; received: {shown(value)}"
                           f" ({type(value).__name__})")

    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _coerce(value, inner[0], key, source)
        for alternative in inner:  # str or a mapping (trainer.loss): the first that fits
            try:
                return _coerce(value, alternative, key, source)
            except ConfigError:
                pass
        raise bad()
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise bad()
        return tuple(_coerce(v, args[0], f"{key}[{i}]", source) for i, v in enumerate(value))
    if origin is dict:
        if value is None:
            return {}
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise bad()
        if args[1] is Any:  # model.args, data.args: any YAML value, every number in it finite
            _check_finite(value, key, source)
            return dict(value)
        return {k: _coerce(v, args[1], f"{key}.{k}", source) for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad()
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise bad()
    if tp is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value) if not isinstance(value, int) or abs(value) < 2**1000 else math.inf
        elif isinstance(value, str):  # YAML 1.1 reads 1e-4 as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is None:
            raise bad()
        if not math.isfinite(number):
            raise ConfigError(f"{key} in {source} must be a finite number; received: {shown(value)}")
        return number
    if tp is str and isinstance(value, str):
        return value
    raise bad()


def _build(cls: type, raw: Mapping[str, Any], sources: Mapping[str, str], prefix: str = "") -> Any:
    """Builds section (or top-level) class ``cls`` from its defaults overlaid with ``raw``."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in schema.fields(cls)}
    kwargs = {}
    for name, value in raw.items():
        key = f"{prefix}{name}"
        source = sources.get(key, "the config")
        if name not in fields:
            raise _unknown_key(key, source, cls, prefix)
        tp = hints[name]
        if _is_section(tp):
            if not isinstance(value, Mapping):
                keys = ", ".join(sorted(f.name for f in schema.fields(tp)))
                raise ConfigError(f"{key} in {source} must be a mapping of {keys}; received: {value!r}")
            kwargs[name] = _build(tp, value, sources, prefix=f"{key}.")
            continue
        typed = _coerce(value, tp, key, source)
        choices = fields[name].metadata.get("choices")
        if choices is not None and typed not in choices:
            raise ConfigError(f"{key} in {source} must be one of {', '.join(map(str, choices))}; received: {typed!r}")
        _check_maximum(typed, key, source)
        kwargs[name] = typed
    return cls(**kwargs)


def _unknown_key(key: str, source: str, cls: type, prefix: str) -> ConfigError:
    valid = [f.name for f in schema.fields(cls)]
    close = difflib.get_close_matches(key[len(prefix):], valid, n=1)
    hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
    where = f"section '{prefix[:-1]}'" if prefix else "the top level"
    return ConfigError(f"unknown key '{key}' in {source}{hint}; valid keys in {where}: {', '.join(valid)}")


def _merge(base: Dict[str, Any], update: Mapping[str, Any], sources: Dict[str, str], source: str,
           prefix: str = "") -> None:
    """Overlays ``update`` on ``base`` in place, recording ``source`` for every key it sets."""
    for name, value in update.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping) and isinstance(base.get(name), dict):
            _merge(base[name], value, sources, source, prefix=f"{key}.")
            continue
        base[name] = dict(value) if isinstance(value, Mapping) else value
        sources[key] = source
        if isinstance(value, Mapping):
            for sub in _flatten(value, f"{key}."):
                sources[sub] = source


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> List[str]:
    keys = []
    for name, value in tree.items():
        keys.append(f"{prefix}{name}")
        if isinstance(value, Mapping):
            keys.extend(_flatten(value, f"{prefix}{name}."))
    return keys


def parse_override(text: str) -> Tuple[List[str], Any]:
    """Parses ``a.b=value`` into (["a", "b"], yaml-parsed value)."""
    if "=" not in text:
        raise ConfigError(f"--set {shown(text)} must look like section.key=value, e.g. --set"
                          " optimizer.learning_rate=0.1")
    path, _, raw = text.partition("=")
    parts = path.strip().split(".")
    if any(not p for p in parts):
        raise ConfigError(f"--set {shown(text)} has an empty key; write section.key=value")
    try:
        value = safe_yaml.load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {shown(text)}: the value is not valid YAML ({str(exc).splitlines()[0]})") from None
    except (ValueError, RecursionError) as exc:  # thousands of digits; nested thousands deep; a recursive alias
        why = str(exc).splitlines()[0][:120]
        raise ConfigError(f"--set {shown(text)}: the value cannot be read ({why})") from None
    return parts, value


# The configs that ship inside the package (hvdkeras/resources/configs/; configs/ in a checkout links there), data
# beside the package's other resources, apart from the schema's package (hvdkeras/config/).
SHIPPED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "resources", "configs")


def shipped_names() -> List[str]:
    """The shipped configs' names (``digits``, ``resnet``...)."""
    if not os.path.isdir(SHIPPED):
        return []
    return sorted(n[:-len(".yaml")] for n in os.listdir(SHIPPED) if n.endswith(".yaml"))


def config_path(path: str) -> str:
    """``path`` itself, or for a shipped config's name (``digits``, ``digits.yaml``) that is not a file here, the
    shipped file: ``python -m hvdkeras.train --config digits`` works from an installed wheel."""
    if os.path.exists(path) or os.sep in path:
        return path
    name = path[:-len(".yaml")] if path.endswith(".yaml") else path
    shipped = os.path.join(SHIPPED, f"{name}.yaml")
    return shipped if name in shipped_names() else path


def read_yaml(path: str) -> Dict[str, Any]:
    """The mapping in the YAML file at ``path`` (empty for an empty file)."""
    if not os.path.exists(path):
        raise ConfigError(f"config file {path} does not exist; pass an existing YAML file with --config, or the name"
                          f" of a shipped config: {', '.join(shipped_names())}")
    try:
        with open(path) as f:
            tree = safe_yaml.load(f)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    except (ValueError, RecursionError) as exc:  # not UTF-8; thousands of digits; nesting too deep; alias bombs
        raise ConfigError(f"config file {path} cannot be read as YAML: {str(exc).splitlines()[0][:120]}") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror or exc}") from None
    if tree is None:
        return {}
    if not isinstance(tree, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections; received a {type(tree).__name__}")
    return tree


def load_unchecked(path: Optional[str] = None, overrides: Sequence[str] = ()) -> Config:
    """Defaults, then the YAML file at ``path``, then each override; keys and types checked, rules not."""
    tree: Dict[str, Any] = {}
    sources: Dict[str, str] = {}
    path = config_path(path) if path is not None else None
    if path is not None:
        _merge(tree, read_yaml(path), sources, path)
    for text in overrides:
        parts, value = parse_override(text)
        update: Any = value
        for part in reversed(parts):
            update = {part: update}
        _merge(tree, update, sources, f"--set {_source_text(text)}")
    folder = os.path.dirname(os.path.abspath(path)) if path is not None else None
    return _with_convention(dataclasses.replace(_build(Config, tree, sources), sources=dict(sources), folder=folder))


def _with_convention(cfg: Config) -> Config:
    """``data.per_rank_batch_size`` given and ``data.global_batch_size`` not: the latter's default is null.

    Both given (not null) is refused by :func:`hvdkeras.config.rules.validate`.
    """
    if cfg.data.per_rank_batch_size is not None and "data.global_batch_size" not in cfg.sources:
        return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, global_batch_size=None))
    return cfg


def from_dict_unchecked(tree: Mapping[str, Any], source: str = "a dict") -> Config:
    """A config from a nested dict (as in ``<workdir>/config.yaml``); keys and types checked, rules not."""
    sources: Dict[str, str] = {}
    merged: Dict[str, Any] = {}
    _merge(merged, tree, sources, source)
    return _with_convention(dataclasses.replace(_build(Config, merged, sources), sources=dict(sources)))


def to_dict(cfg: Config) -> Dict[str, Any]:
    """The config keys as a plain nested dict (tuples become lists), suitable for YAML."""

    def plain(node: Any) -> Any:
        if dataclasses.is_dataclass(node):
            return {f.name: plain(getattr(node, f.name)) for f in schema.fields(type(node))}
        if isinstance(node, tuple):
            return [plain(v) for v in node]
        if isinstance(node, dict):  # trainer.metrics by output holds tuples, which YAML's safe dumper refuses
            return {k: plain(v) for k, v in node.items()}
        return node

    tree: Dict[str, Any] = plain(cfg)
    return tree


def _scalar_text(value: Any) -> str:
    """One value as YAML on one line (a list in flow style), quoted where YAML needs it."""
    return yaml.safe_dump([value], default_flow_style=True, width=1 << 30).strip()[1:-1]


def to_yaml(cfg: Config, auto: Optional[Mapping[str, str]] = None, footer: Sequence[str] = ()) -> str:
    """The resolved config as YAML text, one key per line, with a header line saying what it is.

    ``auto`` (``{"section.key": why}``) marks the values chosen for the user: ``# (auto) why``
    after the value. ``footer`` lines follow as comments (values resolved for the job that
    are not config keys: the global batch, the learning rate, the steps).
    """
    auto = auto or {}
    lines = []
    for section, values in to_dict(cfg).items():
        lines.append(f"{section}:")
        for key, value in values.items():
            why = auto.get(f"{section}.{key}")
            lines.append(f"  {key}: {_scalar_text(value)}" + (f"  # (auto) {why}" if why else ""))
    return HEADER + "\n".join(lines + [f"# {text}" for text in footer]) + "\n"
