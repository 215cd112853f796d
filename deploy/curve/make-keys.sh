#!/bin/sh
# Make the data plane's CURVE keys once, for docker-compose.yml's `keys` service, into two
# directories so that no container gets a secret it does not need:
#
#   $KEYS_SERVER (the learner and the weightservers): server.key_secret, server.key, and
#                allowed/actor-0.key, the allow-list
#   $KEYS_ACTOR  (the actors):  actor-0.key_secret, their key pair, and server.key
#
# Every replica of the compose actor service mounts the same actor key pair: they are one
# trust domain (docs/guides/security.md). Keys that exist are kept, so a restart, a second `up`
# or an actor host with keys copied in changes nothing: delete the volumes (`docker
# compose down -v`) to make new ones. server.key_secret is written last, so its presence
# means the keys are complete.
set -eu

server=${KEYS_SERVER:?set KEYS_SERVER to the servers\' key directory}
actor=${KEYS_ACTOR:?set KEYS_ACTOR to the actors\' key directory}

if [ -e "$server/server.key_secret" ]; then
    echo "make-keys: keeping the CURVE keys in $server and $actor"
    exit 0
fi
umask 077
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ppomq-keys.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
ppomq keys generate --out "$tmp/k" --actors 1 >/dev/null
mkdir -p "$server/allowed" "$actor"
cp "$tmp/k/actors/actor-0.key_secret" "$tmp/k/server.key" "$actor/"
cp "$tmp/k/allowed/actor-0.key" "$server/allowed/"
cp "$tmp/k/server.key" "$server/"
cp "$tmp/k/server.key_secret" "$server/"
echo "make-keys: wrote new CURVE keys to $server and $actor"
