"""Typed, strict configuration: defaults -> YAML file -> ``--set`` overrides -> validation.

A config is a tree of frozen dataclasses (:mod:`~hvdkeras.config.schema`).
:func:`load` builds one from a YAML file and ``section.key=value`` overrides
(:mod:`~hvdkeras.config.loader`), checks the rules (:mod:`~hvdkeras.config.rules`)
and returns a :class:`Config` that cannot be changed afterwards: derive a new one
with :func:`dataclasses.replace`, which keeps where each value came from.

Every problem raises :class:`~hvdkeras.common.errors.ConfigError` whose message is one
line naming the key, where its value came from (the file or ``--set``) and what is
allowed. This package imports nothing of hvdkeras but :mod:`hvdkeras.common.errors`, and
neither TensorFlow nor Horovod.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from hvdkeras.common.errors import ConfigError
from hvdkeras.config import loader as _loader
from hvdkeras.config.loader import HEADER, parse_override, read_yaml, to_dict, to_yaml
from hvdkeras.config.rules import locate, source_of, validate, validate_for_world
from hvdkeras.config.schema import (
    CheckpointConfig,
    Config,
    DataConfig,
    ElasticConfig,
    HorovodConfig,
    ModelConfig,
    OptimizerConfig,
    RuntimeConfig,
    ScheduleConfig,
    TrainerConfig,
    is_import_path,
)

__all__ = [
    "CheckpointConfig", "Config", "ConfigError", "DataConfig", "ElasticConfig", "HEADER", "HorovodConfig",
    "ModelConfig", "OptimizerConfig", "RuntimeConfig", "ScheduleConfig", "TrainerConfig", "from_dict",
    "is_import_path", "load", "locate", "parse_override", "read_yaml", "source_of", "to_dict", "to_yaml", "validate",
    "validate_for_world",
]


def load(path: Optional[str] = None, overrides: Sequence[str] = ()) -> Config:
    """Defaults, then the YAML file at ``path``, then each ``section.key=value`` override; validated."""
    cfg = _loader.load_unchecked(path, overrides)
    validate(cfg)
    return cfg


def from_dict(tree: Mapping[str, Any], source: str = "a dict") -> Config:
    """A validated config from a nested dict (as written to ``<workdir>/config.yaml``)."""
    cfg = _loader.from_dict_unchecked(tree, source)
    validate(cfg)
    return cfg
