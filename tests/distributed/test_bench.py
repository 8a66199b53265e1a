"""The side-by-side benchmark runs every kind of job and writes its table, JSON and chart (no speed thresholds)."""
import json
import os
import subprocess
import sys

from tests.harness import ranks
from tests.harness.ranks import REPO
from tests.harness.stacks import once_per_make_test

# Three kinds of row (hvdkeras, Horovod's recipe, MWMS) run through the same runner in the lab's round
# (test_lab.py) on keras3, whose Horovod recipe is the TensorFlow-ops one, over the two emulated hosts, with
# the hvdkeras/MWMS pair; here, on one host, keras2 runs hvdkeras and Horovod's Keras recipe (its examples'
# --fp16-allreduce) with the bench's table, JSON and chart. The MWMS row (30 s of this test's 100 s) is the
# lab's alone. The lab's round is on keras3 and the bench on keras2 to even out the stacks' times. The model is
# hvdkeras's small_cnn, which every row builds alike (test_lab.py says why); the exchange-cost recipe below builds
# MobileNet, a keras.applications model through the same function.
pytestmark = once_per_make_test("the side-by-side bench", 0.6, stack="keras2")


def test_bench_runs_each_variant_and_writes_results(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--model", "small_cnn", "--image_size", "32",
         "--batch", "4", "--steps", "2", "--rounds", "1", "--np", "2", "--variants", "hvdkeras,horovod-fp16",
         "--out", str(out), "--timeout", "300"],
        check=False, cwd=REPO, capture_output=True, text=True, timeout=900,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "bench.json").read_text())
    table = result["table"]
    assert set(table) == {"hvdkeras", "horovod-fp16"}
    for rows in table.values():
        row = rows["2"]
        assert row["images_per_sec"] > 0 and row["peak_rss_mb_per_rank"] > 0
        assert row["hvdkeras_over_this"] > 0
    assert result["pairs"]["2"] == []  # benchmarks/pairs.py pairs a row with MWMS: test_lab.py's round
    assert (out / "bench.png").stat().st_size > 1000
    assert "hvdkeras/x" in proc.stdout


def test_the_exchange_cost_recipe_averages_every_gradient_and_reports_its_cost():
    # Real ranks with the ceiling's settings (benchmarks/recipes/exchange_cost.py's docstring); the recipe
    # itself exits non-zero unless the average of ones came back as one for every gradient.
    job = ranks.launch(ranks.launch_command(2) + [sys.executable, "benchmarks/recipes/exchange_cost.py",
                                                  "applications.MobileNet", "4", "32", "3"],
                       env=dict(os.environ, BENCH_CPU_BINDING="1", HVDKERAS_IDLE_WAIT_MS="50"), timeout=300)
    by_rank = ranks.rank_results(job)
    assert sorted(by_rank) == [0, 1], job.output[-3000:]
    for result in by_rank.values():
        assert result["tensors"] == 83  # MobileNet's trainable variables with the recipes' 1000-class head
        assert result["gradient_bytes"] == 4 * 4_231_976
        assert 0 < result["exchange_cpu_s"] and 0 < result["exchange_s"] < 60
