"""Your own data, model and metric named by import path (examples/own_model_and_data) on two ranks, on each stack.

The module lives beside its config file, not on PYTHONPATH: every rank finds it in the config's folder.
"""
import os

from tests.harness.ranks import REPO, horovodrun, read_jsonl, train_args

TABULAR = os.path.join(REPO, "examples", "own_model_and_data", "tabular.yaml")
# 301 validation examples: 151 on rank 0, 150 on rank 1, each counted once in the final line
SETS = ("checkpoint.keep=0", "data.args.validation_examples=301")


def test_your_own_model_and_data_train_on_two_ranks_and_resume(tmp_path):
    workdir = tmp_path / "work"
    horovodrun(train_args(workdir, "trainer.epochs=2", *SETS, config=TABULAR), timeout=240)
    assert [r["epoch"] for r in read_jsonl(workdir / "metrics.jsonl")] == [1, 2]
    assert "global batch 64 = 2 ranks x 32" in (workdir / "config.yaml").read_text()

    again = horovodrun(train_args(workdir, "trainer.epochs=4", *SETS, config=TABULAR), timeout=240)
    resumed = [line for line in again.output.splitlines() if "resuming after epoch 2 from" in line]
    assert len(resumed) == 2, again.output[-3000:]  # on both ranks
    final = [line for line in again.output.splitlines() if "final validation" in line]
    assert len(final) == 1 and "(2 ranks, every example once)" in final[0], again.output[-3000:]
    assert "val_top2=" in final[0] and "val_accuracy=" in final[0]
    assert float(final[0].split("val_accuracy=")[1].split(",")[0]) > 0.8  # three separable clusters

    records = read_jsonl(workdir / "metrics.jsonl")
    assert [r["epoch"] for r in records] == [1, 2, 3, 4]  # none missing, none repeated
    assert all(r["examples_per_sec"] > 0 and "val_top2" in r for r in records)
    assert sorted(os.listdir(workdir)) == ["checkpoints", "config.yaml", "metrics.jsonl"]  # rank 0 alone wrote
