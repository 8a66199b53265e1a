"""Is training input-bound? The input pipeline alone versus the training step alone, side by side.

    horovodrun -np 2 -H localhost:2 --gloo python -m hvdkeras.input_bench \\
        --config configs/cifar10_resnet56.yaml --mock_examples 4096

(``hvdkeras.input_bench`` runs this module, ``hvdkeras.input_bench``, which ``-m`` runs too.)

On every rank, in alternating rounds (pipeline, step, pipeline, step, ...; the
first round of each is a warm-up and not counted), it measures

* **pipeline**: images per second delivered by ``data.train()`` (read, shuffle,
  decode, augment, batch), with no model;
* **step**: images per second the training step consumes, fed one cached batch
  (no input cost).

Rank 0 prints the medians over ranks and rounds, and their ratio. A ratio above 1
means the pipeline outruns training; the ImageNet and CIFAR recipes aim for 3 or
more. ``--mock_examples N`` serves the TFDS dataset from
``tfds.testing.mock_data`` (random images of the real shapes) when it is not on disk.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import time

from absl import flags

from hvdkeras.common import command_line

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before anything imports TensorFlow

# The command's own flags (hvdkeras.common.command_line): --config and --set are hvdkeras.train's names too.
FLAGS = command_line.flag_values()
flags.DEFINE_string("config", None, "YAML config file.", flag_values=FLAGS)
flags.DEFINE_multi_string("set", [], "Config override section.key=value (repeatable).", flag_values=FLAGS)
flags.DEFINE_integer("mock_examples", 0, "Serve the TFDS dataset from tfds.testing.mock_data with this many examples.",
                     flag_values=FLAGS)
flags.DEFINE_integer("rounds", 4, "Measured rounds of each kind (after one warm-up round each).", flag_values=FLAGS)
flags.DEFINE_integer("batches", 20, "Batches per round.", flag_values=FLAGS)


def _time_pipeline(datasets, batches: int) -> float:
    iterator = iter(datasets.train(0, max(1, -(-batches // datasets.steps_per_epoch))))
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * datasets.per_rank_batch / (time.perf_counter() - start)


def _time_step(model, batch, batches: int, per_rank_batch: int) -> float:
    import tensorflow as tf

    cached = tf.data.Dataset.from_tensors(batch).repeat()
    start = time.perf_counter()
    model.fit(cached, steps_per_epoch=batches, epochs=1, verbose=0)
    return batches * per_rank_batch / (time.perf_counter() - start)


def measure(cfg, rounds: int, batches: int):
    """(pipeline images/s, step images/s) per measured round, for this rank.

    The data and the compiled model are the trainer's own (:func:`hvdkeras.training.assembly.assemble`).
    """
    from hvdkeras.runtime import distributed
    from hvdkeras.training import assembly

    parts = assembly.assemble(cfg, assembly.start(cfg), workdir=None, agree=False)
    datasets, model = parts.data, parts.model
    distributed.broadcast_variables(model.variables)
    batch = next(iter(datasets.train(0, 1)))
    pipeline, step = [], []
    for r in range(rounds + 1):
        p = _time_pipeline(datasets, batches)
        s = _time_step(model, batch, batches, datasets.per_rank_batch)
        if r:  # round 0 warms up tracing, autotuning and caches
            pipeline.append(p)
            step.append(s)
    return pipeline, step


def main(argv):
    """Measures the input pipeline and the training step; rank 0 prints the medians. An error the user can fix (no
    ``--config``, a config that does not load) is one line and exit status 2, before TensorFlow loads."""
    from hvdkeras import config as config_lib
    from hvdkeras.runtime import tensorflow_import

    if len(argv) > 1:
        command_line.fail(f"unexpected arguments {' '.join(argv[1:])}; overrides go through --set section.key=value")
    if not FLAGS.config:
        command_line.fail("--config is required, e.g. --config configs/cifar10_resnet56.yaml")
    if FLAGS.rounds < 1 or FLAGS.batches < 1:
        command_line.fail(f"--rounds and --batches must be at least 1; received: {FLAGS.rounds}, {FLAGS.batches}")
    cfg = config_lib.load(FLAGS.config, FLAGS.set)
    tensorflow_import.load()  # before anything else imports it (hvdkeras.runtime.tensorflow_import)
    from hvdkeras.runtime import distributed

    mock = contextlib.nullcontext()
    if FLAGS.mock_examples:
        # An explicit import: tensorflow-datasets 4.9.7 loads tfds.testing lazily and not always on access.
        from tensorflow_datasets import testing as tfds_testing

        mock = tfds_testing.mock_data(num_examples=FLAGS.mock_examples)
    with mock:
        pipeline, step = measure(cfg, FLAGS.rounds, FLAGS.batches)
    import numpy as np

    from hvdkeras.common import scaling

    gathered = np.array(pipeline + step)
    total = distributed.allreduce_sum(gathered, name="hvdkeras.input_bench") / distributed.size()
    n = len(pipeline)
    if distributed.is_chief():
        pipe_med, step_med = statistics.median(total[:n]), statistics.median(total[n:])
        size = distributed.size()
        print(f"{cfg.data.name} ({'mock data' if FLAGS.mock_examples else 'real data'}), per-rank batch"
              f" {scaling.global_batch(cfg.data, size) // size}, {size} ranks,"
              f" {FLAGS.rounds} rounds x {FLAGS.batches} batches, mean over ranks:")
        print(f"  input pipeline alone : {pipe_med:10.1f} images/s per rank  (rounds: "
              + ", ".join(f"{v:.0f}" for v in total[:n]) + ")")
        print(f"  training step alone  : {step_med:10.1f} images/s per rank  (rounds: "
              + ", ".join(f"{v:.0f}" for v in total[n:]) + ")")
        print(f"  ratio pipeline/step  : {pipe_med / step_med:10.2f}")


def run():
    """Runs :func:`main` (:func:`hvdkeras.common.command_line.run`), with this docstring as ``--help``."""
    command_line.run(main, FLAGS, __doc__)


if __name__ == "__main__":
    run()
