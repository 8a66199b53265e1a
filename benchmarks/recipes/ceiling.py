"""The communication-free ceiling: the same processes, model, batch and threads as hvdkeras, no gradient exchange.

Each rank trains its own copy on its own batches: Horovod is started (so its
background thread runs, as in every real job) and each process gets hvdkeras'
thread budget, CPU binding and Horovod variables (the runner sets
``BENCH_CPU_BINDING=1``, see :mod:`common`, and ``HVDKERAS_IDLE_WAIT_MS``), but
the optimizer is the plain one and nothing is averaged. The
ranks never wait for each other, so their images/s add up::

    horovodrun -np 2 -H localhost:2 --gloo python benchmarks/recipes/ceiling.py MODEL BATCH SIZE STEPS [--lockstep]

With ``--lockstep`` (the ``ceiling-lockstep`` row) every rank allreduces one number after each batch, as
hvdkeras's per-batch NaN agreement does: the ranks then wait for each other at every step, as in real
training, but no gradient moves. Set beside the ceiling and hvdkeras, it splits what a step loses into the
lockstep (each step waits for the slower rank) and the exchange of the gradients' bytes.

``RESULT`` also carries ``gradient_bytes``, the bytes one allreduce of the model's
gradients moves in float32 (the input of the lab's link arithmetic).
"""
import horovod.tensorflow as hvd
import tensorflow as tf
from common import Clock, batch, data, lockstep, make_model, report, steps, use_hvdkeras_threads

from hvdkeras.runtime import distributed

hvd.init()
use_hvdkeras_threads(hvd.local_size())
model = make_model()
model.compile(tf.keras.optimizers.SGD(0.01, momentum=0.9), "sparse_categorical_crossentropy")


class Lockstep(tf.keras.callbacks.Callback):
    """After every batch the collective of hvdkeras's NaN agreement: the ranks wait for each other at every step."""

    def on_train_batch_end(self, batch, logs=None):
        distributed.any_rank(False, name=distributed.cycled_name("ceiling.lockstep"))


clock = Clock()
model.fit(data(), steps_per_epoch=steps, epochs=2, verbose=0, callbacks=[clock] + ([Lockstep()] if lockstep else []))
report(hvd.rank(), clock, batch, gradient_bytes=sum(int(tf.size(v)) * 4 for v in model.trainable_variables))
