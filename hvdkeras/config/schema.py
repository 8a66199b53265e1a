"""The configuration schema: one frozen dataclass per section, with defaults and allowed choices.

The YAML keys are the field names (``data.global_batch_size``...). A comment above a
field is its documentation; ``choices`` in a field's metadata lists the values the
loader accepts. Nothing here reads files or checks rules across fields: see
:mod:`hvdkeras.config.loader` and :mod:`hvdkeras.config.rules`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Optional, Tuple, Union


def _choices(*values: Any) -> Dict[str, Any]:
    return {"choices": values}


# The largest value each number may take (a tuple's elements each): counts and sizes past these would exhaust
# memory or time before they did anything useful, and a typo such as an extra zero ends here in one line rather
# than hours later. Every float must also be finite. Loss weights are bounded by LOSS_WEIGHT_MAX.
MAXIMA: Dict[str, float] = {
    "data.global_batch_size": 2**24, "data.per_rank_batch_size": 2**24, "data.eval_global_batch_size": 2**24,
    "data.validation_fraction": 1.0, "data.image_shape": 2**16, "data.num_classes": 10**7,
    "data.train_examples": 10**11, "data.eval_examples": 10**11, "data.shuffle_buffer": 10**8,
    "data.parallel_calls": 1024, "data.prefetch": 1024, "data.private_threadpool_size": 4096,
    "model.dropout": 1.0, "model.weight_decay": 1.0,
    "optimizer.learning_rate": 1e6, "optimizer.base_batch_size": 2**24, "optimizer.momentum": 1.0,
    "optimizer.weight_decay": 1.0, "optimizer.clipnorm": 1e12,
    "schedule.warmup_epochs": 10**6, "schedule.boundaries": 10**6, "schedule.decay_rate": 1e6,
    "schedule.end_lr_fraction": 1.0, "schedule.power": 1e3,
    "trainer.epochs": 10**6, "trainer.steps_per_epoch": 10**9, "trainer.validation_freq": 10**6,
    "trainer.label_smoothing": 1.0,
    "checkpoint.every_epochs": 10**6, "checkpoint.keep": 10**4, "checkpoint.preemption_grace_s": 86400.0,
    "horovod.backward_passes_per_step": 1024, "horovod.groups": 10**4, "horovod.stall_warning_seconds": 7 * 86400,
    "horovod.stall_shutdown_seconds": 7 * 86400, "horovod.cycle_time_ms": 60000.0, "horovod.idle_wait_ms": 60000.0,
    "horovod.fusion_threshold_mb": 65536, "horovod.cache_capacity": 10**6,
    "runtime.seed": 2**31 - 1, "runtime.intra_op_threads": 4096, "runtime.inter_op_threads": 4096,
    "runtime.profile_batches": 10**9,
    "elastic.min_np": 2**20, "elastic.max_np": 2**20, "elastic.commit_every_batches": 10**6,
}
LOSS_WEIGHT_MAX = 1e6


def maximum(key: str) -> Optional[float]:
    """The largest value ``key``'s numbers may take (:data:`MAXIMA`, :data:`LOSS_WEIGHT_MAX`); None: unbounded."""
    return LOSS_WEIGHT_MAX if key == "trainer.loss_weights" else MAXIMA.get(key)


def maximum_text(limit: float) -> str:
    """A maximum as messages and the reference write it: a whole number without its ``.0``."""
    return str(int(limit)) if float(limit).is_integer() else str(limit)


