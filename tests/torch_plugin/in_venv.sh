#!/usr/bin/env bash
# Runs a torch test with the Python of the environment torch_plugin_pip_install made (the
# ringgrad_torch package pip-installed there), or says it is Skipped where there is none.
#   in_venv.sh VENV_PYTHON ARGS...
python=$1; shift
[[ -x $python ]] || { echo "SKIPPED: no $python: torch_plugin_pip_install did not make it (see its output)"; exit 77; }
unset PYTHONPATH
exec "$python" "$@"
