#!/usr/bin/env bash
# Volume life figures: a rebalance after a device joins, against `stripefs migrate` of the same
# files and a plain `cp` of the same bytes between two backing directories; a `device replace`
# of one device; and foreground fio RND4K Q32T1 randread IOPS (libaio, direct) on the volume
# while the rebalance (and the replace) runs, as a ratio to the same test without it. Knobs: SFS (binary), STORE (where the device directories
# go; default /dev/shm), FILES x FILE_MB (the data), RUNTIME (fio seconds).
set -u
SFS=${SFS:-$(pwd)/target/release/stripefs}
STORE=${STORE:-/dev/shm}
FILES=${FILES:-16}
FILE_MB=${FILE_MB:-32}
RT=${RUNTIME:-8}
R=$STORE/volume-life-bench
cleanup() { for m in $R/*/mnt; do "$SFS" umount "$m" >/dev/null 2>&1 || umount -l "$m" 2>/dev/null; done; rm -rf "$R"; }
trap cleanup EXIT
cleanup
mkdir -p "$R"
now() { date +%s.%N; }
mbps() { python3 -c "print('%.0f' % ($1 / 1e6 / ($3 - $2)))"; }
total=$((FILES * FILE_MB * 1000000))

# A 3-device volume holding the files, with a fourth directory ready to join.
volume() {
  local d=$R/$1
  mkdir -p $d/d0 $d/d1 $d/d2 $d/d3 $d/mnt
  printf '[volume]\ndevices = ["%s", "%s", "%s"]\nstripe_size = "64K"\n' $d/d0 $d/d1 $d/d2 > $d/vol.toml
  "$SFS" mkfs $d/vol.toml >/dev/null && "$SFS" mount $d/vol.toml $d/mnt || exit 1
  for i in $(seq 1 $FILES); do
    head -c $((FILE_MB * 1000000)) /dev/urandom > $d/mnt/f$i
  done
  "$SFS" device add $d/mnt $d/d3 >/dev/null
  # Made after the add: on the new device set, so the rebalance leaves it where it is.
  head -c 256000000 /dev/urandom > $d/mnt/fio.dat
  sync
}
fio_iops() {
  fio --name=fg --filename="$1/fio.dat" --size=256M --rw=randread --bs=4k --iodepth=32 \
    --ioengine=libaio --direct=1 --runtime=$RT --time_based --norandommap --randrepeat=0 \
    --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["jobs"][0]["read"]["iops"])'
}

# cp between two backing directories: the same bytes, no FUSE.
mkdir -p $R/cp/a $R/cp/b
for i in $(seq 1 $FILES); do head -c $((FILE_MB * 1000000)) /dev/urandom > $R/cp/a/f$i; done
sync; echo 3 > /proc/sys/vm/drop_caches
t0=$(now); cp $R/cp/a/f* $R/cp/b/ && sync; t1=$(now)
cp_mbps=$(mbps $total $t0 $t1)
rm -rf $R/cp

# migrate of the same files, one by one (to every device), on a volume of its own.
volume mig
t0=$(now)
for i in $(seq 1 $FILES); do "$SFS" migrate $R/mig/mnt/f$i --width 4 >/dev/null || exit 1; done
t1=$(now)
mig_mbps=$(mbps $total $t0 $t1)
quiet_iops=$(fio_iops $R/mig/mnt)

# rebalance, and fio (on a file the rebalance does not move) while it runs.
volume reb
"$SFS" rebalance $R/reb/mnt --json > $R/reb.json &
sleep 0.5
busy_iops=$(fio_iops $R/reb/mnt)
wait
reb_mbps=$(python3 -c "import json; p=json.load(open('$R/reb.json')); print('%.0f' % (p['bytes_moved']/1e6/p['elapsed_secs']))")
moved=$(python3 -c "import json; p=json.load(open('$R/reb.json')); print(p['state'], p['files_done'], 'files', p['bytes_moved'], 'bytes', '%.1f s' % p['elapsed_secs'])")

# replace of device 1 by an empty directory, and fio while it runs.
volume rep
mkdir -p $R/rep/d4
"$SFS" device replace $R/rep/mnt 1 $R/rep/d4 --json > $R/rep.json &
sleep 0.5
rep_iops=$(fio_iops $R/rep/mnt)
wait
rep_mbps=$(python3 -c "import json; p=json.load(open('$R/rep.json')); print('%.0f' % (p['bytes_moved']/1e6/p['elapsed_secs']))")
replaced=$(python3 -c "import json; p=json.load(open('$R/rep.json')); print(p['state'], p['files_done'], 'files', p['bytes_moved'], 'bytes', '%.1f s' % p['elapsed_secs'])")

echo "store $STORE, $FILES files x $FILE_MB MB, 3 devices + 1 added, stripe 64K"
echo "cp between backing dirs : $cp_mbps MB/s"
echo "migrate, file by file   : $mig_mbps MB/s"
echo "rebalance (in daemon)   : $reb_mbps MB/s ($moved)"
echo "RND4K Q32T1 read, quiet : $quiet_iops IOPS"
echo "... during rebalance    : $busy_iops IOPS (ratio $(python3 -c "print('%.2f' % ($busy_iops / $quiet_iops))"))"
echo "replace of device 1     : $rep_mbps MB/s ($replaced)"
echo "... RND4K Q32T1 during  : $rep_iops IOPS (ratio $(python3 -c "print('%.2f' % ($rep_iops / $quiet_iops))"))"