def is_import_path(name: Any) -> bool:
    """Whether a name (``model.name``, ``data.name``, ``trainer.loss``, a metric) is your own
    ``package.module:function`` rather than a built-in or Keras name. A TensorFlow Datasets name with a version
    (``cifar10:3.0.2``) is not: what follows its colon starts with a digit."""
    if not isinstance(name, str) or ":" not in name:
        return False
    attribute = name.partition(":")[2]
    return bool(attribute) and not attribute[0].isdigit() and not attribute.startswith("*")


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Input pipeline. See :mod:`hvdkeras.training.data` for the sharding rule."""

    # A built-in dataset (digits, synthetic), any TensorFlow Datasets name (e.g. imagenet2012, cifar10), or your
    # own "package.module:function" returning (train, validation) tf.data.Datasets of (features, label) pairs.
    name: str = "digits"
    # Keyword arguments for data.name's function (your own data only).
    args: Dict[str, Any] = dataclasses.field(default_factory=dict)
    # Examples per optimizer step summed over all ranks, the same on any number of ranks. Each rank's
    # batch is global_batch_size / number of ranks, so it must divide evenly.
    global_batch_size: Optional[int] = 64
    # Horovod's convention instead: a fixed batch per rank, so the global batch is per_rank_batch_size x
    # ranks and grows with them. Set one of the two; with this one, global_batch_size is null.
    per_rank_batch_size: Optional[int] = None
    # Global batch for validation; null: the training global batch.
    eval_global_batch_size: Optional[int] = None
    # Fraction of the embedded digits held out for validation (fixed split).
    validation_fraction: float = 0.2
    # Synthetic data only: image shape, classes and examples per epoch (num_classes also for a built-in model on
    # your own data).
    image_shape: Tuple[int, ...] = (224, 224, 3)
    num_classes: int = 1000  # classes of the labels
    train_examples: int = 1280  # training examples per epoch (also sizes your own data's epoch when set)
    eval_examples: int = 256  # validation examples
    # TensorFlow Datasets only: the split trained on.
    train_split: str = "train"
    eval_split: Optional[str] = "validation"  # TensorFlow Datasets only: the split validated on; null: no validation
    data_dir: Optional[str] = None  # where prepared TFDS data lives; null: TFDS' default (~/tensorflow_datasets)
    manual_dir: Optional[str] = None  # where TFDS' manual downloads go; null: <data_dir>/downloads/manual
    # Per-example transforms (hvdkeras.training.preprocessing); auto picks by dataset name.
    pipeline: str = dataclasses.field(default="auto", metadata=_choices("auto", "imagenet", "cifar", "mnist"))
    shuffle_buffer: int = 10000  # the shuffle buffer, in examples, per rank
    # tf.data's parallel map calls (-1: autotune). tf.data's autotuning (data.autotune) is off by default: its
    # thread holds an iterator's end (fit's, each validation pass's) until its next optimization; without it -1
    # means the thread pool's size (at most 16) and a prefetch buffer that grows while training waits, at the same
    # input rate (docs/performance.md#figures-behind-defaults).
    parallel_calls: int = -1
    prefetch: int = -1  # tf.data prefetch depth in batches (-1: autotune, 0: none)
    autotune: bool = False  # tf.data's autotuning (off: see data.parallel_calls)
    deterministic: bool = True  # tf.data keeps the examples' order (the same run twice sees the same batches)
    private_threadpool_size: Optional[int] = None  # tf.data's private thread pool; null: the rank's intra-op threads


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Model by registry name (see :mod:`hvdkeras.training.models`), or your own function by import path."""

    # A built-in model (small_cnn, mlp, resnet20, resnet56, resnet50, applications.<Name>), or your own
    # "package.module:function" returning an uncompiled Keras model.
    name: str = "small_cnn"
    # Keyword arguments for model.name's function (your own model only).
    args: Dict[str, Any] = dataclasses.field(default_factory=dict)
    # The built-in models' dropout rate (your own function takes its settings from model.args).
    dropout: float = 0.25
    # L2 on convolution and dense kernels only (not batch-norm, not biases): adds
    # weight_decay / 2 * ||w||^2 to the loss, i.e. weight_decay * w to each kernel's gradient.
    weight_decay: float = 0.0


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """Optimizer by name and the learning-rate scaling rule (see :mod:`hvdkeras.training.optimizers`)."""

    # sgd, adam, adamw or rmsprop (hvdkeras.training.optimizers; the estimator API: sgd, adam, rmsprop).
    name: str = "sgd"
    # The rate for a reference batch of examples; the optimizer gets the rate scaled to the global batch
    # (the linear scaling rule, hvdkeras.common.scaling): learning_rate * global batch / reference batch.
    learning_rate: float = 0.01
    # The reference batch. global_batch: base_batch_size (Goyal et al. 2017: 0.1 per 256 images);
    # ranks: data.per_rank_batch_size (Horovod's lr x size; only with data.per_rank_batch_size);
    # none: the global batch itself (no scaling).
    lr_scaling: str = dataclasses.field(default="global_batch", metadata=_choices("global_batch", "ranks", "none"))
    base_batch_size: int = 256  # the reference batch of optimizer.lr_scaling: global_batch
    momentum: float = 0.9  # SGD's momentum (also rmsprop's)
    nesterov: bool = False  # SGD with Nesterov momentum
    weight_decay: float = 0.0  # decoupled weight decay (adamw only)
    clipnorm: Optional[float] = None  # Keras' clipnorm: clip each gradient to this norm; null: no clipping


