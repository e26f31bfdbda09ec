#!/usr/bin/env bash
# The FUSE transports side by side: the raw directory, then three 4-device volumes over it
# (/dev/fuse, and FUSE over io_uring twice: A and B, e.g. two settings or two binaries),
# measured interleaved by `stripefs bench compare` (fio libaio, O_DIRECT, medians of RUNS).
#   STORE=/var/tmp/tc RUNS=3 scripts/transport-compare.sh
#   B_EXTRA='uring_threads = 1' scripts/transport-compare.sh       # a setting, A vs B
#   A_BIN=/tmp/stripefs-before scripts/transport-compare.sh         # a change, before vs after
# Knobs: STORE (a directory on the disk or tmpfs to test; emptied), DEVICE_IO (direct, or
# buffered on tmpfs), RUNS, DURATION, SIZE, PROFILE, SFS (binary for /dev/fuse and B), A_BIN,
# A_EXTRA, B_EXTRA ([mount] lines). Needs root and fio. The kernel's enable_uring is switched on
# for the run and put back afterwards.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
SFS=${SFS:-$root/target/release/stripefs}
A_BIN=${A_BIN:-$SFS}
STORE=${STORE:-/var/tmp/stripefs-transports}
RUNS=${RUNS:-3}
DURATION=${DURATION:-4s}
SIZE=${SIZE:-256M}
PROFILE=${PROFILE:-cdm8}
DEVICE_IO=${DEVICE_IO:-direct}
param=/sys/module/fuse/parameters/enable_uring
[ -x "$SFS" ] || { echo "build first: cargo build --release" >&2; exit 1; }
[ -w "$param" ] || { echo "$param is not writable: FUSE over io_uring cannot be switched on" >&2; exit 1; }
was=$(cat "$param")
mounted=()
cleanup() {
  for m in "${mounted[@]}"; do "$SFS" umount "$m" || umount -l "$m"; done
  echo "$was" > "$param"
  rm -rf "$STORE"
}
trap cleanup EXIT
rm -rf "$STORE"
mkdir -p "$STORE/raw"
echo Y > "$param"
volume() { # name transport binary extra-lines
  local d=$STORE/$1
  mkdir -p "$d"/d{0,1,2,3} "$STORE/mnt-$1"
  printf '[volume]\ndevices = ["%s/d0", "%s/d1", "%s/d2", "%s/d3"]\nstripe_size = "64K"\ndevice_io = "%s"\n[mount]\ntransport = "%s"\n%b\n' \
    "$d" "$d" "$d" "$d" "$DEVICE_IO" "$2" "$4" > "$d.toml"
  "$3" mkfs "$d.toml" >/dev/null
  "$3" mount "$d.toml" "$STORE/mnt-$1"
  mounted+=("$STORE/mnt-$1")
}
volume dev dev "$SFS" ""
volume uring-a uring "$A_BIN" "${A_EXTRA:-}"
volume uring-b uring "$SFS" "${B_EXTRA:-}"
"$SFS" bench compare "$STORE/raw" "$STORE/mnt-dev" "$STORE/mnt-uring-a" "$STORE/mnt-uring-b" \
  --size "$SIZE" --duration "$DURATION" --runs "$RUNS" --profile "$PROFILE"
