"""Run under horovodrun: hvdkeras.training.data on a real TFDS dataset (tiny_tfds) or a config under mock_data.

    python data_check.py shard DATA_DIR          # ids read per rank, one epoch, two epochs
    python data_check.py mock JOBS_JSON          # trains each config's real loading code on mock data

``JOBS_JSON``: a list of ``[config, workdir, [k=v, ...]]``, trained one after the other in this
process (one TensorFlow import and one Horovod start for all of them); a ``RESULT`` line per job
and rank, with the job's index as ``job``.
"""
import json
import os
import sys

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_tfds  # registers the hvdkeras_tiny builder

from hvdkeras import config as config_lib
from hvdkeras.training import data

mode = sys.argv[1]
hvd.init()
rank, size = hvd.rank(), hvd.size()

if mode == "shard":
    data_dir = sys.argv[2]
    cfg = config_lib.load(None, ["data.name=hvdkeras_tiny", f"data.data_dir={data_dir}", "data.pipeline=mnist",
                                 "data.eval_split=test", "data.global_batch_size=26", "data.shuffle_buffer=100",
                                 "data.eval_global_batch_size=4"]).data
    shard = data.Shard(rank, size)
    ds = data.build(cfg, shard, seed=5)
    epochs = []
    stream = list(ds.train(0, 2).as_numpy_iterator())
    for e in range(2):
        batches = stream[e * ds.steps_per_epoch:(e + 1) * ds.steps_per_epoch]
        ids = [tiny_tfds.example_id(np.round(img * 255).astype(np.uint8)) for x, _ in batches for img in x]
        epochs.append(ids)
    again = [tiny_tfds.example_id(np.round(img * 255).astype(np.uint8))
             for x, _ in list(data.build(cfg, shard, seed=5).train(1, 2).as_numpy_iterator()) for img in x]
    val_ids = [tiny_tfds.example_id(np.round(img * 255).astype(np.uint8))
               for x, _ in ds.validation.as_numpy_iterator() for img in x]
    print("RESULT " + json.dumps({"rank": rank, "epochs": epochs, "resumed_epoch_1": again, "val": val_ids,
                                  "steps": ds.steps_per_epoch}), flush=True)
elif mode == "mock":
    from tensorflow_datasets import testing as tfds_testing  # explicit: 4.9.7 loads tfds.testing lazily

    from hvdkeras.runtime.compat import keras
    from hvdkeras.training.trainer import Trainer

    for job, (config_path, workdir, overrides) in enumerate(json.loads(sys.argv[2])):
        with tfds_testing.mock_data(num_examples=12):
            cfg = config_lib.load(config_path, overrides)
            trainer = Trainer.from_config(cfg, workdir)
            final = trainer.fit()
            x, _ = next(iter(trainer.data.train(0, 1)))
        print("RESULT " + json.dumps({"rank": rank, "job": job, "final": final,
                                      "input_shape": list(trainer.data.input_shape), "batch_shape": list(x.shape),
                                      "mean": float(tf.reduce_mean(x)), "std": float(tf.math.reduce_std(x))}),
              flush=True)
        keras.backend.clear_session()  # the next job's model starts from nothing, as in a process of its own
