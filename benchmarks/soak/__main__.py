"""``python -m benchmarks.soak``: the command line of the soak (see :mod:`benchmarks.soak`)."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from typing import List, Optional

import benchmarks.soak as soak
from benchmarks.soak import accounting, quiet_run, report
from benchmarks.soak import elastic as elastic_lib
from benchmarks.soak.loop import Job, Loop
from benchmarks.soak.schedule import (
    ALL_KINDS,
    ELASTIC_KINDS,
    FULL_DISK,
    HOST_LEAVE,
    KILL_EXECUTOR,
    KINDS,
    LINK_CUT,
    NODE_FAIL,
    SLURM_KINDS,
    SLURM_MAY,
    SPARK_KINDS,
    SPARK_MAY,
    TWO_HOST_KINDS,
    parse_range,
    plan,
)
from benchmarks.soak.slurm_job import SlurmJob

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IN_NAMESPACE = "--in-own-mount-namespace"  # the hidden flag of the soak rerun in a private mount namespace
# --short: for the suite, at least 5 faults within 3 minutes (the quiet run included).
KEEP = 3  # checkpoint.keep, set on the job's command line: the accounting of lost checkpoints needs it
SPARK_KEEP = 2  # the Spark estimator's own checkpoint.keep (hvdkeras/spark/keras/estimator.py)
SHORT = {"faults": 5, "interval": "8-12", "epochs": 30, "deadline": 60.0, "gloo_timeout": 10, "startup": 8.0,
         "leave": 15.0}
# --elastic --short: one fault of each elastic kind, each host back and rejoined before the next; faults 25-35 s
# apart, since an elastic job's start-up takes 20 s or more on 2 busy cores (its first rendezvous, Gloo's 10 s
# timeout there, has no elastic recovery: a worker killed before it ends the job, seen in a first try).
# 200 epochs: the digits job trains about 1.5 epochs a second on two ranks, 90 were done before the third fault.
# Gloo's timeout stays Horovod's 30 s: it is also how long a world's rendezvous waits for a joining worker, whose
# start-up (TensorFlow's import) took longer than 10 s on 2 busy cores: with --short's 10 s the survivor aborted
# at the rejoin and the job ended (the stall limit it is short for matters to freeze, not an elastic kind).
SHORT_ELASTIC = dict(SHORT, faults=3, epochs=200, interval="25-35", gloo_timeout=30)
# --slurm --short: one fault of each Slurm kind (seed 40 lands its last fault by about 45 s); the generated script's
# horovodrun keeps Horovod's 30 s Gloo timeout. The same job and epochs as --short's: one quiet run serves both
# (--quiet-from; Slurm's two nodes train what two local ranks train, bit for bit).
SHORT_SLURM = dict(SHORT, faults=4, gloo_timeout=30, requeue_hold=3.0)
SLURM_GLOO_TIMEOUT = 30  # what the generated sbatch script's horovodrun waits (Horovod's default)
# --spark --short: one fault of each Spark kind, 20-30 s apart: a fit's start (the SparkSession, the Parquet, the
# ranks' TensorFlow) takes 30-50 s on 2 cores, and Spark's start-up prints nothing the deadline counts as progress.
SHORT_SPARK = dict(SHORT, faults=3, interval="20-30", deadline=150.0, gloo_timeout=30, startup=20.0)
# An elastic job on two "hosts" of this machine (tests/distributed/test_elastic.py's): their names in the hosts file.
ELASTIC_HOSTS = ("localhost", "127.0.0.1")
COMMIT_EVERY = 5  # elastic.commit_every_batches, set on the job's command line (the test's)
COOLDOWN = (5, 10)  # horovodrun --blacklist-cooldown-range: a killed worker's host may join again after it


def parse(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """The soak's flags, with ``--short``'s values filled in where the user gave none."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=soak.__doc__.split("\n")[0])
    parser.add_argument("--config", default=os.path.join(REPO, "configs", "digits.yaml"))
    parser.add_argument("--epochs", type=int, default=None,
                        help=f"epochs the job trains (default 600; --short {SHORT['epochs']})")
    parser.add_argument("--faults", type=int, default=None,
                        help=f"faults to inject (default 30; --short {SHORT['faults']})")
    parser.add_argument("--interval", default=None, help="seconds between faults, LOW-HIGH (default 30-90)")
    parser.add_argument("--seed", type=int, default=0, help="the fault plan's seed (the job's is the config's)")
    parser.add_argument("--kinds", default=None, help=f"comma-separated, of {', '.join(ALL_KINDS)}"
                        f" (default: {','.join(KINDS)}; with --hosts 2 also {','.join(TWO_HOST_KINDS)})")
    parser.add_argument("--hosts", type=int, default=0, choices=(0, 2),
                        help="2: one rank on each of the lab's two emulated hosts (python -m lab.hosts; needs root)")
    parser.add_argument("--slurm", action="store_true",
                        help="the generated sbatch script on the lab's two-node Slurm (python -m lab.slurm; needs"
                             f" root), Slurm's requeue the restart loop; its kinds: {', '.join(SLURM_KINDS)} (may add"
                             f" {', '.join(k for k in SLURM_MAY if k not in SLURM_KINDS)})")
    parser.add_argument("--requeue-hold", type=float, default=None,
                        help="--slurm: seconds a requeued job stays held before the soak releases it (Slurm's own"
                             " hold is 120 s; default 10; --short 3; at least 2)")
    parser.add_argument("--slurm-cluster", default=None, metavar="CLUSTER_JSON",
                        help="--slurm on a running lab cluster (its cluster.json; python -m lab.slurm up), left up")
    parser.add_argument("--spark", action="store_true",
                        help="a KerasEstimator fit on the lab's standalone Spark cluster (python -m lab.spark; needs"
                             f" root), rerun with the same run_id after it stops; its kinds: {', '.join(SPARK_KINDS)}")
    parser.add_argument("--elastic", action="store_true",
                        help="an elastic job (horovodrun --min-np 1 --max-np 2, two hosts of this machine in a hosts"
                             f" file in --out); its kinds: {', '.join(ELASTIC_KINDS)}")
    parser.add_argument("--leave", type=float, default=None,
                        help=f"{HOST_LEAVE}: seconds the host stays out of the hosts file (default 20; --short 15)")
    parser.add_argument("--rejoin-limit", type=float, default=90.0,
                        help="--elastic: the full world must form again within this many seconds of a host being"
                             " back (default 90)")
    parser.add_argument("--recovery-share", type=float, default=0.3,
                        help="share of faults timed from the next restart instead of from the previous fault")
    parser.add_argument("--startup", type=float, default=None,
                        help="a fault timed from a restart comes within this many seconds of it (default 15)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="an attempt that neither progresses nor exits for this many seconds is a hang"
                             " (default 150; --short 60)")
    parser.add_argument("--gloo-timeout", type=int, default=None,
                        help="horovodrun --gloo-timeout-seconds, the stall limit a freeze outlasts (default 30;"
                             " --short 10)")
    parser.add_argument("--disk-mb", type=int, default=64, help="the size of the workdir's own tmpfs")
    parser.add_argument("--no-quiet", action="store_true", help="skip the quiet run and the final comparison")
    parser.add_argument("--quiet-only", action="store_true",
                        help="run the quiet run alone (in --out/quiet, its figures in --out/quiet.json), for"
                             " --quiet-from")
    parser.add_argument("--quiet-from", default=None, metavar="OUT",
                        help="compare the end with the quiet run in OUT (an earlier soak's or --quiet-only's --out)"
                             " instead of running one; its job's config must be this one's")
    parser.add_argument("--short", action="store_true", help="the suite's soak: 5 faults in at most 3 minutes")
    parser.add_argument("--out", default=os.path.join("runs", "soak"))
    parser.add_argument(IN_NAMESPACE, action="store_true", dest="in_namespace", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.slurm = args.slurm or args.slurm_cluster is not None
    fallback = ((SHORT_ELASTIC if args.elastic else SHORT_SLURM if args.slurm else SHORT_SPARK if args.spark else
                 SHORT) if args.short else
                {"faults": 30, "interval": "30-90", "epochs": 600, "deadline": 150.0, "gloo_timeout": 30,
                 "startup": 15.0, "leave": 20.0, "requeue_hold": 10.0})
    for key, value in dict(fallback, requeue_hold=fallback.get("requeue_hold", 10.0)).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    try:
        args.interval = parse_range(args.interval)
    except ValueError as err:
        parser.error(f"--interval: {err}")
    if args.elastic and args.hosts:
        parser.error("--elastic runs on this machine's two names for itself; the lab's hosts (--hosts 2) are"
                     " another soak: drop one of them")
    if args.slurm and (args.elastic or args.hosts):
        parser.error("--slurm runs the job on the lab's Slurm cluster (its own two hosts): drop --elastic and --hosts")
    if args.spark and (args.elastic or args.hosts or args.slurm):
        parser.error("--spark runs the fit on the lab's Spark cluster (its own two hosts): drop --elastic, --hosts and"
                     " --slurm")
    if args.spark and args.gloo_timeout != SLURM_GLOO_TIMEOUT:
        parser.error(f"--gloo-timeout with --spark: Horovod's Spark launch waits {SLURM_GLOO_TIMEOUT} s; received:"
                     f" {args.gloo_timeout}")
    if args.requeue_hold < 2:
        parser.error(f"--requeue-hold must be at least 2 s (a relaunch in the requeue's second is refused by the node:"
                     f" tests/distributed/test_slurm.py); received: {args.requeue_hold:g}")
    if args.slurm and args.gloo_timeout != SLURM_GLOO_TIMEOUT:
        parser.error(f"--gloo-timeout with --slurm: the generated script's horovodrun waits {SLURM_GLOO_TIMEOUT} s"
                     f" (Horovod's default); received: {args.gloo_timeout}")
    if args.kinds is None:
        args.kinds = ",".join(ELASTIC_KINDS if args.elastic else SLURM_KINDS if args.slurm else
                              SPARK_KINDS if args.spark else KINDS + (TWO_HOST_KINDS if args.hosts else ()))
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in args.kinds if k not in ALL_KINDS]
    if unknown or not args.kinds:
        parser.error(f"--kinds: unknown {unknown}; choose from {', '.join(ALL_KINDS)}")
    if LINK_CUT in args.kinds and not (args.hosts or args.slurm):
        parser.error(f"--kinds: {LINK_CUT} needs the lab's two hosts: add --hosts 2")
    if NODE_FAIL in args.kinds and not args.slurm:
        parser.error(f"--kinds: {NODE_FAIL} needs a Slurm job: add --slurm")
    if KILL_EXECUTOR in args.kinds and not args.spark:
        parser.error(f"--kinds: {KILL_EXECUTOR} needs a Spark job: add --spark")
    not_spark = [k for k in args.kinds if args.spark and k not in SPARK_MAY]
    if not_spark:
        parser.error(f"--kinds: {', '.join(not_spark)} with --spark: choose from {', '.join(SPARK_MAY)}"
                     " (benchmarks.soak.schedule says why)")
    not_slurm = [k for k in args.kinds if args.slurm and k not in SLURM_MAY]
    if not_slurm:
        parser.error(f"--kinds: {', '.join(not_slurm)} with --slurm: choose from {', '.join(SLURM_MAY)}"
                     " (benchmarks.soak.schedule says why)")
    if HOST_LEAVE in args.kinds and not args.elastic:
        parser.error(f"--kinds: {HOST_LEAVE} needs an elastic job: add --elastic")
    promised_nothing = [k for k in args.kinds if args.elastic and k not in ELASTIC_KINDS]
    if promised_nothing:
        parser.error(f"--kinds: {', '.join(promised_nothing)} with --elastic: no promise for an elastic job to judge"
                     f" (benchmarks.soak.schedule says why); choose from {', '.join(ELASTIC_KINDS)}")
    if args.leave <= 0 or args.rejoin_limit <= 0:
        parser.error(f"--leave and --rejoin-limit must be above 0; received: {args.leave:g}, {args.rejoin_limit:g}")
    if args.slurm:
        from lab import slurm as lab_slurm

        _lab_free(parser, "--slurm", "the lab's Slurm cluster", lab_slurm, "lab.slurm",
                  hosts_may_be_up=args.slurm_cluster is not None)
        if args.slurm_cluster is not None and not os.path.isfile(args.slurm_cluster):
            parser.error(f"--slurm-cluster: no such file: {args.slurm_cluster} (python -m lab.slurm up writes"
                         " cluster.json in its folder)")
    if args.spark:
        from lab import spark as lab_spark

        _lab_free(parser, "--spark", "the lab's Spark cluster", lab_spark, "lab.spark")
    if args.hosts:
        from lab import hosts as lab_hosts

        _lab_free(parser, "--hosts 2", "the lab", lab_hosts, "lab.hosts")
    if args.faults < 1 or args.epochs < 1:
        parser.error("--faults and --epochs must be at least 1")
    if sum(map(bool, (args.no_quiet, args.quiet_only, args.quiet_from))) > 1:
        parser.error("--no-quiet, --quiet-only and --quiet-from each say what to do with the quiet run: choose one")
    if args.quiet_from is not None:
        args.quiet_from = os.path.abspath(args.quiet_from)
        if args.spark:
            parser.error("--quiet-from with --spark: the quiet fit is in the Spark soak's own store; drop --quiet-from")
        problem = quiet_run.problem(args.quiet_from, args.epochs)
        if problem:
            parser.error(f"--quiet-from: {problem}")
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    if not os.path.exists(horovodrun):
        parser.error(f"no horovodrun next to {sys.executable}: run the soak with the Python of hvdkeras's"
                     " environment (e.g. .venv/bin/python -m benchmarks.soak), after make install")
    args.horovodrun = horovodrun
    if FULL_DISK in args.kinds and not args.quiet_only and (os.geteuid() != 0 or shutil.which("unshare") is None):
        others = ",".join(k for k in args.kinds if k != FULL_DISK)
        parser.error(f"the {FULL_DISK} fault needs root and unshare(1) (a tmpfs of its own in a private mount"
                     f" namespace): run as root, or leave it out with --kinds {others}")
    return args


