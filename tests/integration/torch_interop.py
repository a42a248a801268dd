"""The PyTorch side of the weights-interchange tests (test_torch_interop.cpp).

ringgrad's checkpoints are safetensors files whose tensors carry PyTorch's state_dict names, so
a PyTorch user can load them into the same architecture and back. This script takes that
architecture in PyTorch from bench/torch_models.py (the CIFAR-style resnet8/resnet20 and
torchvision's resnet18 with a 1-channel stem), reads and writes safetensors itself (Debian ships no safetensors package),
and does the PyTorch half of each test:

  subset SRC DST TRAIN TEST       the first TRAIN/TEST images of MNIST-format SRC into DST
  evaluate MODEL CKPT DATA        accuracy of a ringgrad checkpoint on DATA's test split
  export MODEL SEED OUT           random weights (BN statistics too) and a batch of inputs with
                                  PyTorch's logits for them, for ringgrad to reproduce

Input normalisation is ringgrad's: (pixel/255 - mean) / std with the mean and std of all
training pixels, computed in double precision.
"""
import gzip
import json
import os
import struct
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from torch_models import make_model  # noqa: E402  (ringgrad's models, one copy for all scripts)

# safetensors dtype names <-> torch dtypes (the ones ringgrad's checkpoints use).
DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "F16": torch.float16,
          "BF16": torch.bfloat16, "U8": torch.uint8}
NAMES = {v: k for k, v in DTYPES.items()}


def read_safetensors(path):
    """name -> tensor, and the metadata dict."""
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len])
    data = blob[8 + header_len:]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        raw = bytearray(data[begin:end])
        t = torch.frombuffer(raw, dtype=DTYPES[entry["dtype"]]) if raw else \
            torch.empty(0, dtype=DTYPES[entry["dtype"]])
        tensors[name] = t.reshape(entry["shape"]).clone()
    return tensors, metadata


def write_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        blob = f.read()
    dims = blob[3]
    shape = struct.unpack(">" + "I" * dims, blob[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(blob[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def idx_path(data, name):
    plain = os.path.join(data, name)
    return plain if os.path.exists(plain) else plain + ".gz"


def write_idx(path, t):
    with open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, 0x08, t.dim()))
        f.write(struct.pack(">" + "I" * t.dim(), *t.shape))
        f.write(t.contiguous().numpy().tobytes())


def subset(src, dst, n_train, n_test):
    os.makedirs(dst, exist_ok=True)
    for split, n in (("train", n_train), ("t10k", n_test)):
        for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
            name = f"{split}-{kind}"
            write_idx(os.path.join(dst, name), read_idx(idx_path(src, name))[:n])


def normalized_test_images(data):
    train = read_idx(idx_path(data, "train-images-idx3-ubyte")).to(torch.float64) / 255.0
    mean = train.mean()
    std = ((train - mean) ** 2).mean().sqrt()
    test = read_idx(idx_path(data, "t10k-images-idx3-ubyte")).to(torch.float64) / 255.0
    return ((test - mean) / std).to(torch.float32).unsqueeze(1)


def evaluate(name, ckpt, data):
    tensors, _ = read_safetensors(ckpt)
    model = make_model(name)
    weights = {k: v for k, v in tensors.items() if not k.startswith("optimizer.")}
    model.load_state_dict(weights, strict=True)
    model.eval()
    images = normalized_test_images(data)
    labels = read_idx(idx_path(data, "t10k-labels-idx1-ubyte")).to(torch.int64)
    with torch.no_grad():
        correct = sum(int((model(images[i:i + 500]).argmax(1) == labels[i:i + 500]).sum())
                      for i in range(0, len(labels), 500))
    print(f"pytorch accuracy {correct / len(labels):.6f} correct {correct} of {len(labels)}")


def export(name, seed, out):
    torch.manual_seed(seed)
    model = make_model(name)
    # Non-trivial BatchNorm state, so that a loader that skipped it would be caught.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.3, 0.3)
                m.running_var.uniform_(0.5, 2.0)
                m.num_batches_tracked.fill_(seed)
    model.eval()
    x = torch.randn(8, 1, 28, 28)
    with torch.no_grad():
        logits = model(x)
    write_safetensors(os.path.join(out, "weights.safetensors"), model.state_dict())
    write_safetensors(os.path.join(out, "batch.safetensors"), {"input": x, "logits": logits})
    print(f"exported {name}: {len(model.state_dict())} tensors")


if __name__ == "__main__":
    torch.set_num_threads(2)
    command, args = sys.argv[1], sys.argv[2:]
    if command == "subset":
        subset(args[0], args[1], int(args[2]), int(args[3]))
    elif command == "evaluate":
        evaluate(*args)
    elif command == "export":
        export(args[0], int(args[1]), args[2])
    else:
        raise SystemExit(f"unknown command {command}")
