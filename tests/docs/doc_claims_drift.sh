#!/usr/bin/env bash
# doc_claims.py fails when the code drifts from a page: in a scratch copy of the sources, a
# quoted constant doubled, a store verb dropped from docs/README.md, a named file renamed and a
# line of project history added to a page must each be reported, and the untouched copy must
# pass.
#   doc_claims_drift.sh SOURCE_DIR
set -euo pipefail
src=$(realpath "$1") check=$(dirname "$(realpath "$0")")/doc_claims.py
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
tar -C "$src" --exclude=./build --exclude=./.git -cf - . | tar -C "$scratch" -xf -
python3 "$check" "$scratch" >/dev/null || { echo "FAIL: the untouched copy does not pass"; exit 1; }

# Wherever kJoinBytes lives, its value doubles.
join_file=$(grep -rlE 'constexpr[^;]*\bkJoinBytes = ' "$scratch"/comm)
sed -i -E 's/\bkJoinBytes = /kJoinBytes = 2 * /' "$join_file"
sed -i 's/`compare_set`, //' "$scratch"/docs/README.md
mv "$scratch"/tests/comm/ring_fixtures.h "$scratch"/tests/comm/ring_values.h
echo "Issue 16's target held in the runs of 22:06-22:12." >>"$scratch"/docs/shared-memory.md

status=0
out=$(python3 "$check" "$scratch") && { echo "FAIL: the drifted copy passed"; status=1; }
for want in "for kJoinBytes, the code has 8192" "lists the store's verbs" \
            "names \`tests/comm/ring_fixtures.h\`, which does not exist" \
            "'Issue 16' is an issue number" "'22:06-22:12' is a clock time"; do
  if grep -qF "$want" <<<"$out"; then echo "ok: reported '$want'"; else
    echo "FAIL: not reported: '$want'"; status=1; fi
done
exit $status