def _lab_free(parser: argparse.ArgumentParser, flag: str, what: str, module, down: str,
              hosts_may_be_up: bool = False) -> None:
    """Refuses ``flag`` in one line when ``module`` (one of the lab's: ``lab.hosts``, ``lab.slurm``, ``lab.spark``)
    cannot run here, or when the lab's hosts are up already (unless the soak runs on a cluster already up)."""
    from lab import hosts as lab_hosts

    ok, reason = module.can_run()
    if not ok:
        parser.error(f"{flag}: {what} cannot run here: {reason}")
    if not hosts_may_be_up and lab_hosts.any_up():
        parser.error(f"{flag}: the lab's hosts are up already, maybe for another job (starting them again would"
                     f" tear that job's down); wait for it, or run python -m {down} down if they are stale")


def command(args, workdir: str, lab=None) -> List[str]:
    """The job's command, the same for every attempt (on the lab's hosts ``lab``, a :class:`lab.hosts.HostsInfo`;
    with ``--elastic`` Horovod's elastic launch over the hosts file, :func:`hosts_file`)."""
    if args.elastic:
        where = ["--min-np", "1", "--max-np", "2", "--blacklist-cooldown-range", *map(str, COOLDOWN),
                 "--host-discovery-script", f"{sys.executable} -m hvdkeras.discover_hosts"]
    else:
        where = [*lab.horovodrun_args(), "--disable-cache"] if lab is not None else ["-H", "localhost:2"]
    return [args.horovodrun, "-np", "2", *where, "--gloo", "--gloo-timeout-seconds",
            str(args.gloo_timeout), sys.executable, "-m", "hvdkeras.train", *train_args(args, workdir)]


