# The PyTorch side of compare_ddp.sh: DistributedDataParallel over Gloo (or, with --backend
# ringgrad, over the ringgrad_torch module), the same model, batch per rank, threads and SGD
# settings as ddp_throughput, with sync or with every step under no_sync(), in NCHW or (with
# --channels-last) NHWC. Started once per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
# set. Rank 0 prints the same one-line format. Any Python with torch (and torchvision, for
# resnet18) runs it.
import contextlib
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from torch_train_throughput import make_model, memory_format, throughput_args


def main():
    p = throughput_args(threads=1)
    p.add_argument("--no-sync", action="store_true")
    p.add_argument("--backend", default="gloo", choices=["gloo", "ringgrad"])
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    if a.backend == "ringgrad":
        import ringgrad_torch  # noqa: F401  (registers the backend)
    dist.init_process_group(a.backend)
    torch.manual_seed(0)
    model = make_model(a.model).to(memory_format=memory_format(a))
    model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(a.batch_size, 1, 28, 28).to(memory_format=memory_format(a))
    y = torch.randint(0, 10, (a.batch_size,))
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        with model.no_sync() if a.no_sync else contextlib.nullcontext():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp == "bf16"):
                loss = loss_fn(model(x), y)
            loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(a.steps):
        step()
    dist.barrier()
    seconds = time.perf_counter() - start
    world = dist.get_world_size()
    if dist.get_rank() == 0:
        mode = "no_sync" if a.no_sync else "sync"
        print(f"{a.model} {a.backend} world {world} batch {a.batch_size} {mode} img/s "
              f"{a.batch_size * a.steps * world / seconds:.1f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
