"""The quiet run a soak ends against: its figures beside its folder, and whether an earlier one serves this soak.

A soak's quiet run trains the job to the end with no fault, in ``<out>/quiet``; its final validation accuracy and
wall time go to ``<out>/quiet.json``. ``--quiet-from OUT`` compares a soak with the quiet run of an earlier soak or
of ``--quiet-only``, when it is the same job: the same epochs (checked before the soak starts) and the same resolved
config (each run's ``config.yaml``, checked at the end), so that two soaks of one job pay for one quiet run.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

import yaml

from hvdkeras.common import workdir_guard

FOLDER = "quiet"  # the quiet run's workdir in --out
RECORD = "quiet.json"  # its figures in --out


def folder(out: str) -> str:
    """The quiet run's workdir in the soak's ``--out`` folder ``out``."""
    return os.path.join(out, FOLDER)


def write(out: str, epochs: int, val_accuracy: Optional[float], wall_s: float) -> None:
    """Records a finished quiet run of ``epochs`` epochs in ``out`` (``quiet.json``)."""
    with open(os.path.join(out, RECORD), "w") as f:
        json.dump({"epochs": epochs, "val_accuracy": val_accuracy, "wall_s": round(wall_s, 1)}, f)


def read(out: str) -> Dict[str, Any]:
    """The figures of the quiet run recorded in ``out``: ``epochs``, ``val_accuracy`` and ``wall_s``."""
    with open(os.path.join(out, RECORD)) as f:
        return json.load(f)


def problem(out: str, epochs: int) -> Optional[str]:
    """Why the quiet run in ``out`` cannot serve a soak of ``epochs`` epochs, in one line; None when it can."""
    make = f"python -m benchmarks.soak --quiet-only --epochs {epochs} --out {out} writes one"
    if not os.path.isfile(os.path.join(out, RECORD)):
        return f"{out} holds no finished quiet run (no {RECORD}): {make}"
    found = read(out)
    if found.get("epochs") != epochs:
        return (f"the quiet run in {out} trained {found.get('epochs')} epochs, this soak {epochs}: pass --epochs"
                f" {found.get('epochs')}, or {make}")
    last = os.path.join(folder(out), "checkpoints", f"epoch-{epochs:04d}")
    if not os.path.isdir(last):
        return f"the quiet run in {out} has no {os.path.relpath(last, out)} (moved or deleted?): {make}"
    return None


def config_differs(quiet_workdir: str, workdir: str) -> Optional[str]:
    """The first setting in which the resolved configs (``config.yaml``) of two runs differ, as ``key: A there, B
    here``; None when they are the same job."""
    def settings(folder: str) -> Dict[str, Any]:
        with open(os.path.join(folder, "config.yaml")) as f:
            return workdir_guard.flat(yaml.safe_load(f))

    there, here = settings(quiet_workdir), settings(workdir)
    for key in sorted(set(there) | set(here)):
        if there.get(key, "(unset)") != here.get(key, "(unset)"):
            return f"{key}: {there.get(key, '(unset)')} there, {here.get(key, '(unset)')} here"
    return None
