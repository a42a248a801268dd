#!/usr/bin/env python3
"""The alpha-beta cost model of docs/scaling.md, fitted to a bench/cluster_sim.sh run.

Usage: bench/alpha_beta_fit.py DIR [--ranks-per-host R] [--extrapolate-gbit 100]

DIR holds cluster_sim.sh's allreduce_h<H>_r<R>_<algorithm>.json files. With n = H*R ranks,
ranks numbered host by host, the link between hosts as the bottleneck, alpha the time of one
message step and B the link rate (beta = 1/B), time for S bytes:
  ring                 2(n-1) alpha + 2(n-1)/n S/B   (one edge of the ring crosses each link)
  recursive doubling   log2(n) alpha + R log2(H) S/B (the log2(R) steps inside a host are cheap;
                       in each step across hosts all R ranks of a host send their whole buffer
                       over the host's one link)
  hierarchical         2K(H-1) alpha + 2(H-1)/H S/B + 2 alpha: the buffer crosses hosts in
                       K pipelined slices (see slices()), each an all-reduce of 2(H-1)
                       steps; the reduce-scatter and all-gather inside a host (one round each,
                       over the host's memory, not the link) hide behind them except for the
                       first slice's and the last one's
alpha and B are fitted by least squares to the ring's times over every H and size; the other
two are then predicted with the same alpha and B and set against what was measured.
"""
import glob
import json
import math
import os
import sys


def load(directory):
    runs = {}
    for path in glob.glob(os.path.join(directory, "allreduce_h*_r*_*.json")):
        name = os.path.basename(path)[len("allreduce_"):-len(".json")]
        h, r, algorithm = name.split("_", 2)
        rows = json.load(open(path))["rows"]
        runs[(int(h[1:]), int(r[1:]), algorithm)] = {
            row["size"]: row["out_of_place"]["time_us"] * 1e-6 for row in rows}
    return runs


def slices(size, hosts, ranks):
    """How many slices the hierarchical all-reduce pipelines `size` bytes in
    (comm/collectives/hierarchical_allreduce.cpp): at most 32 latency-bound steps across hosts
    in all, and at least one 256 KiB ring segment per rank and step."""
    most = max(1, 32 // (2 * (hosts - 1))) if hosts > 1 else 1
    return min(most, max(1, size // ((256 << 10) * ranks * hosts)))


def coefficients(algorithm, hosts, ranks, size):
    """(alpha multiplier, S/B multiplier) of the model for `size` bytes."""
    n = hosts * ranks
    if algorithm == "ring":
        return 2 * (n - 1), 2 * (n - 1) / n
    if algorithm == "recursive_doubling":
        return math.log2(n), ranks * math.log2(hosts)
    if algorithm == "hierarchical":
        inside = 2 if ranks > 1 else 0
        return 2 * slices(size, hosts, ranks) * (hosts - 1) + inside, 2 * (hosts - 1) / hosts
    raise ValueError(algorithm)


def fit(runs, min_size):
    """Least squares for t = a * alpha + b * S * beta over the ring's points."""
    saa = sab = sbb = sat = sbt = 0.0
    for (hosts, ranks, algorithm), times in runs.items():
        if algorithm != "ring":
            continue
        for size, t in times.items():
            if size < min_size:
                continue
            ka, kb = coefficients("ring", hosts, ranks, size)
            a, b = ka, kb * size
            saa += a * a; sab += a * b; sbb += b * b; sat += a * t; sbt += b * t
    det = saa * sbb - sab * sab
    if det <= 1e-12 * saa * sbb:
        sys.exit("alpha_beta_fit.py: the ring's times do not determine alpha and B; run "
                 "cluster_sim.sh with at least two host counts, or sizes of 1 KiB and more")
    alpha = (sat * sbb - sbt * sab) / det
    beta = (saa * sbt - sab * sat) / det
    return alpha, beta


def human(size):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size // scale} {unit}"
    return f"{size} B"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    runs = load(sys.argv[1])
    if not any(k[2] == "ring" for k in runs):
        sys.exit(f"alpha_beta_fit.py: no ring runs in {sys.argv[1]}")
    alpha, beta = fit(runs, min_size=1024)
    print(f"fit over the ring runs: alpha = {alpha * 1e6:.1f} us, B = 1/beta = {1 / beta / 1e9:.3f} GB/s")
    print("H R algorithm size measured_ms predicted_ms predicted/measured")
    for (hosts, ranks, algorithm), times in sorted(runs.items()):
        for size in sorted(times):
            if size < 1 << 20 and algorithm != "recursive_doubling":
                continue
            ka, kb = coefficients(algorithm, hosts, ranks, size)
            predicted = ka * alpha + kb * size * beta
            print(f"{hosts} {ranks} {algorithm} {size} {times[size] * 1e3:.2f} {predicted * 1e3:.2f} "
                  f"{predicted / times[size]:.2f}")
    gbit = 100.0
    if "--extrapolate-gbit" in sys.argv:
        gbit = float(sys.argv[sys.argv.index("--extrapolate-gbit") + 1])
    link_beta = 8 / (gbit * 1e9)
    # The fitted alpha carries this machine's 2 CPUs shared by every rank; 5 us is a TCP
    # message step on a real data-centre network (RDMA: 1-2 us).
    for step in (alpha, 5e-6):
        print(f"\nextrapolated: {gbit:g} Gbit/s links, alpha {step * 1e6:.1f} us, 8 ranks per host; ms per all-reduce")
        print("hosts size ring recursive_doubling hierarchical")
        for hosts in (64, 1024):
            for size in (8 << 10, 1 << 20, 64 << 20, 1 << 30):
                cells = []
                for algorithm in ("ring", "recursive_doubling", "hierarchical"):
                    ka, kb = coefficients(algorithm, hosts, 8, size)
                    cells.append(f"{(ka * step + kb * size * link_beta) * 1e3:.2f}")
                print(hosts, human(size), *cells)


if __name__ == "__main__":
    main()
