#!/usr/bin/env bash
# tools/plot/txn_plot.sh on msbench txn JSON lines: an SVG with one line per
# workload; bad input is refused naming what is wrong. Skipped (77) without
# gnuplot.
#   txn_plot_test.sh SOURCE_DIR
set -euo pipefail
plot="$1/tools/plot/txn_plot.sh"
if ! command -v gnuplot >/dev/null; then
  echo "txn_plot_test: skipped: gnuplot is not installed (./ms deps installs gnuplot-nox)"
  exit 77
fi
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "txn_plot_test: $*" >&2; exit 1; }
row() {  # row CLIENTS ROWS PROMOTE TXN P99
  printf '{"bench":"txn","clients":%s,"groups":1,"workload":"rmw","rows_per_group":%s,' "$1" "$2"
  printf '"txn_per_s":%s,"p50_ms":1.0,"p99_ms":%s,"promote":%s,"advisory_lock":false}\n' "$4" "$5" "$3"
}
{
  row 64 1000 true 45.4 6432; row 1 1000 true 46.1 23.9; row 16 1000 true 45.9 5424
  row 1 1 false 46.9 22.8; row 64 1 false 44.1 971.8
  echo '{"bench":"etcd","members":3,"clients":1,"puts_per_s":500}'
} > "$dir/in.jsonl"
out="$("$plot" "$dir/out.svg" "$dir/in.jsonl")" || fail "the plot failed: $out"
grep -q '<svg' "$dir/out.svg" || fail "no SVG written"
grep -q 'rmw rows=1000 groups=1' "$dir/out.svg" || fail "no line for rows=1000"
grep -q 'rmw rows=1 groups=1 no-promote' "$dir/out.svg" || fail "no line for rows=1 without promotion"
grep -q '(2 series)' <<<"$out" || fail "expected 2 series: $out"
# A txn line without a figure, and input with no txn line, are refused.
echo '{"bench":"txn","clients":1}' > "$dir/bad.jsonl"
if err="$("$plot" "$dir/bad.svg" "$dir/bad.jsonl" 2>&1)"; then fail "a txn line without txn_per_s was accepted"; fi
grep -q 'bad.jsonl:1: no "txn_per_s"' <<<"$err" || fail "unclear error: $err"
echo '{"bench":"etcd"}' > "$dir/none.jsonl"
if "$plot" "$dir/none.svg" "$dir/none.jsonl" 2>/dev/null; then fail "input without txn results was accepted"; fi
if "$plot" "$dir/x.svg" 2>/dev/null; then fail "a missing input file argument was accepted"; fi
echo "txn_plot_test: ok"
