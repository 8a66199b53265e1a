"""``RayExecutor.run``'s ``callbacks`` on a Ray cluster; run as a Ray driver on a cluster node.

    python tests/distributed/scripts/ray_callbacks_check.py

Two ranks without TensorFlow each log three values, through ``hvdkeras.ray.ray_logger`` and through Horovod's own
``horovod.ray.ray_logger`` (a script that kept that import), and return their rank and the rendezvous secret they
were given (the test looks for it on every command line). Prints ``RESULT {...}``: the returned values and every
value the driver's callback got, in the order it got them.
"""
import json
import os

from hvdkeras.ray import RayExecutor  # was: from horovod.ray import RayExecutor


def rank_work():
    from horovod.ray import ray_logger as horovods

    import hvdkeras.keras as hvd
    from hvdkeras.ray import ray_logger

    hvd.init()
    for step in range(3):
        (ray_logger if step % 2 == 0 else horovods).log({"rank": hvd.rank(), "step": step})
    return [hvd.rank(), os.environ.get("HOROVOD_GLOO_RENDEZVOUS_SECRET", "")]


def main():
    seen = []
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2, cpus_per_worker=1)
    executor.start()
    try:
        returned = executor.run(rank_work, callbacks=[seen.append])
    finally:
        executor.shutdown()
    print("RESULT " + json.dumps({"returned": returned, "seen": seen}), flush=True)


if __name__ == "__main__":
    main()
