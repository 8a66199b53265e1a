"""Horovod training for ``tf.estimator`` code: Horovod's manual recipe, packaged.

    from hvdkeras import tf_estimator as hvd_estimator

    def model_fn(features, labels, mode, params):
        ...
        optimizer = tf.compat.v1.train.MomentumOptimizer(params["learning_rate"], 0.9)  # already scaled
        optimizer = hvd_estimator.distributed_optimizer(optimizer)                     # the one call
        ...

    est = hvd_estimator.HorovodEstimator(model_fn, model_dir="runs/est", learning_rate=0.01)
    est.train(train_input_fn, max_steps=10000 // est.size)   # Horovod's recipe: steps // ranks
    est.evaluate(eval_input_fn)                  # every example of every rank counted once

What the wrapper does, on every rank:

* **Devices**: the session sees only the GPU at the local rank (with memory growth);
  on CPU hosts it gets the rank's thread budget (:mod:`hvdkeras.runtime.distributed`).
* **Learning rate**: ``params["learning_rate"]`` is the rate after the linear
  scaling rule (your ``scaled_learning_rate``, or the config's rule,
  :mod:`hvdkeras.common.scaling`).
* **Optimizer**: :func:`distributed_optimizer` wraps a ``tf.compat.v1`` optimizer in
  Horovod's ``DistributedOptimizer`` with the configured compression and
  ``backward_passes_per_step``.
* **Same start**: a hook broadcasts all global variables (the global step
  included) from rank 0 when each training or evaluation session starts, also
  after a restart from rank 0's checkpoint.
* **One writer**: only rank 0's ``model_dir`` is the one you gave; the other ranks
  write checkpoints and summaries into a temporary directory that is deleted at
  exit.
* **Steps**: ``train(steps=...)`` and ``train(max_steps=...)`` mean what they mean to
  ``tf.estimator``: optimizer steps, which every rank takes together (each consumes ranks
  x the per-rank batch). Horovod's recipe divides a single-process count by the ranks
  itself (``steps=20000 // hvd.size()``), and a ported script keeps doing so.
* **Data**: an ``input_fn`` with an ``input_context`` argument receives a
  ``tf.distribute.InputContext`` with ``num_input_pipelines`` = ranks and
  ``input_pipeline_id`` = this rank: shard with ``dataset.shard(...)`` or
  ``tfds.even_splits``.
* **Evaluation**: every rank evaluates its own shard; before the metric values
  are read, the states of all ``tf.compat.v1.metrics`` (totals and counts) are
  summed over ranks, so a metric counts every example of every rank once. The
  Estimator's own ``loss`` entry is a mean over batches (Estimator's definition),
  reduced the same way.

Only TensorFlow 2.15 and earlier have ``tf.estimator``; on later versions importing
this module fails with one line saying so, and nothing else in hvdkeras is affected.
"""
from __future__ import annotations

import atexit
import functools
import inspect
import shutil
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import tensorflow as tf

from hvdkeras.runtime import compat

if compat.estimator_unavailable():
    raise ImportError(compat.estimator_unavailable())
_ESTIMATOR = tf.estimator

import horovod.tensorflow as hvd

from hvdkeras import config as config_lib
from hvdkeras.common import horovod_env, log, scaling, schedules
from hvdkeras.common.errors import ConfigError
from hvdkeras.common.workdir import append_metrics
from hvdkeras.config import HorovodConfig, RuntimeConfig
from hvdkeras.gradient_exchange.compression import horovod_compression
from hvdkeras.runtime import distributed
from hvdkeras.training import assembly, optimizers

tf_estimator = _ESTIMATOR
v1 = tf.compat.v1


# --------------------------------------------------------------------------- process setup


def session_config(runtime: RuntimeConfig = RuntimeConfig(), num_gpus: Optional[int] = None,
                   local_rank: Optional[int] = None, local_size: Optional[int] = None) -> tf.compat.v1.ConfigProto:
    """The session config of this rank: its local GPU only, or its CPU thread budget.

    ``num_gpus`` defaults to the GPUs TensorFlow finds; tests pass a number to check
    the rule on CPU-only machines.
    """
    local_rank = distributed.local_rank() if local_rank is None else local_rank
    local_size = distributed.local_size() if local_size is None else local_size
    if num_gpus is None:
        num_gpus = len(tf.config.list_physical_devices("GPU"))
    config = v1.ConfigProto()
    if num_gpus:
        horovod_env.select_local_gpu(list(range(num_gpus)), local_rank)  # same check and message as Keras
        config.gpu_options.visible_device_list = str(local_rank)
        config.gpu_options.allow_growth = runtime.gpu_memory_growth
    else:
        budget = horovod_env.thread_budget(distributed.launch_cores(), local_size, runtime.intra_op_threads,
                                           runtime.inter_op_threads)
        config.intra_op_parallelism_threads = budget.intra_op
        config.inter_op_parallelism_threads = budget.inter_op
    return config