def train_args(args, workdir: str) -> List[str]:
    """The trainer's arguments, the same for every kind of soak."""
    elastic = (["--set", "elastic.enabled=true", "--set", f"elastic.commit_every_batches={COMMIT_EVERY}"]
               if args.elastic else [])
    return ["--config", args.config, "--workdir", workdir, "--set", f"trainer.epochs={args.epochs}",
            "--set", "model.dropout=0",  # the end is compared bit for bit (docs/reliability.md)
            "--set", "trainer.export=false", "--set", f"checkpoint.keep={KEEP}", *elastic]


def spark_command(args, store: str, run_id: str) -> List[str]:
    """One fit of the Spark soak's job (:mod:`benchmarks.soak.spark_fit`), the same for every attempt of ``run_id``."""
    return [sys.executable, "-m", "benchmarks.soak.spark_fit", "--store", store, "--run-id", run_id,
            "--epochs", str(args.epochs)]


def slurm_job(args, cluster, workdir: str, env: dict, name: str) -> SlurmJob:
    """The job as the sbatch script ``python -m hvdkeras.train --dry_run --launcher slurm`` writes for the cluster's
    nodes (one rank each), in ``--out`` as ``<name>.sbatch``; its output goes to ``--out/logs/<name>.out``."""
    out = os.path.abspath(args.out)
    script = os.path.join(out, f"{name}.sbatch")
    dry = [sys.executable, "-m", "hvdkeras.train", *train_args(args, workdir), "--dry_run", "--launcher", "slurm",
           "--np", "2", "--hosts", ",".join(f"{node}:1" for node in cluster.nodes), "--dry_run_output", script]
    res = subprocess.run(dry, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"the dry run that writes {script} failed: {res.stderr.strip()[-2000:]}")
    return SlurmJob(script, os.path.join(out, "logs", f"{name}.out"), cluster.env(env), REPO, cluster.nodes,
                    hold_s=args.requeue_hold)


