"""Run under horovodrun: hvdkeras.training.data on a real TFDS dataset (tiny_tfds) and every config under mock_data.

    python data_check.py PLAN_JSON

One job for every part of the plan, one after the other in these two processes (one TensorFlow import
and one Horovod start for all of them), each printing ``RESULT`` lines with its ``part``:

* ``tiny``: DATA_DIR. Rank 0 prepares hvdkeras_tiny there (52 train, 17 test examples, real TFRecord
  files, offline); then ``shard``: the ids each rank reads in one epoch, in two, and in epoch 2 again
  from a fresh pipeline (a resume), and its validation ids.
* ``uneven``: ``[config, workdir, [k=v, ...]]``, a Trainer run (on hvdkeras_tiny, after ``tiny``); rank 0
  then evaluates the final model on the whole validation set in this one process (``single_process_eval``).
* ``mock``: a list of ``[config, workdir, [k=v, ...]]``, each trained on mock data (its real loading
  code); a ``RESULT`` per job and rank, with the job's index as ``job``.
"""
import atexit
import gc
import json
import os
import sys

from hvdkeras.runtime import tensorflow_import

tensorflow_import.load()  # first, as the command lines import TensorFlow: quiet, matplotlib at its first use

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

atexit.register(gc.freeze)  # skip the interpreter's last garbage collection, over TensorFlow's objects: ~1 s a rank

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_tfds  # registers the hvdkeras_tiny builder
import trainer_process  # this folder's

from hvdkeras import config as config_lib
from hvdkeras.runtime.compat import keras
from hvdkeras.training import data

plan = json.loads(sys.argv[1])
trainer_process.setup()  # as the trainers below expect to find it (trainer_process.py says why)
rank, size = hvd.rank(), hvd.size()


def report(part, **values):
    print("RESULT " + json.dumps({"rank": rank, "part": part, **values}), flush=True)


def ids_of(batches):
    return [tiny_tfds.example_id(np.round(img * 255).astype(np.uint8)) for x, _ in batches for img in x]


if "tiny" in plan:
    data_dir = plan["tiny"]
    if rank == 0:
        tiny_tfds.prepare(data_dir)
    hvd.broadcast_object(None, root_rank=0, name="tiny_prepared")  # every rank reads it once it is written
    cfg = config_lib.load(None, ["data.name=hvdkeras_tiny", f"data.data_dir={data_dir}", "data.pipeline=mnist",
                                 "data.eval_split=test", "data.global_batch_size=26", "data.shuffle_buffer=100",
                                 "data.eval_global_batch_size=4"]).data
    shard = data.Shard(rank, size)
    ds = data.build(cfg, shard, seed=5)
    stream = list(ds.train(0, 2).as_numpy_iterator())
    epochs = [ids_of(stream[e * ds.steps_per_epoch:(e + 1) * ds.steps_per_epoch]) for e in range(2)]
    again = ids_of(data.build(cfg, shard, seed=5).train(1, 2).as_numpy_iterator())
    report("shard", epochs=epochs, resumed_epoch_1=again, val=ids_of(ds.validation.as_numpy_iterator()),
           steps=ds.steps_per_epoch)

if "uneven" in plan:
    from hvdkeras.training.trainer import Trainer

    config_path, workdir, overrides = plan["uneven"]
    cfg = config_lib.load(config_path, overrides)
    trainer = Trainer.from_config(cfg, workdir)
    final = trainer.fit()
    single = None
    if rank == 0:
        whole = data.build(cfg.data, data.Shard(0, 1), seed=cfg.runtime.seed)
        single = trainer.model.evaluate(whole.validation, verbose=0, return_dict=True)
    report("uneven", final=final, single_process_eval=single)
    keras.backend.clear_session()

if "mock" in plan:
    from tensorflow_datasets import testing as tfds_testing  # explicit: 4.9.7 loads tfds.testing lazily

    from hvdkeras.training.trainer import Trainer

    for job, (config_path, workdir, overrides) in enumerate(plan["mock"]):
        with tfds_testing.mock_data(num_examples=12):
            cfg = config_lib.load(config_path, overrides)
            trainer = Trainer.from_config(cfg, workdir)
            final = trainer.fit()
            x, _ = next(iter(trainer.data.train(0, 1)))
        report("mock", job=job, final=final, input_shape=list(trainer.data.input_shape), batch_shape=list(x.shape),
               mean=float(tf.reduce_mean(x)), std=float(tf.math.reduce_std(x)))
        keras.backend.clear_session()  # the next job's model starts from nothing, as in a process of its own
