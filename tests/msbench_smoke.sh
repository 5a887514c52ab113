#!/usr/bin/env bash
# msbench txn with its etcd baseline, briefly: both sides measured, the
# ratio printed, every figure a number above zero. Skipped (77) without etcd.
#   msbench_smoke.sh MSBENCH
set -euo pipefail
msbench="$1"
if [ ! -x /usr/bin/etcd ]; then
  echo "msbench_smoke: skipped: /usr/bin/etcd is not installed (./ms deps installs etcd-server)"
  exit 77
fi
out="$("$msbench" txn --wan=none --replicas=full,full,full --clients=2 --groups=10 --runs=1 \
  --seconds=0.5 --baseline=etcd --json)" || { echo "$out"; echo "msbench_smoke: msbench failed" >&2; exit 1; }
echo "$out"
fail() { echo "msbench_smoke: $*" >&2; exit 1; }
grep -q '"bench":"txn","clients":2,"groups":10' <<<"$out" || fail "no txn cell"
grep -Eq '"txn_per_s":[1-9][0-9.]*' <<<"$out" || fail "no transactions committed"
grep -Eq '"etcd_puts_per_s":[1-9][0-9.]*,"ratio_vs_etcd":0*[.0-9]*[1-9]' <<<"$out" || fail "no ratio to etcd"
grep -Eq '"bench":"etcd","members":3,"clients":2,.*"puts_per_s":[1-9][0-9.]*,.*"errors":0' <<<"$out" ||
  fail "no etcd figures"
# A wrong baseline is a usage error.
if "$msbench" txn --baseline=postgres >/dev/null 2>&1; then fail "--baseline=postgres was accepted"; fi
echo "msbench_smoke: ok"
