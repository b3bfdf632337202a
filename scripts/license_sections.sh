#!/bin/sh
# Writes a small JSONL fine-tuning set to stdout from a text every Debian machine has: the
# section titles of the GNU GPL version 3, as {"prompt", "completion"} records in two
# phrasings ("GPL section 5: " -> "Conveying Modified Source Versions."). make run
# fine-tunes its freshly trained model on it.
#   sh scripts/license_sections.sh [/usr/share/common-licenses/GPL-3] > sections.jsonl
set -eu
license=${1:-/usr/share/common-licenses/GPL-3}
[ -r "$license" ] || { echo "license_sections.sh: cannot read $license" >&2; exit 1; }
# "  5. Conveying Modified Source Versions." -> 5 and the title (JSON-escaped: quotes, backslashes)
sed -n 's/^  \([0-9][0-9]*\)\. \(.*\)$/\1\t\2/p' "$license" | sed 's/\\/\\\\/g; s/"/\\"/g' |
    while IFS="$(printf '\t')" read -r n title; do
        printf '{"prompt": "GPL section %s: ", "completion": "%s"}\n' "$n" "$title"
        printf '{"prompt": "Section %s of the license is ", "completion": "%s"}\n' "$n" "$title"
    done
