"""``model.fit`` under ``tf.distribute.MultiWorkerMirroredStrategy``, one process per worker (Keras 2).

Each worker is started with ``TF_CONFIG`` naming all workers and its own index; the
global batch is ``BATCH`` per worker, as in the Horovod recipes::

    TF_CONFIG='{"cluster": {"worker": [...]}, "task": {"type": "worker", "index": I}}' \\
        python benchmarks/recipes/mwms_fit.py MODEL BATCH SIZE STEPS
"""
import json
import os

import tensorflow as tf
from common import Clock, batch, data, make_model, report, steps

strategy = tf.distribute.MultiWorkerMirroredStrategy()
workers = strategy.num_replicas_in_sync
with strategy.scope():
    model = make_model()
    model.compile(tf.keras.optimizers.SGD(0.01 * workers, momentum=0.9), "sparse_categorical_crossentropy")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
global_data = data().unbatch().batch(batch * workers).with_options(options)
clock = Clock()
model.fit(global_data, steps_per_epoch=steps, epochs=2, verbose=0, callbacks=[clock])
report(json.loads(os.environ["TF_CONFIG"])["task"]["index"], clock, batch * workers)
