"""A table larger than a rank's memory, on a real Spark (local[2]): the rows stream from the store.

The local[2] driver this stack's Spark tests share (the ``spark_local`` fixture) runs
``scripts/spark_stream_check.py``: each rank of a ``KerasEstimator.fit_on_parquet`` joins a memory cgroup of its own,
limited to 256 MiB, when its task first asks for its rows, and its share of the table is three times that. Streamed (the
default), the fit trains to its end; a rank's share read into memory as ``inmemory_cache_all=True`` reads it cannot
fit within the same limit, and the kernel ends the process. Needs root for the cgroups (skipped otherwise, saying so).
keras3 streams the same fit on the standalone cluster's executors (test_spark_cluster.py).
"""
import pytest

from tests.harness import spark_checks
from tests.harness.stacks import once_here, once_per_make_test

pytest.importorskip("pyspark", reason="the [spark] extra is not installed (pip install hvdkeras[spark])")
pytestmark = once_per_make_test("a table larger than a rank's memory, on local[2]", 0.8, stack="keras2")
SPARK_LOCAL = {"stream": once_here("keras2")}  # the part of the shared driver these tests need


@pytest.fixture(scope="module")
def stream(spark_local):
    found = spark_local["stream"]
    if "skipped" in found:
        pytest.skip(f"a rank's memory limit needs cgroups: {found['skipped']}")
    return found


def test_a_ranks_share_three_times_its_memory_limit_streams_and_trains_to_the_end(stream):
    spark_checks.assert_streamed(stream)


def test_the_same_rows_held_in_memory_do_not_fit_within_the_limit(stream):
    # What shows the limit bites: inmemory_cache_all=True's reader holds a rank's whole share at once.
    in_memory = stream["in_memory"]
    assert in_memory["returncode"] == -9, in_memory  # SIGKILL, from the cgroup's out-of-memory killer
