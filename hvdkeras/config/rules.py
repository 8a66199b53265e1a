"""The rules a config must satisfy beyond its keys' types, each failure one line naming the key and its source.

:func:`validate` holds the rules that do not depend on the number of ranks;
:func:`validate_for_world` the ones that do (every global batch splits evenly over
the ranks). Names that a registry resolves (``model.name``, ``optimizer.name``,
``data.name``) are checked where they are built, with the same kind of message
(:func:`locate` adds the source).
"""
from __future__ import annotations

from typing import Any

from hvdkeras.common.errors import ConfigError
from hvdkeras.config.schema import Config, TrainerConfig, is_import_path

DEFAULT_LOSS = TrainerConfig.loss


def source_of(cfg: Config, key: str, default: str = "the defaults") -> str:
    """Where ``key``'s value came from: the YAML file, a ``--set``, or the defaults."""
    return cfg.sources.get(key, default)


def locate(cfg: Config, error: ConfigError) -> ConfigError:
    """``error`` naming where its key's value came from in ``cfg`` (raised by builders that see one section); an
    error about one name of a mapping (``trainer.loss`` received ``'prize'``) names where that name came from."""
    if not error.key:
        return error
    named = f"{error.key}.{error.received}" if isinstance(error.received, str) else None
    return error.with_source((cfg.sources.get(named) if named else None) or source_of(cfg, error.key))


def value_of(cfg: Config, key: str) -> Any:
    """The config value at a dotted key (``trainer.epochs``), tuples given as lists (also inside a mapping)."""
    node: Any = cfg
    for part in key.split("."):
        node = getattr(node, part)
    if isinstance(node, dict):
        return {k: list(v) if isinstance(v, tuple) else v for k, v in node.items()}
    return list(node) if isinstance(node, tuple) else node


class _Rules:
    """``need(ok, key, rule)`` raises ``<key> in <source> must <rule>; received: <value>`` unless ``ok``; with
    ``name`` (one name of a mapping), the source is where that name came from if it has its own."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    def __call__(self, ok: bool, key: str, rule: str, name: Any = None) -> None:
        if not ok:
            source = self.cfg.sources.get(f"{key}.{name}") if name is not None else None
            raise ConfigError.for_key(key, rule, value_of(self.cfg, key), source or source_of(self.cfg, key))


# What the Estimator path (trainer.api: estimator) does not honour, with why: a value other than the
# default is refused for it in one line, rather than ignored.
ESTIMATOR_IGNORES = {
    "checkpoint.enabled": "tf.estimator always writes its checkpoints",
    "checkpoint.resume": "tf.estimator always resumes from its model_dir",
    "checkpoint.preemption": "it has no preemption checkpoint",
    "checkpoint.preemption_grace_s": "it has no preemption checkpoint",
    "checkpoint.on_save_error": "tf.estimator's own saver handles its errors",
    "trainer.terminate_on_nan": "tf.estimator has its own NaN handling (NanTensorHook)",
    "trainer.check_weights_agree": "it always checks the ranks' weights at the end",
    "trainer.check_divergence": "it compares the ranks' weights at the end only",
    "trainer.verbose": "tf.estimator logs itself",
    "runtime.mixed_precision": "its tf.compat.v1 optimizers have no loss scaling here",
    "runtime.jit_compile": "it builds a tf.compat.v1 graph",
    "optimizer.clipnorm": "its tf.compat.v1 optimizers are built without clipping",
    "schedule.momentum_correction": "its rate is a graph tensor the momentum optimizer reads as is",
}


def _estimator_rules(cfg: Config, need: _Rules) -> None:
    defaults = Config()
    for key, why in ESTIMATOR_IGNORES.items():
        default = value_of(defaults, key)
        need(value_of(cfg, key) == default, key,
             f"stay at its default ({default}) with trainer.api=estimator, which does not honour it ({why})")
    for key in ("data.name", "model.name"):
        need(not is_import_path(value_of(cfg, key)), key, "be a built-in name with trainer.api=estimator (your own"
             " package.module:function pieces are for trainer.api=keras)")
    for key in ("trainer.loss", "trainer.metrics", "trainer.loss_weights"):
        default = value_of(defaults, key)
        need(value_of(cfg, key) == default, key, f"stay at its default ({default}) with trainer.api=estimator,"
             " whose model function has its own loss and accuracy")


def _output_rules(trainer: TrainerConfig, need: _Rules) -> None:
    """``trainer.loss``, ``trainer.metrics`` and ``trainer.loss_weights``, alone and by output name. Whether the
    names are the model's outputs is checked when the model is built (:mod:`hvdkeras.training.tasks`)."""
    loss, metrics, weights = trainer.loss, trainer.metrics, trainer.loss_weights
    if isinstance(loss, dict):
        need(bool(loss), "trainer.loss", "map at least one output name to a loss (or be one loss for every output)")
        empty = [output for output, name in loss.items() if not name]
        need(not empty, "trainer.loss", "map each output name to a Keras loss name or your own"
             " package.module:function", empty[0] if empty else None)
    else:
        need(bool(loss), "trainer.loss", "be a Keras loss name or your own package.module:function")
    for output, names in (metrics.items() if isinstance(metrics, dict) else [(None, metrics)]):
        need(len(names) == len(set(names)), "trainer.metrics", "name each metric once"
             + (f" per output (output {output!r} repeats one)" if output is not None else ""), output)
    if weights is not None:
        bad = sorted(k for k, w in weights.items() if not 0 <= w < float("inf"))
        need(not bad, "trainer.loss_weights", f"map output names to weights >= 0 (not {', '.join(bad)})",
             bad[0] if bad else None)
        if isinstance(loss, dict):
            extra = sorted(set(weights) - set(loss))
            need(not extra, "trainer.loss_weights", f"weigh only outputs that trainer.loss names ({', '.join(loss)});"
                 f" {', '.join(extra)} has no loss", extra[0] if extra else None)


