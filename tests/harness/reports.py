"""What the test scripts report back: per-rank JSON and weights written by ``scripts/train_and_report.py``."""
import json
import os

import numpy as np

from tests.harness.ranks import REPO, SCRIPTS

DIGITS = os.path.join(REPO, "configs", "digits.yaml")
REPORT = os.path.join(SCRIPTS, "train_and_report.py")
# A run a resumed one must match bit for bit. Dropout off: Keras 2 draws dropout masks from TensorFlow's
# op-level random state, which no checkpoint holds, so with dropout a resumed run is not bit-identical there.
EXACT = ("trainer.epochs=6", "model.dropout=0", "checkpoint.keep=0")


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


def assert_trained_as_uninterrupted(workdir, uninterrupted):
    """The trainable weights of ``workdir``'s last checkpoint equal the uninterrupted run's, bit for bit."""
    from benchmarks.soak import weights

    found = weights.compare(str(workdir / "checkpoints" / "epoch-0006"), str(uninterrupted))
    assert found["same_variables"] and found["trainable_variables"] > 0, found
    print(f"largest difference in a trainable weight after resuming: {found['trainable_max_abs_diff']:.3g}")
    assert found["trainable_max_abs_diff"] == 0.0, f"resumed weights differ from the uninterrupted run's: {found}"


def tell(request, line: str) -> None:
    """``line`` in the run's own output, passed or failed: the timings a slow run is read by (the lab lock's waits,
    the shared drivers' laps), which pytest would otherwise keep with the captured output of a passing test."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():
        reporter.write(f"\n[timing] {line}\n")  # on a line of its own, not after -q's progress dots
