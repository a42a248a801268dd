#!/usr/bin/env bash
# README.md's ringgrad-train flag table and `ringgrad-train --help` list the same flags with the
# same defaults: a flag added to one and not the other, or a default changed in one, fails here,
# naming it.
set -uo pipefail
bin=$1 readme=$2
fail() { echo "FAIL: $*"; exit 1; }
help=$("$bin" --help) || fail "--help exited non-zero"
from_help=$(grep -E '^  (-[a-z],)?--' <<<"$help" | sed -E 's/^  (-[a-z],)?(--[a-z-]+).*/\2/' |
            grep -vx -- --help | sort -u)
table=$(sed -n '/^## ringgrad-train/,/^## /p' "$readme" | grep -E '^\| `--')
from_readme=$(grep -oE '^\| `--[a-z-]+' <<<"$table" | sed 's/^| `//' | sort -u)
[[ -n $from_help && -n $from_readme ]] || fail "could not read the flags (help or README changed shape)"
missing=$(comm -23 <(echo "$from_help") <(echo "$from_readme"))
extra=$(comm -13 <(echo "$from_help") <(echo "$from_readme"))
[[ -z $missing ]] || fail "in --help but not in README.md's table: $(echo $missing)"
[[ -z $extra ]] || fail "in README.md's table but not in --help: $(echo $extra)"
echo "ok: $(wc -l <<<"$from_help") flags, the same in both"
# Defaults: --help prints "--flag TYPE[:CHECK]=DEFAULT" (no "=" for flags without a default);
# the table's second column holds the same value, numbers compared as numbers (5e-4 = 0.0005).
python3 - <(echo "$help") <(echo "$table") <<'PY' || exit 1
import re, sys
help_text, table = (open(p).read() for p in sys.argv[1:3])
defaults = {}
for flag, spec in re.findall(r"^  (--[a-z-]+) ?(.*?)(?:  |$)", help_text, re.M):
    value = re.search(r"=(\S+)$", spec)  # the last "=", not the one of a ">= 0" check
    if value:
        defaults[flag] = value[1]
wrong = []
for row in table.splitlines():
    cells = [c.strip().strip("`") for c in row.strip("|").split("|")]
    flag = cells[0].split()[0]
    if flag not in defaults:
        continue
    readme, shown = cells[1], defaults[flag]
    try:
        same = float(readme) == float(shown)
    except ValueError:
        same = readme == shown
    if not same:
        wrong.append(f"{flag}: README says '{readme}', --help '{shown}'")
if wrong:
    sys.exit("FAIL: defaults differ: " + "; ".join(wrong))
print(f"ok: the {len(defaults)} defaults of --help are the table's")
PY
