"""What one divergence check costs each rank, against one training step of the same model.

Every rank trains the recipe's model with hvdkeras's ``DistributedOptimizer`` (SGD with momentum, rank 0's weights
broadcast first) for ``STEPS`` steps on synthetic images, timing each step (from one batch's end to the next), then
runs the ranks' comparison of their trainable weights (:func:`hvdkeras.callbacks.divergence.compare`, what the
guard runs at every epoch end and before every checkpoint) ``CHECKS`` times, and the fingerprint alone (no
collective) as often. hvdkeras's thread budget and, with ``BENCH_CPU_BINDING=1``, its CPU binding::

    BENCH_CPU_BINDING=1 HVDKERAS_IDLE_WAIT_MS=50 \\
    horovodrun -np 2 -H localhost:2 --gloo python benchmarks/recipes/divergence_cost.py MODEL BATCH SIZE STEPS

``RESULT`` carries per rank the medians ``step_s`` (the steps after the first two), ``check_s`` (after the first
check, which traces the fingerprint's function: ``first_check_s``), and apart ``fingerprint_s`` and ``allgather_s``
(the check's collective alone, which includes the wait for the slower rank),
``check_over_step`` (``check_s / step_s``), the number of variables compared and their bytes.
"""
import json
import os
import statistics
import time

import horovod.tensorflow as hvd
import tensorflow as tf
from common import batch, data, make_model, steps, use_hvdkeras_threads

from hvdkeras import DistributedOptimizer
from hvdkeras.callbacks import BroadcastGlobalVariablesCallback, divergence
from hvdkeras.runtime import distributed

CHECKS = int(os.environ.get("CHECKS", "9"))

hvd.init()
use_hvdkeras_threads(hvd.local_size())
model = make_model()
model.compile(DistributedOptimizer(tf.keras.optimizers.SGD(0.01 * hvd.size(), momentum=0.9)),
              "sparse_categorical_crossentropy")


class StepClock(tf.keras.callbacks.Callback):
    """Seconds from each batch's end to the next one's: a whole step, its exchange included."""

    def on_train_begin(self, logs=None):
        self.ends = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())


clock = StepClock()
model.fit(data(), steps_per_epoch=steps, epochs=1, verbose=0,
          callbacks=[BroadcastGlobalVariablesCallback(0, check_divergence=False), clock])
step_times = [b - a for a, b in zip(clock.ends, clock.ends[1:])][1:]

# Each rank leaves fit at its own time (tf.data's autotuner can hold an iterator's end, docs/performance.md):
# line the ranks up, so the first check times its trace and not the wait for the other rank.
distributed.any_rank(False, name="divergence_cost.ready")
checks, fingerprints = [], []
for _ in range(CHECKS):
    start = time.perf_counter()
    divergence.compare(model, "in the benchmark")  # raises if the ranks' weights differ
    checks.append(time.perf_counter() - start)
variables = divergence.compared_variables(model)
fingerprint = divergence.Fingerprint(variables)
gathers = []
for i in range(CHECKS):
    start = time.perf_counter()
    values = fingerprint().reshape(-1)
    fingerprints.append(time.perf_counter() - start)
    start = time.perf_counter()
    distributed.allgather_array(values, name=f"divergence_cost.{i % 2}")
    gathers.append(time.perf_counter() - start)

step_s, check_s = statistics.median(step_times), statistics.median(checks[1:])
print("RESULT " + json.dumps({
    "rank": hvd.rank(), "batch": batch, "step_s": step_s, "check_s": check_s,
    "fingerprint_s": statistics.median(fingerprints[1:]), "allgather_s": statistics.median(gathers[1:]),
    "first_check_s": checks[0],
    "check_over_step": check_s / step_s, "variables": len(variables),
    "bytes": sum(int(tf.size(v)) * tf.as_dtype(v.dtype).size for v in variables)}), flush=True)
