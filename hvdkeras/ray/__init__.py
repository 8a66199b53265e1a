"""Horovod on a Ray cluster, as ``horovod.ray`` and Ray Train had it: ``from hvdkeras.ray import RayExecutor``.

Ray's adapter on the launch core (:mod:`hvdkeras.engines`): :mod:`~hvdkeras.ray.cluster` (Ray joined, the ranks'
resources found before anything waits for them), :mod:`~hvdkeras.ray.worker` (a rank's actor),
:mod:`~hvdkeras.ray.worker_checks` (what the driver checks of each worker), :mod:`~hvdkeras.ray.executor`
(``RayExecutor``), :mod:`~hvdkeras.ray.ray_logger` (values ranks log for the driver's ``callbacks``),
:mod:`~hvdkeras.ray.elastic_executor` (``ElasticRayExecutor``, and ``RayExecutor`` with
``min_workers``/``max_workers``), :mod:`~hvdkeras.ray.job` (the config trainer's ranks on Ray, restarted after a
lost worker) and :mod:`~hvdkeras.ray.ray_train` (Ray Train's ``HorovodTrainer`` and ``HorovodConfig``). Ray itself
is imported only when a job starts (``pip install 'hvdkeras[ray]'``).
"""
from typing import Any

from hvdkeras.common.scaling import resized
from hvdkeras.ray.elastic_executor import ElasticRayExecutor, ElasticSettings
from hvdkeras.ray.executor import RayExecutor, Settings

__all__ = ["ElasticRayExecutor", "ElasticSettings", "HorovodConfig", "HorovodTrainer", "RayExecutor", "Settings",
           "resized"]


def __getattr__(name: str) -> Any:
    """``HorovodTrainer`` and ``HorovodConfig`` (:mod:`hvdkeras.ray.ray_train`), imported with Ray when first named."""
    if name in ("HorovodTrainer", "HorovodConfig"):
        from hvdkeras.ray.cluster import import_ray

        import_ray()  # one line when Ray is missing
        from hvdkeras.ray import ray_train

        return getattr(ray_train, name)
    raise AttributeError(f"module 'hvdkeras.ray' has no attribute {name!r}")
