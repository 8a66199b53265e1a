"""Your own data, model and metric named by import path (examples/own_model_and_data) on two ranks, on each stack.

The module lives beside its config file, not on PYTHONPATH: every rank finds it in the config's folder.
"""
import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.harness.ranks import REPO, horovodrun, read_jsonl, train_args
from tests.harness.stacks import once_per_make_test

TABULAR = os.path.join(REPO, "examples", "own_model_and_data", "tabular.yaml")
# 301 validation examples: 151 on rank 0, 150 on rank 1, each counted once in the final line
SETS = ("checkpoint.keep=0", "data.args.validation_examples=301")


# Finding the config's module on every rank and resuming it: import paths and the resume every stack's
# test_two_ranks.py checks; the two-input model below, whose losses and metrics take each stack's path, runs on both.
@once_per_make_test("your own model by import path, resumed", 0.5, stack="keras3")
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
    # the one process beside the two ranks: it reads the same checkpoint and writes nothing, and its start (one core)
    # uses the core the ranks leave free
    alone = subprocess.Popen([sys.executable, *evaluate], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    try:
        on_two = [line for line in horovodrun(evaluate, timeout=240).output.splitlines() if "evaluated " in line]
        alone_out, alone_err = alone.communicate(timeout=240)
    finally:
        if alone.poll() is None:
            alone.kill()
            alone.communicate()
    assert len(on_two) == 1 and "epoch-0004 (2 ranks, every example once)" in on_two[0], on_two
    assert alone.returncode == 0, alone_err[-3000:]
    on_one = [line for line in alone_out.splitlines() if "evaluated " in line]
    assert len(on_one) == 1 and "epoch-0004 (1 rank, every example once)" in on_one[0], alone_out[-3000:]
    for line in (on_two[0], on_one[0]):
        values = _values(line)
        assert values.keys() == trained.keys() == {"val_accuracy", "val_loss", "val_top2"}
        assert values["val_accuracy"] == trained["val_accuracy"] and values["val_top2"] == trained["val_top2"]
        assert abs(values["val_loss"] - trained["val_loss"]) <= 2e-4


def _values(line):
    """``{"val_accuracy": 0.9302, ...}`` from a final validation or evaluation line."""
    return {k: float(v) for k, v in re.findall(r"(val_\w+)=([0-9.]+)", line)}


SHOP = os.path.join(REPO, "examples", "own_model_and_data", "shop.yaml")
PER_OUTPUT = ("buy_loss", "price_loss", "buy_binary_accuracy", "price_mae")


def test_two_inputs_two_outputs_with_sample_weights_train_exactly_on_two_ranks_and_the_export_serves_a_mapping(
        tmp_path):
    """shop.yaml: inputs basket and visitor, outputs buy and price with a loss, a weight and metrics each, and
    sample weights. 301 validation examples (151 and 150 per rank; each rank's last batch smaller) are counted once
    for every output's loss and metric, and the ranks' weights agree at the end (trainer.check_weights_agree, on by
    default: a rank that differs from rank 0 fails the job). A mapping naming an output the model lacks stops the job
    before training (each rank finds it alike), in one line, without a hang."""
    workdir = tmp_path / "shop"
    job = horovodrun(train_args(workdir, "trainer.epochs=1", "checkpoint.enabled=false",
                                "data.args.validation_examples=301", config=SHOP, export=True), timeout=240)
    assert "check_weights_agree: true" in (workdir / "config.yaml").read_text()
    final = [line for line in job.output.splitlines() if "final validation" in line]
    assert len(final) == 1 and "(2 ranks, every example once)" in final[0], job.output[-3000:]
    records = read_jsonl(workdir / "metrics.jsonl")
    assert [r["epoch"] for r in records] == [1]
    last = records[-1]
    assert {"loss", "val_loss"} | {f"{p}{k}" for p in ("", "val_") for k in PER_OUTPUT} <= set(last)
    assert last["val_loss"] == pytest.approx(last["val_buy_loss"] + 0.1 * last["val_price_loss"], rel=1e-5)

    # the exported model predicts from a mapping of inputs (the SavedModel serves the same mapping:
    # tests/unit/runtime/test_export.py), and one process scoring all 301 examples gets what the ranks' summed
    # states gave
    # (in a whole run TensorFlow is loaded here already: the distributed tests' modules import hvdkeras.runtime.compat)
    import tensorflow as tf

    spec = importlib.util.spec_from_file_location("shop_task_scored", os.path.join(os.path.dirname(SHOP),
                                                                                   "shop_task.py"))
    shop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shop)
    x, y, w = shop.arrays(301, seed=1)  # the validation split of shop_task.data
    predicted = tf.keras.models.load_model(str(workdir / "export" / "model.keras"), compile=False).predict(x, verbose=0)
    assert sorted(predicted) == ["buy", "price"]
    weighted = lambda loss: float(np.sum(np.asarray(loss) * w) / len(w))  # noqa: E731 -- the loss: sum(l * w) / n
    scores = {"val_buy_loss": weighted(tf.keras.losses.binary_crossentropy(y["buy"], predicted["buy"])),
              "val_price_loss": weighted(np.mean((predicted["price"] - y["price"]) ** 2, axis=-1)),
              "val_buy_binary_accuracy": float(np.mean((predicted["buy"] > 0.5) == (y["buy"] > 0.5))),
              "val_price_mae": float(np.mean(np.abs(predicted["price"] - y["price"])))}
    for key, value in scores.items():
        assert last[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key

    # a loss for an output the model lacks: the job stops before training, with one line and no hang
    bad = horovodrun(train_args(tmp_path / "bad", "trainer.loss.prize=mse", config=SHOP), timeout=120, check=False)
    errors = [line for line in bad.output.splitlines() if "hvdkeras: error:" in line]
    assert bad.returncode != 0 and errors and not os.path.exists(tmp_path / "bad" / "metrics.jsonl"), bad.output[-3000:]
    assert errors[0].endswith("hvdkeras: error: trainer.loss in --set trainer.loss.prize=mse must name outputs the"
                              " model has (buy, price); received: 'prize'")
