#!/usr/bin/env bash
# tests/gpu/bare_root.sh BUNDLE: proves a bundle from tests/gpu/bundle.sh self-contained: in a bare
# Debian root (debootstrap --variant=minbase bookworm, kept as a tarball in
# ${SOL_BARE_ROOT_CACHE:-~/.cache/sol} between runs), which has none of Sol's build dependencies,
#   - every bundled binary resolves all its libraries (the CUDA module all but CUDA's own), while
#     a binary of the ordinary build does not (the root really lacks them: the check can fail);
#   - sol-generate runs a model on --backend cpu and --backend cuda-emu with the same greedy ids,
#     also through the bundled glibc's loader (run.sh's fallback for an older host glibc);
#   - --backend cuda says in one line, exit 2, that there is no driver, and with a stand-in
#     driver library, that the CUDA runtime is missing and where it was looked for.
# Needs root (chroot, mount). Run by .ci/run.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: tests/gpu/bare_root.sh BUNDLE" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bare_root.sh: needs root (chroot, mount)" >&2; exit 2; }
BUNDLE=$(cd "$1" && pwd)
cache=${SOL_BARE_ROOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sol}
base=$cache/bare-bookworm-minbase.tar
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -p "$cache"
if [ ! -f "$base" ]; then
  command -v debootstrap >/dev/null || apt-get install -y --no-install-recommends debootstrap
  echo "bare_root: debootstrap --variant=minbase bookworm (once; kept in $base)"
  tmp=$(mktemp -d)
  debootstrap --variant=minbase bookworm "$tmp" http://deb.debian.org/debian >/dev/null
  tar -C "$tmp" -cf "$base.part" . && mv "$base.part" "$base"
  rm -rf "$tmp"
fi
root=$(mktemp -d /tmp/sol-bare-XXXXXX)
cleanup() {
  umount "$root/proc" 2>/dev/null || true
  case "$root" in /tmp/sol-bare-*) rm -rf "$root" ;; esac
}
trap cleanup EXIT
tar -C "$root" -xf "$base"
mount -t proc proc "$root/proc"
cp -a "$BUNDLE" "$root/bundle"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root "$@"; }

# The root lacks what Sol builds against: a binary of the ordinary build does not resolve there.
for lib in libzmq.so.5 libjansson.so.4 libyaml-0.so.2 libprotobuf-c.so.1; do
  [ ! -e "$root/usr/lib/x86_64-linux-gnu/$lib" ] || fail "the bare root has $lib: not bare"
done
mkdir -p "$root/plain"
plain=${SOL_BUILD:-$(dirname "$0")/../../build}/worker/sol-worker
[ -x "$plain" ] || fail "no ordinary build's sol-worker at $plain for the negative check (SOL_BUILD)"
cp "$plain" "$root/plain/"
unresolved=$(in_root ldd /plain/sol-worker | grep -c "not found" || true)
[ "$unresolved" -gt 0 ] ||
  fail "an unbundled sol-worker resolves every library in the bare root: the check cannot fail"
echo "ok: an unbundled sol-worker does not resolve there ($unresolved libraries missing)"

for f in "$root"/bundle/bin/* "$root/bundle/lib/sol/libsol-cuda.so"; do
  rel=/bundle/${f#"$root"/bundle/}
  out=$(in_root ldd "$rel")
  missing=$(grep "not found" <<<"$out" | grep -Ev 'lib(cudart|cublasLt|cublas|nccl)\.so' || true)
  [ -z "$missing" ] || fail "$rel does not resolve in the bare root: $missing"
done
echo "ok: every bundled binary resolves its libraries ($(ls "$root/bundle/bin" | wc -l) binaries, the CUDA module)"

in_root /bundle/bin/sol-mkmodel -o /tmp/t.gguf --preset tiny --type q8_0 --seed 7 >/dev/null 2>&1
gen() { in_root "$@" -m /tmp/t.gguf --prompt-tokens 5,9,13,2 -n 8 --temp 0 --tokens; }
cpu=$(gen /bundle/bin/sol-generate --backend cpu 2>/dev/null)
emu=$(gen /bundle/bin/sol-generate --backend cuda-emu 2>/dev/null)
[ "$(wc -l <<<"$cpu")" = 8 ] || fail "--backend cpu gave: $cpu"
[ "$cpu" = "$emu" ] || fail "cuda-emu ids differ from cpu: $(echo $emu) vs $(echo $cpu)"
ld=(/bundle/lib/glibc/ld-linux-x86-64.so.2 --library-path /bundle/lib/glibc:/bundle/lib)
via=$(gen "${ld[@]}" /bundle/bin/sol-generate --backend cuda-emu 2>/dev/null)
[ "$cpu" = "$via" ] || fail "through the bundled glibc: $(echo $via)"
echo "ok: sol-generate in the bare root: cpu and cuda-emu give the same 8 ids ($(echo $cpu)), also through the bundled glibc"
in_root /bundle/bin/sol-worker --help >/dev/null || fail "sol-worker --help"

expect() { # exit status, pattern, command... (in the root)
  local want=$1 pat=$2 rc=0
  shift 2
  in_root "$@" >/dev/null 2>"$root/err" || rc=$?
  [ "$rc" = "$want" ] || fail "$* exited $rc, not $want: $(cat "$root/err")"
  [ "$(wc -l <"$root/err")" = 1 ] || fail "$*: not one line: $(cat "$root/err")"
  grep -Eq "$pat" "$root/err" || fail "$*: unclear: $(cat "$root/err")"
  echo "ok: $(cat "$root/err")"
}
expect 2 "backend cuda: no NVIDIA driver: the driver's library \(libcuda\.so\.1\) was not found" \
  /bundle/bin/sol-generate -m /tmp/t.gguf --backend cuda --prompt-tokens 1 -n 1
mkdir -p "$root/fake"
echo 'int sol_fake_driver;' >"$root/fake/f.c"
cc -shared -fPIC -o "$root/fake/libcuda.so.1" "$root/fake/f.c"
expect 2 "the CUDA runtime \(libcudart\.so\.13\) was not found: looked in SOL_CUDA_LIB_PATH \(/fake\)" \
  env SOL_CUDA_LIB_PATH=/fake /bundle/bin/sol-generate -m /tmp/t.gguf --backend cuda \
  --prompt-tokens 1 -n 1
echo "bare_root: ok"
