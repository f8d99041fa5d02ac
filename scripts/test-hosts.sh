#!/usr/bin/env bash
# make test-hosts (not in CI): builds the image (scripts/image.sh), makes
# the deployment's secrets (deploy/compose/init.sh: certificates, token key
# and token, gossip key), starts deploy/compose/docker-compose.yml (two
# regions and the witness, 17 containers) and runs its test from the host
# (deploy/compose/hosts_test.go, build tag hosts: pulsar-client-go through
# the brokers' external listener). The deployment and its volumes are
# removed after, unless KEEP=1. Starts dockerd if none answers and stops it
# after (by its PID), as scripts/test-image.sh does. Figures: RESULT lines,
# also in bin/test-hosts-results.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
started_dockerd=
if ! docker info >/dev/null 2>&1; then
  dockerd >/tmp/meridian-test-hosts-dockerd.log 2>&1 &
  started_dockerd=$!
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
fi
compose=(docker-compose -f deploy/compose/docker-compose.yml -p meridian)
cleanup() {
  if [ "${KEEP:-}" != 1 ]; then "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true; fi
  if [ -n "$started_dockerd" ]; then kill "$started_dockerd"; wait "$started_dockerd" 2>/dev/null || true; fi
}
trap cleanup EXIT
t0=$(date +%s)
scripts/image.sh
go build -o bin/meridian ./cmd/meridian
deploy/compose/init.sh bin/meridian >/dev/null
"${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
"${compose[@]}" up -d
mkdir -p bin
rm -f bin/test-hosts-results.txt
if ! HOSTS_RESULTS=$PWD/bin/test-hosts-results.txt go test -tags hosts -count=1 -v -timeout 30m -run "${HOSTS_RUN:-TestHosts}" ./deploy/compose/; then
  for c in $("${compose[@]}" ps -q); do n=$(docker inspect -f '{{.Name}}' "$c"); echo "== ${n#/}"; docker logs --tail 20 "$c" 2>&1; done
  exit 1
fi
cat bin/test-hosts-results.txt
echo "test-hosts: ok in $(( $(date +%s) - t0 )) s"
