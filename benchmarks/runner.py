"""Runs one variant of the benchmark as a job of ``np`` processes and reads its throughput and memory.

Where the processes run is a :class:`Placement`: all on this host (:func:`local`), or
one per emulated host of the lab (:func:`on_hosts`, see :mod:`lab`).

A variant is a name from :data:`VARIANTS`, or ``hvdkeras`` followed by config
overrides joined with ``+``: ``hvdkeras+horovod.groups=1+horovod.compression=fp16``.
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hvdkeras.common import horovod_env
from hvdkeras.common.workdir import read_metrics
from hvdkeras.config import HorovodConfig

# Every row by name; `make bench`'s default rows (hvdkeras's defaults, `horovod.compression: none`, and Horovod's
# recipe exchange fp32 gradients alike); the lab's are benchmarks.__main__.LAB_VARIANTS.
VARIANTS = ["hvdkeras", "hvdkeras-fp32", "hvdkeras-fp16", "hvdkeras-lean", "horovod", "horovod-fp16",
            "horovod-tuned", "mwms", "ceiling", "ceiling-lockstep"]
BENCH_VARIANTS = ["hvdkeras", "hvdkeras-lean", "horovod", "horovod-tuned", "mwms", "ceiling"]
# Named hvdkeras variants: the config overrides each adds to the synthetic benchmark config.
HVDKERAS_SETS = {"hvdkeras": [], "hvdkeras-lean": ["trainer.terminate_on_nan=false"],
                 "hvdkeras-grouped": ["horovod.groups=1"], "hvdkeras-fp32": ["horovod.compression=none"],
                 "hvdkeras-fp16": ["horovod.compression=fp16"]}
# Horovod's recipe rows: the recipe's own flags (its examples' --fp16-allreduce).
HOROVOD_FLAGS = {"horovod": [], "horovod-tuned": [], "horovod-fp16": ["--fp16-allreduce"]}
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RECIPES = os.path.join(HERE, "recipes")


@dataclass
class Placement:
    """Where a job's ``np`` processes run and how they are started there."""

    np: int
    horovodrun_hosts: list[str]  # horovodrun's arguments naming the hosts
    env: dict = field(default_factory=lambda: dict(os.environ))
    worker_command: Callable[[int, list[str]], list[str]] = lambda i, argv: argv  # MWMS worker i
    worker_addrs: list[str] = field(default_factory=list)  # MWMS workers' host:port


def local(np_: int) -> Placement:
    """``np_`` processes on this host."""
    return Placement(np_, ["-H", f"localhost:{np_}"], worker_addrs=[f"localhost:{p}" for p in _free_ports(np_)])


def on_hosts(info, slots: int = 1, np_: int | None = None) -> Placement:
    """``np_`` processes (default every slot) on the hosts of the lab (a :class:`lab.hosts.HostsInfo`), ``slots`` on
    each in order, on their cores; hosts past the last process are left out of horovodrun's ``-H``
    (``HostsInfo.host_list``)."""
    hosts = info.hosts
    np_ = len(hosts) * slots if np_ is None else np_
    return Placement(np_, info.horovodrun_args(slots, np_), env=info.env(),
                     worker_command=lambda i, argv: hosts[i].command(argv),
                     worker_addrs=[f"{h.addr}:{23450 + i}" for i, h in enumerate(hosts)])


def hvdkeras_sets(variant: str) -> list[str] | None:
    """The config overrides of an hvdkeras variant, None for the other variants."""
    if variant in HVDKERAS_SETS:
        return list(HVDKERAS_SETS[variant])
    if variant.startswith("hvdkeras+"):
        return variant.split("+")[1:]
    return None


def hvdkeras_horovod_env() -> dict[str, str]:
    """The Horovod variables hvdkeras sets for its default config (idle wait, stall inspector), for the recipe rows
    that run with hvdkeras's host settings."""
    return horovod_env.horovod_environment(horovod_env.resolve_horovod(HorovodConfig()))


def horovod_recipe() -> str:
    """Horovod's published Keras recipe where its Keras layer runs, else the same recipe on its TensorFlow ops."""
    from hvdkeras.runtime import compat

    return os.path.join(RECIPES, "horovod_keras.py" if compat.HOROVOD_KERAS_LAYER else "horovod_ops.py")


def mwms_recipe() -> str:
    """``model.fit`` under MultiWorkerMirroredStrategy where Keras supports it, else the custom-loop recipe."""
    from hvdkeras.runtime import compat

    return os.path.join(RECIPES, "mwms_fit.py" if compat.FIT_UNDER_MULTI_WORKER_STRATEGY else "mwms_loop.py")


