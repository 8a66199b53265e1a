"""Start every rank from rank 0's model and optimizer state."""
from __future__ import annotations

from typing import Any, Optional, Set

from hvdkeras.callbacks import divergence
from hvdkeras.runtime import compat, distributed
from hvdkeras.runtime.compat import keras


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcasts all model and optimizer variables from ``root_rank`` when training starts.

    Horovod's callback, with Horovod's arguments (``root_rank``, ``device``,
    ``local_variables``, :meth:`register_local_var`).

    Rule enforced: every rank computes its first gradients on the same weights and
    applies them to the same optimizer state. Unlike Horovod's callback (which
    broadcasts after the first batch, once slots exist), this one builds the
    optimizer's slot variables first, so the broadcast happens before step one.
    If the optimizer still creates variables lazily during the first step, they are
    broadcast again after that step. Weights loaded on the root before ``fit``
    (a resume) reach every rank through the same broadcast.

    A model whose weights do not exist yet when ``fit`` starts (a ``Sequential``
    without ``Input``, a subclassed model never called) creates them in its first
    step; then, as Horovod does, everything is broadcast right after that step, so
    the weights are equal on every rank from the second step on. The first step's
    gradients were averaged, so only the initial weights differed, and rank 0's are
    the ones kept.

    ``local_variables`` (one variable or a list) and :meth:`register_local_var`
    name variables each rank keeps as its own: they are never broadcast (nor compared).

    ``check_divergence`` (hvdkeras' addition, on by default): at the end of every epoch
    the ranks compare their trainable weights, and a difference stops every rank with
    one line (:func:`hvdkeras.callbacks.divergence.check`; the same check as
    :class:`~hvdkeras.callbacks.DivergenceGuard`, run once per step when both are used).

    Args:
        root_rank: the rank whose variables every rank starts from.
        device: the device the broadcast runs on (Horovod's argument; ``""``: TensorFlow's choice).
        local_variables: a variable, or a list of them, that each rank keeps as its own: never broadcast.
        check_divergence: compare the ranks' trainable weights at every epoch end.
    """

    def __init__(self, root_rank: int = distributed.ROOT_RANK, device: str = "", local_variables=None,
                 check_divergence: bool = True):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.check_divergence = check_divergence
        self._local: Set[Any] = set()
        self._optimizer_variable_count: Optional[int] = None
        self._after_first_step = False
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple, set)):
            local_variables = [local_variables]
        for variable in local_variables:
            self.register_local_var(variable)

    def register_local_var(self, var) -> None:
        """Keeps ``var`` out of every broadcast: each rank keeps its own value."""
        if not hasattr(var, "assign"):
            raise ValueError(f"local variables must be variables (tf.Variable or keras.Variable). Received: {var!r}")
        self._local.add(compat.variable_key(var))

    def _shared(self, variables) -> list:
        return [v for v in variables if compat.variable_key(v) not in self._local]

    def _broadcast(self, variables) -> None:
        with compat.tf.device(self.device):
            distributed.broadcast_variables(self._shared(variables), root_rank=self.root_rank)

    def _optimizer_variables(self):
        return compat.optimizer_variables(self.model.optimizer)

    def on_train_begin(self, logs=None):
        """Builds the optimizer's slots and broadcasts the model and optimizer variables before step one."""
        divergence.start(self.model)
        divergence.exclude(self.model, self._local)
        self._optimizer_variable_count = None
        self._after_first_step = not getattr(self.model, "built", True) or not self.model.variables
        if self._after_first_step:  # built lazily, by the first step
            return
        optimizer = self.model.optimizer
        if not compat.optimizer_built(optimizer):
            compat.build_optimizer(optimizer, self.model.trainable_variables)
        self._broadcast(self.model.variables)
        opt_vars = self._optimizer_variables()
        self._broadcast(opt_vars)
        self._optimizer_variable_count = len(opt_vars)

    def on_train_batch_end(self, batch, logs=None):
        """After the first step, broadcasts what that step created (lazily built weights or optimizer slots)."""
        if self._after_first_step:
            self._after_first_step = False
            self._broadcast(self.model.variables)
            self._broadcast(self._optimizer_variables())
            return
        if self._optimizer_variable_count is None:
            return
        opt_vars = self._optimizer_variables()
        if len(opt_vars) != self._optimizer_variable_count:
            self._broadcast(opt_vars)
        self._optimizer_variable_count = None  # checked once, after the first step

    def on_epoch_end(self, epoch, logs=None):
        """Compares the ranks' trainable weights (``check_divergence``)."""
        if self.check_divergence:
            divergence.check(self.model, f"at the end of epoch {epoch + 1}")
