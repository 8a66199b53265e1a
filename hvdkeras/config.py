"""Typed, strict configuration: defaults -> YAML file -> ``--set`` overrides -> validation.

A config is a tree of frozen dataclasses. :func:`load` builds one from a YAML file
and a list of ``section.key=value`` overrides (each value parsed as YAML), checks
every key and type, and returns a :class:`Config` that cannot be changed
afterwards (use :func:`dataclasses.replace` to derive a new one).
:func:`validate_for_world` adds the checks that need the number of ranks.

Every problem raises :class:`ConfigError` whose message is one line naming the
key, where it came from (the file or ``--set``) and what is allowed.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import typing
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import yaml


class ConfigError(ValueError):
    """A configuration problem, reported as one line without a traceback."""


def _choices(*values: str) -> Dict[str, Any]:
    return {"choices": values}


# --------------------------------------------------------------------------- sections


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Input pipeline. See :mod:`hvdkeras.data` for the sharding rule."""

    name: str = "digits"
    # Examples per optimizer step summed over all ranks. Each rank's batch is
    # global_batch_size / number of ranks, so it must divide evenly.
    global_batch_size: int = 64
    # Global batch for validation; defaults to global_batch_size.
    eval_global_batch_size: Optional[int] = None
    # Fraction of the embedded digits held out for validation (fixed split).
    validation_fraction: float = 0.2
    # Synthetic data only: image shape, classes and examples per epoch.
    image_shape: Tuple[int, ...] = (224, 224, 3)
    num_classes: int = 1000
    train_examples: int = 1280
    eval_examples: int = 256
    # tf.data prefetch depth (batches); -1 means tf.data.AUTOTUNE.
    prefetch: int = -1


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Model by registry name (see :mod:`hvdkeras.models`)."""

    name: str = "digits_cnn"
    dropout: float = 0.25


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """Optimizer by name and the learning-rate scaling rule (see :mod:`hvdkeras.optimizers`)."""

    name: str = "sgd"
    # The single-process learning rate; the optimizer gets the scaled one.
    learning_rate: float = 0.01
    # ranks: lr * number_of_ranks; global_batch: lr * global_batch_size / base_batch_size; none: lr.
    lr_scaling: str = dataclasses.field(default="ranks", metadata=_choices("ranks", "global_batch", "none"))
    base_batch_size: int = 256
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0  # decoupled weight decay (adamw only)
    clipnorm: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class ScheduleConfig:
    """Learning rate over epochs: linear warmup, then a decay (see :mod:`hvdkeras.schedules`)."""

    name: str = dataclasses.field(default="constant", metadata=_choices("constant", "step", "cosine", "polynomial"))
    # Warm up per batch from scaled_lr / ranks to scaled_lr over this many epochs.
    warmup_epochs: float = 0.0
    # step: multiply by decay_rate at each boundary (in epochs).
    boundaries: Tuple[float, ...] = ()
    decay_rate: float = 0.1
    # cosine / polynomial: the rate reached at the last epoch, as a fraction of scaled_lr.
    end_lr_fraction: float = 0.0
    power: float = 1.0  # polynomial only


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    epochs: int = 10
    # Optimizer steps per epoch on every rank; None: as many full global batches as the data holds.
    steps_per_epoch: Optional[int] = None
    # Validate every N epochs (0: never).
    validation_freq: int = 1
    # Progress output on rank 0: 0 silent, 1 progress bar, 2 one line per epoch.
    verbose: int = dataclasses.field(default=2, metadata={"choices": (0, 1, 2)})
    label_smoothing: float = 0.0
    # Check at the end that all ranks hold identical weights (one small collective).
    check_weights_agree: bool = True


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    enabled: bool = True
    # Save after every N epochs (the last epoch is always saved).
    every_epochs: int = 1
    # How many checkpoints to keep (oldest removed first); 0 keeps all.
    keep: int = 3
    # Continue from the latest checkpoint in <workdir>/checkpoints if there is one.
    resume: bool = True


@dataclasses.dataclass(frozen=True)
class HorovodConfig:
    """Options of Horovod's DistributedOptimizer."""

    compression: str = dataclasses.field(default="none", metadata=_choices("none", "fp16"))
    backward_passes_per_step: int = 1
    average_aggregated_gradients: bool = True
    sparse_as_dense: bool = False


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
    """Process setup (see :mod:`hvdkeras.distributed`)."""

    seed: int = 42
    # None: cores_on_host // ranks_on_host (at least 1).
    intra_op_threads: Optional[int] = None
    # None: max(1, intra_op_threads // 4).
    inter_op_threads: Optional[int] = None
    gpu_memory_growth: bool = True


