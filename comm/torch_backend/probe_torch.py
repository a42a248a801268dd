# Prints what CMake needs to build the ringgrad_torch module against the torch this Python
# imports, one "name=value" per line (lists separated by ','); exits 1 when torch is missing.
import sys
import sysconfig

try:
    import torch
    import torch.utils.cpp_extension as ext
except Exception as e:  # any import failure means: no plugin with this Python
    print(f"error={type(e).__name__}: {e}")
    sys.exit(1)

print(f"version={torch.__version__}")
print(f"includes={','.join(ext.include_paths() + [sysconfig.get_paths()['include']])}")
print(f"libdir={ext.library_paths()[0]}")
print(f"suffix={sysconfig.get_config_var('EXT_SUFFIX')}")
print(f"cxx11_abi={int(torch.compiled_with_cxx11_abi())}")
