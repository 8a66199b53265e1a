"""What one exchange of a model's gradients costs each rank, with no training beside it.

Every rank allreduces (average, Horovod's TensorFlow ops, as the trainer's exchange does) one tensor per
trainable variable of the model, in backward order, ``STEPS`` times after two warm-up exchanges, with
hvdkeras's thread budget, CPU binding and Horovod variables (the runner's ceiling settings)::

    BENCH_CPU_BINDING=1 HVDKERAS_IDLE_WAIT_MS=50 \\
    horovodrun -np 2 -H localhost:2 --gloo python benchmarks/recipes/exchange_cost.py MODEL BATCH SIZE STEPS

``RESULT`` carries, per exchange (medians over the ``STEPS``), ``exchange_s`` (wall time) and
``exchange_cpu_s`` (the CPU seconds the process used meanwhile, all threads: Horovod's background thread,
the transport, the copies into and out of the fusion buffer). On a host where each rank has one core,
that CPU time is taken from the backward pass it overlaps, so a rank whose step takes ``T`` seconds
without any exchange takes at least ``T + exchange_cpu_s`` with it: ``T / (T + exchange_cpu_s)`` bounds
its efficiency against the communication-free ceiling. ``exchange_walls_s`` lists every measured
exchange's wall time. All tensors are handed over at once here, so Horovod fuses them into as few
buffers as its fusion threshold allows: the cheapest way to move them. ``BATCH`` is not used (the
recipes' argument list). With ``--groups=K`` the tensors, in backward order, are split into ``K`` contiguous
groups of nearly equal count, each one grouped allreduce (Horovod's ``DistributedOptimizer(groups=K)``: a
group is negotiated and fused as one); with ``--fp16-allreduce`` they cross the wire in fp16.
"""
import json
import statistics
import time

import horovod.tensorflow as hvd
import tensorflow as tf
from common import fp16_allreduce, groups, make_model, steps, use_hvdkeras_threads

hvd.init()
use_hvdkeras_threads(hvd.local_size())
grads = [tf.ones_like(v) for v in reversed(make_model().trainable_variables)]
compression = hvd.Compression.fp16 if fp16_allreduce else hvd.Compression.none


def split(tensors, k):
    """``k`` contiguous groups of nearly equal count (Horovod's split_list)."""
    size, extra = divmod(len(tensors), k)
    bounds = [i * size + min(i, extra) for i in range(k + 1)]
    return [tensors[bounds[i]:bounds[i + 1]] for i in range(k)]


@tf.function
def exchange(tensors):
    if groups:
        return [out for i, group in enumerate(split(tensors, min(groups, len(tensors))))
                for out in hvd.grouped_allreduce(group, op=hvd.Average, compression=compression, name=f"group_{i}")]
    return [hvd.allreduce(t, op=hvd.Average, compression=compression, name=f"grad_{i}")
            for i, t in enumerate(tensors)]


walls, cpus = [], []
for step in range(steps + 2):
    start, cpu_start = time.perf_counter(), time.process_time()
    out = exchange(grads)  # returns when every allreduce has
    if step >= 2:
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu_start)
wrong = [i for i, o in enumerate(out) if not bool(tf.reduce_all(tf.abs(o - 1.0) < 1e-3))]
if wrong:
    raise SystemExit(f"exchange_cost: the average of ones is not one for gradients {wrong[:5]}")
print("RESULT " + json.dumps({
    "rank": hvd.rank(), "exchange_s": statistics.median(walls), "exchange_cpu_s": statistics.median(cpus),
    "exchange_walls_s": walls,
    "gradient_bytes": sum(int(tf.size(g)) * 4 for g in grads), "tensors": len(grads), "groups": groups,
    "fp16": fp16_allreduce}), flush=True)
