#!/usr/bin/env bash
# Plots `msbench txn --json` results: throughput and p99 latency against the
# number of clients, one line per workload (workload, rows per group,
# groups, promotion, combining, advisory lock, where the clients run), as
# one SVG with two panels.
#
#   build/bin/msbench txn --groups=1 --clients=1,16,64 --rows-per-group=1000 --json > hot.jsonl
#   build/bin/msbench txn --groups=1 --clients=1,16,64 --rows-per-group=1 --json >> hot.jsonl
#   tools/plot/txn_plot.sh hot.svg hot.jsonl
#
# Needs gnuplot (Debian's gnuplot-nox; ./ms deps installs it).
set -euo pipefail

usage() { echo "usage: txn_plot.sh OUT.svg RESULTS.jsonl..." >&2; exit 2; }
[ $# -ge 2 ] || usage
out="$1"; shift
command -v gnuplot >/dev/null || { echo "txn_plot: gnuplot is not installed (./ms deps installs gnuplot-nox)" >&2; exit 3; }
for f in "$@"; do [ -r "$f" ] || { echo "txn_plot: cannot read $f" >&2; exit 2; }; done

dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT

# One data file per series: "clients txn_per_s p99_ms", sorted by clients.
# Fields are read from msbench's flat JSON objects by name; lines that are
# not txn results are skipped; a txn line missing a field is an error.
awk -v dir="$dir" '
  function field(name,   re, v) {
    re = "\"" name "\":(\"[^\"]*\"|[-0-9.eE+]+|true|false)"
    if (!match($0, re)) return ""
    v = substr($0, RSTART + length(name) + 3, RLENGTH - length(name) - 3)
    gsub(/"/, "", v)
    return v
  }
  /"bench":"txn"/ {
    n = split("clients txn_per_s p99_ms groups workload rows_per_group promote advisory_lock", want, " ")
    for (i = 1; i <= n; i++) {
      val[want[i]] = field(want[i])
      if (val[want[i]] == "") {
        printf "txn_plot: %s:%d: no \"%s\" in a txn result\n", FILENAME, FNR, want[i] > "/dev/stderr"
        bad = 1; exit 1
      }
    }
    label = val["workload"] " rows=" val["rows_per_group"] " groups=" val["groups"]
    if (val["promote"] == "false") label = label " no-promote"
    if (field("combine") == "false") label = label " no-combine"
    if (field("forward") == "false") label = label " no-forward"
    at = field("at")
    if (at != "" && at != "A,B") label = label " at=" at
    if (val["advisory_lock"] == "true") label = label " lock"
    if (!(label in id)) { id[label] = ++series; print label > (dir "/labels") }
    print val["clients"], val["txn_per_s"], val["p99_ms"] >> (dir "/s" id[label])
    rows++
  }
  END { if (!bad && rows == 0) { print "txn_plot: no msbench txn results in the input" > "/dev/stderr"; exit 1 } }
' "$@"

n=$(wc -l < "$dir/labels")
for i in $(seq 1 "$n"); do sort -n -k1,1 "$dir/s$i" -o "$dir/s$i"; done

plot() {  # plot COLUMN
  local parts=() i label
  for i in $(seq 1 "$n"); do
    label="$(sed -n "${i}p" "$dir/labels" | sed 's/"/\\"/g')"
    parts+=("'$dir/s$i' using 1:$1 with linespoints title \"$label\"")
  done
  local IFS=,
  echo "plot ${parts[*]}"
}

gnuplot <<GNUPLOT
set terminal svg size 1000,450 dynamic font "sans,11"
set output "$out"
set multiplot layout 1,2
set key bottom right font ",9"
set grid
set logscale x 2
set xlabel "clients"
set ylabel "committed transactions/s"
set yrange [0:*]
set title "throughput"
$(plot 2)
set ylabel "p99 latency (ms)"
set autoscale y
set logscale y 10
set key top left
set title "p99 latency"
$(plot 3)
unset multiplot
GNUPLOT
echo "txn_plot: wrote $out ($n series)"
