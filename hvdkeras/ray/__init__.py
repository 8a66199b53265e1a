"""Horovod on a Ray cluster, as ``horovod.ray`` has it: ``from hvdkeras.ray import RayExecutor``.

Ray's adapter on the launch core (:mod:`hvdkeras.engines`): :mod:`~hvdkeras.ray.cluster` (Ray joined, the ranks'
resources found before anything waits for them), :mod:`~hvdkeras.ray.worker` (a rank's actor),
:mod:`~hvdkeras.ray.executor` (``RayExecutor``) and :mod:`~hvdkeras.ray.job` (the config trainer's ranks on Ray,
restarted after a lost worker). Ray itself is imported only when a job starts (``pip install 'hvdkeras[ray]'``).
"""
from hvdkeras.ray.executor import RayExecutor, Settings

__all__ = ["RayExecutor", "Settings"]
