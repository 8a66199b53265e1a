"""fp16 gradient compression against exact float32 averages: final accuracy and loss curves, on two hosts.

    .venv/bin/python tools/fp16_accuracy.py [--seeds 3] [--out runs/fp16_accuracy]

Runs, on the lab's two network-namespace hosts (one rank each, ``lab.hosts``;
needs root), every pair of

- model: ``configs/digits.yaml`` as shipped (the small CNN), and the same job with
  ``model.name=resnet20`` (He et al.'s CIFAR ResNet: batch norm, weight decay 1e-4), the
  CIFAR-style model on the one dataset that needs no download here;
- ``horovod.compression``: ``none`` and ``fp16``;
- ``runtime.seed``: 1 .. S,

interleaved by seed, so a slower stretch of the machine touches both settings alike. Prints
one row per model and setting (median and min-max of the final validation accuracy over the
seeds), then the per-seed difference fp16 - none, and writes every job's per-epoch training
loss and validation accuracy to OUT/curves.json. Speed is not measured: the jobs run on an
unshaped link.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from hvdkeras.common.workdir import read_metrics
from lab import hosts as lab_hosts

MODELS = {"small_cnn": [], "resnet20": ["model.name=resnet20", "model.weight_decay=1e-4"]}
COMPRESSIONS = ("none", "fp16")


def run_job(info, workdir, sets):
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    cmd = [horovodrun, "-np", "2", *info.horovodrun_args(), sys.executable, "-m", "hvdkeras.train",
           "--config", os.path.join(REPO, "configs", "digits.yaml"), "--workdir", workdir,
           "--set", "trainer.verbose=0", "--set", "checkpoint.enabled=false"]
    for s in sets:
        cmd += ["--set", s]
    done = subprocess.run(cmd, cwd=REPO, env=info.env(dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"job failed ({done.returncode}): {' '.join(cmd)}\n{done.stdout[-3000:]}")
    records = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    return {"loss": [r["loss"] for r in records], "val_accuracy": [r.get("val_accuracy") for r in records]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(REPO, "runs", "fp16_accuracy"))
    args = parser.parse_args(argv)
    ok, reason = lab_hosts.can_run()
    if not ok:
        print(f"fp16_accuracy: the two hosts cannot be built here: {reason}", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    curves = {}
    # the hosts' files (ssh keys, sshd configs) are removed with them, on failure too
    with tempfile.TemporaryDirectory(prefix="fp16-hosts-", ignore_cleanup_errors=True) as tmp:
        info = lab_hosts.up(tmp)
        try:
            for seed in range(1, args.seeds + 1):
                for model, model_sets in MODELS.items():
                    for compression in COMPRESSIONS:
                        key = f"{model}/{compression}/seed{seed}"
                        workdir = os.path.join(args.out, key.replace("/", "-"))
                        curves[key] = run_job(info, workdir, model_sets + [f"horovod.compression={compression}",
                                                                           f"runtime.seed={seed}"])
                        print(f"{key}: final val_accuracy {curves[key]['val_accuracy'][-1]:.4f}, final loss"
                              f" {curves[key]['loss'][-1]:.4f}", flush=True)
        finally:
            lab_hosts.down(info)
    with open(os.path.join(args.out, "curves.json"), "w") as f:
        json.dump(curves, f, indent=1)
    print("\n| model | compression | final val_accuracy, median (min-max) | final loss, median |")
    print("| --- | --- | ---: | ---: |")
    for model in MODELS:
        for compression in COMPRESSIONS:
            acc = [curves[f"{model}/{compression}/seed{s}"]["val_accuracy"][-1] for s in range(1, args.seeds + 1)]
            loss = [curves[f"{model}/{compression}/seed{s}"]["loss"][-1] for s in range(1, args.seeds + 1)]
            print(f"| {model} | {compression} | {statistics.median(acc):.4f} ({min(acc):.4f}-{max(acc):.4f}) |"
                  f" {statistics.median(loss):.4f} |")
    print("\nper seed, fp16 - none (final val_accuracy):")
    for model in MODELS:
        final = {c: [curves[f"{model}/{c}/seed{s}"]["val_accuracy"][-1] for s in range(1, args.seeds + 1)]
                 for c in COMPRESSIONS}
        diffs = [b - a for a, b in zip(final["none"], final["fp16"])]
        print(f"  {model}: " + ", ".join(f"{d:+.4f}" for d in diffs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
