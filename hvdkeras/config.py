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

    # A built-in dataset (digits, synthetic) or any TensorFlow Datasets name (e.g. imagenet2012, cifar10).
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
    # TensorFlow Datasets only: splits, where prepared data lives, where manual downloads go.
    train_split: str = "train"
    eval_split: Optional[str] = "validation"  # null: no validation
    data_dir: Optional[str] = None  # null: TFDS' default (~/tensorflow_datasets)
    manual_dir: Optional[str] = None  # null: <data_dir>/downloads/manual
    # Per-example transforms (hvdkeras.preprocessing); auto picks by dataset name.
    pipeline: str = dataclasses.field(default="auto", metadata=_choices("auto", "imagenet", "cifar", "mnist"))
    shuffle_buffer: int = 10000  # examples, per rank
    # tf.data: parallel map calls (-1: autotune), prefetch depth in batches (-1: autotune, 0: none),
    # autotuning, deterministic order, private thread pool size (null: the rank's intra-op threads).
    parallel_calls: int = -1
    prefetch: int = -1
    autotune: bool = True
    deterministic: bool = True
    private_threadpool_size: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Model by registry name (see :mod:`hvdkeras.models`)."""

    name: str = "small_cnn"
    dropout: float = 0.25
    # L2 on convolution and dense kernels only (not batch-norm, not biases): adds
    # weight_decay / 2 * ||w||^2 to the loss, i.e. weight_decay * w to each kernel's gradient.
    weight_decay: float = 0.0


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
    # SGD with momentum: rescale the velocity by new_lr / old_lr when the rate changes (Goyal et al.).
    momentum_correction: bool = True


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    # keras: hvdkeras.trainer (model.fit); estimator: hvdkeras.estimator (tf.estimator, TF 2.15 only).
    api: str = dataclasses.field(default="keras", metadata=_choices("keras", "estimator"))
    epochs: int = 10
    # Optimizer steps per epoch on every rank; None: as many full global batches as the data holds.
    steps_per_epoch: Optional[int] = None
    # Validate every N epochs (0: never).
    validation_freq: int = 1
    # Progress output on rank 0: 0 silent, 1 progress bar, 2 one line per epoch.
    verbose: int = dataclasses.field(default=2, metadata={"choices": (0, 1, 2)})
    label_smoothing: float = 0.0
    # Stop every rank at the same batch when any rank's loss is NaN or infinite (one tiny allreduce per batch).
    terminate_on_nan: bool = True
    # Check at the end that all ranks hold identical weights (one small collective).
    check_weights_agree: bool = True
    # Rank 0 writes TensorBoard event files to <workdir>/tensorboard: per epoch the global losses and
    # metrics, lr and images_per_sec (keras API only; the estimator writes its own into <workdir>/estimator).
    tensorboard: bool = False


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
    # Stall inspector: warn (naming the missing ranks) after a collective has waited this long
    # for some ranks (0: off), and shut the job down after stall_shutdown_seconds (0: never).
    stall_warning_seconds: int = 60
    stall_shutdown_seconds: int = 0
    # Horovod's runtime knobs, set before hvd.init(). cycle_time_ms null: chosen from the host and
    # written into <workdir>/config.yaml (10 ms on CPU/Gloo hosts, Horovod's 1 ms on GPU hosts).
    # fusion_threshold_mb null: Horovod's own default; an explicit value crashes
    # Horovod 0.28.1 when an elastic job re-forms, so it is refused with elastic.enabled.
    cycle_time_ms: Optional[float] = None
    fusion_threshold_mb: Optional[int] = None
    cache_capacity: int = 1024
    hierarchical_allreduce: bool = False
    hierarchical_allgather: bool = False
    # Horovod's timeline (written by rank 0; a path relative to the workdir) and autotuning.
    timeline: Optional[str] = None
    timeline_mark_cycles: bool = False
    autotune: bool = False
    autotune_log: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
    """Process setup (see :mod:`hvdkeras.distributed`)."""

    seed: int = 42
    # None: cores_on_host // ranks_on_host (at least 1).
    intra_op_threads: Optional[int] = None
    # None: max(1, intra_op_threads // 4).
    inter_op_threads: Optional[int] = None
    gpu_memory_growth: bool = True
    # Keras mixed precision policy: float32 variables, float16/bfloat16 compute. mixed_float16 adds
    # dynamic loss scaling (applied after Horovod's allreduce, so every rank skips the same steps).
    mixed_precision: str = dataclasses.field(default="none",
                                             metadata=_choices("none", "mixed_float16", "mixed_bfloat16"))
    # XLA-compile the forward and backward pass (the gradient allreduce stays outside XLA).
    jit_compile: bool = False


@dataclasses.dataclass(frozen=True)
class ElasticConfig:
    """Horovod elastic mode (see :mod:`hvdkeras.elastic`); launch with horovodrun --min-np/--max-np."""

    enabled: bool = False
    min_np: int = 1
    max_np: Optional[int] = None
    # Commit the in-memory state every N batches (and at every epoch end).
    commit_every_batches: int = 10
    # keep_global_batch: per-rank batch = global / ranks, same lr; keep_rank_batch: per-rank batch fixed,
    # lr rescaled for the new global batch.
    on_resize: str = dataclasses.field(default="keep_global_batch",
                                       metadata=_choices("keep_global_batch", "keep_rank_batch"))


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
    elastic: ElasticConfig = ElasticConfig()


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


def _finish(cfg: Config, sources: Dict[str, str]) -> Config:
    object.__setattr__(cfg, "_sources", dict(sources))  # for error messages only; not a field
    validate(cfg)
    return cfg


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
    return _finish(_build(Config, tree, sources), sources)


def from_dict(tree: Mapping[str, Any], source: str = "a dict") -> Config:
    """Builds a config from a nested dict (as written to ``<workdir>/config.yaml``)."""
    sources: Dict[str, str] = {}
    merged: Dict[str, Any] = {}
    _merge(merged, tree, sources, source)
    return _finish(_build(Config, merged, sources), sources)


# --------------------------------------------------------------------------- validation


def _value(cfg: Config, key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        node = getattr(node, part)
    return list(node) if isinstance(node, tuple) else node


def source_of(cfg: Config, key: str, default: str = "the defaults") -> str:
    """Where ``key``'s value came from: the YAML file, a ``--set``, or the defaults."""
    return getattr(cfg, "_sources", {}).get(key, default)