def distributed_optimizer(optimizer, horovod: HorovodConfig = HorovodConfig()):
    """Wraps a ``tf.compat.v1.train.Optimizer`` in Horovod's ``DistributedOptimizer`` (gradients averaged).

    ``horovod.compression: auto`` is decided here, the trainer's way
    (:func:`hvdkeras.common.horovod_env.resolve_compression`: fp16 across hosts, none on one).
    """
    compression = horovod_env.resolve_compression(horovod.compression, multi_host=distributed.spans_hosts())
    return hvd.DistributedOptimizer(
        optimizer, compression=horovod_compression(compression),
        backward_passes_per_step=horovod.backward_passes_per_step,
        average_aggregated_gradients=horovod.average_aggregated_gradients, sparse_as_dense=horovod.sparse_as_dense,
        groups=horovod.groups or None)


# --------------------------------------------------------------------------- hooks


class SumMetricStatesHook(tf.compat.v1.train.SessionRunHook):
    """At the end of an evaluation, replaces every metric state variable by its sum over ranks.

    Runs before Estimator reads the metric values (its final-ops hook comes last),
    so ``total / count`` style metrics become exact over all ranks' examples. The
    variables are taken in name order, the same on every rank.
    """

    def begin(self):
        """Builds the op that replaces each metric state variable by its allreduced sum over ranks."""
        variables = sorted(v1.get_collection(v1.GraphKeys.METRIC_VARIABLES), key=lambda v: v.name)
        assigns = [v.assign(hvd.allreduce(v.read_value(), op=hvd.Sum, name=f"hvdkeras_metric_{i}"))
                   for i, v in enumerate(variables) if v.dtype.base_dtype.is_floating or v.dtype.base_dtype.is_integer]
        self._sum = tf.group(*assigns) if assigns else None

    def end(self, session):
        """Runs the sum over ranks at the end of the evaluation, before the metrics are read."""
        if self._sum is not None:
            session.run(self._sum)


def _broadcast_hook():
    return hvd.BroadcastGlobalVariablesHook(distributed.ROOT_RANK)


# --------------------------------------------------------------------------- the wrapper


def _call_with_accepted(fn: Callable, available: Dict[str, Any]):
    accepted = inspect.signature(fn).parameters
    if any(p.kind == p.VAR_KEYWORD for p in accepted.values()):
        return fn(**available)
    return fn(**{k: v for k, v in available.items() if k in accepted})


def _latest_step(model_dir: Optional[str]) -> int:
    path = tf.train.latest_checkpoint(model_dir) if model_dir else None
    if not path:
        return 0
    return int(tf.train.load_variable(path, v1.GraphKeys.GLOBAL_STEP))


