"""Registers the torch.distributed backend "ringgrad" when torch is imported, without loading it.

Installed as the top-level module ringgrad_torch_autoload and named in the package's
"torch.backends" entry point, which torch calls at the end of `import torch` (its auto-loading of
out-of-tree backends; TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns it off). It runs inside torch's own
import, so it only names the backend: the ringgrad_torch module, with its check that it was built
for this torch, loads when a process group is first created. A failure here must not break
`import torch` for every program in the environment: it becomes a warning.
"""
import warnings


def _create_backend(store, rank, size, timeout):
    import ringgrad_torch  # refuses, with the remedy, a torch it was not built for

    return ringgrad_torch.create_backend(store, rank, size, timeout)


def register():
    try:
        import torch.distributed as dist

        if dist.is_available() and "RINGGRAD" not in dist.Backend._plugins:
            dist.Backend.register_backend("ringgrad", _create_backend, devices=["cpu"])
    except Exception as e:  # noqa: BLE001  (any failure: torch itself must still import)
        warnings.warn(f"ringgrad_torch: the \"ringgrad\" backend is not registered: {e}")
