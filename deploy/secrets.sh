#!/usr/bin/env bash
# Writes the secrets deploy/docker-compose.yaml mounts into DIR (default deploy/secrets, ignored by
# git and docker): a CURVE key pair for the router and one per pool (router.key/.pub,
# worker-fast.key/.pub, worker-precise.key/.pub), the pools' public keys in DIR/authorized/ (the
# router's allow-list, a folder it reads at every handshake) and an API key (api-keys, one per
# line: clients send `Authorization: Bearer KEY`). Existing files are kept: running it again is
# harmless.
#   deploy/secrets.sh [DIR]                 create what is missing
#   deploy/secrets.sh --rotate NAME [DIR]   a new pair for NAME (worker-fast, worker-precise); the
#                                           old public key stays allowed as authorized/NAME.old.pub
#                                           until --retire, so running workers keep serving while
#                                           they are recreated with the new key
#   deploy/secrets.sh --retire NAME [DIR]   the old key of NAME is refused from now on
# Rotation on a running stack (docs/deployment.md, "Rotation"):
#   deploy/secrets.sh --rotate worker-fast
#   docker-compose -f deploy/docker-compose.yaml up -d --force-recreate --no-deps worker-fast
#   deploy/secrets.sh --retire worker-fast
# sol-keygen comes from PATH, else from build/tools, else from the sol:latest image (build it first:
# deploy/docker/images.sh or docker-compose build).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
action=create name=""
case "${1:-}" in
  -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
  --rotate|--retire)
    action=${1#--}; name=${2:-}
    case "$name" in
      worker-fast|worker-precise) ;;
      *) echo "deploy/secrets.sh: --$action takes worker-fast or worker-precise, not '$name' (the router's own pair: delete router.key and router.pub, run this again and recreate every service)" >&2; exit 2 ;;
    esac
    shift 2 ;;
  -*) echo "deploy/secrets.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
esac
dir=${1:-$here/secrets}
mkdir -p "$dir/authorized"
dir=$(cd "$dir" && pwd)

keygen() {
  if command -v sol-keygen >/dev/null; then
    sol-keygen "$@"
  elif [ -x "$here/../build/tools/sol-keygen" ]; then
    "$here/../build/tools/sol-keygen" "$@"
  elif command -v docker >/dev/null && docker image inspect sol:latest >/dev/null 2>&1; then
    docker run --rm --network none --user "$(id -u):$(id -g)" -v "$dir:$dir" sol:latest sol-keygen "$@"
  else
    echo "deploy/secrets.sh: no sol-keygen: build Sol (cmake), or the sol:latest image first (deploy/docker/images.sh, or docker-compose -f deploy/docker-compose.yaml build)" >&2
    exit 1
  fi
}
# Compose mounts file secrets as they are, and the images run as uid 10001: the 0600 secret files
# must be readable by that uid (owned by it when we are root, else an ACL entry; failing both,
# readable by all, which is said).
readable() {
  if [ "$(id -u)" = 0 ]; then
    chown 10001 "$1"
  elif ! { command -v setfacl >/dev/null && setfacl -m u:10001:r "$1"; }; then
    chmod 0644 "$1"
    echo "deploy/secrets.sh: $1 made readable by all (no root, no setfacl) so the containers' uid 10001 can read it" >&2
  fi
}
pair() { # NAME: a new key pair, its public key allowed
  keygen -d "$dir" "$1" >/dev/null
  readable "$dir/$1.key"
  [ "$1" = router ] || cp "$dir/$1.pub" "$dir/authorized/$1.pub"
}

case $action in
  rotate)
    # Replaced, not rewritten: a running container keeps the file it mounted (the old key) until
    # it is recreated; the old public key stays allowed meanwhile.
    [ -f "$dir/$name.pub" ] && cp "$dir/$name.pub" "$dir/authorized/$name.old.pub"
    rm -f "$dir/$name.key" "$dir/$name.pub"
    pair "$name"
    echo "rotated $name: recreate its containers (docker-compose -f deploy/docker-compose.yaml up -d --force-recreate --no-deps $name), then deploy/secrets.sh --retire $name"
    exit 0 ;;
  retire)
    rm -f "$dir/authorized/$name.old.pub"
    echo "retired the old key of $name: the router refuses it from the next handshake"
    exit 0 ;;
esac
for name in router worker-fast worker-precise; do
  [ -f "$dir/$name.key" ] || pair "$name"
  [ "$name" = router ] || [ -f "$dir/authorized/$name.pub" ] || cp "$dir/$name.pub" "$dir/authorized/"
done
if [ ! -f "$dir/api-keys" ]; then
  (umask 077 && echo "sk-$(head -c 24 /dev/urandom | base64 | tr -d '/+=')" >"$dir/api-keys")
fi
readable "$dir/api-keys"
echo "secrets in $dir: router, worker-fast and worker-precise key pairs (public keys allowed in authorized/); api-keys"
