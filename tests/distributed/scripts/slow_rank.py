"""Run under horovodrun: the trainer, with rank 1 pausing in one batch while its Horovod thread stays alive.

    python slow_rank.py WORKDIR CONFIG SECONDS [section.key=value ...]

Rank 1 sleeps SECONDS at the start of batch 4 of epoch 2 (a slow data loader, a long
garbage collection): the other rank waits in that batch's allreduce, and Horovod's
stall inspector, which needs every rank's background thread running, can name rank 1.
"""
import sys
import time

from hvdkeras import config as config_lib
from hvdkeras.compat import keras
from hvdkeras.trainer import Trainer

workdir, config_path, seconds, *overrides = sys.argv[1:]
trainer = Trainer.from_config(config_lib.load(config_path, overrides), workdir)


class PauseOnce(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if trainer.process.rank == 1 and self.epoch == 1 and batch == 3:
            print(f"rank 1 pauses for {seconds}s", flush=True)
            time.sleep(float(seconds))


build_callbacks = trainer.callbacks
trainer.callbacks = lambda *args, **kwargs: build_callbacks(*args, **kwargs) + [PauseOnce()]
trainer.fit()
