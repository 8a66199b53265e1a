"""Run under horovodrun: ``python -m hvdkeras.train`` with rank 1 pausing in one batch, its Horovod thread alive.

    python slow_rank.py SECONDS [RELEASE_FILE] --config FILE --workdir DIR [--set section.key=value ...]
    python slow_rank.py stop --config FILE --workdir DIR [--set section.key=value ...]
    python slow_rank.py stop-after --config FILE --workdir DIR [--set section.key=value ...]

Rank 1 sleeps at the start of batch 4 of epoch 2 (a slow data loader, a long garbage
collection) for SECONDS, or until RELEASE_FILE exists if one is given (at most SECONDS):
the other rank waits in that batch's allreduce, and Horovod's stall inspector, which needs
every rank's background thread running, can name rank 1. A test that watches the job's
output for the warning creates RELEASE_FILE once it has seen it, so the pause lasts as long
as the event takes and no longer. Everything else is the command line's own path, its
one-line errors included.

With ``stop`` instead of SECONDS, rank 1 stops itself there (SIGSTOP, its Horovod thread too): a rank
frozen at a known batch, the other one waiting in that batch's allreduce after 3 whole batches of epoch 2.
With ``stop-after``, rank 1 stops itself once batch 4 of epoch 2 has run, before any callback sees that batch:
the other rank has 4 whole batches of epoch 2 and waits in the first collective of a callback (the per-batch
NaN check), before its own callbacks have counted the fourth.
"""
import os
import signal
import sys
import time

from hvdkeras.runtime import tensorflow_import

tensorflow_import.load()  # first, as the command lines import TensorFlow: quiet, matplotlib at its first use

from hvdkeras import train
from hvdkeras.runtime import distributed
from hvdkeras.runtime.compat import keras
from hvdkeras.training import trainer as trainer_lib

stop = sys.argv[1] in ("stop", "stop-after")
after = sys.argv[1] == "stop-after"
seconds = 0.0 if stop else float(sys.argv[1])
release = sys.argv[2] if len(sys.argv) > 2 and not sys.argv[2].startswith("-") else None
sys.argv = [sys.argv[0]] + sys.argv[(3 if release else 2):]


class PauseOnce(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if distributed.rank() == 1 and self.epoch == 1 and batch == 3 and after:
            print("rank 1 stops itself", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)

    def on_train_batch_begin(self, batch, logs=None):
        if distributed.rank() == 1 and self.epoch == 1 and batch == 3 and stop and not after:
            print("rank 1 stops itself", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        elif distributed.rank() == 1 and self.epoch == 1 and batch == 3:
            until = f" or until {release} exists" if release else ""
            print(f"rank 1 pauses for {seconds:g}s{until}", flush=True)
            deadline = time.time() + seconds
            while time.time() < deadline and not (release and os.path.exists(release)):
                time.sleep(0.1)
            print(f"rank 1 goes on after {seconds - max(0.0, deadline - time.time()):.1f}s", flush=True)


build_callbacks = trainer_lib.Trainer.callbacks
trainer_lib.Trainer.callbacks = (  # first with stop-after: no other callback has seen the batch
    lambda self, *args, **kwargs: [PauseOnce()] + build_callbacks(self, *args, **kwargs) if after
    else build_callbacks(self, *args, **kwargs) + [PauseOnce()])
train.run()
