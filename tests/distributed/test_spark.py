"""hvdkeras.spark on a real Spark (local[2]): ranks in Spark tasks, and a job Spark cannot start in one line."""
import os
import sys

import pytest

from tests.harness.ranks import SCRIPTS, launch, results

pytest.importorskip("pyspark", reason="the [spark] extra is not installed (pip install hvdkeras[spark])")
CHECK = os.path.join(SCRIPTS, "spark_run_check.py")


def test_run_returns_every_ranks_result_in_rank_order():
    (result,) = results(launch([sys.executable, CHECK, "ranks"], timeout=240))
    assert result["results"] == [{"rank": 0, "size": 2, "sum": 1.0}, {"rank": 1, "size": 2, "sum": 1.0}]


def test_more_ranks_than_task_slots_is_one_line_at_once():
    (result,) = results(launch([sys.executable, CHECK, "too_many"], timeout=240))
    assert result["error"] == ("num_proc=3 ranks need 3 Spark task slots at once, but this Spark has 2 (master"
                               " local[2]); lower num_proc to 2 or give Spark more cores")
    assert result["seconds"] < 5  # Horovod itself would wait start_timeout (600 s) for the third task
