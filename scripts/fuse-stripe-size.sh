#!/usr/bin/env bash
# Where FUSE's per-request cost overtakes striping: `stripefs bench sweep` over REAL
# directories (no emulation), once on tmpfs and once on the ext4 disk, stripe sizes 8K..256K
# and 1, 2 and 4 devices, every CDM8 profile. Each run writes its CSV, chart and heat map, and
# prints the table "where more devices stop helping" (MB/s of 4 devices over 1 per stripe
# size, and the largest size with under 10 % gain). Takes 3 x 6 x 8 tests of DURATION per
# place: about 12 minutes at the default 5 s; run it on an otherwise idle machine.
# Knobs: SFS (the binary), DURATION, RUNS (runs per test, the median kept), SIZE (test file),
# PROFILE, DISK (a folder on ext4), OUT (where the results go), WHERE ("tmpfs ext4", or one).
set -eu
B=${SFS:-$(pwd)/target/release/stripefs}
DURATION=${DURATION:-5s}
RUNS=${RUNS:-1}
SIZE=${SIZE:-256M}
PROFILE=${PROFILE:-cdm8}
DISK=${DISK:-/var/tmp/stripefs-finding}
OUT=${OUT:-$(pwd)/fuse-stripe-size}
WHERE=${WHERE:-tmpfs ext4}
RAM=/tmp/stripefs-finding-ram
mkdir -p "$OUT"
cleanup() { umount "$RAM" 2>/dev/null || true; rm -rf "$DISK"; }
trap cleanup EXIT
for where in $WHERE; do
  case $where in
    tmpfs) mkdir -p "$RAM"; mount -t tmpfs -o size=4G,mode=0700 tmpfs "$RAM"; root=$RAM ;;
    ext4) mkdir -p "$DISK"; root=$DISK ;;
    *) echo "WHERE: tmpfs or ext4, not $where" >&2; exit 2 ;;
  esac
  devs=""
  for i in 0 1 2 3; do mkdir -p "$root/d$i"; devs="$devs${devs:+,}$root/d$i"; done
  # tmpfs takes no O_DIRECT: its devices are read and written buffered (said in the header).
  io=direct; [ "$where" = tmpfs ] && io=buffered
  echo "##### $where ($root), device I/O $io"
  "$B" bench sweep --devices "$devs" --stripe-sizes 8K,16K,32K,64K,128K,256K --widths 1,2,4 \
    --device-io "$io" --profile "$PROFILE" --size "$SIZE" --duration "$DURATION" --runs "$RUNS" \
    --csv "$OUT/$where.csv" --chart "$OUT/$where.svg" | tee "$OUT/$where.txt"
  [ "$where" = tmpfs ] && umount "$RAM"
done
echo "results in $OUT: per place a CSV (and .jsonl), a chart, a heat map and the table"
