"""Horovod's elastic Keras example on Ray's ``ElasticRayExecutor``; run as a Ray driver on a cluster node.

    python tests/distributed/scripts/ray_elastic_check.py FOLDER [--epochs N] [--steps-per-epoch S]

Each rank runs ``examples/horovod/tensorflow2_keras_mnist_elastic.py`` (Horovod's elastic TF2 Keras example,
switched by its import line) as its ``__main__``, with ``--checkpoint-dir FOLDER``: rank 0 writes
``checkpoint-<epoch>.keras`` after each epoch. ``ElasticRayExecutor`` runs it between one and two ranks, one CPU each
(Horovod's ``create_settings(min_np=..., max_np=...)`` and ``cpus_per_slot``). Prints ``RESULT {...}`` with each
finishing rank's rank, size, node, the epoch its state counted, its learning rate and its weights' digest, or the
error's one line, and what each finishing rank logged for the driver's callback (``ray_logger``).
"""
import argparse
import json
import os
import sys

from hvdkeras.ray import ElasticRayExecutor  # was: from horovod.ray import ElasticRayExecutor

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXAMPLE = os.path.join(REPO, "examples", "horovod", "tensorflow2_keras_mnist_elastic.py")


def rank_work(folder, epochs, steps):
    import hashlib
    import runpy

    import numpy as np

    import hvdkeras.keras as hvd
    from hvdkeras.ray import ray_logger

    sys.argv = [EXAMPLE, "--epochs", str(epochs), "--steps-per-epoch", str(steps), "--checkpoint-dir", folder]
    example = runpy.run_path(EXAMPLE, run_name="__main__")
    model = example["model"]
    digest = hashlib.sha256(b"".join(np.asarray(w).tobytes() for w in model.get_weights())).hexdigest()[:16]
    ray_logger.log({"rank": hvd.rank(), "size": hvd.size()})
    return {"rank": hvd.rank(), "size": hvd.size(), "host": os.environ.get("HOROVOD_HOSTNAME"),
            "epoch": int(example["state"].epoch), "learning_rate": float(np.asarray(model.optimizer.learning_rate)),
            "digest": digest}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("folder")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps-per-epoch", type=int, default=40)
    args = parser.parse_args()
    settings = ElasticRayExecutor.create_settings(min_np=1, max_np=2, elastic_timeout=120, timeout_s=60)
    executor = ElasticRayExecutor(settings, use_gpu=False, cpus_per_slot=1,
                                  env_vars={"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"})
    logged = []
    try:
        executor.start()
        ranks = executor.run(lambda: rank_work(args.folder, args.epochs, args.steps_per_epoch),
                             callbacks=[logged.append])
        report = {"ranks": ranks, "error": None, "logged": logged}
    except Exception as exc:  # noqa: BLE001 - reported, the test asserts on it
        report = {"ranks": [], "error": f"{type(exc).__name__}: {exc}", "logged": logged}
    finally:
        executor.shutdown()
    print("RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
