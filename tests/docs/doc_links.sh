#!/usr/bin/env bash
# Every relative link in README.md and docs/*.md names a file or folder inside the repository:
# a user's clone has nothing beside it, so a link that climbs out of the tree is broken there.
# Usage: doc_links.sh SOURCE_DIR
set -euo pipefail
root=$(realpath "$1")
bad=0
for page in "$root"/README.md "$root"/docs/*.md; do
  # ](target) of inline links; absolute URLs and in-page anchors are not files.
  while IFS= read -r target; do
    target=${target%%#*}
    [[ -z $target || $target =~ ^[a-z]+: ]] && continue
    resolved=$(realpath -m "$(dirname "$page")/$target")
    if [[ $resolved != "$root"/* ]]; then
      echo "${page#"$root"/}: link '$target' leaves the repository"
      bad=1
    elif [[ ! -e $resolved ]]; then
      echo "${page#"$root"/}: link '$target' names nothing in the repository"
      bad=1
    fi
  done < <(grep -o '](\([^)]*\))' "$page" | sed 's/^](//; s/)$//')
done
exit $bad
