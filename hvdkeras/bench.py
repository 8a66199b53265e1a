"""Side-by-side throughput: the hvdkeras trainer versus what a user would otherwise run.

    python -m hvdkeras.bench --model applications.MobileNetV2 --batch 16 --np 2 --rounds 3
    make bench

Variants, run in alternating rounds (A B C ... A B C ...) on synthetic images so
that machine noise hits all of them alike; each job trains two epochs of
``--steps`` steps and only the second (warm) epoch is measured:

* ``hvdkeras``: ``python -m hvdkeras.train`` on a synthetic config, with its defaults;
* ``hvdkeras-lean``: the same without per-batch callbacks (``TerminateOnNaN``'s
  allreduce), to price them;
* ``horovod``: Horovod's published Keras recipe (init, scale the rate,
  ``DistributedOptimizer``, broadcast and metric-average callbacks) with Horovod's
  and TensorFlow's default settings (on Keras 3, where Horovod 0.28.1's Keras layer
  does not run, the same recipe on Horovod's TensorFlow ops with
  ``hvdkeras.DistributedOptimizer``);
* ``horovod-tuned``: the same recipe with hvdkeras' host settings (cycle time,
  threads per rank): the difference to ``hvdkeras`` is the framework's own cost;
* ``mwms``: ``tf.distribute.MultiWorkerMirroredStrategy`` with the same number of
  processes, model and per-process batch (``model.fit``; on Keras 3, whose ``fit``
  fails under this strategy, TensorFlow's custom training loop for it).

It prints a table (median images/s total and per rank, min-max spread over
rounds, peak memory per rank, ratios to hvdkeras), writes it as JSON and draws a
PNG bar chart into ``--out``. ``--np 1,2`` adds a scaling sweep: scaling
efficiency ``throughput(np) / (np * throughput(1))`` per variant and a line chart.
"""
from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

VARIANTS = ["hvdkeras", "hvdkeras-lean", "horovod", "horovod-tuned", "mwms"]
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# The plain scripts a user would write. They print "RESULT <json>" per process.
_COMMON = r'''
import json, os, resource, sys, time
import numpy as np
import tensorflow as tf
model_name, batch, size, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def make_model():
    name = model_name.split(".", 1)[1] if model_name.startswith("applications.") else model_name
    base = getattr(tf.keras.applications, name)(weights=None, include_top=False,
                                                input_shape=(size, size, 3), pooling="avg")
    return tf.keras.Model(base.input, tf.keras.layers.Dense(1000, activation="softmax")(base.output))

def data():
    x = tf.random.uniform((batch, size, size, 3))
    y = tf.random.uniform((batch,), maxval=1000, dtype=tf.int32)
    return tf.data.Dataset.from_tensors((x, y)).repeat()

class Clock(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()
    def on_epoch_end(self, epoch, logs=None):
        self.seconds = time.perf_counter() - self.start

def report(rank, clock, global_batch):
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps({"rank": rank, "images_per_sec": steps * global_batch / clock.seconds,
                                  "peak_rss_mb": rss_mb}), flush=True)
'''

HOROVOD_SCRIPT = _COMMON + r'''
import horovod.tensorflow.keras as hvd
hvd.init()
model = make_model()
opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01 * hvd.size(), momentum=0.9))
model.compile(opt, "sparse_categorical_crossentropy")
clock = Clock()
model.fit(data(), steps_per_epoch=steps, epochs=2, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback(), clock])
report(hvd.rank(), clock, batch * hvd.size())
'''

# The same recipe where Horovod's Keras layer does not run (Keras 3): Horovod's TensorFlow ops,
# hvdkeras.DistributedOptimizer for the gradient averaging, and Horovod's two callbacks as they
# behave in its Keras layer (broadcast after the first batch, per-metric allreduce at epoch ends).
HOROVOD_OPS_SCRIPT = _COMMON + r'''
import horovod.tensorflow as hvd
from hvdkeras.optimizers import DistributedOptimizer
hvd.init()
model = make_model()
opt = DistributedOptimizer(tf.keras.optimizers.SGD(0.01 * hvd.size(), momentum=0.9))
model.compile(opt, "sparse_categorical_crossentropy")

class BroadcastGlobalVariablesCallback(tf.keras.callbacks.Callback):
    done = False
    def on_train_batch_end(self, batch, logs=None):
        if not self.done:
            hvd.broadcast_variables([v.value for v in model.variables + opt.variables], root_rank=0)
            self.done = True

class MetricAverageCallback(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        for key in sorted(logs or {}):
            logs[key] = float(hvd.allreduce(tf.constant(logs[key], tf.float32), op=hvd.Average, name=key))

clock = Clock()
model.fit(data(), steps_per_epoch=steps, epochs=2, verbose=0,
          callbacks=[BroadcastGlobalVariablesCallback(), MetricAverageCallback(), clock])
report(hvd.rank(), clock, batch * hvd.size())
'''