def _results(output: str) -> list[dict]:
    """Every ``RESULT <json>`` of ``output``, each JSON read up to its end: mpirun's tagged output interleaves the
    ranks' writes, so one line may hold two results or go on after one (``[1,0]<stdout>:RESULT {...}[1,1]<stdout>:
    RESULT {...}``)."""
    decoder = json.JSONDecoder()
    return [decoder.raw_decode(part)[0] for part in output.split("RESULT ")[1:] if part.startswith("{")]


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


def machine_cpu() -> tuple[float, float, float]:
    """``(seconds, busy CPU seconds, stolen CPU seconds)`` of the whole machine now, from ``/proc/stat``.

    Between two readings, ``busy / seconds`` is how many cores the machine's processes
    used (ours and anyone else's) and ``stolen / seconds`` how many the hypervisor
    gave to other guests while this one wanted them.
    """
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return time.time(), 0.0, 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    ticks = os.sysconf("SC_CLK_TCK")
    return time.time(), (user + nice + system + irq + softirq) / ticks, steal / ticks


def machine_load(before: tuple, after: tuple) -> dict:
    """Cores the machine kept busy and cores stolen from it between two :func:`machine_cpu` readings."""
    seconds = max(after[0] - before[0], 1e-9)
    return {"machine_busy_cores": (after[1] - before[1]) / seconds, "stolen_cores": (after[2] - before[2]) / seconds}


def run_variant(variant: str, args, np_: int, workdir: str, place: Placement | None = None) -> dict:
    """One job of ``variant`` on ``np_`` processes: total images/s, CPU cores per rank, peak memory per rank,
    the machine's load while it ran (:func:`machine_load`) and the job's wall time
    ``wall_s`` (launch, warm-up and measured steps).

    The ``ceiling`` variant also returns ``gradient_bytes``, the bytes of the model's gradients.
    """
    before = machine_cpu()
    result = _run_variant(variant, args, np_, workdir, place)
    after = machine_cpu()
    return dict(result, wall_s=after[0] - before[0], **machine_load(before, after))


