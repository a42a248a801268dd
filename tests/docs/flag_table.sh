#!/usr/bin/env bash
# README.md's ringgrad-train flag table and `ringgrad-train --help` list the same flags: a flag
# added to one and not the other fails here, naming it.
set -uo pipefail
bin=$1 readme=$2
fail() { echo "FAIL: $*"; exit 1; }
from_help=$("$bin" --help | grep -E '^  (-[a-z],)?--' | sed -E 's/^  (-[a-z],)?(--[a-z-]+).*/\2/' |
            grep -vx -- --help | sort -u)
from_readme=$(sed -n '/^## ringgrad-train/,/^## /p' "$readme" | grep -oE '^\| `--[a-z-]+' |
              sed 's/^| `//' | sort -u)
[[ -n $from_help && -n $from_readme ]] || fail "could not read the flags (help or README changed shape)"
missing=$(comm -23 <(echo "$from_help") <(echo "$from_readme"))
extra=$(comm -13 <(echo "$from_help") <(echo "$from_readme"))
[[ -z $missing ]] || fail "in --help but not in README.md's table: $(echo $missing)"
[[ -z $extra ]] || fail "in README.md's table but not in --help: $(echo $extra)"
echo "ok: $(wc -l <<<"$from_help") flags, the same in both"
