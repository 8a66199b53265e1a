r"""Horovod's published Keras recipe: init, scale the rate, DistributedOptimizer, broadcast and metric averaging.

Keras 2 only (Horovod 0.28.1's Keras layer does not run on Keras 3: see ``horovod_ops.py``)::

    horovodrun -np 2 -H localhost:2 --gloo python benchmarks/recipes/horovod_keras.py \
        MODEL BATCH SIZE STEPS [--fp16-allreduce]
"""
import horovod.tensorflow.keras as hvd
import tensorflow as tf
from common import Clock, batch, data, fp16_allreduce, make_model, report, steps

hvd.init()
model = make_model()
compression = hvd.Compression.fp16 if fp16_allreduce else hvd.Compression.none
opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01 * hvd.size(), momentum=0.9),
                               compression=compression)
model.compile(opt, "sparse_categorical_crossentropy")
clock = Clock()
model.fit(data(), steps_per_epoch=steps, epochs=2, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback(), clock])
report(hvd.rank(), clock, batch * hvd.size())
