#!/usr/bin/env bash
# Makes deploy/compose/secrets/ (not in git; .gitignore): the deployment's
# CA and a certificate per container (meridian admin tls create-cert: the
# code `meridian up --tls` uses), each naming the container's role (as
# `up --tls` issues them: a bookie takes ledger operations only from a
# broker's certificate), its hostname,
# localhost and 127.0.0.1 (the brokers' external listener, where the
# host's clients reach them, and each container's own health probe); the token secret key, a super-user token
# (admin.token) and the gossip key. Files that are there are kept. They
# are made readable by the image's user (65532) only.
#   deploy/compose/init.sh [MERIDIAN_BINARY]      # default: bin/meridian, built if missing
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:-$root/bin/meridian}
[ -x "$bin" ] || (cd "$root" && go build -o bin/meridian ./cmd/meridian)
dir=$here/secrets
mkdir -p "$dir"
# Every certificate names localhost and 127.0.0.1 too: the container's
# HEALTHCHECK probes its own https://127.0.0.1:PORT.
cert() { "$bin" admin tls create-cert --dir "$dir" "$@" --host localhost,127.0.0.1 >/dev/null; }
for r in east west; do
  cert --name "$r-etcd" --region "$r" --role etcd --host "$r-etcd"
  cert --name "global-$r" --region "$r" --role etcd --host "global-$r"
  for i in 1 2 3 4; do cert --name "$r-bookie-$i" --region "$r" --role bookie --host "$r-bookie-$i"; done
  for i in 1 2; do cert --name "$r-broker-$i" --region "$r" --role broker --host "$r-broker-$i"; done
done
cert --name witness --role etcd --host witness
cert --name client          # tools: etcd asks every client for a certificate
[ -s "$dir/token-secret.key" ] || "$bin" admin tokens create-secret-key --output "$dir/token-secret.key"
[ -s "$dir/admin.token" ] || "$bin" admin tokens create --secret-key "file://$dir/token-secret.key" --subject admin > "$dir/admin.token"
[ -s "$dir/gossip.key" ] || "$bin" admin gossip keygen > "$dir/gossip.key"
chmod 0600 "$dir"/*
chown -R 65532:65532 "$dir" 2>/dev/null || echo "init.sh: not root: chown $dir to 65532 (the image's user) yourself" >&2
echo "$dir"
