#!/usr/bin/env bash
# Builds Sol's container images with a real Docker engine and no registry: the Debian base that the
# Dockerfiles' FROM lines name, made once by debootstrap and imported, then the images themselves.
#   deploy/docker/images.sh [--cuda BUNDLE] [--rebuild-base]
#     base   debootstrap --variant=minbase bookworm, slimmed (no docs, man pages or locales, and a
#            dpkg rule so that later installs add none), imported as debian:bookworm-slim and
#            tagged debian:bookworm (the build stage's FROM). The root is cached as a tarball in
#            ${SOL_BASE_CACHE:-~/.cache/sol} and reused while the image exists.
#     sol    docker build -f deploy/docker/Dockerfile -t sol:latest (the repository is the context)
#     --cuda BUNDLE  sol-cuda:latest instead, from deploy/docker/Dockerfile.cuda: the GPU bundle
#            of tests/gpu/bundle.sh BUNDLE and the CUDA runtime libraries of $CUDA_HOME
#            (/usr/local/cuda) staged as its context (docs/deployment.md, "GPU")
# Prints each image's size. Needs a running Docker engine (scripts/docker-engine start).
set -euo pipefail
cd "$(dirname "$0")/../.."
bundle="" rebuild=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda)
      [ -n "${2:-}" ] || { echo "images.sh: --cuda needs the bundle folder (tests/gpu/bundle.sh DIR)" >&2; exit 2; }
      bundle=$2; shift ;;
    --rebuild-base) rebuild=1 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "images.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
docker info >/dev/null 2>&1 || { echo "images.sh: no Docker engine answers (start one: scripts/docker-engine start)" >&2; exit 2; }
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
cache=${SOL_BASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sol}
tarball=$cache/docker-base-bookworm-slim.tar
mib() { docker image inspect -f '{{.Size}}' "$1" | awk '{printf "%.0f MiB", $1 / 1048576}'; }

base() {
  if [ "$rebuild" = 0 ] && docker image inspect debian:bookworm-slim >/dev/null 2>&1; then return; fi
  if [ "$rebuild" = 1 ] || [ ! -f "$tarball" ]; then
    command -v debootstrap >/dev/null || $SUDO apt-get install -y -qq --no-install-recommends debootstrap
    mkdir -p "$cache"
    root=$(mktemp -d /tmp/sol-base-XXXXXX)
    echo "images: debootstrap --variant=minbase bookworm (a few minutes, once)"
    $SUDO debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null
    # Slim as Debian's -slim images are: what dpkg would install under these paths is skipped
    # from now on, and what debootstrap put there goes now (copyrights stay: licences).
    $SUDO tee "$root/etc/dpkg/dpkg.cfg.d/sol-slim" >/dev/null <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/i18n/*
EOF
    $SUDO find "$root/usr/share/doc" -type f ! -name copyright -delete
    $SUDO rm -rf "$root"/usr/share/{man,info,locale,i18n}/* "$root"/var/cache/apt/archives/*.deb \
      "$root"/var/lib/apt/lists/*
    printf 'deb http://deb.debian.org/debian bookworm main\ndeb http://deb.debian.org/debian bookworm-updates main\ndeb http://deb.debian.org/debian-security bookworm-security main\n' |
      $SUDO tee "$root/etc/apt/sources.list" >/dev/null
    $SUDO tar -C "$root" --numeric-owner -cf "$tarball.part" . && $SUDO mv "$tarball.part" "$tarball"
    $SUDO rm -rf "$root"
  fi
  docker import -c 'CMD ["bash"]' "$tarball" debian:bookworm-slim >/dev/null
  docker tag debian:bookworm-slim debian:bookworm
  echo "images: debian:bookworm-slim (also tagged debian:bookworm): $(mib debian:bookworm-slim)"
}

build() { # TAG DOCKERFILE [CONTEXT]
  local t0=$SECONDS
  echo "images: docker build -t $1 -f $2 ${3:-.}"
  DOCKER_BUILDKIT=0 docker build -t "$1" -f "$2" "${3:-.}"
  echo "images: $1: $(mib "$1") (built in $((SECONDS - t0)) s)"
}

cuda_context() { # the bundle and the CUDA runtime libraries, copied into a temporary context
  local cuda=${CUDA_HOME:-/usr/local/cuda} l f
  [ -x "$bundle/bin/sol-worker" ] && [ -f "$bundle/lib/sol/libsol-cuda.so" ] ||
    { echo "images.sh: $bundle is not a GPU bundle (tests/gpu/bundle.sh $bundle)" >&2; exit 2; }
  ctx=$(mktemp -d /tmp/sol-cuda-ctx-XXXXXX)
  mkdir -p "$ctx/cuda"
  cp -a "$bundle" "$ctx/bundle"
  for l in libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libnccl.so.2; do
    f=$(find -L "$cuda/lib64" "$cuda/lib" -maxdepth 1 -name "$l" 2>/dev/null | sed -n 1p)
    [ -n "$f" ] || { echo "images.sh: $l not found under $cuda" >&2; exit 2; }
    cp -L "$f" "$ctx/cuda/$l"
  done
}

base
if [ -n "$bundle" ]; then
  cuda_context
  trap 'rm -rf "$ctx"' EXIT
  build sol-cuda:latest "$PWD/deploy/docker/Dockerfile.cuda" "$ctx"
else
  build sol:latest deploy/docker/Dockerfile
fi
