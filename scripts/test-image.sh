#!/usr/bin/env bash
# make test-image (not in CI): builds the image (scripts/image.sh), runs
# `meridian standalone` in it, waits for docker's HEALTHCHECK (meridian
# health on /readyz) to say healthy, produces and consumes from the host
# with pulsar-client-go (meridian produce|consume) through the published
# port, checks it runs as the image's non-root user with /data its own, and
# that a restarted container keeps the messages (the /data volume). Starts
# dockerd if none answers and stops it after (by its PID).
set -euo pipefail
cd "$(dirname "$0")/.."
started_dockerd=
if ! docker info >/dev/null 2>&1; then
  dockerd >/tmp/meridian-test-image-dockerd.log 2>&1 &
  started_dockerd=$!
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
fi
name=meridian-test-image-$$
vol=meridian-test-image-$$
cleanup() {
  docker rm -f "$name" >/dev/null 2>&1 || true
  docker volume rm "$vol" >/dev/null 2>&1 || true
  if [ -n "$started_dockerd" ]; then kill "$started_dockerd"; wait "$started_dockerd" 2>/dev/null || true; fi
}
trap cleanup EXIT
t0=$(date +%s)
scripts/image.sh
go build -o bin/meridian ./cmd/meridian
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
admin=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
run() {
  docker run -d --name "$name" -v "$vol:/data" -p "127.0.0.1:$port:$port" -p "127.0.0.1:$admin:8080" meridian:latest \
    standalone --data-dir /data --listen "0.0.0.0:$port" --admin 0.0.0.0:8080 --advertise "127.0.0.1:$port" >/dev/null
  for i in $(seq 120); do
    st=$(docker inspect -f '{{.State.Health.Status}}' "$name")
    [ "$st" = healthy ] && { echo "healthy after ${i}s"; return 0; }
    [ "$(docker inspect -f '{{.State.Running}}' "$name")" = true ] || { docker logs "$name" | tail -30; echo "container exited"; return 1; }
    sleep 1
  done
  docker logs "$name" | tail -30; echo "not healthy after 120 s"; return 1
}
run
user=$(docker inspect -f '{{.Config.User}}' "$name")
uid=$(stat -c %u /proc/$(docker inspect -f '{{.State.Pid}}' "$name"))
[ "$user" = 65532:65532 ] && [ "$uid" = 65532 ] || { echo "runs as user $user (uid $uid), want 65532"; exit 1; }
bin/meridian health --url "http://127.0.0.1:$admin"
bin/meridian produce --url "pulsar://127.0.0.1:$port" --topic image-test --messages 20 --log-level warn >/dev/null
got=$(bin/meridian consume --url "pulsar://127.0.0.1:$port" --topic image-test --subscription s --count 10 --timeout 30s --log-level warn | wc -l)
[ "$got" -ge 10 ] || { echo "consumed $got of 10"; exit 1; }
docker rm -f "$name" >/dev/null
run
got=$(bin/meridian consume --url "pulsar://127.0.0.1:$port" --topic image-test --subscription s --count 10 --timeout 30s --log-level warn | wc -l)
[ "$got" -ge 10 ] || { echo "after a new container on the same volume: consumed $got of the other 10"; exit 1; }
echo "test-image: ok in $(( $(date +%s) - t0 )) s"
