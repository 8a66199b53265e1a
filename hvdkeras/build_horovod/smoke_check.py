"""Run on every rank by :mod:`hvdkeras.build_horovod.checks`: Horovod's TensorFlow ops against exact values.

    horovodrun -np 2 -H localhost:2 --gloo python -m hvdkeras.build_horovod.smoke_check

Every rank runs the same ops in the same order, each on values that depend on its rank,
and compares the result with the value computed here from the rank formula (integers
and small sums of powers of two: exact in float32). Each rank prints one
``SMOKE ok <op>`` or ``SMOKE FAILED <op>: got ..., expected ...`` line per op and exits
non-zero if any op failed.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf


def value(r):
    """Rank ``r``'s dense input: [r+1, 2(r+1), 4(r+1)]."""
    return np.array([1.0, 2.0, 4.0], np.float32) * (r + 1)


def checks(rank, size):
    """(op, function returning (got, expected)) for each op; every rank runs them in the same order."""
    ranks = range(size)
    total = sum(value(r) for r in ranks)

    def dense_sum():
        return hvd.allreduce(tf.constant(value(rank)), op=hvd.Sum, name="smoke.sum").numpy(), total

    def dense_average():
        return hvd.allreduce(tf.constant(value(rank)), op=hvd.Average, name="smoke.avg").numpy(), total / size

    def int_sum():
        got = hvd.allreduce(tf.constant([rank + 1, 10], tf.int32), op=hvd.Sum, name="smoke.int").numpy()
        return got, np.array([sum(r + 1 for r in ranks), 10 * size], np.int32)

    def sparse_sum():
        # IndexedSlices (an embedding's gradient): rank r contributes to row r+1 and to row 0; rows add up.
        rows = size + 1
        sparse = tf.IndexedSlices(values=tf.constant(np.stack([value(rank), value(rank)])),
                                  indices=tf.constant([rank + 1, 0], tf.int64),
                                  dense_shape=tf.constant([rows, 3], tf.int64))
        reduced = hvd.allreduce(sparse, op=hvd.Sum, name="smoke.sparse")
        expected = np.zeros((rows, 3), np.float32)
        for r in ranks:
            expected[r + 1] += value(r)
            expected[0] += value(r)
        if not isinstance(reduced, tf.IndexedSlices):
            return f"a {type(reduced).__name__}, not IndexedSlices", "IndexedSlices"
        return tf.convert_to_tensor(reduced).numpy(), expected

    pair = [tf.constant(value(rank)), tf.constant([[float(rank)]])]
    expected_pair = [total, np.array([[float(sum(ranks))]], np.float32)]

    def grouped_eager():
        return [g.numpy() for g in hvd.grouped_allreduce(pair, op=hvd.Sum, name="smoke.grouped")], expected_pair

    @tf.function
    def grouped_graph(tensors):
        return hvd.grouped_allreduce(tensors, op=hvd.Sum, name="smoke.grouped_fn")

    def grouped_tf_function():
        return [g.numpy() for g in grouped_graph(pair)], expected_pair

    def broadcast():
        got = hvd.broadcast(tf.constant(value(rank) + 100.0 * rank), root_rank=0, name="smoke.bcast").numpy()
        return got, value(0)

    return [("allreduce", dense_sum), ("allreduce_average", dense_average), ("allreduce_int32", int_sum),
            ("allreduce_sparse", sparse_sum), ("grouped_allreduce", grouped_eager),
            ("grouped_allreduce_tf_function", grouped_tf_function), ("broadcast", broadcast)]


def show(v) -> str:
    """A value (or nested list of values) as one line of text."""
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(show(x) for x in v) + "]"
    return np.array2string(np.asarray(v), separator=",").replace("\n", "") if not isinstance(v, str) else v


def same(got, expected) -> bool:
    """Whether ``got`` equals ``expected`` exactly, in shape and values (lists element by element)."""
    if isinstance(expected, list):
        return len(got) == len(expected) and all(same(g, e) for g, e in zip(got, expected))
    got, expected = np.asarray(got), np.asarray(expected)
    return got.shape == expected.shape and bool(np.array_equal(got, expected))


def main() -> int:
    """Runs every op on this rank and prints one line per op; returns 1 if any failed, else 0."""
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    failed = 0
    for op, check in checks(rank, size):
        try:
            got, expected = check()
        except Exception as exc:  # an op that is not registered or errors: name it, go on with the others
            got, expected = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", "a result"
        if not isinstance(got, str) and same(got, expected):
            print(f"SMOKE ok {op}", flush=True)
        else:
            failed += 1
            print(f"SMOKE FAILED {op}: got {show(got)}, expected {show(expected)} (rank {rank} of {size})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
