#!/usr/bin/env bash
# Failover RTO over several runs (issue 5's benchmark): runs the kill -9
# and the SIGSTOP region-loss tests RUNS times each and prints, per kind,
# the median and the max of the produce and consume RTO.
#   RUNS=5 scripts/failover-rto.sh
# The tests run with the gossip profile MERIDIAN_TEST_GOSSIP_PROFILE
# (meridian: the default settings; fast: tuned for one host) and the
# region lease MERIDIAN_TEST_FAILOVER_LEASE_TTL (default 5s).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
out=$(mktemp)
go test -count="$RUNS" -p 1 -timeout 60m -v \
  -run 'TestAutomaticFailoverOnRegionLoss$|TestAutomaticFailoverOnSilentOutage$' ./tools/georep/ | tee "$out" | grep -E 'RTO|_test.go:[0-9]+: |^(--- |FAIL|ok)' || true
python3 - "$out" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.search(r'(kill -9|SIGSTOP) of every east process: RTO produce ([0-9.]+)(m?s), consume ([0-9.]+)(m?s).*duplicates delivered: ([0-9]+)', line)
    if not m:
        continue
    f = lambda v, u: float(v) / (1000 if u == 'ms' else 1)
    rows.setdefault(m.group(1), []).append((f(m.group(2), m.group(3)), f(m.group(4), m.group(5)), int(m.group(6))))
for kind, rs in rows.items():
    p = [r[0] for r in rs]; c = [r[1] for r in rs]; d = [r[2] for r in rs]
    print(f"{kind}: {len(rs)} runs; produce RTO median {statistics.median(p):.2f} s, max {max(p):.2f} s; "
          f"consume RTO median {statistics.median(c):.2f} s, max {max(c):.2f} s; duplicates median {statistics.median(d)}, max {max(d)}")
PY
if grep -q -- '--- FAIL' "$out"; then
  echo "a run failed: its whole output is in $out"
else
  rm -f "$out"
fi