def _horovodrun(np_: int, place: Placement, controller: str = "gloo") -> tuple[list[str], dict]:
    """horovodrun's command for a job of ``np_`` processes placed by ``place`` on ``controller`` (``gloo`` or
    ``mpi``), and its environment."""
    env = dict(place.env, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    return [os.path.join(os.path.dirname(sys.executable), "horovodrun"), "-np", str(np_),
            *place.horovodrun_hosts, f"--{controller}"], env


def run_exchange(args, np_: int, place: Placement | None = None, env: dict[str, str] | None = None,
                 flags: Sequence[str] = (), controller: str = "gloo") -> dict:
    """One job of the exchange-only recipe (``recipes/exchange_cost.py``) on ``np_`` processes, with the ceiling's
    settings plus ``env`` (Horovod variables) and the recipe's ``flags`` (``--fp16-allreduce``, ``--groups=K``), on
    ``controller``: per rank, the median wall and CPU seconds of one exchange and every exchange's wall time, plus
    the gradient bytes, the job's wall time and the machine's load meanwhile (:func:`machine_load`)."""
    place = place or local(np_)
    horovodrun, job_env = _horovodrun(np_, place, controller)
    recipe = [sys.executable, os.path.join(RECIPES, "exchange_cost.py"), args.model, "1", str(args.image_size),
              str(args.steps), *flags]
    before = machine_cpu()
    results = sorted(_results(_run(horovodrun + recipe, dict(job_env, **hvdkeras_horovod_env(), BENCH_CPU_BINDING="1",
                                                             **(env or {})),
                                   args.timeout)), key=lambda r: r["rank"])
    after = machine_cpu()
    if len(results) != np_:
        raise RuntimeError(f"the exchange job reported {len(results)} results for {np_} processes")
    return {"ranks": results, "gradient_bytes": results[0]["gradient_bytes"], "wall_s": after[0] - before[0],
            **machine_load(before, after)}


def _run_variant(variant: str, args, np_: int, workdir: str, place: Placement | None) -> dict:
    place = place or local(np_)
    horovodrun, env = _horovodrun(np_, place)
    model_args = [args.model, str(args.batch), str(args.image_size), str(args.steps)]
    sets = hvdkeras_sets(variant)
    if sets is not None:
        run_dir = tempfile.mkdtemp(dir=workdir, prefix="hvdkeras-")
        sets = [f"data.image_shape=[{args.image_size},{args.image_size},3]", "data.num_classes=1000",
                f"data.global_batch_size={args.batch * np_}", f"trainer.steps_per_epoch={args.steps}",
                "trainer.epochs=2", "trainer.verbose=0", "data.eval_examples=0", f"model.name={args.model}",
                "checkpoint.enabled=false", "trainer.check_weights_agree=false",
                # the recipes' problem: plain cross-entropy, no weight decay (synthetic_resnet50.yaml has both), and
                # no dropout (a registered model's; the applications have none)
                "model.weight_decay=0", "model.dropout=0", "trainer.label_smoothing=0"] + sets
        cmd = horovodrun + [sys.executable, "-m", "hvdkeras.train", "--config",
                            os.path.join(REPO, "configs", "synthetic_resnet50.yaml"), "--workdir", run_dir]
        for s in sets:
            cmd += ["--set", s]
        _run(cmd, env, args.timeout)
        last = read_metrics(os.path.join(run_dir, "metrics.jsonl"))[-1]
        return {"images_per_sec": last["images_per_sec"], "peak_rss_mb": last["peak_rss_mb"],
                "cpu_cores_per_rank": last["cpu_cores_per_rank"]}
    if variant in ("ceiling", "ceiling-lockstep"):  # hvdkeras's host settings: Horovod variables, CPU binding, threads
        recipe = [sys.executable, os.path.join(RECIPES, "ceiling.py"), *model_args]
        lockstep = ["--lockstep"] if variant == "ceiling-lockstep" else []
        results = _results(_run(horovodrun + recipe + lockstep,
                                dict(env, **hvdkeras_horovod_env(), BENCH_CPU_BINDING="1"), args.timeout))
        return {"images_per_sec": sum(r["images_per_sec"] for r in results),
                "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
                "cpu_cores_per_rank": statistics.mean(r["cpu_cores"] for r in results),
                "gradient_bytes": results[0]["gradient_bytes"]}
    if variant in HOROVOD_FLAGS:
        if variant == "horovod-tuned":
            cores = horovod_env.host_cores()
            budget = horovod_env.thread_budget(cores, np_)
            env.update(hvdkeras_horovod_env(), TF_NUM_INTRAOP_THREADS=str(budget.intra_op),
                       TF_NUM_INTEROP_THREADS=str(budget.inter_op), BENCH_CPU_BINDING="1")
        results = _results(_run(horovodrun + [sys.executable, horovod_recipe()] + model_args + HOROVOD_FLAGS[variant],
                                env, args.timeout))
    elif variant == "mwms":  # one process per worker, TF_CONFIG wiring them together
        recipe = mwms_recipe()
        procs = []
        for i in range(np_):
            worker_env = dict(env, TF_CONFIG=json.dumps({"cluster": {"worker": place.worker_addrs},
                                                         "task": {"type": "worker", "index": i}}))
            procs.append(subprocess.Popen(place.worker_command(i, [sys.executable, recipe] + model_args), cwd=REPO,
                                          env=worker_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        try:
            outputs = [p.communicate(timeout=args.timeout)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if any(p.returncode for p in procs):
            raise RuntimeError("MultiWorkerMirroredStrategy job failed:\n" + outputs[0][-3000:])
        results = [r for out in outputs for r in _results(out)]
    else:
        raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)} or hvdkeras+<key>=<value>")
    return {"images_per_sec": statistics.mean(r["images_per_sec"] for r in results),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
            "cpu_cores_per_rank": statistics.mean(r["cpu_cores"] for r in results)}


def run_rounds(variants: Sequence[str], nps: Sequence[int], args) -> dict[str, dict[int, list[dict]]]:
    """``args.rounds`` rounds of every variant at every process count, alternating; one result per job.

    The jobs' working directories (the trainer's runs) are removed at the end, on failure too."""
    runs: dict[str, dict[int, list[dict]]] = {v: {n: [] for n in nps} for v in variants}
    tic = time.time()
    with tempfile.TemporaryDirectory(prefix="hvdkeras-bench-", ignore_cleanup_errors=True) as workdir:
        for round_ in range(args.rounds):
            for np_ in nps:
                for variant in variants:
                    result = dict(run_variant(variant, args, np_, workdir), round=round_)
                    runs[variant][np_].append(result)
                    print(f"round {round_ + 1}/{args.rounds} np={np_} {variant:14} {result['images_per_sec']:8.2f}"
                          f" images/s ({time.time() - tic:.0f}s)", flush=True)
    return runs
