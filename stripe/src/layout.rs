//! Where a file's bytes live. Stripe `k` of a file goes to slot `k % width`, at offset
//! `(k / width) * stripe_size` in that slot's object file; slot `s` is device
//! `(first_device + s) % device_count`. Consecutive stripes of one slot are contiguous in its
//! object, so any contiguous file range touches each slot's object in one contiguous range.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub stripe_size: u32,
    pub width: u32,
    pub first_device: u32,
}

/// One slot's share of a request: a contiguous object range, gathered from or scattered to
/// `segments` of the caller's buffer (buffer offset, length), in object order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotIo {
    pub slot: u32,
    pub obj_offset: u64,
    pub segments: Vec<(usize, usize)>,
}

impl SlotIo {
    pub fn len(&self) -> u64 {
        self.segments.iter().map(|s| s.1 as u64).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }
}

impl Layout {
    pub fn new(stripe_size: u32, width: u32, first_device: u32) -> Layout {
        Layout {
            stripe_size,
            width,
            first_device,
        }
    }

    /// Checks the layout against the volume's device count.
    pub fn validate(&self, device_count: u32) -> Result<(), String> {
        let s = self.stripe_size as u64;
        if !s.is_power_of_two() || !(8 * 1024..=256 * 1024).contains(&s) {
            return Err(format!(
                "stripe_size {} must be a power of two from 8K to 256K",
                self.stripe_size
            ));
        }
        if self.width == 0 || self.width > device_count {
            return Err(format!(
                "width {} must be from 1 to the number of devices ({device_count})",
                self.width
            ));
        }
        if self.first_device >= device_count {
            return Err(format!(
                "first device {} is not below the device count {device_count}",
                self.first_device
            ));
        }
        Ok(())
    }

    /// Device index (in the volume) of a slot.
    pub fn device_of_slot(&self, slot: u32, device_count: u32) -> usize {
        ((self.first_device + slot) % device_count) as usize
    }

    /// Slot of a device in this layout, if the file spans it.
    pub fn slot_of_device(&self, device: usize, device_count: u32) -> Option<u32> {
        let slot = (device as u32 + device_count - self.first_device) % device_count;
        (slot < self.width).then_some(slot)
    }

    /// File offset -> (slot, offset in that slot's object).
    pub fn map(&self, offset: u64) -> (u32, u64) {
        let s = self.stripe_size as u64;
        let w = self.width as u64;
        let k = offset / s;
        ((k % w) as u32, (k / w) * s + offset % s)
    }

    /// (slot, object offset) -> file offset; the inverse of `map`.
    pub fn unmap(&self, slot: u32, obj_offset: u64) -> u64 {
        let s = self.stripe_size as u64;
        let w = self.width as u64;
        let row = obj_offset / s;
        (row * w + slot as u64) * s + obj_offset % s
    }

    /// Splits the file range `[offset, offset + len)` into one contiguous object range per slot.
    pub fn plan(&self, offset: u64, len: usize) -> Vec<SlotIo> {
        let s = self.stripe_size as u64;
        let mut per_slot: Vec<Option<SlotIo>> = vec![None; self.width as usize];
        let mut done = 0usize;
        while done < len {
            let pos = offset + done as u64;
            let (slot, obj) = self.map(pos);
            let piece = ((s - pos % s) as usize).min(len - done);
            let io = per_slot[slot as usize].get_or_insert_with(|| SlotIo {
                slot,
                obj_offset: obj,
                segments: Vec::new(),
            });
            // Adjacent in the buffer and in the object (width 1): one segment.
            match io.segments.last_mut() {
                Some(last) if last.0 + last.1 == done => last.1 += piece,
                _ => io.segments.push((done, piece)),
            }
            done += piece;
        }
        per_slot.into_iter().flatten().collect()
    }

    /// How many bytes of a file of `file_size` bytes the object of `slot` holds.
    pub fn object_len(&self, file_size: u64, slot: u32) -> u64 {
        let s = self.stripe_size as u64;
        let row = s * self.width as u64;
        let full = (file_size / row) * s;
        let rem = file_size % row;
        full + rem.saturating_sub(slot as u64 * s).min(s)
    }

