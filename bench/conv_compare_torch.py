#!/usr/bin/python3
"""PyTorch side of compare_conv.sh (run with /usr/bin/python3, which has PyTorch 1.13).

  time    SHAPES OUT.json   time PyTorch's forward + backward for each shape of SHAPES (the table
                            `conv_bench --list-shapes` prints) at batch 64, 2 threads; write JSON.
  report  SHAPES FILES...   read conv_bench JSON (--benchmark_format=json) and `time` JSON files
                            from interleaved rounds, take each side's fastest time per shape, and
                            print ours/PyTorch per shape and summed per network (times count).
"""
import json
import sys
import time

BATCH = 64
THREADS = 2
REPEATS = 5          # timed blocks per shape; the fastest block counts, as on our side
MIN_BLOCK_S = 0.2    # each block runs at least this long


def read_shapes(path):
    keys = ["name", "network", "C", "K", "H", "W", "R", "S", "stride", "pad", "count", "input_grad"]
    shapes = []
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            shape = dict(zip(keys, fields[:2] + [int(v) for v in fields[2:]]))
            shape["input_grad"] = bool(shape["input_grad"])
            shapes.append(shape)
    return shapes


def time_torch(shapes, out_path):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    results = {}
    for s in shapes:
        x = torch.randn(BATCH, s["C"], s["H"], s["W"], requires_grad=s["input_grad"])
        w = torch.randn(s["K"], s["C"], s["R"], s["S"], requires_grad=True)
        inputs = [x, w] if s["input_grad"] else [w]

        def step():
            y = F.conv2d(x, w, stride=s["stride"], padding=s["pad"])
            torch.autograd.grad(y, inputs, torch.ones_like(y))

        for _ in range(3):
            step()
        best = float("inf")
        for _ in range(REPEATS):
            iters, start = 0, time.perf_counter()
            while time.perf_counter() - start < MIN_BLOCK_S:
                step()
                iters += 1
            best = min(best, (time.perf_counter() - start) / iters)
        results[s["name"]] = best * 1e3
    with open(out_path, "w") as f:
        json.dump({"torch_ms": results}, f)


def fastest_times(paths):
    """Per shape, the fastest time (ms) over all files: ours from conv_bench, theirs from time."""
    ours, theirs = {}, {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        for name, ms in data.get("torch_ms", {}).items():
            theirs[name] = min(ms, theirs.get(name, float("inf")))
        for b in data.get("benchmarks", []):
            if b.get("run_type", "iteration") != "iteration":
                continue
            assert b["time_unit"] == "ms", "conv_bench reports milliseconds"
            name = b["run_name"].removesuffix("/real_time")
            ours[name] = min(b["real_time"], ours.get(name, float("inf")))
    return ours, theirs


def report(shapes, paths):
    ours, theirs = fastest_times(paths)
    print(f"{'shape':<34} {'count':>5} {'ours_ms':>9} {'torch_ms':>9} {'ratio':>6}")
    totals = {}
    for s in shapes:
        o, t = ours[s["name"]], theirs[s["name"]]
        print(f"{s['name']:<34} {s['count']:>5} {o:>9.3f} {t:>9.3f} {o / t:>6.2f}")
        net = totals.setdefault(s["network"], [0.0, 0.0])
        net[0] += s["count"] * o
        net[1] += s["count"] * t
    print("ratio = ours / PyTorch time (below 1: we are faster)")
    for net, (o, t) in totals.items():
        print(f"{net + ' all convs, fwd+bwd':<34} {'':>5} {o:>9.2f} {t:>9.2f} {o / t:>6.2f}")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] in ("time", "report"):
        shapes = read_shapes(sys.argv[2])
        if sys.argv[1] == "time" and len(sys.argv) == 4:
            time_torch(shapes, sys.argv[3])
            sys.exit(0)
        if sys.argv[1] == "report" and len(sys.argv) > 3:
            report(shapes, sys.argv[3:])
            sys.exit(0)
    sys.exit(__doc__)