MWMS_SCRIPT = _COMMON + r'''
strategy = tf.distribute.MultiWorkerMirroredStrategy()
workers = strategy.num_replicas_in_sync
with strategy.scope():
    model = make_model()
    model.compile(tf.keras.optimizers.SGD(0.01 * workers, momentum=0.9), "sparse_categorical_crossentropy")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
global_data = data().unbatch().batch(batch * workers).with_options(options)
clock = Clock()
model.fit(global_data, steps_per_epoch=steps, epochs=2, verbose=0, callbacks=[clock])
report(json.loads(os.environ["TF_CONFIG"])["task"]["index"], clock, batch * workers)
'''

# Keras 3.15's model.fit fails under MultiWorkerMirroredStrategy (keras-team/keras#20585): there the
# same training runs as TensorFlow's custom-loop recipe for the strategy (strategy.run per step).
MWMS_LOOP_SCRIPT = _COMMON + r'''
strategy = tf.distribute.MultiWorkerMirroredStrategy()
workers = strategy.num_replicas_in_sync
with strategy.scope():
    model = make_model()
    opt = tf.keras.optimizers.SGD(0.01 * workers, momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(reduction="none")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
global_data = data().unbatch().batch(batch * workers).with_options(options)
batches = iter(strategy.experimental_distribute_dataset(global_data))

def replica_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)), global_batch_size=batch * workers)
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss

@tf.function
def train_step():
    x, y = next(batches)
    return strategy.reduce("SUM", strategy.run(replica_step, args=(x, y)), axis=None)

clock = Clock()
for epoch in range(2):
    clock.on_epoch_begin(epoch)
    for _ in range(steps):
        loss = train_step()
    float(loss)  # waits for the last step
    clock.on_epoch_end(epoch)
report(json.loads(os.environ["TF_CONFIG"])["task"]["index"], clock, batch * workers)
'''


def horovod_recipe_script() -> str:
    """Horovod's published Keras recipe where its Keras layer runs, else the same recipe on its TensorFlow ops."""
    from hvdkeras import compat

    return HOROVOD_SCRIPT if compat.HOROVOD_KERAS_LAYER else HOROVOD_OPS_SCRIPT


def mwms_script() -> str:
    """``model.fit`` under MultiWorkerMirroredStrategy where Keras supports it, else the custom-loop recipe."""
    from hvdkeras import compat

    return MWMS_SCRIPT if compat.FIT_UNDER_MULTI_WORKER_STRATEGY else MWMS_LOOP_SCRIPT


def _results(output: str) -> List[dict]:
    return [json.loads(line.split("RESULT ", 1)[1]) for line in output.splitlines() if "RESULT " in line]


def _run(cmd: List[str], env: Dict[str, str], timeout: float) -> str:
    proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} ... failed:\n{proc.stdout[-3000:]}")
    return proc.stdout


