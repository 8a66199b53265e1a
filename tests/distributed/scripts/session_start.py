"""A driver's SparkSession started in a thread of its own, while the driver goes on importing.

A driver's session takes seconds to start (Spark's JVM; on a cluster, the driver's own copy of a shipped environment
unpacked, the executors), and its TensorFlow import takes a few more, mostly on another core: started with
:func:`in_background` before the driver imports TensorFlow, the two overlap. The JVM's process is started in the
caller's thread first (see :func:`in_background`).
"""
import threading


def in_background(builder):
    """Starts ``builder.getOrCreate()`` in a thread; returns a function that waits for the session and returns it,
    or raises what stopped it."""
    from pyspark import SparkConf, SparkContext

    # Spark's JVM is forked here, in the caller's thread, before the thread starts. pyspark forks it with a
    # preexec_fn, so Python's fork hooks run first, logging's taking its module lock; forked from the thread while
    # the caller imported TensorFlow (whose imports take that lock too), the two deadlocked once: the driver hung at
    # its start, idle, until its test's timeout. The session itself, the slow part, still starts in the thread.
    conf = SparkConf()
    for key, value in builder._options.items():  # what getOrCreate passes to the JVM's start
        conf.set(key, value)
    SparkContext._ensure_initialized(conf=conf)
    box = {}

    def start():
        try:
            box["session"] = builder.getOrCreate()
        except BaseException as exc:  # noqa: BLE001 - raised again in the driver's thread
            box["error"] = exc

    thread = threading.Thread(target=start, name="spark-session-start", daemon=True)
    thread.start()

    def session():
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["session"]

    return session
