"""``Loop``: the one declared contract between a driver and the trainer it drives."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Protocol

from hvdkeras.training import data as data_lib
from hvdkeras.training.assembly import Parts


class Loop(Protocol):
    """What a driver uses of a trainer (:class:`hvdkeras.training.trainer.Trainer` implements it)."""

    parts: Parts

    def write_config(self) -> None:
        """Rank 0 writes the resolved config to the workdir."""

    def job_lines(self, data: Optional[data_lib.Datasets] = None, size: Optional[int] = None) -> List[str]:
        """What the job resolved that is not a config key, one line each."""

    def data_for_world(self, rank: int, size: int) -> data_lib.Datasets:
        """Collective: this rank's data for ``size`` ranks."""

    def preflight(self, data: data_lib.Datasets, scaled_lr: Optional[float] = None) -> None:
        """Collective: stops every rank with a readable diff if the ranks differ."""

    def fit_range(self, data: data_lib.Datasets, epoch: int, batch: int, scaled_lr: float, size: int,
                  extra_callbacks: Callable[[], List[Any]] = ...) -> Dict[str, List[float]]:
        """Trains from ``(epoch, batch)`` to the last epoch; the history."""

    def finish(self, final: Dict[str, float], data: Optional[data_lib.Datasets] = None) -> Dict[str, float]:
        """Collective: the final validation and the check that the ranks agree; the final metrics."""