    /// The largest file this layout can hold when no object may pass `max_object_len` bytes
    /// (the backing filesystem's largest file): whole stripe rows, never past `i64::MAX`.
    pub fn max_file_size(&self, max_object_len: u64) -> u64 {
        let s = self.stripe_size as u64;
        (max_object_len / s)
            .saturating_mul(s)
            .saturating_mul(self.width as u64)
            .min(i64::MAX as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_largest_file_keeps_every_object_within_the_device_limit() {
        let l = Layout::new(64 * 1024, 4, 1);
        let ext4 = 17_592_186_040_320; // 16 TiB - 4 KiB
        let max = l.max_file_size(ext4);
        assert!((0..4).all(|slot| l.object_len(max, slot) <= ext4));
        assert!(
            max > 3 * ext4,
            "a 4-wide file holds nearly 4 objects' worth"
        );
        assert_eq!(l.max_file_size(u64::MAX), i64::MAX as u64);
    }

    fn layouts() -> impl Strategy<Value = (Layout, u32)> {
        (3u32..=8, 1u32..=8, 0u32..8).prop_flat_map(|(shift, n, first)| {
            let n = n.max(1);
            (1..=n).prop_map(move |w| (Layout::new(1 << (10 + shift), w, first % n), n))
        })
    }

    proptest! {
        #[test]
        fn map_unmap_round_trip((layout, _n) in layouts(), offset in 0u64..(1 << 40)) {
            let (slot, obj) = layout.map(offset);
            prop_assert!(slot < layout.width);
            prop_assert_eq!(layout.unmap(slot, obj), offset);
        }

        #[test]
        fn unmap_map_round_trip((layout, _n) in layouts(), slot_seed in 0u32..64, obj in 0u64..(1 << 36)) {
            let slot = slot_seed % layout.width;
            let offset = layout.unmap(slot, obj);
            prop_assert_eq!(layout.map(offset), (slot, obj));
        }

        #[test]
        fn plan_covers_every_byte_once((layout, _n) in layouts(), offset in 0u64..(1 << 32), len in 0usize..(3 << 20)) {
            let plan = layout.plan(offset, len);
            let mut covered = vec![false; len];
            for io in &plan {
                let mut obj = io.obj_offset;
                for &(buf, l) in &io.segments {
                    for i in [0, l - 1] {
                        // First and last byte of each segment map back to the right place.
                        prop_assert_eq!(layout.map(offset + (buf + i) as u64), (io.slot, obj + i as u64));
                    }
                    for c in &mut covered[buf..buf + l] {
                        prop_assert!(!*c);
                        *c = true;
                    }
                    obj += l as u64;
                }
            }
            prop_assert!(covered.iter().all(|&c| c));
            // One contiguous range per slot, at most `width` of them.
            prop_assert!(plan.len() <= layout.width as usize);
        }

        #[test]
        fn object_lengths_add_up((layout, _n) in layouts(), size in 0u64..(1 << 34)) {
            let total: u64 = (0..layout.width).map(|s| layout.object_len(size, s)).sum();
            prop_assert_eq!(total, size);
            if size > 0 {
                let (slot, obj) = layout.map(size - 1);
                prop_assert_eq!(layout.object_len(size, slot), obj + 1);
            }
        }

        #[test]
        fn device_slot_round_trip((layout, n) in layouts(), slot_seed in 0u32..64) {
            let slot = slot_seed % layout.width;
            let dev = layout.device_of_slot(slot, n);
            prop_assert!(dev < n as usize);
            prop_assert_eq!(layout.slot_of_device(dev, n), Some(slot));
        }
    }

    #[test]
    fn one_mib_on_four_devices_is_256k_each() {
        let l = Layout::new(64 * 1024, 4, 1);
        for slot in 0..4 {
            assert_eq!(l.object_len(1 << 20, slot), 256 * 1024);
        }
        let plan = l.plan(0, 1 << 20);
        assert_eq!(plan.len(), 4);
        assert!(plan
            .iter()
            .all(|p| p.len() == 256 * 1024 && p.obj_offset == 0));
    }

    #[test]
    fn validate_checks_every_field() {
        assert!(Layout::new(12 * 1024, 2, 0).validate(4).is_err());
        assert!(Layout::new(8 * 1024, 5, 0).validate(4).is_err());
        assert!(Layout::new(8 * 1024, 0, 0).validate(4).is_err());
        assert!(Layout::new(64 * 1024, 2, 4).validate(4).is_err());
        assert!(Layout::new(256 * 1024, 4, 3).validate(4).is_ok());
    }
}
