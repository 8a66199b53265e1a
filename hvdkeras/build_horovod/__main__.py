"""python -m hvdkeras.build_horovod: patch, build, install and check Horovod 0.28.1 for this environment."""
from __future__ import annotations

import argparse
import shutil
import sys
from typing import Sequence

from hvdkeras.build_horovod import BuildError, builder, checks, patches
from hvdkeras.build_horovod import plan as plans


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parses ``python -m hvdkeras.build_horovod``'s command line."""
    p = argparse.ArgumentParser(
        prog="python -m hvdkeras.build_horovod",
        description="Builds Horovod 0.28.1 from the registry's source, patched for current TensorFlow, against the "
                    "TensorFlow installed here; installs it and checks it on two ranks.")
    p.add_argument("--gpu", action="store_true",
                   help="build the CUDA/NCCL allreduce (HOROVOD_GPU_OPERATIONS=NCCL; NCCL from the nvidia-nccl-cu12 "
                        "wheel when it is installed). Unverified: see docs/stacks.md, GPU builds.")
    p.add_argument("--mpi", choices=("auto", "yes", "no"), default="auto",
                   help="build the MPI controller too: auto (when OpenMPI's mpicxx and mpirun are on PATH), yes, no")
    p.add_argument("--cache-dir", default=None,
                   help=f"where built wheels are kept (default $HVDKERAS_WHEEL_CACHE or {builder.DEFAULT_CACHE})")
    p.add_argument("--rebuild", action="store_true", help="build again even if the cache has this build's wheel")
    p.add_argument("--no-install", action="store_true", help="only build the wheel (and print its folder)")
    p.add_argument("--no-smoke", action="store_true", help="skip the two-rank check (--check-build still runs)")
    p.add_argument("--print-plan", action="store_true", help="print the build id and flags and stop")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Builds, installs and checks Horovod as the command line asks.

            Returns:
                The exit status: 0 on success, 1 after a ``BuildError`` (its message printed to stderr).
    """
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        plan = plans.discover(mpi=args.mpi, gpu=args.gpu)
        selected = patches.select(gpu=plan.gpu)
        if patches.open_rendezvous(selected):
            builder.log(f"WARNING: {patches.AUTH_PATCH} left out ({patches.OPEN_ENV}=1): this Horovod's Gloo"
                        " rendezvous answers anyone who reaches its port, and hvdkeras refuses it unless"
                        f" {patches.OPEN_ENV}=1 is set where it runs too")
        root = builder.cache_root(args.cache_dir)
        if args.print_plan:
            print(plans.build_id(plan, patches.digest(selected)))
            for key, value in sorted(plans.build_env(plan).items()):
                print(f"  {key}={value}")
            print("  patches: " + " ".join(p.name for p in selected))
            return 0
        if args.rebuild:
            shutil.rmtree(root / plans.build_id(plan, patches.digest(selected)), ignore_errors=True)
        folder = builder.build_wheel(plan, root, selected)
        if args.no_install:
            print(folder)
            return 0
        builder.install(folder)
        builder.log("checking: horovodrun --check-build")
        print(checks.check_build(plan).rstrip())
        if not args.no_smoke:
            builder.log("checking: allreduce (dense, int32, sparse), grouped_allreduce (eager, tf.function), "
                        "broadcast on two Gloo ranks")
            checks.smoke(plan)
        builder.log(f"done: Horovod {plans.HOROVOD_VERSION} for {plan.tf_distribution} {plan.tf_version} "
                    f"({plan.controllers}, {plan.devices}) passed its checks")
        return 0
    except BuildError as exc:
        print(f"[build_horovod] FAILED: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
