#!/usr/bin/env bash
# fio randrw 70/30, 4K, Q16 over a 4-device volume (directories under /tmp) with a 64M RAM
# write-back cache of 4K lines, once per cleaning policy: hit ratio, dirty lines every 5 s and
# write-back MB/s from `stripefs stats --json`. Knobs: SFS (the binary), RUNTIME (s per policy).
set -u
B=${SFS:-$(pwd)/target/release/stripefs}
RT=${RUNTIME:-30}
R=/tmp/mixedrun
for policy in alru acp nop; do
  umount -l $R/mnt 2>/dev/null; rm -rf $R; mkdir -p $R/d0 $R/d1 $R/d2 $R/d3 $R/mnt
  cat > $R/vol.toml <<CFG
[volume]
devices = ["$R/d0", "$R/d1", "$R/d2", "$R/d3"]
stripe_size = "64K"
device_io = "direct"
[cache]
store = "ram"
size = "64M"
line_size = "4K"
mode = "wb"
[cache.cleaner]
policy = "$policy"
CFG
  $B mkfs $R/vol.toml >/dev/null 2>&1 && $B mount $R/vol.toml $R/mnt >/dev/null 2>&1 || { echo "mount failed"; exit 1; }
  fio --name=mix --filename=$R/mnt/f --size=256M --rw=randrw --rwmixread=70 --bs=4k --iodepth=16 \
      --ioengine=libaio --direct=1 --runtime=$RT --time_based --output-format=terse >/tmp/mixed-$policy.fio 2>&1 &
  FIO=$!
  samples=""
  for t in $(seq 5 5 $RT); do
    sleep 5
    d=$($B stats $R/mnt --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["cache"]["dirty_lines"])')
    samples="$samples $t s:$d"
  done
  wait $FIO
  $B stats $R/mnt --json > /tmp/mixed-$policy.json
  python3 - "$policy" "$RT" "$samples" <<'PY'
import json,sys
policy, rt, samples = sys.argv[1], float(sys.argv[2]), sys.argv[3]
s = json.load(open(f"/tmp/mixed-{policy}.json"))["cache"]
c = s["counters"]
reads = c["read_hits"] + c["read_partial_misses"] + c["read_full_misses"] + c["pass_through_reads"]
writes = c["write_hits"] + c["write_partial_misses"] + c["write_full_misses"] + c["pass_through_writes"]
hr = (c["read_hits"] + c["write_hits"]) / max(1, reads + writes)
wb = s["cleaned_lines"] * s["line_size"] / rt / 1e6
fio = open(f"/tmp/mixed-{policy}.fio").read().split(";")
riops, wiops = (fio[7], fio[48]) if len(fio) > 48 else ("?", "?")
print(f"| {policy} | {hr:.3f} | {c['read_hits']}/{reads} | {c['write_hits']}/{writes} | {wb:.1f} | {samples.strip()} | {riops} / {wiops} |")
PY
  $B umount $R/mnt >/dev/null 2>&1
done
