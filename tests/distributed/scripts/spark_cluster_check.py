"""Run by test_spark_cluster.py as the driver of lab/spark.py's standalone cluster (its environment: ClusterInfo.env()).

``SparkSession.builder.getOrCreate()`` joins the cluster (the driver's spark-defaults.conf names it), then:

* ``hvdkeras.spark.run(fn, num_proc=2)``: one rank per executor, each allreducing its rank and saying
  where it ran (hostname, its address on the lab's link, its network namespace);
* ``num_proc=3`` on the cluster's 2 task slots (``spark.cores.max``): the one-line error and how long it took.

Prints ``RESULT {"ranks": [...], "too_many": {...}, "slots": {...}}``.
"""
import json
import os
import sys
import time

from pyspark.sql import SparkSession

from hvdkeras import spark as hvd_spark
from hvdkeras.common.errors import HvdkerasError
from hvdkeras.spark.runner import _registered_slots


def where_and_allreduce(driver_addr):
    import socket

    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    total = hvd.allreduce(tf.constant(float(hvd.rank())), op=hvd.Sum, name="spark_cluster_check")
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.connect((driver_addr, 9))  # no packet sent: the route picks this host's address on the link
    addr = probe.getsockname()[0]
    probe.close()
    return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(), "sum": float(total.numpy()),
            "hostname": socket.gethostname(), "addr": addr, "netns": os.readlink("/proc/self/ns/net")}


def slots(sc):
    return {"default_parallelism": sc.defaultParallelism, "registered": _registered_slots(sc)}


driver_addr = os.environ["SPARK_LOCAL_IP"]
began = time.time()
session = SparkSession.builder.appName("hvdkeras-spark-cluster-check").getOrCreate()
sc = session.sparkContext
try:
    report = {"master": sc.master, "slots": {"at_start": slots(sc)}, "session_s": time.time() - began}
    began = time.time()
    report["ranks"] = hvd_spark.run(where_and_allreduce, args=(driver_addr,), num_proc=2, verbose=0)
    report["run_s"] = time.time() - began
    report["slots"]["after_run"] = slots(sc)
    before = time.time()
    try:
        hvd_spark.run(where_and_allreduce, args=(driver_addr,), num_proc=3, verbose=0)
        error = None
    except HvdkerasError as exc:
        error = str(exc)
    report["too_many"] = {"error": error, "seconds": time.time() - before}
    report["driver_netns"] = os.readlink("/proc/self/ns/net")
    print("RESULT " + json.dumps(report), flush=True)
finally:
    session.stop()
sys.exit(0)
