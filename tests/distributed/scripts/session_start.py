"""A driver's SparkSession started in a thread of its own, while the driver goes on importing.

A driver's session takes seconds to start (Spark's JVM; on a cluster, the driver's own copy of a shipped environment
unpacked, the executors), and its TensorFlow import takes a few more, mostly on another core: started with
:func:`in_background` before the driver imports TensorFlow, the two overlap.
"""
import threading


def in_background(builder):
    """Starts ``builder.getOrCreate()`` in a thread; returns a function that waits for the session and returns it,
    or raises what stopped it."""
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
