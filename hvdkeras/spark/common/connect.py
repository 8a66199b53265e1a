"""Spark Connect: hvdkeras's Spark jobs through a Connect session, which has no ``SparkContext`` and no RDDs.

A Connect client (Databricks' standard access mode and serverless, ``SparkSession.builder.remote(...)``) reaches the
executors only through DataFrames. What the classic path does with the driver's ``SparkContext``, this module does
with public DataFrame and session calls, as Spark's own ``TorchDistributor`` does there:

* the ranks' barrier stage is a barrier ``mapInPandas`` over ``num_proc`` one-row partitions (:class:`ConnectStage`);
  each task runs :func:`hvdkeras.spark.gang.run_task` unchanged (``BarrierTaskContext``, one ``allGather``);
* a stage's jobs carry a session tag, which cancels them (``addTag`` / ``interruptTag``);
* the executors' Python is asked by a one-row ``mapInPandas`` (:func:`probe_executor`);
* the Parquet is written by ``mapInArrow`` (:mod:`hvdkeras.spark.common.parquet_writer`), a model is sent to
  ``transform``'s tasks inside the function, not as a broadcast.

What a Connect client cannot see, it does not check: the executors' task slots. A barrier stage with too few slots
never starts, and the start watch ends it after ``start_timeout`` in one line. The ranks report to this process (the
output relay, the start count): the executors must reach it at the driver's address (``spark.driver.host``), as a
notebook on the driver node is.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple


def is_connect(obj: Any) -> bool:
    """Whether ``obj`` (a DataFrame or a SparkSession) belongs to a Spark Connect session."""
    return type(obj).__module__.startswith("pyspark.sql.connect.")


def session_of(dataset: Any) -> Optional[Any]:
    """The Connect session ``dataset`` comes from; None for a classic DataFrame."""
    return dataset.sparkSession if is_connect(dataset) else None


class ConnectStage:
    """The ranks' barrier stage through a Connect session (:func:`hvdkeras.spark.gang.run_gang`'s stage).

    Args:
        spark: the Connect SparkSession.
    """

    def __init__(self, spark: Any):
        self.spark = spark

    def conf(self, key: str, default: Optional[str] = None) -> Optional[str]:
        """A Spark setting of the session, or ``default``."""
        try:
            value = self.spark.conf.get(key, default)
        except Exception:  # noqa: BLE001 - a setting the server does not let the client read
            return default
        return default if value is None else str(value)

    def begin(self, group: str) -> None:
        """This thread's jobs carry ``group`` from now on."""
        self.spark.addTag(group)

    def cancel(self, group: str) -> None:
        """Interrupts the jobs that carry ``group`` (from another thread)."""
        self.spark.interruptTag(group)

    def end(self, group: str) -> None:
        """This thread's jobs no longer carry ``group``."""
        self.spark.removeTag(group)

    def collect(self, task: Callable[[Iterator[Any]], Iterator[Tuple[int, bytes]]], num_proc: int) -> List[
            Tuple[int, bytes]]:
        """Runs ``task`` as ``num_proc`` barrier tasks; their ``(rank, result)`` pairs.

        Like the classic stage, the barrier stage feeds a shuffle (``repartition(1)``): Spark starts a failed barrier
        stage again only when it is a map stage."""

        def frames(batches: Iterator[Any]) -> Iterator[Any]:
            import pandas as pd  # type: ignore[import-untyped]

            for rank, data in task(iter(())):
                yield pd.DataFrame({"rank": [rank], "data": [data]})
            for _ in batches:  # the partition's one row: nothing to read
                pass

        rows = self.spark.range(0, num_proc, 1, num_proc).mapInPandas(frames, "rank long, data binary",
                                                                      barrier=True).repartition(1).collect()
        return [(int(row["rank"]), bytes(row["data"])) for row in rows]


def probe_executor(spark: Any, probe: Callable[[Any], Iterator[Dict[str, Optional[str]]]]) -> Dict[str, Optional[str]]:
    """What ``probe`` says about one executor's Python, run there as a one-row ``mapInPandas``."""

    def frames(batches: Iterator[Any]) -> Iterator[Any]:
        import json as json_

        import pandas as pd

        for _ in batches:
            pass
        yield pd.DataFrame({"answer": [json_.dumps(next(probe(None)))]})

    (row,) = spark.range(0, 1, 1, 1).mapInPandas(frames, "answer string").collect()
    answer: Dict[str, Optional[str]] = json.loads(row["answer"])
    return answer