class HorovodEstimator:
    """A ``tf.estimator.Estimator`` made Horovod-distributed (see the module docstring).

    Give either ``model_fn`` (a classic Estimator model function; its ``params``
    receive ``learning_rate``, ``num_ranks`` and ``rank``) or ``keras_model`` (a
    compiled Keras model whose optimizer is Horovod's ``DistributedOptimizer``; see
    :func:`keras_estimator`). ``learning_rate`` is the single-process rate and is
    scaled by the number of ranks unless ``scaled_learning_rate`` is given.
    """

    def __init__(self, model_fn: Optional[Callable] = None, model_dir: Optional[str] = None,
                 params: Optional[Dict[str, Any]] = None, learning_rate: Optional[float] = None,
                 scaled_learning_rate: Optional[float] = None, runtime: RuntimeConfig = RuntimeConfig(),
                 save_checkpoints_steps: Optional[int] = 100, keep_checkpoint_max: int = 5,
                 save_summary_steps: int = 100, keras_model=None, num_gpus: Optional[int] = None):
        if (model_fn is None) == (keras_model is None):
            raise ValueError("give exactly one of model_fn or keras_model")
        if model_dir is None:
            raise ValueError("model_dir is required: rank 0 keeps its checkpoints and summaries there")
        if not distributed.initialized():  # the config path's assembly.start has initialised it already
            distributed.init_horovod()
        self.rank, self.size = distributed.rank(), distributed.size()
        self.model_dir = model_dir  # rank 0's, the one that matters
        if self.rank == distributed.ROOT_RANK:
            own_dir = model_dir
        else:
            own_dir = tempfile.mkdtemp(prefix=f"hvdkeras-estimator-rank{self.rank}-")
            atexit.register(shutil.rmtree, own_dir, ignore_errors=True)
        self.own_model_dir = own_dir
        if scaled_learning_rate is None and learning_rate is not None:
            scaled_learning_rate = learning_rate * self.size
        self.learning_rate = scaled_learning_rate
        run_config = tf_estimator.RunConfig(
            model_dir=own_dir, session_config=session_config(runtime, num_gpus=num_gpus),
            save_checkpoints_steps=save_checkpoints_steps, keep_checkpoint_max=keep_checkpoint_max,
            save_summary_steps=save_summary_steps, log_step_count_steps=save_summary_steps,
            tf_random_seed=runtime.seed)
        user_params = dict(params or {})
        user_params.update(num_ranks=self.size, rank=self.rank)
        if self.learning_rate is not None:
            user_params["learning_rate"] = self.learning_rate
        if keras_model is not None:
            self.estimator = tf.keras.estimator.model_to_estimator(keras_model=keras_model, config=run_config)
        else:
            self.estimator = tf_estimator.Estimator(self._wrap_model_fn(model_fn), config=run_config,
                                                    params=user_params)

    # ------------------------------------------------------------------ model_fn and input_fn

    @staticmethod
    def _wrap_model_fn(model_fn):
        def wrapped(features, labels, mode, params, config):
            spec = _call_with_accepted(model_fn, {"features": features, "labels": labels, "mode": mode,
                                                  "params": params, "config": config})
            return spec

        return wrapped

    def _wrap_input_fn(self, input_fn):
        context = tf.distribute.InputContext(num_input_pipelines=self.size, input_pipeline_id=self.rank)

        def wrapped(params, config, mode):
            return _call_with_accepted(input_fn, {"params": params, "config": config, "mode": mode,
                                                  "input_context": context})

        return wrapped

    # ------------------------------------------------------------------ train / evaluate

    def train(self, input_fn, steps: Optional[int] = None, max_steps: Optional[int] = None,
              hooks: Optional[List] = None) -> "HorovodEstimator":
        """Trains ``steps`` more optimizer steps, or until the global step reaches ``max_steps`` (tf.estimator's
        meaning, no division by the ranks: every rank takes each step). One of the two is required, so no rank
        runs out of data while another waits for it in an allreduce."""
        if (steps is None) == (max_steps is None):
            raise ValueError(f"give one of steps or max_steps. Received: steps={steps}, max_steps={max_steps}")
        start = int(distributed.broadcast_array([_latest_step(self.own_model_dir)], name="hvdkeras.est_step",
                                                root_rank=distributed.ROOT_RANK)[0])
        last = start + steps if steps is not None else max_steps
        assert last is not None  # one of the two was given
        if start >= last:  # decided together: no rank waits in a broadcast the others skip
            return self
        self.estimator.train(self._wrap_input_fn(input_fn), max_steps=last,
                             hooks=[_broadcast_hook()] + list(hooks or []))
        return self

    def _checkpoint_for_evaluation(self) -> Optional[str]:
        """This rank's latest checkpoint, or rank 0's (shared filesystem) if this rank has none yet."""
        own = tf.train.latest_checkpoint(self.own_model_dir)
        chief = distributed.broadcast_object(tf.train.latest_checkpoint(self.model_dir) if self.rank == 0 else None,
                                             name="hvdkeras.est_ckpt")
        if chief is None:
            raise ValueError(f"nothing to evaluate: no checkpoint in {self.model_dir}; train first")
        if own is None and not tf.io.gfile.exists(chief + ".index"):
            raise ValueError(
                f"rank {self.rank} has not trained in this process and cannot read rank 0's checkpoint {chief};"
                " evaluate after train() in the same job, or put model_dir on a filesystem every host sees")
        return own or chief

    def evaluate(self, input_fn, steps: Optional[int] = None, hooks: Optional[List] = None,
                 name: Optional[str] = None) -> Dict[str, Any]:
        """Evaluates every rank's shard; the metrics are the same, global numbers on every rank."""
        checkpoint = self._checkpoint_for_evaluation()
        results = self.estimator.evaluate(
            self._wrap_input_fn(input_fn), steps=steps, checkpoint_path=checkpoint, name=name,
            hooks=[_broadcast_hook(), SumMetricStatesHook()] + list(hooks or []))
        return {k: (v.item() if hasattr(v, "item") else v) for k, v in results.items()}

    def train_and_evaluate(self, train_input_fn, eval_input_fn, max_steps: int, eval_every_steps: int,
                           on_evaluation: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]:
        """Alternates ``train`` to the next multiple of ``eval_every_steps`` and ``evaluate``; returns the last."""
        results: Dict[str, Any] = {}
        target = 0
        while target < max_steps:
            target = min(max_steps, target + eval_every_steps)
            tic = time.perf_counter()
            self.train(train_input_fn, max_steps=target)
            train_time = time.perf_counter() - tic
            results = self.evaluate(eval_input_fn)
            if on_evaluation is not None:
                on_evaluation(dict(results, train_time_s=train_time))
        return results

    def variables(self) -> Dict[str, Any]:
        """This rank's trainable variables, as saved in its latest checkpoint."""
        names = self.estimator.get_variable_names()
        skip = ("global_step", "_CHECKPOINTABLE_OBJECT_GRAPH", "optimizer/")
        return {n: self.estimator.get_variable_value(n) for n in names
                if not any(s in n for s in skip) and "Momentum" not in n and "Adam" not in n}


