#!/usr/bin/env bash
# Two (or more) stripefs builds on one workload, alternating round by round so the machine's
# drift hits them alike: a fresh volume per run, one fio job (libaio, O_DIRECT), IOPS and the
# daemon's CPU per 100k I/Os (from /proc/PID/stat), medians of ROUNDS. The name `raw` in BINS
# runs the same job on a file of the store itself (no FUSE), the baseline of the issues' ratios
# (O_DIRECT on tmpfs needs Linux 6.6+).
#   BINS="/tmp/stripefs-before target/release/stripefs" scripts/ab.sh
#   BINS="raw ..." STORE=/var/tmp/ab DEVICE_IO=direct BS=1M RW=write QD=1 scripts/ab.sh
# Knobs: STORE (emptied; tmpfs by default), DEVICES (count, 4), DEVICE_IO (buffered, or direct
# on a disk), TRANSPORT (dev or uring, or both: "dev uring" runs each build over each; uring
# needs /sys/module/fuse/parameters/enable_uring = Y), VARIANTS ('|'-separated [mount] lines:
# each build runs once per variant, e.g. VARIANTS='uring_threads = 0|uring_depth = 64'), EXTRA
# ([mount] lines for every run, \n-separated), RW, BS, QD, RUNTIME (seconds), ROUNDS, FIO_CPUS
# (fio's cpus_allowed, e.g. 0: the load kept to one CPU, as `stripefs bench --cpus`).
# Needs root and fio.
set -euo pipefail
BINS=${BINS:?BINS: the stripefs binaries to compare}
STORE=${STORE:-/dev/shm/stripefs-ab}
DEVICES=${DEVICES:-4}
DEVICE_IO=${DEVICE_IO:-buffered}
TRANSPORT=${TRANSPORT:-dev}
EXTRA=${EXTRA:-}
VARIANTS=${VARIANTS:-}
RW=${RW:-randread}
BS=${BS:-4k}
QD=${QD:-32}
RUNTIME=${RUNTIME:-4}
FIO_CPUS=${FIO_CPUS:-}
ROUNDS=${ROUNDS:-3}
command -v fio >/dev/null || { echo "fio is needed (apt-get install fio)" >&2; exit 1; }
IFS='|' read -r -a variants <<< "$VARIANTS"
[ ${#variants[@]} -gt 0 ] || variants=("")
mnt=$STORE/mnt
cleanup() {
  mountpoint -q "$mnt" && { umount "$mnt" 2>/dev/null || umount -l "$mnt"; }
  rm -rf "$STORE"
}
trap cleanup EXIT

# The targets, by index: a build (or raw) over a transport with a variant.
tbin=() ttransport=() tvariant=() tlabel=() truns=()
for bin in $BINS; do
  if [ "$bin" = raw ]; then
    tbin+=(raw) ttransport+=(-) tvariant+=(0) tlabel+=(raw) truns+=("")
    continue
  fi
  for t in $TRANSPORT; do
    for v in "${!variants[@]}"; do
      label="$bin@$t"
      [ -z "$VARIANTS" ] || label="$label (${variants[$v]})"
      tbin+=("$bin") ttransport+=("$t") tvariant+=("$v") tlabel+=("$label") truns+=("")
    done
  done
done

# The daemon's CPU ticks so far (0 for raw).
ticks() { if [ -n "$pid" ]; then awk '{print $14 + $15}' "/proc/$pid/stat"; else echo 0; fi; }

# Runs a stripefs command, showing its output only when it fails.
quiet() {
  local out
  out=$("$@" 2>&1) || { echo "$* failed:" >&2; echo "$out" >&2; return 1; }
}

for round in $(seq "$ROUNDS"); do
  for i in "${!tbin[@]}"; do
    bin=${tbin[$i]}
    rm -rf "$STORE"
    mkdir -p "$STORE" "$mnt"
    pid=
    if [ "$bin" = raw ]; then
      file=$STORE/raw.f
    else
      devs=$(for d in $(seq 0 $(( DEVICES - 1 ))); do
        mkdir -p "$STORE/d$d"; printf '"%s/d%s", ' "$STORE" "$d"; done)
      printf '[volume]\ndevices = [%s]\nstripe_size = "64K"\ndevice_io = "%s"\n[mount]\ntransport = "%s"\n%b\n%b\n' \
        "${devs%, }" "$DEVICE_IO" "${ttransport[$i]}" "$EXTRA" "${variants[${tvariant[$i]}]}" \
        > "$STORE/vol.toml"
      quiet "$bin" mkfs "$STORE/vol.toml"
      quiet "$bin" mount "$STORE/vol.toml" "$mnt"
      file=$mnt/f
      pid=$(pgrep -f "mount $STORE/vol.toml" | head -1)
    fi
    dd if=/dev/urandom of="$file" bs=1M count=256 oflag=direct status=none
    cpu0=$(ticks)
    iops=$(fio --name=ab --filename="$file" --size=256M --rw="$RW" --bs="$BS" --iodepth="$QD" \
      --numjobs=1 --ioengine=libaio --direct=1 --runtime="$RUNTIME" --time_based \
      --norandommap --randrepeat=0 ${FIO_CPUS:+--cpus_allowed=$FIO_CPUS} --output-format=json 2>/dev/null |
      python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print("%.0f" % (j["read"]["iops"] + j["write"]["iops"]))')
    cpu1=$(ticks)
    truns[$i]="${truns[$i]} $iops/$(( cpu1 - cpu0 ))/${pid:-none}"
    [ "$bin" = raw ] || quiet "$bin" umount "$mnt"
    echo "round $round ${tlabel[$i]}: $iops IOPS" >&2
  done
done
echo "$RW $BS Q$QD, $DEVICES devices, transport $TRANSPORT, device I/O $DEVICE_IO, $ROUNDS rounds of ${RUNTIME}s (median [rounds])${FIO_CPUS:+, fio on CPU $FIO_CPUS}"
for i in "${!tbin[@]}"; do
  # shellcheck disable=SC2086 # one argument per run
  python3 - "${tlabel[$i]}" "$RUNTIME" ${truns[$i]} <<'PY'
import statistics as st, sys
name, runtime, runs = sys.argv[1], float(sys.argv[2]), [r.split("/") for r in sys.argv[3:]]
iops = [float(i) for i, _, _ in runs]
line = f"{name}: IOPS {st.median(iops):.0f} {[int(i) for i in iops]}"
if runs[0][2] != "none":
    # /proc/PID/stat counts clock ticks (100 a second): CPU-seconds per 100k I/Os.
    cpu = [int(t) / 100 / runtime / max(i, 1) * 1e5 for i, (_, t, _) in zip(iops, runs)]
    line += f"  daemon CPU-s/100k {st.median(cpu):.3f} {[round(c, 3) for c in cpu]}"
print(line)
PY
done