def validate(cfg: Config) -> None:
    """The rules that do not depend on the number of ranks."""
    need = _Rules(cfg)
    data, model, opt, sched = cfg.data, cfg.model, cfg.optimizer, cfg.schedule
    trainer, ckpt, hvd, runtime, elastic = cfg.trainer, cfg.checkpoint, cfg.horovod, cfg.runtime, cfg.elastic

    if (data.global_batch_size is None) == (data.per_rank_batch_size is None):
        raise ConfigError(
            f"set one of data.global_batch_size (the same global batch on any number of ranks) and"
            f" data.per_rank_batch_size (Horovod's convention: the global batch grows with the ranks); received"
            f" data.global_batch_size={data.global_batch_size!r} ({source_of(cfg, 'data.global_batch_size')}) and"
            f" data.per_rank_batch_size={data.per_rank_batch_size!r} ({source_of(cfg, 'data.per_rank_batch_size')})")
    need(data.global_batch_size is None or data.global_batch_size > 0, "data.global_batch_size", "be > 0")
    need(data.per_rank_batch_size is None or data.per_rank_batch_size > 0, "data.per_rank_batch_size", "be > 0")
    need(opt.lr_scaling != "ranks" or data.per_rank_batch_size is not None, "optimizer.lr_scaling",
         f"not be ranks with data.global_batch_size={data.global_batch_size}"
         f" ({source_of(cfg, 'data.global_batch_size')}):"
         " the global batch stays the same on any number of ranks, so x ranks would change the rate with the rank"
         " count alone; use optimizer.lr_scaling=global_batch with optimizer.base_batch_size (the batch the rate"
         " was tuned for), or set data.per_rank_batch_size instead of data.global_batch_size (Horovod's convention:"
         " a fixed batch per rank)")
    need(data.eval_global_batch_size is None or data.eval_global_batch_size > 0, "data.eval_global_batch_size",
         "be > 0 or null (null: same as global_batch_size)")
    need(0.0 < data.validation_fraction < 1.0, "data.validation_fraction", "be between 0 and 1 (exclusive)")
    need(len(data.image_shape) == 3 and all(x > 0 for x in data.image_shape), "data.image_shape",
         "be [height, width, channels] with positive sizes")
    need(data.num_classes >= 2, "data.num_classes", "be >= 2")
    need(data.train_examples > 0, "data.train_examples", "be > 0")
    need(data.eval_examples >= 0, "data.eval_examples", "be >= 0")
    need(data.prefetch >= -1, "data.prefetch", "be -1 (autotune) or >= 0")
    need(data.parallel_calls == -1 or data.parallel_calls > 0, "data.parallel_calls", "be -1 (autotune) or > 0")
    need(data.shuffle_buffer >= 1, "data.shuffle_buffer", "be >= 1")
    need(data.private_threadpool_size is None or data.private_threadpool_size > 0, "data.private_threadpool_size",
         "be > 0 or null (the rank's thread budget)")

    need(not data.args or is_import_path(data.name), "data.args",
         f"be empty with the built-in data.name={data.name!r} (data.args are the keyword arguments of your own"
         " data.name: package.module:function)")
    need(not model.args or is_import_path(model.name), "model.args",
         f"be empty with the built-in model.name={model.name!r} (model.args are the keyword arguments of your own"
         " model.name: package.module:function; a built-in model takes model.dropout and model.weight_decay)")
    need(model.weight_decay >= 0, "model.weight_decay", "be >= 0")
    need(0.0 <= model.dropout < 1.0, "model.dropout", "be in [0, 1)")

    need(opt.learning_rate > 0, "optimizer.learning_rate", "be > 0")
    need(opt.base_batch_size > 0, "optimizer.base_batch_size", "be > 0")
    need(0.0 <= opt.momentum < 1.0, "optimizer.momentum", "be in [0, 1)")
    need(opt.weight_decay >= 0, "optimizer.weight_decay", "be >= 0")
    need(opt.weight_decay == 0 or opt.name == "adamw", "optimizer.weight_decay",
         f"be 0 with optimizer.name={opt.name} (decoupled weight decay is used by adamw only)")
    need(opt.clipnorm is None or opt.clipnorm > 0, "optimizer.clipnorm", "be > 0 or null")

    need(trainer.epochs > 0, "trainer.epochs", "be > 0")
    need(trainer.steps_per_epoch is None or trainer.steps_per_epoch > 0, "trainer.steps_per_epoch", "be > 0 or null")
    need(trainer.validation_freq >= 0, "trainer.validation_freq", "be >= 0 (0: never validate)")
    need(not trainer.tensorboard or trainer.api == "keras", "trainer.tensorboard",
         "be false with trainer.api=estimator (the estimator writes its own summaries into <workdir>/estimator)")
    need(0.0 <= trainer.label_smoothing < 1.0, "trainer.label_smoothing", "be in [0, 1)")
    need(trainer.label_smoothing == 0 or trainer.loss == DEFAULT_LOSS, "trainer.label_smoothing",
         f"be 0 with trainer.loss={trainer.loss!r} (label smoothing belongs to the default loss, {DEFAULT_LOSS})")
    _output_rules(trainer, need)

    need(sched.warmup_epochs >= 0, "schedule.warmup_epochs", "be >= 0")
    need(sched.warmup_epochs == 0 or opt.lr_scaling != "none", "schedule.warmup_epochs",
         "be 0 with optimizer.lr_scaling=none (warmup rises from optimizer.learning_rate to the scaled rate, and"
         " without scaling the two are equal); scale the rate with optimizer.lr_scaling=global_batch")
    need(sched.name != "step" or len(sched.boundaries) > 0, "schedule.boundaries",
         "list at least one epoch for schedule.name=step")
    need(list(sched.boundaries) == sorted(sched.boundaries) and all(b > sched.warmup_epochs for b in sched.boundaries),
         "schedule.boundaries", f"be increasing epochs after schedule.warmup_epochs ({sched.warmup_epochs})")
    need(0.0 < sched.decay_rate <= 1.0, "schedule.decay_rate", "be in (0, 1]")
    need(0.0 <= sched.end_lr_fraction <= 1.0, "schedule.end_lr_fraction", "be in [0, 1]")
    need(sched.power > 0, "schedule.power", "be > 0")

    need(ckpt.every_epochs > 0, "checkpoint.every_epochs", "be > 0")
    need(ckpt.keep >= 0, "checkpoint.keep", "be >= 0 (0 keeps all)")
    need(ckpt.preemption_grace_s > 0, "checkpoint.preemption_grace_s", "be > 0 (seconds)")

    need(hvd.backward_passes_per_step >= 1, "horovod.backward_passes_per_step", "be >= 1")
    need(hvd.groups >= 0, "horovod.groups", "be >= 0 (0: one request per gradient)")
    need(hvd.idle_wait_ms >= 0, "horovod.idle_wait_ms", "be >= 0 (0: Horovod's own loop)")
    need(hvd.cycle_time_ms is None or hvd.cycle_time_ms > 0, "horovod.cycle_time_ms",
         "be > 0 or null (Horovod's own 1 ms)")
    need(hvd.fusion_threshold_mb is None or hvd.fusion_threshold_mb >= 0, "horovod.fusion_threshold_mb",
         "be >= 0 (0: no fusion) or null (auto)")
    need(hvd.cache_capacity >= 0, "horovod.cache_capacity", "be >= 0 (0: no response cache)")
    need(hvd.stall_warning_seconds >= 0, "horovod.stall_warning_seconds", "be >= 0 (0: off)")
    need(hvd.stall_shutdown_seconds == 0 or hvd.stall_shutdown_seconds > hvd.stall_warning_seconds,
         "horovod.stall_shutdown_seconds", "be 0 (never) or longer than horovod.stall_warning_seconds")

    need(elastic.min_np >= 1, "elastic.min_np", "be >= 1")
    need(elastic.max_np is None or elastic.max_np >= elastic.min_np, "elastic.max_np",
         f"be null or >= elastic.min_np ({elastic.min_np})")
    need(elastic.commit_every_batches >= 1, "elastic.commit_every_batches", "be >= 1")
    need(not elastic.enabled or trainer.api == "keras", "elastic.enabled", "be false with trainer.api=estimator")
    if trainer.api == "estimator":
        _estimator_rules(cfg, need)
    need(not elastic.enabled or hvd.compression != "auto", "horovod.compression",
         "be none or fp16 with elastic.enabled (auto decides by the hosts of the current world, so ranks that"
         " join later could send another wire format than the ranks already training)")
    need(not elastic.enabled or hvd.fusion_threshold_mb is None, "horovod.fusion_threshold_mb",
         "be null with elastic.enabled (Horovod 0.28.1 segfaults re-forming an elastic job with it set)")

    need(not runtime.profile_batches or (len(runtime.profile_batches) == 2
                                         and 1 <= runtime.profile_batches[0] <= runtime.profile_batches[1]),
         "runtime.profile_batches", "be [] (no profile) or [start, stop] with 1 <= start <= stop")
    need(not runtime.profile_batches or trainer.api == "keras", "runtime.profile_batches",
         "be [] with trainer.api=estimator (its hooks are its own: tf.estimator.ProfilerHook)")
    need(runtime.intra_op_threads is None or runtime.intra_op_threads > 0, "runtime.intra_op_threads",
         "be > 0 or null (auto)")
    need(runtime.inter_op_threads is None or runtime.inter_op_threads > 0, "runtime.inter_op_threads",
         "be > 0 or null (auto)")


def validate_for_world(cfg: Config, num_ranks: int) -> None:
    """The rules that depend on the number of ranks: every global batch must split evenly over them."""
    need = _Rules(cfg)
    batch = cfg.data.global_batch_size
    # None: per_rank_batch_size x ranks, which always divides
    need(batch is None or batch % num_ranks == 0, "data.global_batch_size",
         f"be divisible by the {num_ranks} ranks (e.g. {max(1, (batch or 1) // num_ranks) * num_ranks})")
    if cfg.data.eval_global_batch_size is not None:
        need(cfg.data.eval_global_batch_size % num_ranks == 0, "data.eval_global_batch_size",
             f"be divisible by the {num_ranks} ranks")
