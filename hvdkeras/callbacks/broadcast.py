"""Start every rank from rank 0's model and optimizer state."""
from __future__ import annotations

from hvdkeras import compat, distributed

keras = compat.keras


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcasts all model and optimizer variables from ``root_rank`` when training starts.

    Rule enforced: every rank computes its first gradients on the same weights and
    applies them to the same optimizer state. Unlike Horovod's callback (which
    broadcasts after the first batch, once slots exist), this one builds the
    optimizer's slot variables first, so the broadcast happens before step one.
    If the optimizer still creates variables lazily during the first step, they are
    broadcast again after that step. Weights loaded on the root before ``fit``
    (a resume) reach every rank through the same broadcast.
    """

    def __init__(self, root_rank: int = distributed.ROOT_RANK):
        super().__init__()
        self.root_rank = root_rank
        self._optimizer_variable_count = None

    def _optimizer_variables(self):
        return compat.optimizer_variables(self.model.optimizer)

    def on_train_begin(self, logs=None):
        optimizer = self.model.optimizer
        if not compat.optimizer_built(optimizer):
            compat.build_optimizer(optimizer, self.model.trainable_variables)
        distributed.broadcast_variables(self.model.variables, root_rank=self.root_rank)
        opt_vars = self._optimizer_variables()
        distributed.broadcast_variables(opt_vars, root_rank=self.root_rank)
        self._optimizer_variable_count = len(opt_vars)

    def on_train_batch_end(self, batch, logs=None):
        if self._optimizer_variable_count is None:
            return
        opt_vars = self._optimizer_variables()
        if len(opt_vars) != self._optimizer_variable_count:
            distributed.broadcast_variables(opt_vars, root_rank=self.root_rank)
        self._optimizer_variable_count = None  # checked once, after the first step