class _Checker:
    def __init__(self, cfg: Config):
        self.cfg = cfg

    def __call__(self, ok: bool, key: str, rule: str) -> None:
        """Raises ``<key> in <source> must <rule>; received: <value>`` unless ``ok``."""
        if not ok:
            raise ConfigError(f"{key} in {source_of(self.cfg, key)} must {rule}; received: {_value(self.cfg, key)!r}")


def validate(cfg: Config) -> None:
    """Checks that do not depend on the number of ranks."""
    from hvdkeras import models, optimizers  # registries; imported late

    need = _Checker(cfg)
    d, t, s, o, c, h, r = cfg.data, cfg.trainer, cfg.schedule, cfg.optimizer, cfg.checkpoint, cfg.horovod, cfg.runtime
    need(models.is_known(cfg.model.name), "model.name",
         f"be one of {', '.join(models.names())} or applications.<Name> of keras.applications")
    need(o.name in optimizers.names(), "optimizer.name", f"be one of {', '.join(optimizers.names())}")
    need(d.global_batch_size > 0, "data.global_batch_size", "be > 0")
    need(d.eval_global_batch_size is None or d.eval_global_batch_size > 0, "data.eval_global_batch_size",
         "be > 0 or null (null: same as global_batch_size)")
    need(0.0 < d.validation_fraction < 1.0, "data.validation_fraction", "be between 0 and 1 (exclusive)")
    need(len(d.image_shape) == 3 and all(x > 0 for x in d.image_shape), "data.image_shape",
         "be [height, width, channels] with positive sizes")
    need(d.num_classes >= 2, "data.num_classes", "be >= 2")
    need(d.train_examples > 0, "data.train_examples", "be > 0")
    need(d.eval_examples >= 0, "data.eval_examples", "be >= 0")
    need(d.prefetch >= -1, "data.prefetch", "be -1 (autotune) or >= 0")
    need(d.parallel_calls == -1 or d.parallel_calls > 0, "data.parallel_calls", "be -1 (autotune) or > 0")
    need(d.shuffle_buffer >= 1, "data.shuffle_buffer", "be >= 1")
    need(d.private_threadpool_size is None or d.private_threadpool_size > 0, "data.private_threadpool_size",
         "be > 0 or null (the rank's thread budget)")
    need(cfg.model.weight_decay >= 0, "model.weight_decay", "be >= 0")
    need(0.0 <= cfg.model.dropout < 1.0, "model.dropout", "be in [0, 1)")
    need(o.learning_rate > 0, "optimizer.learning_rate", "be > 0")
    need(o.base_batch_size > 0, "optimizer.base_batch_size", "be > 0")
    need(0.0 <= o.momentum < 1.0, "optimizer.momentum", "be in [0, 1)")
    need(o.weight_decay >= 0, "optimizer.weight_decay", "be >= 0")
    need(o.weight_decay == 0 or o.name == "adamw", "optimizer.weight_decay",
         f"be 0 with optimizer.name={o.name} (decoupled weight decay is used by adamw only)")
    need(o.clipnorm is None or o.clipnorm > 0, "optimizer.clipnorm", "be > 0 or null")
    need(t.epochs > 0, "trainer.epochs", "be > 0")
    need(t.steps_per_epoch is None or t.steps_per_epoch > 0, "trainer.steps_per_epoch", "be > 0 or null")
    need(t.validation_freq >= 0, "trainer.validation_freq", "be >= 0 (0: never validate)")
    need(not t.tensorboard or t.api == "keras", "trainer.tensorboard",
         "be false with trainer.api=estimator (the estimator writes its own summaries into <workdir>/estimator)")
    need(0.0 <= t.label_smoothing < 1.0, "trainer.label_smoothing", "be in [0, 1)")
    need(s.warmup_epochs >= 0, "schedule.warmup_epochs", "be >= 0")
    need(s.name != "step" or len(s.boundaries) > 0, "schedule.boundaries",
         "list at least one epoch for schedule.name=step")
    need(list(s.boundaries) == sorted(s.boundaries) and all(b > s.warmup_epochs for b in s.boundaries),
         "schedule.boundaries", f"be increasing epochs after schedule.warmup_epochs ({s.warmup_epochs})")
    need(0.0 < s.decay_rate <= 1.0, "schedule.decay_rate", "be in (0, 1]")
    need(0.0 <= s.end_lr_fraction <= 1.0, "schedule.end_lr_fraction", "be in [0, 1]")
    need(s.power > 0, "schedule.power", "be > 0")
    need(c.every_epochs > 0, "checkpoint.every_epochs", "be > 0")
    need(c.keep >= 0, "checkpoint.keep", "be >= 0 (0 keeps all)")
    need(h.backward_passes_per_step >= 1, "horovod.backward_passes_per_step", "be >= 1")
    need(h.cycle_time_ms is None or h.cycle_time_ms > 0, "horovod.cycle_time_ms", "be > 0 or null (auto)")
    need(h.fusion_threshold_mb is None or h.fusion_threshold_mb >= 0, "horovod.fusion_threshold_mb",
         "be >= 0 (0: no fusion) or null (auto)")
    need(h.cache_capacity >= 0, "horovod.cache_capacity", "be >= 0 (0: no response cache)")
    need(h.stall_warning_seconds >= 0, "horovod.stall_warning_seconds", "be >= 0 (0: off)")
    need(h.stall_shutdown_seconds == 0 or h.stall_shutdown_seconds > h.stall_warning_seconds,
         "horovod.stall_shutdown_seconds", "be 0 (never) or longer than horovod.stall_warning_seconds")
    e = cfg.elastic
    need(e.min_np >= 1, "elastic.min_np", "be >= 1")
    need(e.max_np is None or e.max_np >= e.min_np, "elastic.max_np", f"be null or >= elastic.min_np ({e.min_np})")
    need(e.commit_every_batches >= 1, "elastic.commit_every_batches", "be >= 1")
    need(not e.enabled or t.api == "keras", "elastic.enabled", "be false with trainer.api=estimator")
    need(not e.enabled or h.fusion_threshold_mb is None, "horovod.fusion_threshold_mb",
         "be null with elastic.enabled (Horovod 0.28.1 segfaults re-forming an elastic job with it set)")
    need(r.intra_op_threads is None or r.intra_op_threads > 0, "runtime.intra_op_threads", "be > 0 or null (auto)")
    need(r.inter_op_threads is None or r.inter_op_threads > 0, "runtime.inter_op_threads", "be > 0 or null (auto)")


def validate_for_world(cfg: Config, num_ranks: int) -> None:
    """Checks that depend on the number of ranks: every global batch must split evenly over them."""
    need = _Checker(cfg)
    need(cfg.data.global_batch_size % num_ranks == 0, "data.global_batch_size",
         f"be divisible by the {num_ranks} ranks (e.g. {max(1, cfg.data.global_batch_size // num_ranks) * num_ranks})")
    if cfg.data.eval_global_batch_size is not None:
        need(cfg.data.eval_global_batch_size % num_ranks == 0, "data.eval_global_batch_size",
             f"be divisible by the {num_ranks} ranks")


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
