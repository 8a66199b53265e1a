"""Keras' stopping and plateau callbacks, with every decision agreed across ranks.

A rank that leaves the training loop while the others go on leaves them waiting
in the next gradient allreduce forever. These callbacks make one decision for all
ranks, with one small collective where the decision is taken.
"""
from __future__ import annotations

from hvdkeras.common import log
from hvdkeras.runtime import compat, distributed
from hvdkeras.runtime.compat import keras


class TerminateOnNaN(keras.callbacks.TerminateOnNaN):
    """Stops every rank at the same batch when any rank sees a NaN or infinite loss.

    Rule enforced: the NaN check is combined over ranks after every training batch
    (one one-number allreduce per batch), so all ranks leave the loop together.
    """

    def on_batch_end(self, batch, logs=None):
        """Runs Keras' check on this rank's loss, then stops every rank if any rank saw an invalid loss."""
        local = bool(self.model.stop_training)
        super().on_batch_end(batch, logs)  # Keras' check on this rank's loss
        saw_nan = bool(self.model.stop_training) and not local
        if distributed.any_rank(saw_nan, name=distributed.cycled_name("hvdkeras.terminate_on_nan")):
            if not saw_nan:
                log.info(f"Batch {batch}: another rank saw an invalid loss, terminating training", every_rank=True)
            self.model.stop_training = True


class EarlyStopping(keras.callbacks.EarlyStopping):
    """Keras' ``EarlyStopping``; rank 0's decision is every rank's.

    Rule enforced: after each epoch rank 0 broadcasts whether to stop. With
    :class:`MetricAverageCallback` earlier in the list every rank already sees the
    same metric and would decide alike; the broadcast keeps them together even when
    they would not. With ``restore_best_weights`` rank 0's restored weights are
    broadcast when training stops.
    """

    def on_epoch_end(self, epoch, logs=None):
        """Takes Keras' decision, then makes rank 0's decision (and its restored weights) every rank's."""
        super().on_epoch_end(epoch, logs)
        stop = distributed.root_decides(self.model.stop_training, name="hvdkeras.early_stopping")
        if stop and not self.model.stop_training:
            self.stopped_epoch = epoch
        self.model.stop_training = stop
        if stop and self.restore_best_weights:
            distributed.broadcast_variables(self.model.variables)


class ReduceLROnPlateau(keras.callbacks.ReduceLROnPlateau):
    """Keras' ``ReduceLROnPlateau``; rank 0's learning rate is every rank's.

    Rule enforced: after each epoch's decision rank 0 broadcasts the resulting
    learning rate and every rank sets it, so the optimizers never diverge.
    """

    def on_epoch_end(self, epoch, logs=None):
        """Takes Keras' decision, then sets rank 0's learning rate on every rank and logs it as ``lr``."""
        super().on_epoch_end(epoch, logs)
        lr = compat.get_learning_rate(self.model.optimizer)
        agreed = float(distributed.broadcast_array([lr], name="hvdkeras.reduce_lr_on_plateau")[0])
        if agreed != lr:
            compat.set_learning_rate(self.model.optimizer, agreed)
        if logs is not None:
            logs["lr"] = agreed