@dataclasses.dataclass(frozen=True)
class ScheduleConfig:
    """Learning rate over epochs: linear warmup, then a decay (see :mod:`hvdkeras.common.schedules`)."""

    # The decay after the warmup: constant, step (at boundaries), cosine or polynomial to end_lr_fraction.
    name: str = dataclasses.field(default="constant", metadata=_choices("constant", "step", "cosine", "polynomial"))
    # Warm up per batch from the reference batch's rate, min(learning_rate, scaled lr), to the scaled lr
    # over this many epochs (Goyal et al.; Horovod's scaled_lr / ranks under its convention).
    warmup_epochs: float = 0.0
    # step: multiply by decay_rate at each boundary (in epochs).
    boundaries: Tuple[float, ...] = ()
    decay_rate: float = 0.1  # step: the factor at each boundary
    # cosine / polynomial: the rate reached at the last epoch, as a fraction of scaled_lr.
    end_lr_fraction: float = 0.0
    power: float = 1.0  # polynomial only: the decay's power (1: linear)
    # SGD with momentum: rescale the velocity by new_lr / old_lr when the rate changes (Goyal et al.).
    momentum_correction: bool = True


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """Training loop: API, epochs, steps, validation, progress output, losses and metrics, checks, exports."""

    # keras: hvdkeras.training.trainer (model.fit); estimator: hvdkeras.tf_estimator (tf.estimator, TF 2.15 only).
    api: str = dataclasses.field(default="keras", metadata=_choices("keras", "estimator"))
    epochs: int = 10  # epochs to train (a resumed run continues to this many)
    # Optimizer steps per epoch on every rank; None: as many full global batches as the data holds.
    steps_per_epoch: Optional[int] = None
    # Validate every N epochs (0: never).
    validation_freq: int = 1
    # Progress output on rank 0: 0 silent, 1 progress bar, 2 one line per epoch.
    verbose: int = dataclasses.field(default=2, metadata=_choices(0, 1, 2))
    # Keras names ("mse", "mae", ...) or your own "package.module:function" (a Keras loss or metric function, or
    # a Loss or Metric class, made with no arguments). The defaults are image classification's: sparse
    # categorical cross-entropy on integer labels and softmax outputs (label_smoothing applies to it alone) and
    # accuracy. Metrics are exact over all ranks whatever they are.
    # A model with several outputs: loss is one name for every output or a mapping of output name to a name
    # (an output left out has no loss); metrics a list for every output or a mapping of output name to a list.
    loss: Union[str, Dict[str, str]] = "sparse_categorical_crossentropy"
    metrics: Union[Tuple[str, ...], Dict[str, Tuple[str, ...]]] = ("accuracy",)  # names, as for trainer.loss
    # How much each output's loss counts in the loss minimised: a mapping of output name to a weight >= 0 (an
    # output with a loss left out weighs 1); null: every output weighs 1.
    loss_weights: Optional[Dict[str, float]] = None
    label_smoothing: float = 0.0  # for the default loss only: sparse categorical cross-entropy
    # Stop every rank at the same batch when any rank's loss is NaN or infinite (one tiny allreduce per batch).
    terminate_on_nan: bool = True
    # Check at the end that all ranks hold identical weights (one small collective).
    check_weights_agree: bool = True
    # At every epoch end and before every checkpoint, the ranks compare a fingerprint of their trainable weights
    # (one pass over them, one allgather of two numbers per variable); weights that differ stop every rank with one
    # line naming the first differing variable, and are not saved (hvdkeras.callbacks.DivergenceGuard).
    check_divergence: bool = True
    # Rank 0 writes TensorBoard event files to <workdir>/tensorboard: per epoch the global losses and
    # metrics, lr and images_per_sec (keras API only; the estimator writes its own into <workdir>/estimator).
    tensorboard: bool = False
    # At the end, rank 0 writes <workdir>/export/model.keras and <workdir>/export/saved_model (keras API only).
    export: bool = True


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """Checkpoints in ``<workdir>/checkpoints``: how often, how many kept, resume, preemption, errors."""

    enabled: bool = True  # rank 0 writes checkpoints
    # Save after every N epochs (the last epoch is always saved).
    every_epochs: int = 1
    # How many checkpoints to keep (oldest removed first); 0 keeps all.
    keep: int = 3
    # Continue from the latest checkpoint in <workdir>/checkpoints if there is one.
    resume: bool = True
    # SIGTERM on any rank (a scheduler's preemption, horovodrun's or Slurm's forwarding): every rank
    # stops at the same batch, rank 0 writes a mid-epoch checkpoint, all exit with status 75; the
    # rerun resumes at that batch. preemption_grace_s: warn if that took longer after the signal.
    preemption: bool = True
    preemption_grace_s: float = 30.0  # see checkpoint.preemption
    # A save that fails (full disk, I/O error): stop with one line, or warn and train on. The
    # checkpoints already written stay intact either way.
    on_save_error: str = dataclasses.field(default="stop", metadata=_choices("stop", "continue"))