def keras_estimator(keras_model, model_dir: str, runtime: RuntimeConfig = RuntimeConfig(), **kwargs):
    """A compiled Keras model as a :class:`HorovodEstimator`.

    Compile it with ``horovod.tensorflow.keras.DistributedOptimizer`` around a
    ``tf.keras.optimizers.legacy`` optimizer (Estimator conversion needs the legacy
    optimizers in TF 2.15), at the scaled learning rate.
    """
    return HorovodEstimator(keras_model=keras_model, model_dir=model_dir, runtime=runtime, **kwargs)


# --------------------------------------------------------------------------- config-driven


def learning_rate_tensor(cfg, scaled_lr: float, steps_per_epoch: int, size: int):
    """The configured warmup and schedule at the current global step, as a graph tensor.

    The rate is :func:`hvdkeras.common.schedules.rate_from_config`'s, the one the trainer's callbacks apply,
    evaluated at the step's fractional epoch.
    """
    rate = schedules.rate_from_config(cfg.schedule, cfg.trainer.epochs, scaled_lr,
                                      scaling.warmup_start_lr(cfg.optimizer, scaled_lr))
    step = v1.train.get_or_create_global_step()
    lr = tf.numpy_function(lambda s: np.float32(rate(int(s) / steps_per_epoch)), [step], tf.float32)
    lr.set_shape([])
    return lr


def _per_example(metric: Any) -> Optional[Callable]:
    """A Keras metric's per-example function (a name, a function, or a mean-of-values metric object such as
    accuracy); None for a metric that is not a mean of per-example values (AUC, precision)."""
    if isinstance(metric, str):
        metric = tf.keras.metrics.get(metric)
    fn = getattr(metric, "_fn", None)  # Keras' MeanMetricWrapper: accuracy, crossentropies, errors
    if fn is not None:
        return functools.partial(fn, **getattr(metric, "_fn_kwargs", {}))
    if callable(metric) and not isinstance(metric, tf.keras.metrics.Metric):
        return metric
    return None


def eval_metric_ops(task_metrics: Any, loss: Any, labels: Any, probabilities: Any) -> Dict[str, Any]:
    """The task's metrics as ``tf.compat.v1`` means over every example (summed over ranks by
    :class:`SumMetricStatesHook`), plus ``loss_per_example``: the task's loss per example.

    Raises:
        ConfigError: a metric that is not a mean of per-example values, or a model with several outputs.
    """
    if isinstance(task_metrics, dict):
        raise ConfigError("trainer.api=estimator trains a model with one output: trainer.metrics by output is for"
                          " trainer.api=keras")
    ops = {}
    for metric in task_metrics:
        fn = _per_example(metric)
        name = metric if isinstance(metric, str) else getattr(metric, "name", getattr(metric, "__name__", "?"))
        if fn is None:
            raise ConfigError(f"trainer.metrics: {name} is not a mean over examples, which the estimator API"
                              " computes (accuracy, crossentropies, errors); use trainer.api=keras for it")
        ops[name] = v1.metrics.mean(fn(labels, probabilities))
    per_example = loss.call(labels, probabilities) if hasattr(loss, "call") else loss(labels, probabilities)
    ops["loss_per_example"] = v1.metrics.mean(per_example)
    return ops


