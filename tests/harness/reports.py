"""What the test scripts report back: per-rank JSON and weights written by ``scripts/train_and_report.py``."""
import json
import os

import numpy as np

from tests.harness.ranks import REPO, SCRIPTS

DIGITS = os.path.join(REPO, "configs", "digits.yaml")
REPORT = os.path.join(SCRIPTS, "train_and_report.py")


def reports(report_dir, np_=2):
    out = []
    for r in range(np_):
        with open(os.path.join(report_dir, f"rank{r}.json")) as f:
            rep = json.load(f)
        with np.load(os.path.join(report_dir, f"rank{r}.npz")) as z:
            rep["weights"] = [z[k] for k in sorted(z.files, key=lambda k: int(k.split("_")[1]))]
        out.append(rep)
    return out


def assert_identical_weights(reps):
    assert len(reps[0]["weights"]) == len(reps[1]["weights"]) > 0
    for a, b in zip(reps[0]["weights"], reps[1]["weights"]):
        assert np.array_equal(a, b)


def under(paths, root):
    root = os.path.abspath(root)
    return [p for p in paths if p == root or p.startswith(root + os.sep)]