def hosts_file(out: str) -> str:
    """An elastic soak's hosts file in ``out``, written with both hosts (:data:`ELASTIC_HOSTS`, one slot each)."""
    path = os.path.join(out, "hosts")
    with open(path, "w") as f:
        f.write("".join(f"{host}:1\n" for host in ELASTIC_HOSTS))
    return path


def promise(args) -> Optional[elastic_lib.Promise]:
    """The elastic job's promise in its settings, or None (not ``--elastic``)."""
    if not args.elastic:
        return None
    return elastic_lib.Promise(full_size=2, commit_every=COMMIT_EVERY, rejoin_limit_s=args.rejoin_limit,
                               cooldown_s=float(COOLDOWN[1]))


def _in_own_mount_namespace(argv: Optional[List[str]]) -> None:
    """Reruns this command in a private mount namespace (its tmpfs vanishes with it, whatever ends the soak)."""
    argv = sys.argv[1:] if argv is None else argv
    os.execvp("unshare", ["unshare", "--mount", "--propagation", "private", sys.executable, "-m", "benchmarks.soak",
                          *argv, IN_NAMESPACE])


def _stack() -> str:
    from importlib import metadata

    found = []
    # the stacks install TensorFlow as tensorflow-cpu; a GPU machine's is tensorflow
    for names in (("tensorflow", "tensorflow-cpu"), ("keras",), ("horovod",)):
        for name in names:
            try:
                found.append(f"{names[0]} {metadata.version(name)}")
                break
            except metadata.PackageNotFoundError:
                pass
    return ", ".join(found)


