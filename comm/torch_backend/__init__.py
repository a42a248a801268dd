"""ringgrad's collectives as the torch.distributed backend "ringgrad" (CPU tensors).

torch is imported before the extension so that its CUDA and NCCL libraries are the ones
loaded: the extension links ringgrad's comm library, whose nccl backend would otherwise load
the system's libnccl ahead of torch's and break `import torch`.
"""
import torch

# The extension is compiled against one torch's C++ API, which changes between releases; loaded
# into another torch it would crash the interpreter, so refuse it here with the remedy instead.
# (CMake fills these in when it copies this file into the build tree.)
_BUILT_FOR_TORCH = "@TORCH_version@"
_BUILT_FOR_PYTHON = "@RINGGRAD_PYTHON@"
if torch.__version__ != _BUILT_FOR_TORCH:
    raise ImportError(
        f"ringgrad_torch was built for torch {_BUILT_FOR_TORCH} (the Python "
        f"'{_BUILT_FOR_PYTHON}'), but this Python has torch {torch.__version__} "
        f"({torch.__file__}); use that Python, or rebuild the module for this one: "
        "cmake -S . -B build -DRINGGRAD_PYTHON=<this python> && "
        "cmake --build build --target ringgrad_torch")

from ringgrad_torch._C import RinggradBackend, create_backend  # noqa: F401  (registers "ringgrad")
