"""The Spark estimator's ranks on a table larger than the memory each rank may use (a cgroup's limit), on Spark.

``run_stream_checks(session, work)`` runs in a stack's shared Spark driver (local[2] or the lab's cluster). It writes
the training Parquet with pyarrow where ``fit_on_parquet`` reads it (rows of 256 float32 features and a class, in row
groups of 8192 rows as the estimator's own writer makes them), each rank's share ``share`` times the limit, then fits
through the session's ``SparkBackend``, each rank's training function wrapped: when the rank's task is first asked
for its rows, the rank joins a memory cgroup of its own limited to ``limit_mb``. Every page it touches from then on
(the rows it reads, its model, its gradients, its reads' page cache) is charged to that limit, and past it the kernel
kills the rank; what it had before (Python, TensorFlow and Horovod imported, the Spark task) stays charged where it was.
The rows streamed (the default) must train to the end. With ``negative=True``, what shows the limit bites: a process
in a cgroup of the same limit reads one rank's share into memory with the reader ``inmemory_cache_all=True`` uses
(``reader.read_rows``), and the kernel must end it. (A whole in-memory fit showed the same, two ranks killed, at the
cost of a Spark stage and two TensorFlow imports.)

Needs root (cgroup v1's memory controller at /sys/fs/cgroup/memory); the cgroups are removed at the end.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

CGROUP_ROOT = "/sys/fs/cgroup/memory"
FEATURES, CLASSES, GROUP_ROWS = 256, 4, 8192


def can_limit():
    """Whether this process may make memory cgroups: ``(True, "")`` or ``(False, why not)``."""
    if not os.path.isdir(CGROUP_ROOT):
        return False, f"no cgroup v1 memory controller at {CGROUP_ROOT}"
    if not os.access(CGROUP_ROOT, os.W_OK):
        return False, f"{CGROUP_ROOT} is not writable (not root)"
    return True, ""


def limited(fn, limit_bytes, prefix):
    """``fn`` as a rank runs it within ``limit_bytes`` from its first look at its rows; it returns
    ``{"result": fn's, "peak_bytes": ..., "rss_bytes": ..., "cgroup": name, "host": its hostname}``."""

    def rank(*args):
        from hvdkeras.spark.keras import task

        group = os.path.join(CGROUP_ROOT, f"{prefix}-{os.getpid()}")
        real = task.SparkTask.datasets

        def datasets(self, *a, **kw):
            if not os.path.exists(group):
                os.mkdir(group)
                with open(os.path.join(group, "memory.limit_in_bytes"), "w") as f:
                    f.write(str(limit_bytes))
                with open(os.path.join(group, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
            return real(self, *a, **kw)

        task.SparkTask.datasets = datasets
        try:
            result = fn(*args)
        finally:
            task.SparkTask.datasets = real
        with open(os.path.join(group, "memory.max_usage_in_bytes")) as f:
            peak = int(f.read())
        with open(os.path.join(group, "memory.stat")) as f:
            stat = dict(line.split() for line in f)
        with open(os.path.join(CGROUP_ROOT, "cgroup.procs"), "w") as f:  # out again, so that the driver removes it
            f.write(str(os.getpid()))
        import socket

        return {"result": result, "peak_bytes": peak, "rss_bytes": int(stat["rss"]), "cgroup": os.path.basename(group),
                "host": socket.gethostname()}

    return rank


class LimitedBackend:
    """Horovod's backend interface around ``inner`` (the session's ``SparkBackend``): its ranks run within a limit."""

    def __init__(self, inner, limit_bytes, prefix):
        self.inner, self.limit_bytes, self.prefix = inner, limit_bytes, prefix
        self.ranks = []

    def num_processes(self):
        return self.inner.num_processes()

    def check(self):
        self.inner.check()

    def run(self, fn, args=(), kwargs=None, env=None):
        raw = self.inner.run(limited(fn, self.limit_bytes, self.prefix), args=args, env=env)
        self.ranks = [{k: v for k, v in r.items() if k != "result"} for r in raw]
        return [r["result"] for r in raw]


# One rank's share held in memory, as inmemory_cache_all=True's ranks read it: argv is the store's folder.
READ_IN_MEMORY = """
import sys
from hvdkeras.spark.common.reader import read_rows
from hvdkeras.spark.common.store import Store
store = Store.create(sys.argv[1])
rows = read_rows(store, store.get_train_data_path(), 0, 2, ["features", "label"])
print(len(rows["label"]))
"""


def in_memory_read(base, limit_bytes, group):
    """A process in the cgroup ``group`` (made, limited to ``limit_bytes``, removed) reading rank 0's share into
    memory: ``{"returncode": ..., "seconds": ...}``; -9 when the kernel ended it."""
    folder = os.path.join(CGROUP_ROOT, group)
    os.mkdir(folder)
    with open(os.path.join(folder, "memory.limit_in_bytes"), "w") as f:
        f.write(str(limit_bytes))

    def join():  # in the child, before it runs Python: everything it touches is charged to the group
        with open(os.path.join(folder, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    began = time.time()
    proc = subprocess.run([sys.executable, "-c", READ_IN_MEMORY, base], preexec_fn=join, capture_output=True,
                          text=True, timeout=300)
    return {"returncode": proc.returncode, "seconds": round(time.time() - began, 1),
            "said": (proc.stdout + proc.stderr).strip()[-300:]}


def write_table(store, rows):
    """``rows`` rows at the store's training path, in row groups of :data:`GROUP_ROWS`; the file's bytes. One block
    of random rows repeats (its labels shift with each group): what matters here is the table's size, written
    uncompressed and fast."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = store.get_localized_path(store.get_train_data_path())
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    labels = rng.integers(0, CLASSES, GROUP_ROWS)
    values = (rng.normal(size=(GROUP_ROWS, FEATURES)) + labels[:, None]).astype(np.float32)
    block = pa.ListArray.from_arrays(pa.array(np.arange(0, GROUP_ROWS * FEATURES + 1, FEATURES, dtype=np.int32)),
                                     pa.array(values.reshape(-1)))
    path = os.path.join(folder, "part-00000.parquet")
    schema = pa.schema([("features", pa.list_(pa.float32())), ("label", pa.int64())])
    with pq.ParquetWriter(path, schema, compression="none", use_dictionary=False, write_statistics=False) as writer:
        for group, first in enumerate(range(0, rows, GROUP_ROWS)):
            n = min(GROUP_ROWS, rows - first)
            writer.write_table(pa.table({"features": block.slice(0, n),
                                         "label": pa.array((labels[:n] + group) % CLASSES, pa.int64())}))
    return os.path.getsize(path)


def run_stream_checks(session, work, limit_mb=256, share=3.0, negative=False):
    """The streamed fit within ``limit_mb`` a rank (and with ``negative`` a rank's share read into memory within the
    same limit); what each did."""
    from hvdkeras.runtime.compat import keras
    from hvdkeras.spark import keras as hvd_keras
    from hvdkeras.spark.common.backend import SparkBackend
    from hvdkeras.spark.common.store import Store

    ok, why = can_limit()
    if not ok:
        return {"skipped": why}
    limit = limit_mb << 20
    rows = int(2 * share * limit / (FEATURES * 4 + 8)) + 1  # two ranks' shares
    # The store in memory (tmpfs) where there is one: the table's gigabytes are written in a second or two, not
    # ten, and what a rank reads is charged to it as any read is.
    shm = "/dev/shm"
    base = tempfile.mkdtemp(prefix="hvdkeras-stream-", dir=shm if os.access(shm, os.W_OK) else work)
    store = Store.create(base)
    began = time.time()
    report = {"limit_bytes": limit, "rows": rows, "parquet_bytes": write_table(store, rows),
              "write_seconds": round(time.time() - began, 1)}
    prefix = f"hvdkeras-stream-{os.getpid()}"
    try:
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(CLASSES, activation="softmax")])
        backend = LimitedBackend(SparkBackend(num_proc=2), limit, f"{prefix}-streamed")
        began = time.time()
        try:
            trained = hvd_keras.KerasEstimator(
                backend=backend, store=store, model=model, optimizer=keras.optimizers.SGD(0.01),
                loss="sparse_categorical_crossentropy", feature_cols=["features"], label_cols=["label"],
                batch_size=4096, epochs=1, random_seed=1, verbose=0, run_id="streamed", max_retries=0,
                ).fit_on_parquet()
            outcome = {"epochs": len(trained.getHistory()["loss"]), "loss": trained.getHistory()["loss"][-1]}
        except Exception as exc:  # noqa: BLE001  (what fit says is the outcome)
            outcome = {"error": str(exc).splitlines()[0][:400]}
        outcome.update(seconds=round(time.time() - began, 1), ranks=backend.ranks)
        report["streamed"] = outcome
        if negative:
            report["in_memory"] = in_memory_read(base, limit, f"{prefix}-in-memory")
    finally:
        for name in os.listdir(CGROUP_ROOT):
            if name.startswith(prefix):
                try:
                    os.rmdir(os.path.join(CGROUP_ROOT, name))
                except OSError as exc:
                    report.setdefault("cgroups_left", []).append(f"{name}: {exc}")
        shutil.rmtree(base, ignore_errors=True)
    return report
