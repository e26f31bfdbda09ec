#!/usr/bin/env bash
# RAM-cache read hits against the FUSE ceiling: fio RND4K Q32T1 randread (libaio, direct, 4 s)
# on a 4-device stripefs volume over tmpfs with a 512M RAM write-back cache of 4K lines whose
# 256M file is all cached (every read a hit), interleaved per round with libfuse's
# passthrough_hp --nopassthrough over the raw tmpfs directory. Prints IOPS per round, the
# medians and the cache's hit count. Knobs: SFS (binaries, space-separated: compared in one
# run), PT (passthrough_hp), ROUNDS, RUNTIME, THREADS (stripefs [mount] threads; empty: default).
set -u
SFS=${SFS:-$(pwd)/target/release/stripefs}
PT=${PT:-/tmp/fuseceil/build/example/passthrough_hp}
ROUNDS=${ROUNDS:-3}
RT=${RUNTIME:-4}
R=/dev/shm/cachehits
cleanup() { for m in $R/mnt-*; do umount -l "$m" 2>/dev/null; done; rm -rf $R; }
trap cleanup EXIT
cleanup; mkdir -p $R/raw
dd if=/dev/urandom of=$R/raw/f bs=1M count=256 status=none
fio_iops() {
  fio --name=hits --filename="$1/f" --size=256M --rw=randread --bs=4k --iodepth=32 --numjobs=1 \
    --ioengine=libaio --direct=1 --runtime=$RT --time_based --norandommap --randrepeat=0 \
    --output-format=json 2>/dev/null | python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["jobs"][0]["read"]["iops"])'
}
i=0
for b in $SFS; do
  i=$((i + 1)); d=$R/v$i
  mkdir -p $d/d0 $d/d1 $d/d2 $d/d3 $R/mnt-sfs$i
  cat > $d/vol.toml <<CFG
[volume]
devices = ["$d/d0", "$d/d1", "$d/d2", "$d/d3"]
stripe_size = "64K"
${THREADS:+[mount]
threads = $THREADS}
[cache]
store = "ram"
size = "512M"
line_size = "4K"
mode = "wb"
[cache.seq_cutoff]
policy = "never"
CFG
  $b mkfs $d/vol.toml >/dev/null || exit 1
done
declare -A all
for r in $(seq $ROUNDS); do
  mkdir -p $R/mnt-pt
  $PT --nopassthrough $R/raw $R/mnt-pt >/dev/null 2>&1 &
  sleep 1
  v=$(fio_iops $R/mnt-pt); all[pt]="${all[pt]:-} $v"
  umount $R/mnt-pt; wait
  i=0
  for b in $SFS; do
    i=$((i + 1)); m=$R/mnt-sfs$i
    $b mount $R/v$i/vol.toml $m >/dev/null 2>&1 || { echo "mount $b failed"; exit 1; }
    # Every line of the file into the cache (the RAM cache starts empty at each mount).
    dd if=$R/raw/f of=$m/f bs=1M oflag=direct status=none
    dd if=$m/f of=/dev/null bs=1M iflag=direct status=none
    v=$(fio_iops $m); all[sfs$i]="${all[sfs$i]:-} $v"
    hits=$($b stats $m --json | python3 -c 'import json,sys; c=json.load(sys.stdin)["cache"]["counters"]; print(c["read_hits"], "hits of", c["read_hits"]+c["read_partial_misses"]+c["read_full_misses"]+c["pass_through_reads"], "reads")')
    echo "round $r sfs$i ($b): $v IOPS; $hits"
    $b umount $m >/dev/null 2>&1
  done
  echo "round $r passthrough_hp: $(echo ${all[pt]} | awk '{print $NF}') IOPS"
done
med() { echo "$@" | tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
pt=$(med ${all[pt]})
echo "median passthrough_hp (raw tmpfs): $pt IOPS"
i=0
for b in $SFS; do
  i=$((i + 1)); s=$(med ${all[sfs$i]})
  echo "median sfs$i ($b): $s IOPS = $(awk -v a=$s -v b=$pt 'BEGIN {printf "%.2f", a/b}') x passthrough_hp"
done