@dataclasses.dataclass(frozen=True)
class Config:
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    trainer: TrainerConfig = TrainerConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    horovod: HorovodConfig = HorovodConfig()
    runtime: RuntimeConfig = RuntimeConfig()


# --------------------------------------------------------------------------- building


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        return f"{_type_name(inner[0])} or null"
    if origin in (tuple, list, Tuple, List):
        return f"list of {_type_name(args[0])}"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str, source: str) -> Any:
    """Checks ``value`` against the field type ``tp``; returns the typed value."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)

    def bad() -> ConfigError:
        return ConfigError(
            f"{key} in {source} must be {_type_name(tp)}; received: {value!r} ({type(value).__name__})"
        )

    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], key, source)
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise bad()
        return tuple(_coerce(v, args[0], f"{key}[{i}]", source) for i, v in enumerate(value))
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad()
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise bad()
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads 1e-4 as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise bad()
    if tp is str:
        if isinstance(value, str):
            return value
        raise bad()
    raise bad()


def _resolved_hints(cls: type) -> Dict[str, Any]:
    return typing.get_type_hints(cls)


def _build(cls: type, raw: Mapping[str, Any], sources: Mapping[str, str], prefix: str = "") -> Any:
    """Builds dataclass ``cls`` from defaults overlaid with ``raw`` (already merged)."""
    hints = _resolved_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for name, value in raw.items():
        key = f"{prefix}{name}"
        if name not in fields:
            raise _unknown_key(key, sources.get(key, "the config"), cls, prefix)
        tp = hints[name]
        source = sources.get(key, "the config")
        if _is_dataclass_type(tp):
            if not isinstance(value, Mapping):
                raise ConfigError(
                    f"{key} in {source} must be a mapping of {', '.join(sorted(f.name for f in dataclasses.fields(tp)))};"
                    f" received: {value!r}"
                )
            kwargs[name] = _build(tp, value, sources, prefix=f"{key}.")
        else:
            typed = _coerce(value, tp, key, source)
            choices = fields[name].metadata.get("choices")
            if choices is not None and typed not in choices:
                raise ConfigError(
                    f"{key} in {source} must be one of {', '.join(map(str, choices))}; received: {typed!r}"
                )
            kwargs[name] = typed
    return cls(**kwargs)


def _unknown_key(key: str, source: str, cls: type, prefix: str) -> ConfigError:
    valid = [f.name for f in dataclasses.fields(cls)]
    leaf = key[len(prefix):]
    close = difflib.get_close_matches(leaf, valid, n=1)
    hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
    where = f"section '{prefix[:-1]}'" if prefix else "the top level"
    return ConfigError(
        f"unknown key '{key}' in {source}{hint}; valid keys in {where}: {', '.join(valid)}"
    )


def _merge(base: Dict[str, Any], update: Mapping[str, Any], sources: Dict[str, str], source: str,
           prefix: str = "") -> None:
    for name, value in update.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping) and isinstance(base.get(name), dict):
            _merge(base[name], value, sources, source, prefix=f"{key}.")
        else:
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
        raise ConfigError(f"--set {text!r} must look like section.key=value, e.g. --set optimizer.learning_rate=0.1")
    path, _, raw = text.partition("=")
    parts = path.strip().split(".")
    if any(not p for p in parts):
        raise ConfigError(f"--set {text!r} has an empty key; write section.key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {text!r}: the value is not valid YAML ({str(exc).splitlines()[0]})") from None
    return parts, value


def _read_yaml(path: str) -> Dict[str, Any]:
    if not os.path.exists(path):
        raise ConfigError(f"config file {path} does not exist; pass an existing YAML file with --config (see configs/)")
    try:
        with open(path) as f:
            tree = yaml.safe_load(f)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if tree is None:
        return {}
    if not isinstance(tree, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections; received a {type(tree).__name__}")
    return tree


def load(path: Optional[str] = None, overrides: Sequence[str] = ()) -> Config:
    """Defaults, then the YAML file at ``path``, then each ``section.key=value`` override."""
    tree: Dict[str, Any] = {}
    sources: Dict[str, str] = {}
    if path is not None:
        _merge(tree, _read_yaml(path), sources, path)
    for text in overrides:
        parts, value = parse_override(text)
        update: Dict[str, Any] = value
        for part in reversed(parts):
            update = {part: update}
        _merge(tree, update, sources, f"--set {text}")
    cfg = _build(Config, tree, sources)
    validate(cfg, source=path or "the defaults")
    return cfg


def from_dict(tree: Mapping[str, Any], source: str = "a dict") -> Config:
    """Builds a config from a nested dict (as written to ``<workdir>/config.yaml``)."""
    sources: Dict[str, str] = {}
    merged: Dict[str, Any] = {}
    _merge(merged, tree, sources, source)
    cfg = _build(Config, merged, sources)
    validate(cfg, source=source)
    return cfg


# --------------------------------------------------------------------------- validation


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def validate(cfg: Config, source: str = "the config") -> None:
    """Checks that do not depend on the number of ranks."""
    from hvdkeras import data, models, optimizers  # registries; imported late

    d, t, s, o, c, h, r = cfg.data, cfg.trainer, cfg.schedule, cfg.optimizer, cfg.checkpoint, cfg.horovod, cfg.runtime
    _require(d.name in data.names(),
             f"data.name in {source} must be one of {', '.join(data.names())}; received: {d.name!r}")
    _require(cfg.model.name in models.names(),
             f"model.name in {source} must be one of {', '.join(models.names())}; received: {cfg.model.name!r}")
    _require(o.name in optimizers.names(),
             f"optimizer.name in {source} must be one of {', '.join(optimizers.names())}; received: {o.name!r}")
    _require(d.global_batch_size > 0, f"data.global_batch_size in {source} must be > 0; received: {d.global_batch_size}")
    _require(d.eval_global_batch_size is None or d.eval_global_batch_size > 0,
             f"data.eval_global_batch_size in {source} must be > 0 or null; received: {d.eval_global_batch_size}")
    _require(0.0 < d.validation_fraction < 1.0,
             f"data.validation_fraction in {source} must be between 0 and 1 (exclusive); received: {d.validation_fraction}")
    _require(len(d.image_shape) == 3 and all(x > 0 for x in d.image_shape),
             f"data.image_shape in {source} must be [height, width, channels] with positive sizes; received: {list(d.image_shape)}")
    _require(d.num_classes >= 2, f"data.num_classes in {source} must be >= 2; received: {d.num_classes}")
    _require(d.train_examples > 0 and d.eval_examples >= 0,
             f"data.train_examples must be > 0 and data.eval_examples >= 0 in {source}; received: {d.train_examples}, {d.eval_examples}")
    _require(d.prefetch == -1 or d.prefetch >= 0, f"data.prefetch in {source} must be -1 (autotune) or >= 0; received: {d.prefetch}")
    _require(0.0 <= cfg.model.dropout < 1.0, f"model.dropout in {source} must be in [0, 1); received: {cfg.model.dropout}")
    _require(o.learning_rate > 0, f"optimizer.learning_rate in {source} must be > 0; received: {o.learning_rate}")
    _require(o.base_batch_size > 0, f"optimizer.base_batch_size in {source} must be > 0; received: {o.base_batch_size}")
    _require(0.0 <= o.momentum < 1.0, f"optimizer.momentum in {source} must be in [0, 1); received: {o.momentum}")
    _require(o.weight_decay >= 0, f"optimizer.weight_decay in {source} must be >= 0; received: {o.weight_decay}")
    _require(o.weight_decay == 0 or o.name == "adamw",
             f"optimizer.weight_decay in {source} is only used by optimizer.name=adamw; received name {o.name!r}"
             f" with weight_decay {o.weight_decay} (set it to 0 or use adamw)")
    _require(o.clipnorm is None or o.clipnorm > 0, f"optimizer.clipnorm in {source} must be > 0 or null; received: {o.clipnorm}")
    _require(t.epochs > 0, f"trainer.epochs in {source} must be > 0; received: {t.epochs}")
    _require(t.steps_per_epoch is None or t.steps_per_epoch > 0,
             f"trainer.steps_per_epoch in {source} must be > 0 or null; received: {t.steps_per_epoch}")
    _require(t.validation_freq >= 0, f"trainer.validation_freq in {source} must be >= 0; received: {t.validation_freq}")
    _require(0.0 <= t.label_smoothing < 1.0,
             f"trainer.label_smoothing in {source} must be in [0, 1); received: {t.label_smoothing}")
    _require(s.warmup_epochs >= 0, f"schedule.warmup_epochs in {source} must be >= 0; received: {s.warmup_epochs}")
    _require(s.warmup_epochs < t.epochs or s.warmup_epochs == 0,
             f"schedule.warmup_epochs ({s.warmup_epochs}) in {source} must be shorter than trainer.epochs ({t.epochs})")
    _require(s.name != "step" or len(s.boundaries) > 0,
             f"schedule.boundaries in {source} must list at least one epoch for schedule.name=step; received: []")
    _require(list(s.boundaries) == sorted(s.boundaries) and all(b > s.warmup_epochs for b in s.boundaries),
             f"schedule.boundaries in {source} must be increasing epochs after schedule.warmup_epochs ({s.warmup_epochs});"
             f" received: {list(s.boundaries)}")
    _require(0.0 < s.decay_rate <= 1.0, f"schedule.decay_rate in {source} must be in (0, 1]; received: {s.decay_rate}")
    _require(0.0 <= s.end_lr_fraction <= 1.0,
             f"schedule.end_lr_fraction in {source} must be in [0, 1]; received: {s.end_lr_fraction}")
    _require(s.power > 0, f"schedule.power in {source} must be > 0; received: {s.power}")
    _require(c.every_epochs > 0, f"checkpoint.every_epochs in {source} must be > 0; received: {c.every_epochs}")
    _require(c.keep >= 0, f"checkpoint.keep in {source} must be >= 0 (0 keeps all); received: {c.keep}")
    _require(h.backward_passes_per_step >= 1,
             f"horovod.backward_passes_per_step in {source} must be >= 1; received: {h.backward_passes_per_step}")
    _require(r.intra_op_threads is None or r.intra_op_threads > 0,
             f"runtime.intra_op_threads in {source} must be > 0 or null (auto); received: {r.intra_op_threads}")
    _require(r.inter_op_threads is None or r.inter_op_threads > 0,
             f"runtime.inter_op_threads in {source} must be > 0 or null (auto); received: {r.inter_op_threads}")


def validate_for_world(cfg: Config, num_ranks: int, source: str = "the config") -> None:
    """Checks that depend on the number of ranks: every global batch must split evenly."""
    d = cfg.data
    _require(d.global_batch_size % num_ranks == 0,
             f"data.global_batch_size={d.global_batch_size} in {source} is not divisible by the {num_ranks} ranks;"
             f" use a multiple of {num_ranks} (e.g. {max(num_ranks, d.global_batch_size // num_ranks * num_ranks)})")
    eval_batch = d.eval_global_batch_size or d.global_batch_size
    _require(eval_batch % num_ranks == 0,
             f"data.eval_global_batch_size={eval_batch} in {source} is not divisible by the {num_ranks} ranks;"
             f" use a multiple of {num_ranks}")


# --------------------------------------------------------------------------- output


def to_dict(cfg: Config) -> Dict[str, Any]:
    """Plain nested dict (tuples become lists) suitable for YAML."""

    def plain(x: Any) -> Any:
        if isinstance(x, tuple):
            return [plain(v) for v in x]
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        return x

    return plain(dataclasses.asdict(cfg))


def to_yaml(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False, default_flow_style=None)


def save(cfg: Config, path: str) -> None:
    """Writes the resolved config atomically (temp file, then rename)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write("# Resolved hvdkeras config: defaults, then the file, then --set overrides.\n")
        f.write(to_yaml(cfg))
    os.replace(tmp, path)
