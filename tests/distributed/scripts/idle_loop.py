"""Run under horovodrun: how often Horovod's threads wake while nothing is pending, and work after the pause.

    python idle_loop.py SECONDS [section.key=value ...]

Starts Horovod through :func:`hvdkeras.runtime.distributed.init` with the config's Horovod section
(``horovod.idle_wait_ms`` among the overrides), runs one allreduce, then sleeps SECONDS on
every rank with no tensor enqueued, then runs one more allreduce. Prints ``RESULT <json>``:
``wakeups_per_s``, the voluntary context switches per second of the threads ``hvd.init``
started (Horovod's background thread and Gloo's), during the pause; ``sums``, the two
allreduces' results.
"""
import atexit
import gc
import json
import os
import sys
import time

from hvdkeras.runtime import tensorflow_import

tensorflow_import.load()  # first, as the command lines import TensorFlow: quiet, matplotlib at its first use

import horovod.tensorflow as hvd
import tensorflow as tf

from hvdkeras import config as config_lib
from hvdkeras.common import horovod_env
from hvdkeras.runtime import distributed

atexit.register(gc.freeze)  # skip the interpreter's last garbage collection, over TensorFlow's objects: ~1 s a rank

seconds = float(sys.argv[1])
cfg = config_lib.load(None, sys.argv[2:])


def thread_ids():
    return set(os.listdir("/proc/self/task"))


def voluntary_switches(tids):
    total = 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
        except FileNotFoundError:  # the thread ended
            pass
    return total


before = thread_ids()
distributed.init(cfg.runtime, horovod_cfg=cfg.horovod)
horovod_threads = thread_ids() - before
first = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum, name="idle.first")
start_switches, start = voluntary_switches(horovod_threads), time.perf_counter()
time.sleep(seconds)
wakeups = (voluntary_switches(horovod_threads) - start_switches) / (time.perf_counter() - start)
second = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum, name="idle.second")
print("RESULT " + json.dumps({"rank": hvd.rank(), "threads": len(horovod_threads), "wakeups_per_s": wakeups,
                              "idle_wait": os.environ.get(horovod_env.IDLE_WAIT_VARIABLE),
                              "sums": [float(first.numpy()[0]), float(second.numpy()[0])]}), flush=True)
