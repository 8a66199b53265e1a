"""What every recipe shares: its arguments, the model, the synthetic data, the epoch clock and the result line.

Arguments: ``MODEL BATCH IMAGE_SIZE STEPS [--fp16-allreduce] [--lockstep] [--groups=K]``, with ``MODEL``
``applications.<Name>`` of ``tf.keras.applications`` or a model hvdkeras registers (``small_cnn``, ``resnet20``, ...:
``model.name``'s choices, dropout off), built as the hvdkeras rows build it, ``BATCH`` the images per process and
step, and ``--fp16-allreduce`` (Horovod's recipes only) the flag of Horovod's own examples: gradients cross the
wire in fp16 (``hvd.Compression.fp16``); ``--lockstep`` (the ceiling only) synchronizes its ranks after every
batch; ``--groups=K`` (the exchange-only recipe) sends the gradients as ``K`` grouped allreduces, as Horovod's
``DistributedOptimizer(groups=K)`` does (0, the default: one allreduce per gradient).

With ``BENCH_CPU_BINDING=1`` in the environment (the runner sets it for the ceiling and for ``horovod-tuned``,
the rows with hvdkeras's host settings), each process binds itself as hvdkeras's ``runtime.cpu_binding: auto``
does (:func:`hvdkeras.common.horovod_env.cpu_binding`), from the launcher's local rank (Gloo's or mpirun's), as this
module is imported.
"""
import json
import os
import resource
import sys
import time

import tensorflow as tf

model_name, batch, size, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fp16_allreduce = "--fp16-allreduce" in sys.argv[5:]
lockstep = "--lockstep" in sys.argv[5:]  # the ceiling only (ceiling.py)
groups = max([int(a.split("=", 1)[1]) for a in sys.argv[5:] if a.startswith("--groups=")] or [0])


def bind_like_hvdkeras():
    """Binds this process as hvdkeras's ``runtime.cpu_binding: auto`` would, by the launcher's local rank."""
    from hvdkeras.common import horovod_env
    from hvdkeras.runtime.distributed import bind_cpus

    # Gloo's launcher sets HOROVOD_LOCAL_*, mpirun (horovodrun --mpi) OMPI_COMM_WORLD_LOCAL_*
    local_rank = os.environ.get("HOROVOD_LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK"))
    local_size = os.environ.get("HOROVOD_LOCAL_SIZE", os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE"))
    if local_rank is None or local_size is None:
        raise SystemExit("BENCH_CPU_BINDING=1: neither HOROVOD_LOCAL_RANK/SIZE nor OMPI_COMM_WORLD_LOCAL_RANK/SIZE "
                         "is set; start the recipe with horovodrun")
    binding = horovod_env.cpu_binding("auto", horovod_env.allowed_cpus(), horovod_env.shared_cpus(),
                                      int(local_rank), int(local_size))
    if binding.cpus:
        bind_cpus(binding.cpus)


if os.environ.get("BENCH_CPU_BINDING") == "1":
    bind_like_hvdkeras()


def use_hvdkeras_threads(local_size: int) -> None:
    """TensorFlow's intra- and inter-op threads as hvdkeras gives each of ``local_size`` ranks on this host."""
    from hvdkeras.common import horovod_env

    budget = horovod_env.thread_budget(horovod_env.host_cores(), local_size)
    tf.config.threading.set_intra_op_parallelism_threads(budget.intra_op)
    tf.config.threading.set_inter_op_parallelism_threads(budget.inter_op)


def make_model():
    """``MODEL`` for ``IMAGE_SIZE`` images and 1000 classes, as ``model.name=MODEL`` builds it for the hvdkeras rows
    (``hvdkeras.training.models.build``: a ``keras.applications`` base, pooled, or a registered model; no dropout,
    no weight decay, which the runner sets for those rows too)."""
    from hvdkeras.config import ModelConfig
    from hvdkeras.training import models

    return models.build((size, size, 3), 1000, ModelConfig(name=model_name, dropout=0.0, weight_decay=0.0))


def data():
    """One random batch of ``batch`` images and labels, repeated."""
    x = tf.random.uniform((batch, size, size, 3))
    y = tf.random.uniform((batch,), maxval=1000, dtype=tf.int32)
    return tf.data.Dataset.from_tensors((x, y)).repeat()


class Clock(tf.keras.callbacks.Callback):
    """Seconds of the last epoch, and the CPU seconds the process used in it (all threads)."""

    def on_epoch_begin(self, epoch, logs=None):
        self.start, self.cpu_start = time.perf_counter(), time.process_time()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds = time.perf_counter() - self.start
        self.cpu_seconds = time.process_time() - self.cpu_start


def report(rank, clock, global_batch, **extra):
    """Prints ``RESULT <json>``: images/s of all processes in the last epoch, CPU cores, peak memory, ``extra``."""
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {"rank": rank, "images_per_sec": steps * global_batch / clock.seconds, "peak_rss_mb": rss_mb,
              "cpu_cores": clock.cpu_seconds / clock.seconds, **extra}
    print("RESULT " + json.dumps(result), flush=True)
