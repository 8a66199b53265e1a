"""Runs one variant of the benchmark as a job of ``np`` processes and reads its throughput and memory."""
from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from hvdkeras import horovod_env
from hvdkeras.config import HorovodConfig
from hvdkeras.workdir import read_metrics

VARIANTS = ["hvdkeras", "hvdkeras-lean", "horovod", "horovod-tuned", "mwms"]
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RECIPES = os.path.join(HERE, "recipes")


def horovod_recipe() -> str:
    """Horovod's published Keras recipe where its Keras layer runs, else the same recipe on its TensorFlow ops."""
    from hvdkeras import compat

    return os.path.join(RECIPES, "horovod_keras.py" if compat.HOROVOD_KERAS_LAYER else "horovod_ops.py")


def mwms_recipe() -> str:
    """``model.fit`` under MultiWorkerMirroredStrategy where Keras supports it, else the custom-loop recipe."""
    from hvdkeras import compat

    return os.path.join(RECIPES, "mwms_fit.py" if compat.FIT_UNDER_MULTI_WORKER_STRATEGY else "mwms_loop.py")


def _results(output: str) -> list[dict]:
    return [json.loads(line.split("RESULT ", 1)[1]) for line in output.splitlines() if "RESULT " in line]


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> str:
    proc = subprocess.run(cmd, check=False, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} ... failed:\n{proc.stdout[-3000:]}")
    return proc.stdout


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_variant(variant: str, args, np_: int, workdir: str) -> dict:
    """One job of ``variant`` on ``np_`` processes; returns total images/s and peak memory per rank."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    horovodrun = [os.path.join(os.path.dirname(sys.executable), "horovodrun"), "-np", str(np_), "-H",
                  f"localhost:{np_}", "--gloo"]
    model_args = [args.model, str(args.batch), str(args.image_size), str(args.steps)]
    if variant.startswith("hvdkeras"):
        run_dir = tempfile.mkdtemp(dir=workdir, prefix=f"{variant}-")
        sets = [f"data.image_shape=[{args.image_size},{args.image_size},3]", "data.num_classes=1000",
                f"data.global_batch_size={args.batch * np_}", f"trainer.steps_per_epoch={args.steps}",
                "trainer.epochs=2", "trainer.verbose=0", "data.eval_examples=0", f"model.name={args.model}",
                "checkpoint.enabled=false", "trainer.check_weights_agree=false"]
        if variant == "hvdkeras-lean":
            sets.append("trainer.terminate_on_nan=false")
        cmd = horovodrun + [sys.executable, "-m", "hvdkeras.train", "--config",
                            os.path.join(REPO, "configs", "synthetic_resnet50.yaml"), "--workdir", run_dir]
        for s in sets:
            cmd += ["--set", s]
        _run(cmd, env, args.timeout)
        last = read_metrics(os.path.join(run_dir, "metrics.jsonl"))[-1]
        return {"images_per_sec": last["images_per_sec"], "peak_rss_mb": last["peak_rss_mb"]}
    if variant.startswith("horovod"):
        if variant == "horovod-tuned":
            cores = horovod_env.host_cores()
            budget = horovod_env.thread_budget(cores, np_)
            tuned = horovod_env.horovod_environment(horovod_env.resolve_horovod(HorovodConfig(), False))
            env.update(tuned, TF_NUM_INTRAOP_THREADS=str(budget.intra_op), TF_NUM_INTEROP_THREADS=str(budget.inter_op))
        results = _results(_run(horovodrun + [sys.executable, horovod_recipe()] + model_args, env, args.timeout))
    else:  # mwms: one process per worker, TF_CONFIG wiring them together
        recipe = mwms_recipe()
        hosts = [f"localhost:{p}" for p in _free_ports(np_)]
        procs = []
        for i in range(np_):
            worker_env = dict(env, TF_CONFIG=json.dumps({"cluster": {"worker": hosts},
                                                         "task": {"type": "worker", "index": i}}))
            procs.append(subprocess.Popen([sys.executable, recipe] + model_args, cwd=REPO, env=worker_env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outputs = [p.communicate(timeout=args.timeout)[0] for p in procs]
        if any(p.returncode for p in procs):
            raise RuntimeError("MultiWorkerMirroredStrategy job failed:\n" + outputs[0][-3000:])
        results = [r for out in outputs for r in _results(out)]
    return {"images_per_sec": statistics.mean(r["images_per_sec"] for r in results),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in results)}


def run_rounds(variants: Sequence[str], nps: Sequence[int], args) -> dict[str, dict[int, list[dict]]]:
    """``args.rounds`` rounds of every variant at every process count, alternating; one result per job."""
    workdir = tempfile.mkdtemp(prefix="hvdkeras-bench-")
    runs: dict[str, dict[int, list[dict]]] = {v: {n: [] for n in nps} for v in variants}
    tic = time.time()
    for round_ in range(args.rounds):
        for np_ in nps:
            for variant in variants:
                result = run_variant(variant, args, np_, workdir)
                runs[variant][np_].append(result)
                print(f"round {round_ + 1}/{args.rounds} np={np_} {variant:14} {result['images_per_sec']:8.2f}"
                      f" images/s ({time.time() - tic:.0f}s)", flush=True)
    return runs
