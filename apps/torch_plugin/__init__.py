"""ringgrad's collectives as the torch.distributed backend "ringgrad" (CPU tensors).

torch is imported before the extension so that its CUDA and NCCL libraries are the ones
loaded: the extension links ringgrad's comm library, whose nccl backend would otherwise load
the system's libnccl ahead of torch's and break `import torch`.
"""
import torch  # noqa: F401

from ringgrad_torch._C import RinggradBackend, create_backend  # noqa: F401  (registers "ringgrad")
