"""``python -m benchmarks``: the command line of the side-by-side benchmark (see :mod:`benchmarks`)."""
from __future__ import annotations

import argparse
import json
import os

import benchmarks
from benchmarks import pairs
from benchmarks.runner import BENCH_VARIANTS, VARIANTS, hvdkeras_sets, run_rounds
from benchmarks.summary import draw, print_table, summarize

# The lab's rows, at equal settings pair by pair (benchmarks.pairs): hvdkeras and Horovod's recipe each with
# fp32 and with fp16 gradients, MultiWorkerMirroredStrategy (fp32), and the communication-free ceiling.
LAB_VARIANTS = ("hvdkeras-fp32", "horovod", "hvdkeras-fp16", "horovod-fp16", "mwms", "ceiling")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=benchmarks.__doc__.split("\n")[0])
    parser.add_argument("--model", default="applications.MobileNetV2",
                        help="applications.<Name> of keras.applications, or a registered model name")
    parser.add_argument("--batch", type=int, default=16, help="images per process and step")
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=10, help="measured steps (a warm-up epoch of as many runs first)")
    parser.add_argument("--np", default="2", help="comma-separated process counts, e.g. 1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=None,
                        help=f"comma-separated rows (default: {','.join(BENCH_VARIANTS)}; with --hosts:"
                             f" {','.join(LAB_VARIANTS)}); any of {', '.join(VARIANTS)} or hvdkeras+<key>=<value>")
    parser.add_argument("--out", default="runs/bench")
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--hosts", type=int, default=0,
                        help="run in the lab: one process on each of this many emulated hosts (2 to 8; needs root)")
    parser.add_argument("--link", default="unlimited",
                        help="with --hosts: link rates to sweep, tc units, e.g. unlimited,1gbit,gpu "
                             "(gpu: the GPU-equivalent rate)")
    parser.add_argument("--exchange_scaling", default=None,
                        help="with --hosts: an exchange_scaling.json (python -m benchmarks.exchange_scaling) whose "
                             "measured/model factors the projection multiplies the ring model's time by")
    args = parser.parse_args(argv)
    if args.hosts:
        return lab_main(parser, args)
    nps = [int(n) for n in args.np.split(",")]
    variants = args.variants.split(",") if args.variants is not None else list(BENCH_VARIANTS)
    unknown = sorted(v for v in variants if v not in VARIANTS and hvdkeras_sets(v) is None)
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    os.makedirs(args.out, exist_ok=True)
    runs = run_rounds(variants, nps, args)
    table = summarize(runs, nps)
    title = f"{args.model} {args.image_size}px, batch {args.batch}/process"
    text = print_table(table, nps)
    compared = {str(n): pairs.compare({v: by_np[n] for v, by_np in runs.items()}) for n in nps}
    lines = [line for n in nps for line in pairs.compare_text(compared[str(n)], f"np={n}")]
    if lines:
        print(pairs.HEADER, *lines, sep="\n")
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump({"model": args.model, "batch_per_process": args.batch, "image_size": args.image_size,
                   "steps": args.steps, "rounds": args.rounds, "table": table, "pairs": compared,
                   "text": "\n".join([text, *lines])}, f, indent=1)
    for path in draw(table, nps, args.out, title):
        print(f"wrote {path}")
    print(f"wrote {os.path.join(args.out, 'bench.json')}")


def lab_main(parser, args):
    """The link sweep on the emulated hosts (:mod:`benchmarks.link_sweep`)."""
    from benchmarks.link_summary import write_all
    from benchmarks.link_sweep import parse_link, run_sweep
    from lab import hosts

    try:
        hosts.host_specs(args.hosts)
    except ValueError as err:
        parser.error(f"--hosts: {err}")

    variants = args.variants.split(",") if args.variants is not None else list(LAB_VARIANTS)
    bad = [v for v in variants if v not in VARIANTS and hvdkeras_sets(v) is None]
    if bad:
        parser.error(f"unknown variants {bad}; choose from {', '.join(VARIANTS)} or hvdkeras+<key>=<value>")
    if "ceiling" not in variants:
        variants.append("ceiling")  # efficiency is measured against it
    try:
        rates = parse_link(args.link)
    except ValueError as err:
        parser.error(str(err))
    if args.exchange_scaling:
        from benchmarks.efficiency import measured_factors

        try:
            with open(args.exchange_scaling) as f:
                args.comm_factors = measured_factors(json.load(f))
        except (OSError, ValueError) as err:
            parser.error(f"--exchange_scaling {args.exchange_scaling}: {err}")
    sweep = run_sweep(variants, rates, args)
    write_all(sweep, args, args.out)


if __name__ == "__main__":
    main()