@dataclasses.dataclass(frozen=True)
class HorovodConfig:
    """Options of Horovod's DistributedOptimizer."""

    # The gradients' wire format. none (the default, as in Horovod and PyTorch DDP): exact float32
    # averages on any layout. fp16: half the bytes, for a network-bound job across hosts (the dry run
    # and the start-up line recommend it there). auto: fp16 when the ranks span several hosts, none on
    # one host; resolved per job, marked (auto) and written to <workdir>/config.yaml.
    compression: str = dataclasses.field(default="none", metadata=_choices("none", "fp16", "auto"))
    # Gradient accumulation: k > 1 sums the gradients of k batches locally, then one allreduce and one
    # update. average_aggregated_gradients false (Horovod's default, and hvdkeras.DistributedOptimizer's)
    # applies the sum of the k averages: the linear scaling rule for the k-times larger batch.
    # true divides by k: the rate of one batch for the k-times larger one.
    backward_passes_per_step: int = 1
    average_aggregated_gradients: bool = False  # see horovod.backward_passes_per_step
    sparse_as_dense: bool = False  # Horovod's sparse_as_dense: embedding gradients averaged as dense tensors
    # 0: one allreduce request per gradient, sent as soon as the backward pass produces it (overlaps
    # computation; Horovod fuses what is ready each cycle). k: k grouped requests, each sent when its
    # last gradient exists (1: one request after the whole backward pass).
    groups: int = 0
    # Stall inspector: warn (naming the missing ranks) after a collective has waited this long
    # for some ranks (0: off), and shut the job down after stall_shutdown_seconds (0: never).
    stall_warning_seconds: int = 60
    stall_shutdown_seconds: int = 0  # see horovod.stall_warning_seconds
    # Horovod's runtime knobs, set before hvd.init(). cycle_time_ms null: Horovod's own 1 ms, ahead of 10 ms
    # (docs/performance.md#figures-behind-defaults). fusion_threshold_mb null: Horovod's own default; an
    # explicit value crashes Horovod 0.28.1 when an elastic job re-forms, so it is refused with elastic.enabled.
    cycle_time_ms: Optional[float] = None
    # A rank with no tensor pending waits up to this long for one to be enqueued instead of
    # coordinating with the others every cycle (hvdkeras's Horovod build, patch 0008; 0: Horovod's
    # own loop). Measured in the lab, one core per host: docs/performance.md#idle-cycles.
    idle_wait_ms: float = 50.0
    fusion_threshold_mb: Optional[int] = None  # see horovod.cycle_time_ms
    cache_capacity: int = 1024  # Horovod's response cache (HOROVOD_CACHE_CAPACITY)
    hierarchical_allreduce: bool = False  # Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE
    hierarchical_allgather: bool = False  # Horovod's HOROVOD_HIERARCHICAL_ALLGATHER
    # Horovod's timeline (written by rank 0; a path relative to the workdir) and autotuning.
    timeline: Optional[str] = None
    timeline_mark_cycles: bool = False  # mark Horovod's cycles in the timeline
    autotune: bool = False  # Horovod's autotuning of fusion and cycle time (HOROVOD_AUTOTUNE)
    autotune_log: Optional[str] = None  # where autotuning logs its trials (relative to the workdir)


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
    """Process setup (see :mod:`hvdkeras.runtime.distributed`)."""

    seed: int = 42  # Python's, NumPy's and TensorFlow's seed on each rank: seed + rank
    # TensorFlow's intra-op threads per rank; null: cores_on_host // ranks_on_host (at least 1).
    intra_op_threads: Optional[int] = None
    # TensorFlow's inter-op threads per rank; null: max(2, intra_op_threads // 4) (see horovod_env.thread_budget).
    inter_op_threads: Optional[int] = None
    # CPU hosts: auto runs local rank r of k on its own block of the n cores the host's ranks share,
    # cores[r*n//k:(r+1)*n//k], unless the launcher bound it already; none leaves the affinity alone.
    cpu_binding: str = dataclasses.field(default="auto", metadata=_choices("auto", "none"))
    gpu_memory_growth: bool = True  # GPUs: allocate memory as needed instead of all at start
    # Keras mixed precision policy: float32 variables, float16/bfloat16 compute. mixed_float16 adds
    # dynamic loss scaling (applied after Horovod's allreduce, so every rank skips the same steps).
    mixed_precision: str = dataclasses.field(default="none",
                                             metadata=_choices("none", "mixed_float16", "mixed_bfloat16"))
    # XLA-compile the forward and backward pass (the gradient allreduce stays outside XLA).
    jit_compile: bool = False
    # [start, stop]: rank 0 writes a TensorFlow profiler trace of training batches start..stop (counted from 1
    # over the run's fit, across epochs) into <workdir>/tensorboard/plugins/profile; []: none.
    profile_batches: Tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class ElasticConfig:
    """Horovod elastic mode (see :mod:`hvdkeras.elastic`); launch with horovodrun --min-np/--max-np."""

    enabled: bool = False  # train under Horovod's elastic mode (hosts may leave and join)
    min_np: int = 1  # the fewest ranks the job continues with
    max_np: Optional[int] = None  # the most ranks; null: no limit
    # Commit the in-memory state every N batches (and at every epoch end).
    commit_every_batches: int = 10
    # keep_global_batch: per-rank batch = global / ranks, same lr; keep_rank_batch: per-rank batch fixed,
    # lr rescaled for the new global batch.
    on_resize: str = dataclasses.field(default="keep_global_batch",
                                       metadata=_choices("keep_global_batch", "keep_rank_batch"))


@dataclasses.dataclass(frozen=True)
class Config:
    """The whole training config: one frozen section per YAML top-level key, and where each value came from."""

    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    trainer: TrainerConfig = TrainerConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    horovod: HorovodConfig = HorovodConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    elastic: ElasticConfig = ElasticConfig()
    # Where each key's value came from ("configs/x.yaml", "--set a.b=1"; absent: the defaults), for error
    # messages. Not a config key; a field so that dataclasses.replace keeps it.
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False, repr=False,
                                                   metadata={"internal": True})
    # The config file's folder, where your own modules ("package.module:function" names) are also looked for.
    # Not a config key either.
    folder: Optional[str] = dataclasses.field(default=None, compare=False, repr=False, metadata={"internal": True})


def fields(cls: type) -> Tuple[dataclasses.Field[Any], ...]:
    """The config keys of section (or top-level) class ``cls``, without internal fields."""
    return tuple(f for f in dataclasses.fields(cls) if not f.metadata.get("internal"))
