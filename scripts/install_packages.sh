#!/usr/bin/env bash
# Installs the given Debian packages that are missing (apt-get, as root); without root, names
# them and fails. Used by build.sh (what building needs) and test.sh (what the tests add).
set -euo pipefail
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]})) || exit 0
if [[ $(id -u) -ne 0 ]]; then
  echo "ringgrad: missing Debian packages (run as root to install): ${missing[*]}" >&2
  exit 1
fi
echo "ringgrad: installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q "${missing[@]}" >/dev/null
