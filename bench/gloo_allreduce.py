# PyTorch Gloo all-reduce (float sum) over a byte-size sweep, for bench/compare_allreduce.sh
# (and, with BACKEND ringgrad, the same loop through the ringgrad_torch module, for
# bench/compare_ddp.sh's 8-byte case). Each rank is started with RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT set; rank 0 prints "size_bytes time_us busbw_GBps" per size,
# busbw = algbw * 2(n-1)/n.
# Usage: python3 gloo_allreduce.py MIN_BYTES MAX_BYTES FACTOR ITERS WARMUP [BACKEND]
import sys
import time

import torch
import torch.distributed as dist


def main():
    min_bytes, max_bytes, factor, iters, warmup = (int(a) for a in sys.argv[1:6])
    backend = sys.argv[6] if len(sys.argv) > 6 else "gloo"
    if backend == "ringgrad":
        import ringgrad_torch  # noqa: F401  (registers the backend)
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    size = min_bytes
    while size <= max_bytes:
        x = torch.arange(size // 4, dtype=torch.float32) + rank * 1000
        for _ in range(warmup):
            dist.all_reduce(x)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        local = (time.perf_counter() - t0) / iters * 1e6
        t = torch.tensor([local], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rank == 0:
            us = t.item()
            print(f"{size} {us:.2f} {size / us / 1e3 * 2 * (world - 1) / world:.3f}", flush=True)
        size *= factor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
