"""Times every conv shape of `conv_bench --list-shapes` in PyTorch (forward + backward, batch 64,
2 threads unless --threads) and, unless --torch-only, beside it ours: per round and per shape,
PyTorch's blocks (in NCHW and in channels_last, NHWC) then one conv_bench run filtered to that
shape, so both sides see the same load on a shared machine. Each side keeps its fastest block over
the rounds, PyTorch over both layouts (ours are NCHW). Prints ours/PyTorch per shape and summed per
network (each shape times its count), and each side's GFLOP/s (the conv's nominal multiply-adds,
padding included, x2) as a fraction of the cores' f32 FMA peak (`conv_bench --peak`). Run it with
the Python whose PyTorch is the comparison (bench/compare_conv.sh picks one).

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

    def __init__(self, s, layout):
        x = torch.randn(BATCH, s["C"], s["H"], s["W"]).to(memory_format=layout)
        w = torch.randn(s["K"], s["C"], s["R"], s["S"]).to(memory_format=layout)
        self.x = x.requires_grad_(bool(s["input_grad"]))
        self.w = w.requires_grad_()
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


def step_gflop(s):
    """Nominal GFLOP of one shape's training step: forward, dw and (but for the stem) dx."""
    out_h = (s["H"] + 2 * s["pad"] - s["R"]) // s["stride"] + 1
    out_w = (s["W"] + 2 * s["pad"] - s["S"]) // s["stride"] + 1
    macs = BATCH * s["K"] * out_h * out_w * s["C"] * s["R"] * s["S"]
    return 2 * macs * (3 if s["input_grad"] else 2) / 1e9


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
    layouts = {"NCHW": torch.contiguous_format, "NHWC": torch.channels_last}
    convs = {s["name"]: {k: TorchConv(s, v) for k, v in layouts.items()} for s in shapes}
    ours = {s["name"]: float("inf") for s in shapes}
    theirs = {s["name"]: {k: float("inf") for k in layouts} for s in shapes}
    peak = float(subprocess.run([args.bench, "--threads", str(args.threads), "--peak"], check=True,
                                capture_output=True, text=True).stdout)
    print(f"f32 FMA peak of {args.threads} core(s), measured: {peak:.1f} GFLOP/s")
    for _ in range(args.rounds):
        for s in shapes:
            for k, conv in convs[s["name"]].items():
                theirs[s["name"]][k] = min(theirs[s["name"]][k], conv.block_ms())
            if not args.torch_only:
                ours[s["name"]] = min(ours[s["name"]], ours_block_ms(args.bench, s["name"], args.threads))

    if args.torch_only:
        for s in shapes:
            times = "  ".join(f"{k} {t:.3f} ms" for k, t in theirs[s["name"]].items())
            print(f"{s['name']:<34} {times}")
        return
    print(f"{'shape':<34} {'count':>5} {'ours_ms':>9} {'torch_ms':>9} {'ratio':>6} "
          f"{'ours_GF/s':>9} {'%peak':>6} {'torch_GF/s':>10} {'%peak':>6} {'torch':>5}")
    totals = {}
    for s in shapes:
        layout = min(theirs[s["name"]], key=theirs[s["name"]].get)
        o, t = ours[s["name"]], theirs[s["name"]][layout]
        gflop = step_gflop(s)
        print(f"{s['name']:<34} {s['count']:>5} {o:>9.3f} {t:>9.3f} {o / t:>6.2f} "
              f"{gflop / o * 1e3:>9.1f} {100 * gflop / o * 1e3 / peak:>5.0f}% "
              f"{gflop / t * 1e3:>10.1f} {100 * gflop / t * 1e3 / peak:>5.0f}% {layout:>5}")
        net = totals.setdefault(s["network"], [0.0, 0.0, 0.0])
        net[0] += s["count"] * o
        net[1] += s["count"] * t
        net[2] += s["count"] * gflop
    for net, (o, t, gflop) in totals.items():
        print(f"{net + ' all convs x count':<34} {'':>5} {o:>9.2f} {t:>9.2f} {o / t:>6.2f} "
              f"{gflop / o * 1e3:>9.1f} {100 * gflop / o * 1e3 / peak:>5.0f}% "
              f"{gflop / t * 1e3:>10.1f} {100 * gflop / t * 1e3 / peak:>5.0f}%")
    print("ratio = ours / PyTorch time per training step (below 1: we are faster); torch: the "
          "layout of PyTorch's faster time (ours are NCHW)")


if __name__ == "__main__":
    main()
