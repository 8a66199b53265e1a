"""Run under horovodrun: trains with hvdkeras.Trainer and reports, per rank, what tests need to check.

    python train_and_report.py REPORT_DIR WORKDIR CONFIG [section.key=value ...]

Writes REPORT_DIR/rank<r>.json (final metrics, every path this rank wrote to) and
REPORT_DIR/rank<r>.npz (final weights). Rank 0 also evaluates the final model on
the whole validation set in this one process, for comparison with the averaged
metrics the distributed run logged.
"""
import atexit
import builtins
import gc
import json
import os
import sys

from hvdkeras.runtime import tensorflow_import

tensorflow_import.load()  # first, as the command lines import TensorFlow: quiet, matplotlib at its first use

import numpy as np
import tensorflow as tf

atexit.register(gc.freeze)  # skip the interpreter's last garbage collection, over TensorFlow's objects: ~1 s a rank

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

report_dir, workdir, config_path, *overrides = sys.argv[1:]
written = set()

# Record every write this process makes (Python file opens, renames, directory
# creation, TensorFlow checkpoint writes), to prove only rank 0 writes.
_open = builtins.open


def recording_open(file, mode="r", *args, **kwargs):
    if any(c in mode for c in "wax+"):
        written.add(os.path.abspath(str(file)))
    return _open(file, mode, *args, **kwargs)


builtins.open = recording_open
_os_open = os.open
WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def recording_os_open(path, flags, *args, **kwargs):  # the library's appends and locks open files this way
    if flags & WRITES:
        written.add(os.path.abspath(str(path)))
    return _os_open(path, flags, *args, **kwargs)


os.open = recording_os_open
for name in ("rename", "replace", "makedirs", "mkdir"):
    original = getattr(os, name)

    def recorder(*args, _original=original, **kwargs):
        written.update(os.path.abspath(a) for a in args if isinstance(a, (str, os.PathLike)))
        return _original(*args, **kwargs)

    setattr(os, name, recorder)
_ckpt_write = tf.train.Checkpoint.write


def recording_ckpt_write(self, file_prefix, *args, **kwargs):
    written.add(os.path.abspath(str(file_prefix)))
    return _ckpt_write(self, file_prefix, *args, **kwargs)


tf.train.Checkpoint.write = recording_ckpt_write

import tiny_tfds  # noqa: F401  (registers the hvdkeras_tiny TFDS builder for data tests)

from hvdkeras import config as config_lib
from hvdkeras.training import data as data_lib
from hvdkeras.training.trainer import Trainer

cfg = config_lib.load(config_path, overrides)
trainer = Trainer.from_config(cfg, workdir)
final = trainer.fit()
rank = trainer.process.rank
report = {"rank": rank, "final": final, "written": sorted(written),
          # every thread's cores at the end (TensorFlow's pools, Horovod's and Gloo's threads included)
          "thread_cpus": sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir("/proc/self/task")}),
          "binding": trainer.process.cpus.describe()}
if rank == 0:
    whole = data_lib.build(cfg.data, data_lib.Shard(0, 1), seed=cfg.runtime.seed)
    report["single_process_eval"] = trainer.model.evaluate(whole.validation, verbose=0, return_dict=True)
builtins.open = _open
os.makedirs(report_dir, exist_ok=True)
np.savez(os.path.join(report_dir, f"rank{rank}.npz"), *[v.numpy() for v in trainer.model.variables])
with open(os.path.join(report_dir, f"rank{rank}.json"), "w") as f:
    json.dump(report, f)
