#!/usr/bin/env bash
# Two (or more) stripefs builds on one workload, alternating round by round so the machine's
# drift hits them alike: a fresh volume per run, one fio job (libaio, O_DIRECT), IOPS and the
# daemon's CPU per 100k I/Os (from /proc/PID/stat), medians of ROUNDS. The name `raw` in BINS
# runs the same job on a file of the store itself (no FUSE), the baseline of the issues' ratios.
#   BINS="/tmp/stripefs-before target/release/stripefs" scripts/ab.sh
#   BINS="..." STORE=/var/tmp/ab DEVICE_IO=direct BS=1M RW=write QD=1 scripts/ab.sh
# Knobs: STORE (emptied; tmpfs by default), DEVICES (count, 4), DEVICE_IO (buffered, or direct on a disk),
# TRANSPORT (dev or uring, or both: "dev uring" runs each build over each; uring needs
# /sys/module/fuse/parameters/enable_uring = Y), VARIANTS ('|'-separated [mount] lines: each
# build runs once per variant, e.g. VARIANTS='uring_threads = 0|uring_threads = 4'), EXTRA
# ([mount] lines, \n-separated), RW, BS, QD, RUNTIME (seconds), ROUNDS. Needs root and fio.
set -euo pipefail
BINS=${BINS:?BINS: the stripefs binaries to compare}
STORE=${STORE:-/dev/shm/stripefs-ab}
DEVICE_IO=${DEVICE_IO:-buffered}
TRANSPORT=${TRANSPORT:-dev}
EXTRA=${EXTRA:-}
VARIANTS=${VARIANTS:-}
IFS='|' read -r -a variants <<< "$VARIANTS"
[ ${#variants[@]} -gt 0 ] || variants=("")
DEVICES=${DEVICES:-4}
RW=${RW:-randread}
BS=${BS:-4k}
QD=${QD:-32}
RUNTIME=${RUNTIME:-4}
ROUNDS=${ROUNDS:-3}
command -v fio >/dev/null || { echo "fio is needed (apt-get install fio)" >&2; exit 1; }
mnt=$STORE/mnt
cleanup() {
  mountpoint -q "$mnt" && { umount "$mnt" 2>/dev/null || umount -l "$mnt"; }
  rm -rf "$STORE"
}
trap cleanup EXIT
declare -A runs
# A target is BIN@TRANSPORT#VARIANT (the variant's index).
targets=$(for bin in $BINS; do
  if [ "$bin" = raw ]; then echo raw; else
    for t in $TRANSPORT; do for v in "${!variants[@]}"; do echo "$bin@$t#$v"; done; done
  fi
done)
for round in $(seq "$ROUNDS"); do
  for target in $targets; do
    bin=${target%@*} transport=${target#*@} variant=${target#*#}
    transport=${transport%#*}
    rm -rf "$STORE"
    mkdir -p "$STORE" "$mnt"
    if [ "$bin" = raw ]; then
      file=$STORE/raw.f pid=
      dd if=/dev/urandom of="$file" bs=1M count=256 oflag=direct status=none
    else
      devs=$(for d in $(seq 0 $(( DEVICES - 1 ))); do mkdir -p "$STORE/d$d"; printf '"%s/d%s", ' "$STORE" "$d"; done)
      printf '[volume]\ndevices = [%s]\nstripe_size = "64K"\ndevice_io = "%s"\n[mount]\ntransport = "%s"\n%b\n' \
        "${devs%, }" "$DEVICE_IO" "$transport" "$EXTRA\n${variants[$variant]:-}" > "$STORE/vol.toml"
      "$bin" mkfs "$STORE/vol.toml" >/dev/null 2>&1
      "$bin" mount "$STORE/vol.toml" "$mnt" >/dev/null 2>&1
      file=$mnt/f
      dd if=/dev/urandom of="$file" bs=1M count=256 oflag=direct status=none
      pid=$(pgrep -f "mount $STORE/vol.toml" | head -1)
    fi
    cpu() { if [ -n "$pid" ]; then awk '{print $14 + $15}' "/proc/$pid/stat"; else echo 0; fi; }
    cpu0=$(cpu)
    iops=$(fio --name=ab --filename="$file" --size=256M --rw="$RW" --bs="$BS" --iodepth="$QD" \
      --numjobs=1 --ioengine=libaio --direct=1 --runtime="$RUNTIME" --time_based \
      --norandommap --randrepeat=0 --output-format=json 2>/dev/null |
      python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print("%.0f" % (j["read"]["iops"] + j["write"]["iops"]))')
    cpu1=$(cpu)
    runs[$target]="${runs[$target]:-} $iops/$(( cpu1 - cpu0 ))"
    [ "$bin" = raw ] || "$bin" umount "$mnt" >/dev/null 2>&1
    echo "round $round $target: $iops IOPS" >&2
  done
done
echo "$RW $BS Q$QD, $DEVICES devices, $TRANSPORT, device I/O $DEVICE_IO, $ROUNDS rounds of ${RUNTIME}s (median [rounds])"
for target in $targets; do
  label=$target
  [ "$target" = raw ] || [ -z "$VARIANTS" ] || label="$target (${variants[${target#*#}]})"
  python3 - "$label" "$RUNTIME" ${runs[$target]} <<'PY'
import statistics as st, sys
name, runtime, runs = sys.argv[1], float(sys.argv[2]), [r.split("/") for r in sys.argv[3:]]
iops = [float(i) for i, _ in runs]
# /proc/PID/stat counts clock ticks (100 a second): CPU-seconds per 100k I/Os.
cpu = [int(t) / 100 / runtime / max(i, 1) * 1e5 for i, (_, t) in zip(iops, runs)]
print(f"{name}: IOPS {st.median(iops):.0f} {[int(i) for i in iops]}  "
      f"daemon CPU-s/100k {st.median(cpu):.3f} {[round(c, 3) for c in cpu]}")
PY
done
