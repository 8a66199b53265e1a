"""How many examples a dataset has and so how many steps an epoch takes, from sizes alone.

The dry run plans without TensorFlow, TensorFlow Datasets or Horovod, so it counts
steps from what is written down:

* ``digits``: the rows of the file the package ships, minus the validation part
  (:func:`digits_split`, the same split :mod:`hvdkeras.training.data` makes);
* ``synthetic``: ``data.train_examples``;
* a TensorFlow Datasets name: the prepared copy's ``dataset_info.json`` (the split's
  shard lengths), under ``data.data_dir`` (or TFDS's own default folder).

Where none of these answers (a TFDS dataset not prepared here, a sliced split such
as ``train[:90%]``), :func:`steps_per_epoch` returns ``None`` and says why: the
trainer counts them at start. The step rules themselves are :mod:`hvdkeras.common.scaling`'s.
"""
from __future__ import annotations

import gzip
import json
import os
import re
from typing import Optional, Tuple

from hvdkeras.common.scaling import for_world, global_order_steps, world_batches
from hvdkeras.common.scaling import steps_per_epoch as sharded_steps
from hvdkeras.config import Config, DataConfig, is_import_path

DIGITS_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "resources", "digits.csv.gz")
BUILT_IN = ("digits", "synthetic")  # hvdkeras.training.data's own datasets (its registry, which needs TensorFlow)


def digits_split(total: int, validation_fraction: float) -> Tuple[int, int]:
    """(training, validation) examples of the digits' fixed split: ``round(total x fraction)`` validate."""
    n_val = int(round(total * validation_fraction))
    return total - n_val, n_val


def digits_examples() -> int:
    """The rows of the digits file the package ships (1,797)."""
    with gzip.open(DIGITS_FILE, "rt") as f:
        return sum(1 for line in f if line.strip())


def tfds_data_dir(data: DataConfig) -> str:
    """``data.data_dir``, else TensorFlow Datasets' default (``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``)."""
    return data.data_dir or os.environ.get("TFDS_DATA_DIR") or os.path.expanduser("~/tensorflow_datasets")


def _version_key(name: str) -> Tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in name.split("."))


def tfds_info_file(data: DataConfig) -> Optional[str]:
    """The ``dataset_info.json`` of the prepared ``data.name`` (``name``, ``name/config``, ``name:version``),
    the newest version when none is named; None when it is not prepared there."""
    name, _, version = data.name.partition(":")
    folder = os.path.join(tfds_data_dir(data), *name.split("/"))
    if not os.path.isdir(folder):
        return None
    versions = [version] if version else sorted(
        (v for v in os.listdir(folder) if re.fullmatch(r"\d+\.\d+\.\d+", v)), key=_version_key, reverse=True)
    for v in versions:
        path = os.path.join(folder, v, "dataset_info.json")
        if os.path.isfile(path):
            return path
    return None


def tfds_split_examples(info_file: str, split: str) -> Optional[int]:
    """The examples of ``split`` written in a ``dataset_info.json``; None when the file does not say."""
    with open(info_file) as f:
        info = json.load(f)
    for entry in info.get("splits", []):
        if entry.get("name") == split:
            if "shardLengths" in entry:
                return sum(int(n) for n in entry["shardLengths"])
            if "numExamples" in entry:
                return int(entry["numExamples"])
    return None


def not_prepared_line(data: DataConfig) -> str:
    """One line saying the TFDS dataset is not prepared in its data directory, and the command that prepares it."""
    directory = tfds_data_dir(data)
    return (f"{data.name} is not prepared in {directory} (data.data_dir); `tfds build {data.name.split(':')[0]}"
            f" --data_dir={directory}` prepares it (the trainer's error names the files a manual download needs)")


def train_examples(data: DataConfig) -> Tuple[Optional[int], str]:
    """(training examples, where the number comes from), or (None, why it is not known before the start)."""
    if data.name == "digits":
        return digits_split(digits_examples(), data.validation_fraction)[0], "digits"
    if data.name == "synthetic":
        return data.train_examples, "synthetic (data.train_examples)"
    if is_import_path(data.name):  # your own function: not imported by a dry run
        return None, f"your own data.name={data.name!r}, not imported here"
    if not re.fullmatch(r"[\w-]+", data.train_split):
        return None, f"data.train_split={data.train_split!r} is a slice, counted at start"
    info = tfds_info_file(data)
    if info is None:
        return None, not_prepared_line(data)
    count = tfds_split_examples(info, data.train_split)
    if count is None:
        return None, f"{info} lists no split {data.train_split!r} (data.train_split)"
    return count, f"{data.name}[{data.train_split}]"


def steps_per_epoch(config: Config, num_ranks: int) -> Tuple[Optional[int], str]:
    """(steps per epoch or None, where it comes from or why it is known only at start), without TensorFlow.

    ``trainer.steps_per_epoch`` when set; otherwise as many full global batches as the
    data holds: :func:`hvdkeras.common.scaling.global_order_steps` for the in-memory and
    synthetic data (one global order), :func:`hvdkeras.common.scaling.steps_per_epoch` for
    TFDS data sharded by rank.
    """
    configured = config.trainer.steps_per_epoch
    if configured:
        return configured, "trainer.steps_per_epoch"
    data = for_world(config.data, num_ranks)
    examples, source = train_examples(data)
    if examples is None:
        return None, f"unknown here, counted at start ({source}; or set trainer.steps_per_epoch)"
    batch, _ = world_batches(data)
    if data.name in BUILT_IN:
        steps = global_order_steps(examples, batch)
    else:
        steps = sharded_steps(examples, batch, num_ranks)
    return steps, f"{source}: as many full global batches as the data holds, the same on every rank"