def train_from_config(cfg, workdir: str) -> Dict[str, Any]:
    """``trainer.api: estimator``: the config's data, model and optimizer through :class:`HorovodEstimator`."""
    try:
        return _train_from_config(cfg, workdir)
    except ConfigError as exc:  # a name the data, model or optimizer builders do not know
        raise config_lib.locate(cfg, exc) from None


def _train_from_config(cfg, workdir: str) -> Dict[str, Any]:
    # the trainer's assembly: the horovod section's settings reach Horovod before hvd.init (once), then pinning,
    # threads and seeds; the task's data (the steps agreed by the ranks), model, loss and metrics; no checkpoint
    # callback: the Estimator keeps its own checkpoints, by global step
    world = assembly.start(cfg, workdir)
    v1.logging.set_verbosity(v1.logging.WARN)  # Estimator's per-step INFO lines, times every rank
    parts = assembly.assemble(cfg, world, workdir=workdir, with_model=False, with_checkpoints=False)
    parts.write_config()
    rank, size = world.rank, world.size
    files, task, probe, scaled_lr = parts.files, parts.task, parts.data, parts.scaled_lr
    cfg = parts.config
    steps_per_epoch = probe.steps_per_epoch

    def datasets():  # a new dataset in each of the Estimator's graphs; the ranks agreed on the steps above
        return assembly.build_data(parts.job, rank, size, world.threads.intra_op, agree=False, task=task,
                                   steps=steps_per_epoch)

    def model_fn(features, labels, mode, params):
        model = task.model(cfg, probe)
        training = mode == tf_estimator.ModeKeys.TRAIN
        probabilities = model(features, training=training)
        predictions = tf.argmax(probabilities, axis=-1)
        if mode == tf_estimator.ModeKeys.PREDICT:
            return tf_estimator.EstimatorSpec(mode, predictions={"class": predictions, "probabilities": probabilities})
        task_loss = task.loss(cfg, probe)
        loss = task_loss(labels, probabilities)
        loss += tf.add_n(model.losses) if model.losses else 0.0
        if mode == tf_estimator.ModeKeys.EVAL:
            return tf_estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=eval_metric_ops(
                task.metrics(cfg, probe), task_loss, labels, probabilities))
        lr = learning_rate_tensor(cfg, params["learning_rate"], steps_per_epoch, size)
        optimizer = distributed_optimizer(optimizers.build_v1(cfg.optimizer, lr), cfg.horovod)
        update_ops = list(model.updates) + v1.get_collection(v1.GraphKeys.UPDATE_OPS)  # batch-norm statistics
        with tf.control_dependencies(update_ops):
            train_op = optimizer.minimize(loss, global_step=v1.train.get_global_step(),
                                          var_list=model.trainable_variables)
        return tf_estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    ckpt = cfg.checkpoint
    est = HorovodEstimator(model_fn, model_dir=files.estimator, scaled_learning_rate=scaled_lr,
                           runtime=cfg.runtime, save_checkpoints_steps=ckpt.every_epochs * steps_per_epoch,
                           keep_checkpoint_max=max(ckpt.keep, 1), save_summary_steps=steps_per_epoch)

    def train_input_fn():
        return datasets().train(0, cfg.trainer.epochs)

    def eval_input_fn():
        return datasets().validation

    def record_evaluation(results):
        if rank == 0:
            epoch = int(results["global_step"]) // steps_per_epoch
            record = {"epoch": epoch, **{k: float(v) for k, v in results.items()}}
            log.info(f"estimator epoch {epoch}: "
                     + ", ".join(f"{k}={v:.4f}" for k, v in sorted(results.items()) if k != "global_step"))
            append_metrics(files.metrics, record)

    per_epoch = steps_per_epoch  # optimizer steps, taken by every rank together
    results = est.train_and_evaluate(train_input_fn, eval_input_fn, max_steps=cfg.trainer.epochs * per_epoch,
                                     eval_every_steps=per_epoch * cfg.trainer.validation_freq or per_epoch,
                                     on_evaluation=record_evaluation)
    weights = [v for _, v in sorted(est.variables().items())]
    if distributed.ranks_disagreeing(weights, name="hvdkeras.estimator_weights"):
        raise RuntimeError("estimator variables differ from rank 0's after training")
    log.info(f"final validation ({size} ranks, estimator, every example once): "
             f"accuracy={results['accuracy']:.4f}, loss_per_example={results['loss_per_example']:.4f}")
    return results
