#!/usr/bin/env bash
# fio on a stripefs volume against fio on one of its backing directories, in the same run.
#   scripts/fio-compare.sh [BASE_DIR] [DEVICES] [STRIPE] [SIZE] [RUNTIME]
# BASE_DIR holds the baseline file, the device directories and the mountpoint (default: a
# tmpfs at /mnt/ram, i.e. RAM disks). Needs root, fio, and a release build.
# Note: the daemon does buffered I/O on its object files, so on a disk-backed BASE_DIR a
# --direct=1 baseline reaches the disk while stripefs reaches the page cache; RAM disks compare
# like with like.
set -euo pipefail
base=${1:-/mnt/ram}
devices=${2:-4}
stripe=${3:-64K}
size=${4:-512M}
runtime=${5:-10}
bin=$(cd "$(dirname "$0")/.." && pwd)/target/release/stripefs
[ -x "$bin" ] || { echo "build first: cargo build --release" >&2; exit 1; }
command -v fio >/dev/null || { echo "install fio: apt-get install -y fio" >&2; exit 1; }
if [ "$base" = /mnt/ram ] && ! mountpoint -q /mnt/ram; then
  mkdir -p /mnt/ram && mount -t tmpfs -o size=8G tmpfs /mnt/ram
fi

work=$(mktemp -d "$base/fio-compare.XXXX")
mnt=$work/mnt
cleanup() { "$bin" umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/baseline" "$mnt"
list=""
for i in $(seq 0 $((devices - 1))); do mkdir -p "$work/d$i"; list="$list\"$work/d$i\", "; done
printf '[volume]\ndevices = [%s]\nstripe_size = "%s"\n' "${list%, }" "$stripe" > "$work/vol.toml"
"$bin" mkfs "$work/vol.toml" >/dev/null
"$bin" mount "$work/vol.toml" "$mnt"

# name rw bs iodepth
tests=("SEQ1M-Q8T1-read read 1M 8" "SEQ1M-Q8T1-write write 1M 8"
       "RND4K-Q32T1-read randread 4k 32" "RND4K-Q32T1-write randwrite 4k 32")
measure() { # dir rw bs depth -> "MB/s IOPS"
  fio --name=m --directory="$1" --filename=fio.data --size="$size" --rw="$2" --bs="$3" \
      --iodepth="$4" --numjobs=1 --ioengine=libaio --direct=1 --runtime="$runtime" --time_based \
      --group_reporting --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; d=j["read"] if j["read"]["io_bytes"] else j["write"]; print("%.1f %.0f" % (d["bw_bytes"]/1e6, d["iops"]))'
}
printf '%-20s %14s %14s %8s   (%s devices, stripe %s, %s, %ss each, fio libaio --direct=1)\n' \
  test "baseline MB/s" "stripefs MB/s" ratio "$devices" "$stripe" "$size" "$runtime"
for t in "${tests[@]}"; do
  set -- $t
  read -r b_bw b_iops < <(measure "$work/baseline" "$2" "$3" "$4")
  read -r s_bw s_iops < <(measure "$mnt" "$2" "$3" "$4")
  ratio=$(python3 -c "print(f'{$s_bw/$b_bw:.2f}')")
  printf '%-20s %8s (%6s IOPS) %8s (%6s IOPS) %6sx\n' "$1" "$b_bw" "$b_iops" "$s_bw" "$s_iops" "$ratio"
done
