#!/usr/bin/env bash
# Writes the secrets deploy/docker-compose.yaml mounts (Compose `secrets:`) into DIR
# (default deploy/secrets, ignored by git and docker): a CURVE key pair for the router and one per
# pool (router.key/.pub, worker-fast.key/.pub, worker-precise.key/.pub) and an API key (api-keys,
# one per line: clients send `Authorization: Bearer KEY`). Existing files are kept, so running it
# again is harmless; delete a file and run it again to rotate that secret (docs/deployment.md).
# sol-keygen comes from PATH, else from build/tools, else from the sol:latest image.
# usage: deploy/secrets.sh [DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/secrets}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if command -v sol-keygen >/dev/null; then
    keygen=(sol-keygen)
elif [ -x "$here/../build/tools/sol-keygen" ]; then
    keygen=("$here/../build/tools/sol-keygen")
elif command -v docker >/dev/null; then
    keygen=(docker run --rm --user "$(id -u):$(id -g)" -v "$dir:$dir" sol:latest sol-keygen)
else
    echo "deploy/secrets.sh: no sol-keygen (build Sol, or build the sol:latest image)" >&2
    exit 1
fi
for name in router worker-fast worker-precise; do
    [ -f "$dir/$name.key" ] || "${keygen[@]}" -d "$dir" "$name" >/dev/null
done
if [ ! -f "$dir/api-keys" ]; then
    (umask 077 && echo "sk-$(head -c 24 /dev/urandom | base64 | tr -d '/+=')" >"$dir/api-keys")
fi
# Compose mounts file secrets as they are, and the images run as uid 10001: the 0600 secret files
# must be readable by that uid (owned by it when we are root, else an ACL entry; failing both,
# readable by all, which is said).
for f in "$dir"/*.key "$dir/api-keys"; do
    if [ "$(id -u)" = 0 ]; then
        chown 10001 "$f"
    elif ! { command -v setfacl >/dev/null && setfacl -m u:10001:r "$f"; }; then
        chmod 0644 "$f"
        echo "deploy/secrets.sh: $f made readable by all (no root, no setfacl) so the containers' uid 10001 can read it" >&2
    fi
done
echo "secrets in $dir: router, worker-fast and worker-precise key pairs; api-keys"