def _final(args, loop: Loop, quiet: Optional[dict], workdir: str, quiet_dir: str) -> dict:
    """The final validation and weights of the soaked run against the quiet run's (``quiet``: its figures, as
    :func:`benchmarks.soak.quiet_run.read` gives them). An elastic run whose world changed trained some batches on
    another number of ranks (other per-rank batches, another sum's order), so its weights cannot equal the quiet
    run's bit for bit: it says so instead of comparing."""
    changed = args.elastic and elastic_lib.world_changed(loop.attempts, 2)
    if quiet is None and not changed:
        return {}
    from benchmarks.soak import weights

    name = f"epoch-{args.epochs:04d}"
    soaked = loop.attempts[-1].said.final
    found = {"soaked_val_accuracy": soaked.get("val_accuracy"), "soaked_wall_s": round(loop.attempts[-1].end, 1)}
    if quiet is not None:
        found.update({"quiet_val_accuracy": quiet["val_accuracy"], "quiet_wall_s": round(quiet["wall_s"], 1)})
    if changed:
        sizes = [w.size for a in loop.attempts for w in a.said.worlds]
        found["worlds"] = "->".join(str(n) for i, n in enumerate(sizes) if i == 0 or n != sizes[i - 1])
        found["verdict"] = "not comparable: the world changed (weights not compared with a quiet run's)"
        return found
    a, b = (os.path.join(d, "checkpoints", name) for d in (workdir, quiet_dir))
    if not (os.path.isdir(a) and os.path.isdir(b)):
        which = "the soaked run" if not os.path.isdir(a) else "the quiet run"
        found["verdict"] = f"cannot compare: {name} missing in {which}"
        return found
    differs = quiet_run.config_differs(quiet_dir, workdir) if args.quiet_from else None
    if differs:
        found["verdict"] = f"cannot compare: the quiet run in {args.quiet_from} is another job ({differs})"
        return found
    found.update(weights.compare(a, b))
    equal = found.get("same_variables") and found.get("trainable_max_abs_diff") == 0.0
    found["verdict"] = ("trainable weights equal bit for bit (the promise, dropout off)" if equal
                        else "trainable weights DIFFER from the quiet run's")
    return found


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the quiet run, then the soak; writes and prints the report. Exit status 0 when every promise held."""
    args = parse(argv)
    full_disk = FULL_DISK in args.kinds and not args.quiet_only
    if full_disk and not args.in_namespace:
        _in_own_mount_namespace(argv)
    out = os.path.abspath(args.out)
    disk = os.path.join(out, "disk")
    workdir, quiet_dir = os.path.join(disk, "work"), quiet_run.folder(args.quiet_from or out)
    store = os.path.join(out, "store")  # --spark: the estimator's store, on the filesystem both hosts share
    if args.spark:
        from benchmarks.soak.spark_fit import MARK, run_path

        workdir, quiet_dir = run_path(store, "soak"), run_path(store, "quiet")
    # a soak starts afresh in --out (but for a quiet run it compares with)
    for old in (workdir, os.path.join(out, "logs"), *(() if args.quiet_from else (quiet_dir,))):
        shutil.rmtree(old, ignore_errors=True)
    if not args.quiet_from and os.path.exists(os.path.join(out, quiet_run.RECORD)):
        os.remove(os.path.join(out, quiet_run.RECORD))
    os.makedirs(os.path.join(out, "logs"))
    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
    if args.elastic:
        env["HVDKERAS_HOSTS_FILE"] = os.path.join(out, "hosts")  # hosts_file() writes it before each run
    tic = time.time()
    mounted, lab, cluster, jobs, spark = False, None, None, {}, None
    os.makedirs(disk, exist_ok=True)
    try:
        if full_disk:  # before the lab's hosts start: their own mount namespaces copy it
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.disk_mb}m", "tmpfs", disk], check=True)
            mounted = True
        if args.hosts:
            from lab import hosts as lab_hosts

            lab = lab_hosts.up(os.path.join(out, "lab"))
            env = lab.env(env)
        if args.slurm:
            from lab import hosts as lab_hosts
            from lab import slurm as lab_slurm

            if args.slurm_cluster is not None:
                with open(args.slurm_cluster) as f:
                    cluster = lab_slurm.ClusterInfo.from_json(f.read())
            else:
                cluster = lab_slurm.up(os.path.join(out, "slurm"))
                print(f"[soak] the lab's Slurm cluster is up: nodes {', '.join(cluster.nodes)}", flush=True)
            runs = ((("quiet", quiet_dir),) if args.quiet_only else (("job", workdir),)
                    + ((("quiet", quiet_dir),) if not (args.no_quiet or args.quiet_from) else ()))
            jobs = {name: slurm_job(args, cluster, where, env, name) for name, where in runs}
        if args.spark:
            from lab import spark as lab_spark

            spark = lab_spark.up(os.path.join(out, "spark"))
            env = spark.env(env)
            print(f"[soak] the lab's Spark cluster is up: master {spark.master_url}", flush=True)

        def make_job(where: str, run_id: str, **kw) -> Job:
            if spark is not None:
                return Job(spark_command(args, store, run_id), env, REPO, where, rank_env=MARK, lines_late=True, **kw)
            return Job(command(args, where, lab), env, REPO, where, **kw)

        quiet = quiet_run.read(args.quiet_from) if args.quiet_from else None
        if quiet is not None:
            print(f"[soak] the quiet run: {quiet_dir}'s ({args.epochs} epochs, val accuracy {quiet['val_accuracy']})",
                  flush=True)
        elif not args.no_quiet:
            print(f"[soak] the quiet run: {args.epochs} epochs, no fault", flush=True)
            calm = Loop(make_job(quiet_dir, "quiet", hosts_file=hosts_file(out) if args.elastic else None,
                                 slurm=jobs.get("quiet")),
                        [], args.interval, args.deadline,
                        os.path.join(out, "logs", "quiet"), max_attempts=1, promise=promise(args))
            os.makedirs(calm.logs, exist_ok=True)
            if calm.run():
                quiet = {"epochs": args.epochs, "val_accuracy": calm.attempts[-1].said.final.get("val_accuracy"),
                         "wall_s": calm.attempts[-1].end}
                quiet_run.write(out, **quiet)
            else:
                print(f"[soak] the quiet run failed: see {calm.logs}", flush=True)
                quiet = {"epochs": args.epochs, "val_accuracy": None, "wall_s": calm.attempts[-1].end}
            if args.quiet_only:
                print(f"[soak] the quiet run {'ended' if quiet['val_accuracy'] is not None else 'FAILED'} in"
                      f" {quiet['wall_s']:.1f}s: val accuracy {quiet['val_accuracy']} ({quiet_dir})", flush=True)
                return 0 if quiet["val_accuracy"] is not None else 1
        faults = plan(args.seed, args.faults, args.interval, args.kinds, args.recovery_share, args.startup,
                      stall_limit_s=args.gloo_timeout, leave_s=args.leave)
        print(f"[soak] {len(faults)} faults planned (seed {args.seed}): "
              + ", ".join(f"{f.kind}@{f.anchor}+{f.delay_s:g}s" for f in faults), flush=True)
        links = ({rank: end for rank, (_, _, _, end) in enumerate(lab_hosts.HOST_SPECS)} if lab or cluster
                 else {})
        loop = Loop(make_job(workdir, "soak", disk=disk if mounted else None, links=links,
                             hosts_file=hosts_file(out) if args.elastic else None, slurm=jobs.get("job")), faults,
                    args.interval, args.deadline, os.path.join(out, "logs"), max_attempts=3 * args.faults + 5,
                    say=lambda line: print(line, flush=True), promise=promise(args), epochs=args.epochs)
        finished = loop.run()
        steps = next((a.said.steps for a in loop.attempts if a.said.steps), None) or 1
        outs = accounting.outcomes(loop.faults, loop.attempts, steps, promise(args), lines_late=loop.job.lines_late,
                                   epoch_ends=loop.epoch_ends)
        foreign = sorted({p for a in loop.attempts for p in a.said.damaged} - set(loop.damaged))
        final = (_final(args, loop, quiet, workdir, quiet_dir) if finished
                 else {"verdict": "the soaked run never finished"})
        if len(loop.faults) < args.faults:
            final["note"] = f"the run ended after {len(loop.faults)} of {args.faults} faults: raise --epochs"
        settings = {"seed": args.seed, "faults": args.faults, "interval_s": list(args.interval), "kinds": args.kinds,
                    "epochs": args.epochs, "deadline_s": args.deadline, "gloo_timeout_s": args.gloo_timeout,
                    "hosts": 2 if args.slurm else args.hosts or 1, "short": args.short, "stack": _stack(),
                    **({"quiet_from": args.quiet_from} if args.quiet_from else {}),
                    "elastic": args.elastic, "slurm": args.slurm, "spark": args.spark,
                    **({"requeue_hold_s": args.requeue_hold} if args.slurm else {}),
                    **({"leave_s": args.leave, "rejoin_limit_s": args.rejoin_limit, "commit_every": COMMIT_EVERY,
                        "blacklist_cooldown_s": list(COOLDOWN)} if args.elastic else {}),
                    "command": (f"sbatch {jobs['job'].script}" if jobs else " ".join(spark_command(args, store, "soak"))
                                if spark else " ".join(command(args, workdir, lab))),
                    **({"slurm_jobs": {name: job.job_id for name, job in jobs.items()}} if jobs else {}),
                    "total_wall_s": round(time.time() - tic, 1)}
        lost = accounting.lost_checkpoints(loop.attempts, SPARK_KEEP if args.spark else KEEP)
        result = report.build(outs, loop.attempts, settings, steps, final, accounting.unprompted(loop.faults,
                              loop.attempts), foreign, lost)
        if loop.epoch_ends:  # what a Spark soak's wall times lost were measured from
            result["epoch_ends"] = [[end.at, end.epoch, end.train_s] for end in loop.epoch_ends]
        if os.path.exists(os.path.join(workdir, "metrics.jsonl")):
            shutil.copy(os.path.join(workdir, "metrics.jsonl"), os.path.join(out, "metrics.jsonl"))
    finally:
        for submitted in jobs.values():
            submitted.cancel()
        if cluster is not None and args.slurm_cluster is None:
            lab_slurm.down(cluster)
        if spark is not None:
            lab_spark.down(spark)
        if lab is not None:
            lab_hosts.down(lab)
        if mounted:  # the soaked workdir outlives its tmpfs in --out/work, for a look after the soak
            shutil.rmtree(os.path.join(out, "work"), ignore_errors=True)
            if os.path.isdir(workdir):
                shutil.copytree(workdir, os.path.join(out, "work"), ignore_dangling_symlinks=True)
            subprocess.run(["umount", "-l", disk], check=False)
    with open(os.path.join(out, "soak.json"), "w") as f:
        json.dump(result, f, indent=1)
    table = report.text(result)
    with open(os.path.join(out, "soak.txt"), "w") as f:
        f.write(table + "\n")
    print(table)
    print(f"wrote {os.path.join(out, 'soak.txt')} and soak.json ({result['settings']['total_wall_s']}s in all)")
    ok = (finished and result["survived"] == result["faults"] and not result["hangs"] and not result["left_behind"]
          and not result["unprompted_failures"] and not foreign and not lost
          and (quiet is None or "bit for bit" in final.get("verdict", "")
               or final.get("verdict", "").startswith("not comparable: the world changed")))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
