"""Run under horovodrun: ``python -m hvdkeras.train`` with rank 1 pausing in one batch, its Horovod thread alive.

    python slow_rank.py SECONDS --config FILE --workdir DIR [--set section.key=value ...]

Rank 1 sleeps SECONDS at the start of batch 4 of epoch 2 (a slow data loader, a long
garbage collection): the other rank waits in that batch's allreduce, and Horovod's
stall inspector, which needs every rank's background thread running, can name rank 1.
Everything else is the command line's own path, its one-line errors included.
"""
import sys
import time

from hvdkeras import distributed, train
from hvdkeras import trainer as trainer_lib
from hvdkeras.compat import keras

seconds = float(sys.argv[1])
sys.argv = [sys.argv[0]] + sys.argv[2:]


class PauseOnce(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if distributed.rank() == 1 and self.epoch == 1 and batch == 3:
            print(f"rank 1 pauses for {seconds:g}s", flush=True)
            time.sleep(seconds)


build_callbacks = trainer_lib.Trainer.callbacks
trainer_lib.Trainer.callbacks = lambda self, *args, **kwargs: build_callbacks(self, *args, **kwargs) + [PauseOnce()]
train.run()
