"""Your own data, model and metric named by import path (examples/own_model_and_data) on two ranks, on each stack.

The module lives beside its config file, not on PYTHONPATH: every rank finds it in the config's folder.
"""
import os
import re
import subprocess
import sys

from tests.harness.ranks import REPO, horovodrun, read_jsonl, train_args

TABULAR = os.path.join(REPO, "examples", "own_model_and_data", "tabular.yaml")
# 301 validation examples: 151 on rank 0, 150 on rank 1, each counted once in the final line
SETS = ("checkpoint.keep=0", "data.args.validation_examples=301")


def test_your_own_model_and_data_train_on_two_ranks_and_resume(tmp_path):
    workdir = tmp_path / "work"
    horovodrun(train_args(workdir, "trainer.epochs=2", *SETS, config=TABULAR), timeout=240)
    assert [r["epoch"] for r in read_jsonl(workdir / "metrics.jsonl")] == [1, 2]
    assert "global batch 64 = 2 ranks x 32" in (workdir / "config.yaml").read_text()

    again = horovodrun(train_args(workdir, "trainer.epochs=4", *SETS, config=TABULAR, export=True), timeout=240)
    resumed = [line for line in again.output.splitlines() if "resuming after epoch 2 from" in line]
    assert len(resumed) == 2, again.output[-3000:]  # on both ranks
    final = [line for line in again.output.splitlines() if "final validation" in line]
    assert len(final) == 1 and "(2 ranks, every example once)" in final[0], again.output[-3000:]
    assert "val_top2=" in final[0] and "val_accuracy=" in final[0]
    assert float(final[0].split("val_accuracy=")[1].split(",")[0]) > 0.8  # three separable clusters

    records = read_jsonl(workdir / "metrics.jsonl")
    assert [r["epoch"] for r in records] == [1, 2, 3, 4]  # none missing, none repeated
    assert all(r["examples_per_sec"] > 0 and "val_top2" in r for r in records)
    assert sorted(os.listdir(workdir)) == ["checkpoints", "config.yaml", "export", "metrics.jsonl"]  # rank 0 alone

    # python -m hvdkeras.evaluate: the latest checkpoint on 2 ranks and on 1 process, every example once: the
    # training's final line (the counts exactly; the loss, a float32 sum in another order, to rounding)
    trained = _values(final[0])
    evaluate = ["-m", "hvdkeras.evaluate", "--config", TABULAR, "--workdir", str(workdir),
                *[a for s in SETS for a in ("--set", s)]]
    on_two = [line for line in horovodrun(evaluate, timeout=240).output.splitlines() if "evaluated " in line]
    assert len(on_two) == 1 and "epoch-0004 (2 ranks, every example once)" in on_two[0], on_two
    alone = subprocess.run([sys.executable, *evaluate], cwd=REPO, capture_output=True, text=True, timeout=240,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert alone.returncode == 0, alone.stderr[-3000:]
    on_one = [line for line in alone.stdout.splitlines() if "evaluated " in line]
    assert len(on_one) == 1 and "epoch-0004 (1 rank, every example once)" in on_one[0], alone.stdout[-3000:]
    for line in (on_two[0], on_one[0]):
        values = _values(line)
        assert values.keys() == trained.keys() == {"val_accuracy", "val_loss", "val_top2"}
        assert values["val_accuracy"] == trained["val_accuracy"] and values["val_top2"] == trained["val_top2"]
        assert abs(values["val_loss"] - trained["val_loss"]) <= 2e-4


def _values(line):
    """``{"val_accuracy": 0.9302, ...}`` from a final validation or evaluation line."""
    return {k: float(v) for k, v in re.findall(r"(val_\w+)=([0-9.]+)", line)}
