"""Is the Spark estimator's input the bottleneck, and does a rank's memory grow with its rows?
``python -m benchmarks.spark_reader [--rows 60000] [--rounds 3] [--memory-rows 20000]``.

Speed. One process trains the same model on MNIST-sized images (28x28x1, ten classes) in two
ways, round by round in alternation:

* ``store``: the rows in Parquet in a store, laid out as the estimator's driver writes them (one
  ``array<float>`` column of 784 values, an ``int`` label, ``--files`` files). The estimator's
  own task (:class:`hvdkeras.spark.keras.task.SparkTask`) streams this rank's rows with pyarrow
  into its ``tf.data`` pipeline, as a rank does by default. **The reads are inside the timing.**
* ``memory``: the same arrays, already in memory, through the same pipeline
  (:func:`hvdkeras.training.data.sharded_train_epochs`).

It prints examples per second for each round and the ratio ``store / memory``.

Memory. For tables of ``--memory-rows`` rows and 4 and 16 times as many, a new process for each
table and mode reads one epoch of the rank's batches (no training: the read is what holds rows) with
the rows streamed and with ``inmemory_cache_all=True``, and reports its peak resident memory above what
it held before the read, against the table's size.

The Parquet is written with pyarrow in Spark's layout, so no Spark starts: the benchmark measures
the reading, not Spark's writer. Figures go in docs/performance.md ("The Spark estimator's input").
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Tuple

import numpy as np


def write_store(root: str, x: np.ndarray, y: np.ndarray, files: int) -> Tuple[Any, str]:
    """(the store, the training folder): ``x`` and ``y`` as ``files`` Parquet files in the store's layout."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from hvdkeras.spark.common.store import Store

    store = Store.create(root)
    path = store.get_train_data_path()
    where = store.get_localized_path(path)
    os.makedirs(where, exist_ok=True)
    flat = x.reshape(len(x), -1)
    for i, part in enumerate(np.array_split(np.arange(len(x)), files)):
        values = pa.array(flat[part].reshape(-1), pa.float32())
        offsets = pa.array(np.arange(0, (len(part) + 1) * flat.shape[1], flat.shape[1], dtype=np.int32))
        table = pa.table({"features": pa.ListArray.from_arrays(offsets, values), "label": pa.array(y[part])})
        pq.write_table(table, os.path.join(where, f"part-{i:05d}.parquet"))
    return store, path


def model(seed: int) -> Any:
    """Horovod's keras_spark_mnist model, narrowed to fit two cores: conv 16, conv 32, pool, dense 64."""
    from hvdkeras.runtime.compat import keras

    keras.utils.set_random_seed(seed)
    m = keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    m.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
    return m


def _task(store: Any, path: str, rows: int, in_memory: bool = False) -> Any:
    """The estimator's task over the store's rows, as a rank gets it."""
    from hvdkeras.spark.common.data import PreparedData
    from hvdkeras.spark.keras.task import SparkTask, SparkTaskSpec

    prepared = PreparedData(train_path=path, val_path=None, train_rows=rows, val_rows=0, columns={},
                            feature_cols=("features",), label_cols=("label",), sample_weight_col=None)
    return SparkTask(SparkTaskSpec(store=store, data=prepared, model=b"", input_shapes=((28, 28, 1),),
                                   label_shapes=None, loss=None, loss_weights=None, metrics=None, optimizer=None,
                                   custom_objects={}, inmemory_cache_all=in_memory))


def _config(batch: int, seed: int) -> Any:
    from hvdkeras import config as config_lib

    return config_lib.from_dict({"data": {"name": "spark", "global_batch_size": batch,
                                          "eval_global_batch_size": batch}, "runtime": {"seed": seed}})


def one_round(source: str, store: Any, path: str, x: np.ndarray, y: np.ndarray, batch: int, epochs: int,
              seed: int) -> Dict[str, float]:
    """Trains ``epochs`` epochs fed from ``source``; examples per second, the read included."""
    import tensorflow as tf

    from hvdkeras.training import data as data_lib

    config = _config(batch, seed)
    m = model(seed)
    shard = data_lib.Shard(0, 1)
    tic = time.perf_counter()
    if source == "store":
        data = _task(store, path, len(x)).datasets(config, shard, None, None)
        dataset, steps = data.train(0, epochs), data.steps_per_epoch
    else:
        records = tf.data.Dataset.from_tensor_slices((x, y))
        steps = len(x) // batch
        cfg = config.data.__class__(**{**config.data.__dict__, "shuffle_buffer": len(x)})
        dataset = data_lib.finish(data_lib.sharded_train_epochs(records, None, batch, steps, seed, shard, 0, epochs,
                                                                cfg), cfg)
    ready = time.perf_counter() - tic
    m.fit(dataset, steps_per_epoch=steps, epochs=epochs, verbose=0, shuffle=False)
    seconds = time.perf_counter() - tic
    return {"examples_per_sec": steps * batch * epochs / seconds, "seconds": seconds, "ready_s": ready}


