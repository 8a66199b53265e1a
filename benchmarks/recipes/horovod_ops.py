r"""Horovod's Keras recipe where its Keras layer does not run (Keras 3): on Horovod's TensorFlow ops.

``hvdkeras.DistributedOptimizer`` averages the gradients, and Horovod's two callbacks
are written out as they behave in its Keras layer (broadcast after the first batch,
per-metric allreduce at epoch ends)::

    horovodrun -np 2 -H localhost:2 --gloo python benchmarks/recipes/horovod_ops.py \
        MODEL BATCH SIZE STEPS [--fp16-allreduce]
"""
import horovod.tensorflow as hvd
import tensorflow as tf
from common import Clock, batch, data, fp16_allreduce, make_model, report, steps

from hvdkeras import DistributedOptimizer

hvd.init()
model = make_model()
compression = hvd.Compression.fp16 if fp16_allreduce else hvd.Compression.none
opt = DistributedOptimizer(tf.keras.optimizers.SGD(0.01 * hvd.size(), momentum=0.9),
                           compression=compression)
model.compile(opt, "sparse_categorical_crossentropy")


class BroadcastGlobalVariablesCallback(tf.keras.callbacks.Callback):
    done = False

    def on_train_batch_end(self, batch, logs=None):
        if not self.done:
            hvd.broadcast_variables([v.value for v in model.variables + opt.variables], root_rank=0)
            self.done = True


class MetricAverageCallback(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        for key in sorted(logs or {}):
            logs[key] = float(hvd.allreduce(tf.constant(logs[key], tf.float32), op=hvd.Average, name=key))


clock = Clock()
model.fit(data(), steps_per_epoch=steps, epochs=2, verbose=0,
          callbacks=[BroadcastGlobalVariablesCallback(), MetricAverageCallback(), clock])
report(hvd.rank(), clock, batch * hvd.size())