def _free_ports(n: int) -> List[int]:
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
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            last = [json.loads(line) for line in f if line.strip()][-1]
        return {"images_per_sec": last["images_per_sec"], "peak_rss_mb": last["peak_rss_mb"]}
    if variant.startswith("horovod"):
        script = os.path.join(workdir, "horovod_recipe.py")
        with open(script, "w") as f:
            f.write(horovod_recipe_script())
        if variant == "horovod-tuned":
            from hvdkeras import config as config_lib
            from hvdkeras import distributed

            cores = distributed.host_cores()
            budget = distributed.thread_budget(cores, np_)
            tuned = distributed.horovod_environment(distributed.resolve_horovod(config_lib.HorovodConfig(), False))
            env.update(tuned, TF_NUM_INTRAOP_THREADS=str(budget.intra_op), TF_NUM_INTEROP_THREADS=str(budget.inter_op))
        results = _results(_run(horovodrun + [sys.executable, script] + model_args, env, args.timeout))
    else:  # mwms: one process per worker, TF_CONFIG wiring them together
        script = os.path.join(workdir, "mwms.py")
        with open(script, "w") as f:
            f.write(mwms_script())
        hosts = [f"localhost:{p}" for p in _free_ports(np_)]
        procs = []
        for i in range(np_):
            worker_env = dict(env, TF_CONFIG=json.dumps({"cluster": {"worker": hosts},
                                                         "task": {"type": "worker", "index": i}}))
            procs.append(subprocess.Popen([sys.executable, script] + model_args, cwd=REPO, env=worker_env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outputs = [p.communicate(timeout=args.timeout)[0] for p in procs]
        if any(p.returncode for p in procs):
            raise RuntimeError("MultiWorkerMirroredStrategy job failed:\n" + outputs[0][-3000:])
        results = [r for out in outputs for r in _results(out)]
    return {"images_per_sec": statistics.mean(r["images_per_sec"] for r in results),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in results)}


def summarize(runs: Dict[str, Dict[int, List[dict]]], nps: List[int]) -> dict:
    table = {}
    for variant, by_np in runs.items():
        table[variant] = {}
        for np_, rounds in by_np.items():
            rates = [r["images_per_sec"] for r in rounds]
            table[variant][np_] = {
                "images_per_sec": statistics.median(rates), "per_rank": statistics.median(rates) / np_,
                "min": min(rates), "max": max(rates), "rounds": rates,
                "peak_rss_mb_per_rank": max(r["peak_rss_mb"] for r in rounds),
            }
    for variant in table:
        for np_ in nps:
            row = table[variant][np_]
            base = table.get("hvdkeras", {}).get(np_)
            if base:
                row["hvdkeras_over_this"] = base["images_per_sec"] / row["images_per_sec"]
            one = table[variant].get(1)
            if one and np_ > 1:
                row["scaling_efficiency"] = row["images_per_sec"] / (np_ * one["images_per_sec"])
    return table


def print_table(table: dict, nps: List[int]) -> str:
    lines = [f"{'variant':15} {'np':>3} {'images/s':>9} {'per rank':>9} {'spread':>15} {'peak MB/rank':>12}"
             f" {'hvdkeras/x':>10} {'scaling':>8}"]
    for np_ in nps:
        for variant, rows in table.items():
            r = rows[np_]
            scaling = f"{r['scaling_efficiency']:.2f}" if "scaling_efficiency" in r else ""
            lines.append(f"{variant:15} {np_:>3} {r['images_per_sec']:9.2f} {r['per_rank']:9.2f}"
                         f" {r['min']:7.2f}-{r['max']:<7.2f} {r['peak_rss_mb_per_rank']:12.0f}"
                         f" {r.get('hvdkeras_over_this', float('nan')):10.3f} {scaling:>8}")
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def draw(table: dict, nps: List[int], out: str, title: str) -> List[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    np_ = nps[-1]
    variants = list(table)
    medians = [table[v][np_]["images_per_sec"] for v in variants]
    errors = [[m - table[v][np_]["min"] for v, m in zip(variants, medians)],
              [table[v][np_]["max"] - m for v, m in zip(variants, medians)]]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(variants, medians, yerr=errors, capsize=4, color=["#1f77b4", "#6baed6", "#ff7f0e", "#fdae6b", "#2ca02c"])
    ax.set_ylabel("images/s (all ranks, median of rounds)")
    ax.set_title(f"{title}, np={np_}")
    fig.tight_layout()
    paths.append(os.path.join(out, "bench.png"))
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    if len(nps) > 1:
        fig, ax = plt.subplots(figsize=(6, 4))
        for v in variants:
            ax.plot(nps, [table[v][n]["images_per_sec"] for n in nps], marker="o", label=v)
        ax.set_xlabel("processes")
        ax.set_ylabel("images/s")
        ax.set_title(f"{title}: scaling")
        ax.legend()
        fig.tight_layout()
        paths.append(os.path.join(out, "scaling.png"))
        fig.savefig(paths[-1], dpi=100)
        plt.close(fig)
    return paths


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="applications.MobileNetV2",
                        help="applications.<Name> of keras.applications, or a registered model name")
    parser.add_argument("--batch", type=int, default=16, help="images per process and step")
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=10, help="measured steps (a warm-up epoch of as many runs first)")
    parser.add_argument("--np", default="2", help="comma-separated process counts, e.g. 1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", default="runs/bench")
    parser.add_argument("--timeout", type=float, default=1200)
    args = parser.parse_args(argv)
    nps = [int(n) for n in args.np.split(",")]
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    if not args.model.startswith("applications."):
        variants = [v for v in variants if v.startswith("hvdkeras")]  # the plain scripts use keras.applications
    os.makedirs(args.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="hvdkeras-bench-")
    runs: Dict[str, Dict[int, List[dict]]] = {v: {n: [] for n in nps} for v in variants}
    tic = time.time()
    for round_ in range(args.rounds):
        for np_ in nps:
            for variant in variants:
                result = run_variant(variant, args, np_, workdir)
                runs[variant][np_].append(result)
                print(f"round {round_ + 1}/{args.rounds} np={np_} {variant:14} {result['images_per_sec']:8.2f}"
                      f" images/s ({time.time() - tic:.0f}s)", flush=True)
    table = summarize(runs, nps)
    title = f"{args.model} {args.image_size}px, batch {args.batch}/process"
    text = print_table(table, nps)
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump({"model": args.model, "batch_per_process": args.batch, "image_size": args.image_size,
                   "steps": args.steps, "rounds": args.rounds, "table": table, "text": text}, f, indent=1)
    for path in draw(table, nps, args.out, title):
        print(f"wrote {path}")
    print(f"wrote {os.path.join(args.out, 'bench.json')}")


if __name__ == "__main__":
    main()
