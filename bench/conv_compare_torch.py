#!/usr/bin/python3
"""Times every conv shape of `conv_bench --list-shapes` in PyTorch (forward + backward, batch 64,
2 threads unless --threads) and, unless --torch-only, beside it ours: per round and per shape,
one PyTorch block then one conv_bench run filtered to that shape, so both sides see the same load
on a shared machine. Each side keeps its fastest block over the rounds. Prints ours/PyTorch per shape and
summed per network (each shape times its count). Run with /usr/bin/python3 (PyTorch 1.13).

  conv_compare_torch.py PATH/TO/conv_bench [--rounds N] [--threads N] [--torch-only]
"""
import argparse
import json
import re
import subprocess
import time

import torch
import torch.nn.functional as F

BATCH = 64
BLOCK_S = 0.3  # one timed block per side, shape and round


def read_shapes(bench):
    keys = ["name", "network", "C", "K", "H", "W", "R", "S", "stride", "pad", "count", "input_grad"]
    table = subprocess.run([bench, "--list-shapes"], check=True, capture_output=True, text=True)
    shapes = []
    for line in table.stdout.splitlines():
        fields = line.split("\t")
        shapes.append(dict(zip(keys, fields[:2] + [int(v) for v in fields[2:]])))
    return shapes


class TorchConv:
    """One shape's training-step conv work in PyTorch: forward, then dw (and dx unless the stem)."""

    def __init__(self, s):
        self.x = torch.randn(BATCH, s["C"], s["H"], s["W"], requires_grad=bool(s["input_grad"]))
        self.w = torch.randn(s["K"], s["C"], s["R"], s["S"], requires_grad=True)
        self.inputs = [self.x, self.w] if s["input_grad"] else [self.w]
        self.stride, self.pad = s["stride"], s["pad"]
        for _ in range(3):
            self.step()

    def step(self):
        y = F.conv2d(self.x, self.w, stride=self.stride, padding=self.pad)
        torch.autograd.grad(y, self.inputs, torch.ones_like(y))

    def block_ms(self):
        iters, start = 0, time.perf_counter()
        while time.perf_counter() - start < BLOCK_S:
            self.step()
            iters += 1
        return (time.perf_counter() - start) / iters * 1e3


def ours_block_ms(bench, name, threads):
    # Names hold no regex metacharacters (and Google Benchmark's regex rejects escaped '-').
    assert re.fullmatch(r"[\w/-]+", name), name
    run = subprocess.run(
        [bench, "--threads", str(threads), f"--benchmark_filter=^{name}/", "--benchmark_format=json",
         f"--benchmark_min_time={BLOCK_S}"], check=True, capture_output=True, text=True)
    (result,) = json.loads(run.stdout)["benchmarks"]
    assert result["time_unit"] == "ms", "conv_bench reports milliseconds"
    return result["real_time"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench", help="path to the conv_bench binary")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--torch-only", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    shapes = read_shapes(args.bench)
    convs = {s["name"]: TorchConv(s) for s in shapes}
    ours = {s["name"]: float("inf") for s in shapes}
    theirs = dict(ours)
    for _ in range(args.rounds):
        for s in shapes:
            theirs[s["name"]] = min(theirs[s["name"]], convs[s["name"]].block_ms())
            if not args.torch_only:
                ours[s["name"]] = min(ours[s["name"]], ours_block_ms(args.bench, s["name"], args.threads))

    if args.torch_only:
        for s in shapes:
            print(f"{s['name']:<34} {theirs[s['name']]:>9.3f} ms")
        return
    print(f"{'shape':<34} {'count':>5} {'ours_ms':>9} {'torch_ms':>9} {'ratio':>6}")
    totals = {}
    for s in shapes:
        o, t = ours[s["name"]], theirs[s["name"]]
        print(f"{s['name']:<34} {s['count']:>5} {o:>9.3f} {t:>9.3f} {o / t:>6.2f}")
        net = totals.setdefault(s["network"], [0.0, 0.0])
        net[0] += s["count"] * o
        net[1] += s["count"] * t
    for net, (o, t) in totals.items():
        print(f"{net + ' all convs x count':<34} {'':>5} {o:>9.2f} {t:>9.2f} {o / t:>6.2f}")
    print("ratio = ours / PyTorch time per training step (below 1: we are faster)")


if __name__ == "__main__":
    main()
