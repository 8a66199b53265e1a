"""Kubernetes: one file to ``kubectl apply``, for Kubeflow Trainer v2 (``--kubernetes_api trainjob``: a ``TrainJob``
and the ``ClusterTrainingRuntime`` it refers to, :mod:`~hvdkeras.launch.trainjob`) or for the MPI Operator
(``mpijob``: an ``MPIJob``, :mod:`~hvdkeras.launch.mpijob`); both with the job's ``NetworkPolicy`` and, when asked,
the workdir's ``PersistentVolumeClaim`` (:mod:`~hvdkeras.launch.kubernetes_pods`)."""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional

import yaml

from hvdkeras.launch import mpijob, trainjob
from hvdkeras.launch.commands import DEFAULT_IMAGE
from hvdkeras.launch.kubernetes_pods import KubernetesOptions, no_volume_note
from hvdkeras.launch.plan import Plan

__all__ = ["KubernetesOptions", "kubernetes_documents", "kubernetes_manifest", "needs"]


class _Dumper(yaml.SafeDumper):
    """YAML without anchors: each value written where it belongs, as a reader and ``kubectl diff`` expect."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _options(image: str, options: Optional[KubernetesOptions]) -> KubernetesOptions:
    options = options or KubernetesOptions()
    if image != DEFAULT_IMAGE or options.image == DEFAULT_IMAGE:
        options = dataclasses.replace(options, image=image)
    return options.check()


def kubernetes_documents(p: Plan, image: str = DEFAULT_IMAGE,
                         options: Optional[KubernetesOptions] = None) -> List[Dict[str, Any]]:
    """The objects of the job's file, in the order to apply them (checked: LaunchError in one line)."""
    options = _options(image, options)
    if options.api == "mpijob":
        return mpijob.mpijob_documents(p, options)
    return trainjob.trainjob_documents(p, options)


def kubernetes_manifest(p: Plan, image: str = DEFAULT_IMAGE, options: Optional[KubernetesOptions] = None) -> str:
    """The job's file: a header saying what it runs and what the cluster needs, then its objects as YAML."""
    options = _options(image, options)
    documents = kubernetes_documents(p, image, options)
    lines = (mpijob.header if options.api == "mpijob" else trainjob.header)(p, options)
    note = no_volume_note(options)
    if note:
        lines.append(f"# Note: {note}.")
    return "\n".join(lines) + "\n" + yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False,
                                                    default_flow_style=False)


def needs(options: KubernetesOptions) -> str:
    """What the cluster must have installed for ``options``' target (the dry run's line)."""
    return mpijob.NEEDS if options.api == "mpijob" else trainjob.NEEDS