def _status_bytes(field: str) -> int:
    """``VmRSS`` or ``VmHWM`` (the peak resident set) of this process, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> None:
    """Starts ``VmHWM`` again from the current resident set (Linux: ``5`` to ``/proc/self/clear_refs``)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def measure_memory(root: str, rows: int, mode: str, batch: int) -> Dict[str, Any]:
    """In this process: one epoch of a rank's batches of the store at ``root`` (``mode``: ``streamed`` or
    ``in_memory``); the peak resident bytes above those held before the read, and the seconds."""
    import tensorflow as tf

    from hvdkeras.spark.common.store import Store
    from hvdkeras.training import data as data_lib

    store = Store.create(root)
    tf.constant(0)  # TensorFlow's runtime up before the baseline
    _reset_peak()
    before = _status_bytes("VmRSS")
    tic = time.perf_counter()
    data = _task(store, store.get_train_data_path(), rows, mode == "in_memory").datasets(
        _config(batch, 0), data_lib.Shard(0, 1), None, None)
    seen = sum(int(b[1].shape[0]) for b in data.train(0, 1))
    peak = _status_bytes("VmHWM")
    return {"mode": mode, "rows": seen, "peak_above_bytes": peak - before, "seconds": time.perf_counter() - tic}


def memory_table(base_rows: int, batch: int, scales: Tuple[int, ...] = (1, 4, 16)) -> List[Dict[str, Any]]:
    """For each scale, a table of ``base_rows * scale`` rows, and each mode's :func:`measure_memory` in a new
    process (its peak is its own)."""
    rng = np.random.default_rng(0)
    table: List[Dict[str, Any]] = []
    for scale in scales:
        rows = base_rows * scale
        with tempfile.TemporaryDirectory() as root:
            x = (rng.integers(0, 256, (rows, 28, 28, 1)) / 255.0).astype(np.float32)
            y = rng.integers(0, 10, rows).astype(np.int32)
            write_store(root, x, y, 10)
            table_bytes = x.nbytes + y.nbytes
            del x, y
            for mode in ("streamed", "in_memory"):
                proc = subprocess.run([sys.executable, "-m", "benchmarks.spark_reader", "--measure-memory", mode,
                                       "--store", root, "--rows", str(rows), "--batch", str(batch)],
                                      capture_output=True, text=True, check=True)
                found = json.loads(proc.stdout.strip().splitlines()[-1])
                found.update(scale=scale, table_bytes=table_bytes)
                table.append(found)
                print(f"{scale:>2}x ({table_bytes / 2**20:6.0f} MiB): {mode:9s} peak above the start"
                      f" {found['peak_above_bytes'] / 2**20:7.0f} MiB ({found['peak_above_bytes'] / table_bytes:.2f}x"
                      f" the table), {found['seconds']:.1f} s", flush=True)
    return table


def main(argv: List[str] | None = None) -> None:
    """Runs the rounds and prints the table; writes ``--out`` as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=60000, help="training images (MNIST has 60000)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of (store, memory), alternating")
    parser.add_argument("--files", type=int, default=10, help="Parquet files (the driver writes num_proc x 10)")
    parser.add_argument("--memory-rows", type=int, default=20000,
                        help="the smallest table of the memory measurement (then 4x and 16x); 0 skips it")
    parser.add_argument("--out", default="runs/bench-spark-reader.json")
    parser.add_argument("--measure-memory", choices=["streamed", "in_memory"], help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure_memory:  # one measurement, in its own process (memory_table starts it)
        print(json.dumps(measure_memory(args.store, args.rows, args.measure_memory, args.batch)))
        return

    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, args.rows).astype(np.int32)
    x = (rng.integers(0, 256, (args.rows, 28, 28, 1)) / 255.0).astype(np.float32)
    rounds: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as root:
        store, path = write_store(root, x, y, args.files)
        for r in range(args.rounds):
            order = ("store", "memory") if r % 2 == 0 else ("memory", "store")
            row: Dict[str, Any] = {"round": r + 1}
            for source in order:
                row[source] = one_round(source, store, path, x, y, args.batch, args.epochs, seed=r)
            row["ratio"] = row["store"]["examples_per_sec"] / row["memory"]["examples_per_sec"]
            rounds.append(row)
            print(f"round {r + 1}: store {row['store']['examples_per_sec']:.0f} ex/s (ready in"
                  f" {row['store']['ready_s']:.2f} s), memory {row['memory']['examples_per_sec']:.0f} ex/s"
                  f" (ready in {row['memory']['ready_s']:.2f} s), ratio {row['ratio']:.3f}", flush=True)
    ratios = [row["ratio"] for row in rounds]
    summary = {"rows": args.rows, "epochs": args.epochs, "batch": args.batch, "files": args.files,
               "median_ratio": statistics.median(ratios), "min_ratio": min(ratios), "max_ratio": max(ratios),
               "rounds": rounds}
    print(f"store / memory, median of {len(ratios)} rounds: {summary['median_ratio']:.3f}"
          f" (range {summary['min_ratio']:.3f}-{summary['max_ratio']:.3f})")
    if args.memory_rows:
        summary["memory"] = memory_table(args.memory_rows, args.batch)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
