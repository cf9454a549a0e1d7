#!/usr/bin/env bash
# tshark's reference counts for every capture in a directory, one TSV line per file, for
# tests/integration/wire_tshark_counts.rs (which compares `latscope analyze` against them without running
# tshark, so the suite stays fast):
#   scripts/tshark-counts.sh ../shared/pcaps > tests/data/tshark_counts.tsv
# Columns: file, size in bytes (the test checks it read the same file), then the counts
# named in the header. A counter is the number of frames carrying that tcp.analysis.* item
# (tshark's `-Y tcp.analysis.X` filter), `connections` is the highest tcp.stream + 1.
set -euo pipefail
dir=${1:?usage: scripts/tshark-counts.sh DIR > FILE}
command -v tshark >/dev/null || { echo "tshark is not installed (scripts/setup.sh installs it)" >&2; exit 2; }
FIELDS="retransmission fast_retransmission spurious_retransmission out_of_order duplicate_ack
        zero_window window_full lost_segment keep_alive"
one() {
  # The counter names travel as a plain string: bash cannot export an array to the shells
  # xargs starts (an exported array arrives empty, and every counter read 0).
  local f=$1 args=(-n -T fields -E occurrence=f -e frame.number -e tcp.stream) fields
  read -r -a fields <<< "$(echo $FIELDS)"
  for x in "${fields[@]}"; do args+=(-e "tcp.analysis.$x"); done
  local size; size=$(stat -c %s "$f")
  tshark -r "$f" "${args[@]}" 2>/dev/null | awk -F'\t' -v name="$(basename "$f")" -v size="$size" '
    { frames++; if ($2 != "") { tcp++; if ($2 + 1 > conns) conns = $2 + 1 }
      for (i = 3; i <= NF; i++) if ($i != "") c[i]++ }
    END { printf "%s\t%s\t%d\t%d\t%d", name, size, frames, tcp, conns
          for (i = 3; i <= 11; i++) printf "\t%d", c[i]; printf "\n" }'
}
export -f one
export FIELDS
printf '#file\tsize\tframes\ttcp_frames\tconnections'
printf '\t%s' $FIELDS; printf '\n'
find "$dir" -maxdepth 1 -type f \( -name '*.pcap' -o -name '*.pcapng' -o -name '*.cap' -o -name '*.pcap.gz' -o -name '*.pcapng.gz' \) -print0 \
  | sort -z | xargs -0 -n 1 -P "${JOBS:-2}" bash -c 'one "$1"' _ | LC_ALL=C sort
