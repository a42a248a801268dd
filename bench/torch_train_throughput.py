# The PyTorch side of compare_torch.sh: the same models (torchvision ResNet-18 with a 1-channel
# stem; CIFAR-style ResNet-20, both from torch_models.py), batch, threads and SGD settings as
# train_throughput, on random MNIST-shaped data. Prints the same one-line format.
# On the CPU run it with the system interpreter: /usr/bin/python3 (Debian's python3-torch).
# --device cuda --amp bf16 is the GPU baseline of tests/gpu/run.sh: NCHW tensors (as ours),
# cuDNN convolutions with its autotuner on, torch.autocast(bfloat16), fp32 master weights.
import argparse
import resource
import time

import torch
import torch.nn as nn

from torch_models import make_model


def throughput_args(threads):
    """The flags this script and torch_ddp_throughput.py share, with ringgrad's defaults."""
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet20")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=threads)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--amp", choices=["none", "bf16"], default="none")
    p.add_argument("--channels-last", action="store_true",
                   help="model and batch in torch.channels_last (NHWC) rather than NCHW")
    return p


def memory_format(a):
    return torch.channels_last if a.channels_last else torch.contiguous_format


def main():
    p = throughput_args(threads=2)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--no-tf32", action="store_true",
                   help="float32 convolutions without TF32 (PyTorch allows it in cuDNN by default; "
                        "ours never use it)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    device = torch.device(a.device)
    if a.device == "cuda":
        torch.backends.cudnn.benchmark = True  # pick the fastest conv algorithm per shape
        torch.backends.cudnn.allow_tf32 = not a.no_tf32
    model = make_model(a.model).to(device, memory_format=memory_format(a))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(a.batch_size, 1, 28, 28, device=device).to(memory_format=memory_format(a))
    y = torch.randint(0, 10, (a.batch_size,), device=device)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.amp == "bf16"):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    def synchronize():  # CUDA work is asynchronous: time it to its end
        if a.device == "cuda":
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        step()
    synchronize()
    start = time.perf_counter()
    for _ in range(a.steps):
        step()
    synchronize()
    seconds = time.perf_counter() - start
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"{a.model} batch {a.batch_size} threads {a.threads} img/s "
          f"{a.batch_size * a.steps / seconds:.1f} peak_rss_mb {rss_mb:.1f}")


if __name__ == "__main__":
    main()
