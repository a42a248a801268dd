#!/usr/bin/env bash
# Passwordless SSH for `ringgrad-run --hostfile`, the tutorial's key setup as one command:
# make a key if there is none, copy it to each host (ssh-copy-id asks for that host's password
# once), then prove a BatchMode login works, which is how ringgrad-run logs in. Says what it
# did for every host; exit 0 only when every host accepts the key.
# Usage: scripts/setup-ssh.sh [-i KEY] [-p PORT] [-o SSH_OPTION]... HOST...
#   KEY defaults to ~/.ssh/id_ed25519; HOST may be user@host.
set -uo pipefail

key=$HOME/.ssh/id_ed25519 port="" opts=()
while getopts "i:p:o:h" flag; do
  case $flag in
    i) key=$OPTARG ;;
    p) port=$OPTARG ;;
    o) opts+=(-o "$OPTARG") ;;
    *) sed -n '6,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
(($# > 0)) || { sed -n '6,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
common=(-o IdentitiesOnly=yes "${opts[@]}")
[[ -n $port ]] && common+=(-p "$port")

if [[ -f $key ]]; then
  echo "key: using the existing $key"
else
  mkdir -p "$(dirname "$key")" && chmod 700 "$(dirname "$key")"
  ssh-keygen -q -t ed25519 -N "" -C "ringgrad $(id -un)@$(hostname)" -f "$key" ||
    { echo "key: ssh-keygen failed for $key" >&2; exit 1; }
  echo "key: generated $key (ed25519, no passphrase)"
fi

# BatchMode never prompts: it succeeds exactly when the key alone is enough.
batch_login() { ssh -o BatchMode=yes -o ConnectTimeout=10 -i "$key" "${common[@]}" "$1" true 2>&1; }

failed=0
for host in "$@"; do
  if batch_login "$host" >/dev/null; then
    echo "$host: the key is already accepted; nothing copied"
    continue
  fi
  copy_out=$(ssh-copy-id -i "$key.pub" "${common[@]}" "$host" 2>&1)
  if (($? != 0)); then
    echo "$host: ssh-copy-id failed: $(tail -1 <<<"$copy_out")"
    failed=$((failed + 1))
    continue
  fi
  if said=$(batch_login "$host"); then
    echo "$host: copied $key.pub; a BatchMode login works"
  else
    echo "$host: copied $key.pub, but a BatchMode login still fails: $said"
    failed=$((failed + 1))
  fi
done
((failed == 0)) && echo "all $# hosts accept $key" || echo "$failed of $# hosts are not set up"
((failed == 0))
