#!/usr/bin/env bash
# What each pulsar-client-go setting buys when a region dies silently
# (issue 32): the drill region-blackhole-default-client (every east
# process SIGSTOPped for 188 s, 200 msgs/s, the multi-region service URL)
# run once per client setting — the client's defaults, each setting
# alone, and the recommended set — and a table of the produce and
# consume RTO, lost and duplicated messages (docs/georep.md).
#   make bench-client-rto          (~45 min)
#   ONLY="defaults recommended" scripts/client-rto.sh
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/meridian ./cmd/meridian
out=${OUT:-drill-out/client-rto}
mkdir -p "$out"
declare -A settings=(
  [defaults]="defaults: true"
  [connection_timeout=2s]="defaults: true, connection_timeout: 2s"
  [keep_alive_interval=1s]="defaults: true, keep_alive_interval: 1s"
  [keep_alive_interval=5s]="defaults: true, keep_alive_interval: 5s"
  [operation_timeout=5s]="defaults: true, operation_timeout: 5s"
  [send_timeout=5s]="defaults: true, send_timeout: 5s"
  [keep_alive_interval=1s+operation_timeout=5s]="defaults: true, keep_alive_interval: 1s, operation_timeout: 5s"
  [recommended]="connection_timeout: 2s, keep_alive_interval: 1s, operation_timeout: 5s"
)
order=(defaults connection_timeout=2s keep_alive_interval=1s keep_alive_interval=5s operation_timeout=5s send_timeout=5s keep_alive_interval=1s+operation_timeout=5s recommended)
[ -n "${ONLY:-}" ] && read -r -a order <<<"$ONLY"
for name in "${order[@]}"; do
  f="$out/$name.yaml"
  sed "s|client: {defaults: true}|client: {${settings[$name]}}|" scenarios/region-blackhole-default-client.yaml >"$f"
  echo "== $name: client {${settings[$name]}}"
  ./bin/meridian drill "$f" --out "$out/$name" | tail -n +1 | grep -E 'rto|lost|duplicates|report' || true
done
python3 - "$out" "${order[@]}" <<'PY'
import json, sys, os
out, names = sys.argv[1], sys.argv[2:]
print("| client settings | produce RTO | consume RTO | failed sends | lost | duplicates |")
print("|---|---:|---:|---:|---:|---:|")
for n in names:
    p = os.path.join(out, n, "report.json")
    try:
        r = json.load(open(p))
    except Exception as e:
        print(f"| {n} | no report ({e}) | | | | |"); continue
    c = r["result"]
    f = c["faults"][0]  # the pause (the second fault is the resume)
    print(f"| {n} | {f['produce_rto']:.1f} s | {f['consume_rto']:.1f} s | {c['failed']} | {c['lost']} | {c['duplicates']} |")
PY
