//! Where a file's bytes live. Stripe `k` of a file goes to slot `k % width`, at offset
//! `(k / width) * stripe_size` in that slot's object file; slot `s` is the device at place
//! `(first_device + s) % len` of the layout's ring, an ordered list of device ids (see
//! `Rings`). Consecutive stripes of one slot are contiguous in its object, so any contiguous
//! file range touches each slot's object in one contiguous range.

use serde::{Deserialize, Serialize};
use smallvec::{smallvec, SmallVec};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StoredLayout", into = "StoredLayout")]
pub struct Layout {
    pub stripe_size: u32,
    pub width: u32,
    /// The place in the ring of slot 0's device.
    pub first_device: u32,
    /// Which ring of the volume's device set the layout is laid on: devices are named by
    /// stable ids, so adding a device (a new ring) never remaps an existing file.
    pub ring: u16,
}

/// A layout as records store it: the ring in the high half of `first_device`, so records
/// written before rings existed (ring 0, the devices at mkfs) read unchanged.
#[derive(Serialize, Deserialize)]
struct StoredLayout {
    stripe_size: u32,
    width: u32,
    first_device: u32,
}

impl From<StoredLayout> for Layout {
    fn from(s: StoredLayout) -> Layout {
        Layout {
            stripe_size: s.stripe_size,
            width: s.width,
            first_device: s.first_device & 0xffff,
            ring: (s.first_device >> 16) as u16,
        }
    }
}

impl From<Layout> for StoredLayout {
    fn from(l: Layout) -> StoredLayout {
        StoredLayout {
            stripe_size: l.stripe_size,
            width: l.width,
            first_device: (l.ring as u32) << 16 | (l.first_device & 0xffff),
        }
    }
}

/// The rings of a volume's device set: ring `r` is the ordered list of device ids that
/// layouts on ring `r` stripe over. Ring 0 is the devices at mkfs; each change of the device
/// set that new files should use adds a ring (rings are never changed, so a layout always
/// means the same devices).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rings(pub Vec<Vec<u32>>);

impl Rings {
    /// The one ring of a volume made with `count` devices.
    pub fn initial(count: u32) -> Rings {
        Rings(vec![(0..count).collect()])
    }

    /// The ring new files are laid on.
    pub fn current(&self) -> u16 {
        (self.0.len() - 1) as u16
    }

    pub fn ring(&self, ring: u16) -> Option<&[u32]> {
        self.0.get(ring as usize).map(|r| r.as_slice())
    }

    /// The device id of a slot of `layout` (which `validate` accepted).
    pub fn device_of_slot(&self, layout: &Layout, slot: u32) -> usize {
        let ring = &self.0[layout.ring as usize];
        ring[((layout.first_device + slot) as usize) % ring.len()] as usize
    }

    /// The device ids of a layout's slots, in slot order.
    pub fn devices_of(&self, layout: &Layout) -> Vec<usize> {
        (0..layout.width)
            .map(|s| self.device_of_slot(layout, s))
            .collect()
    }

    /// Slot of a device in `layout`, if the file spans it.
    pub fn slot_of_device(&self, layout: &Layout, device: usize) -> Option<u32> {
        let ring = self.0.get(layout.ring as usize)?;
        let place = ring.iter().position(|&d| d as usize == device)? as u32;
        let len = ring.len() as u32;
        let slot = (place + len - layout.first_device % len) % len;
        (slot < layout.width).then_some(slot)
    }

    /// Checks `layout` against these rings: its ring exists, and its width and first device
    /// fit in it.
    pub fn validate(&self, layout: &Layout) -> Result<(), String> {
        let Some(ring) = self.ring(layout.ring) else {
            return Err(format!(
                "ring {} is not one of the volume's {} device rings",
                layout.ring,
                self.0.len()
            ));
        };
        layout.validate(ring.len() as u32)
    }

    /// The ring a new device joins: the current one with `device` appended.
    pub fn with_device(&self, device: u32) -> Rings {
        let mut next = self.0.clone();
        let mut ring = next.last().cloned().unwrap_or_default();
        ring.push(device);
        next.push(ring);
        Rings(next)
    }

    /// The rings after device `new` takes the place of `old`: each ring holding `old` gains a
    /// twin with `new` in its place (same order, so every slot keeps its object), and the
    /// current ring's twin (or, without `old`, a copy of it) comes last, so new files use it.
    /// Rings that have their twin already are left alone: `None` when all have one and the
    /// current ring is without `old` (a replacement asked for again).
    pub fn replacing(&self, old: u32, new: u32) -> Option<Rings> {
        let swapped =
            |r: &[u32]| -> Vec<u32> { r.iter().map(|&d| if d == old { new } else { d }).collect() };
        let last = self.0.len().checked_sub(1)?;
        let lacking = |i: usize| {
            let r = &self.0[i];
            r.contains(&old) && !r.contains(&new) && self.twin(i as u16, old, new).is_none()
        };
        if !(0..self.0.len()).any(lacking) && !self.0[last].contains(&old) {
            return None;
        }
        let mut next = self.0.clone();
        for i in (0..last).filter(|&i| lacking(i)) {
            next.push(swapped(&self.0[i]));
        }
        next.push(swapped(&self.0[last]));
        Some(Rings(next))
    }

    /// The twin `replacing(old, new)` added for `ring`: the ring a layout on `ring` moves to
    /// once its object on `old` is on `new`.
    pub fn twin(&self, ring: u16, old: u32, new: u32) -> Option<u16> {
        let from = self.ring(ring)?;
        let want: Vec<u32> = from
            .iter()
            .map(|&d| if d == old { new } else { d })
            .collect();
        if !from.contains(&old) {
            return None;
        }
        (ring as usize + 1..self.0.len())
            .rev()
            .find(|&j| self.0[j] == want)
            .map(|j| j as u16)
    }
}

/// One slot's share of a request: a contiguous object range, gathered from or scattered to
/// `segments` of the caller's buffer (buffer offset, length), in object order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotIo {
    pub slot: u32,
    pub obj_offset: u64,
    pub segments: Segments,
}

/// A slot's segments of the caller's buffer: one for most requests, one per stripe row
/// crossed for the rest. Inline, as the plan and its slots up to 8 devices: every request
/// makes them, and a small one then allocates nothing.
pub type Segments = SmallVec<[(usize, usize); 2]>;

/// A request's shares, one per slot it touches.
pub type Plan = SmallVec<[SlotIo; 8]>;

impl SlotIo {
    pub fn len(&self) -> u64 {
        self.segments.iter().map(|s| s.1 as u64).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }
}

impl Layout {
    /// A layout on ring 0 (the devices at mkfs).
    pub fn new(stripe_size: u32, width: u32, first_device: u32) -> Layout {
        Layout {
            stripe_size,
            width,
            first_device,
            ring: 0,
        }
    }

    /// Checks the layout against the length of its ring.
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
    pub fn plan(&self, offset: u64, len: usize) -> Plan {
        let s = self.stripe_size as u64;
        let mut per_slot: SmallVec<[Option<SlotIo>; 8]> = smallvec![None; self.width as usize];
        let mut done = 0usize;
        while done < len {
            let pos = offset + done as u64;
            let (slot, obj) = self.map(pos);
            let piece = ((s - pos % s) as usize).min(len - done);
            let io = per_slot[slot as usize].get_or_insert_with(|| SlotIo {
                slot,
                obj_offset: obj,
                segments: Segments::new(),
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
    fn a_replaced_device_is_swapped_in_twins_of_its_rings_and_slots_keep_their_places() {
        // Ring 0 at mkfs, ring 1 after device 3 joined.
        let rings = Rings::initial(3).with_device(3);
        let next = rings.replacing(1, 4).unwrap();
        assert_eq!(
            next.0,
            [
                vec![0, 1, 2],
                vec![0, 1, 2, 3],
                vec![0, 4, 2],
                vec![0, 4, 2, 3]
            ]
        );
        assert_eq!(next.current(), 3);
        assert_eq!(next.twin(0, 1, 4), Some(2));
        assert_eq!(next.twin(1, 1, 4), Some(3));
        assert_eq!(next.twin(2, 1, 4), None, "the twin has no old device");
        let l = Layout {
            ring: 1,
            ..Layout::new(65536, 3, 3)
        };
        let moved = Layout { ring: 3, ..l };
        for slot in 0..3 {
            let (a, b) = (
                next.device_of_slot(&l, slot),
                next.device_of_slot(&moved, slot),
            );
            assert_eq!(if a == 1 { 4 } else { a }, b, "slot {slot}");
        }
        // Replacing a device the current ring no longer has (being drained): the current
        // ring stays current.
        let drained = Rings(vec![vec![0, 1, 2], vec![0, 2]]);
        let next = drained.replacing(1, 3).unwrap();
        assert_eq!(next.0.last().unwrap(), &vec![0, 2]);
        assert_eq!(next.twin(0, 1, 3), Some(2));
        // Asked again: nothing to add. A ring made since (device 4 joined) that still holds
        // the old device gets its twin.
        assert_eq!(next.replacing(1, 3), None);
        let later = Rings(vec![vec![0, 1, 2], vec![0, 3, 2], vec![0, 1, 2, 4]]);
        let again = later.replacing(1, 3).unwrap();
        assert_eq!(again.0[3], vec![0, 3, 2, 4]);
        assert_eq!(again.twin(2, 1, 3), Some(3));
        assert_eq!(again.twin(0, 1, 3), Some(1));
    }

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
        fn plan_covers_every_byte_once((layout, _n) in layouts(), offset in 0u64..(1 << 32), len in prop_oneof![0usize..16384, 0usize..(3 << 20)]) {
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
        fn device_slot_round_trip((layout, n) in layouts(), slot_seed in 0u32..64, added in 0u32..3) {
            let mut rings = Rings::initial(n);
            for k in 0..added {
                rings = rings.with_device(n + k);
            }
            let slot = slot_seed % layout.width;
            let dev = rings.device_of_slot(&layout, slot);
            prop_assert!(dev < n as usize, "a ring-0 layout stays on the devices at mkfs");
            prop_assert_eq!(rings.slot_of_device(&layout, dev), Some(slot));
            let on_new = Layout { ring: rings.current(), ..layout };
            let dev = rings.device_of_slot(&on_new, slot);
            prop_assert_eq!(rings.slot_of_device(&on_new, dev), Some(slot));
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
    fn records_made_before_rings_read_as_ring_0_and_rings_round_trip() {
        let config = bincode::config::standard();
        let old = StoredLayout {
            stripe_size: 65536,
            width: 3,
            first_device: 2,
        };
        let bytes = bincode::serde::encode_to_vec(&old, config).unwrap();
        let (l, _): (Layout, _) = bincode::serde::decode_from_slice(&bytes, config).unwrap();
        assert_eq!(l, Layout::new(65536, 3, 2));
        let on_ring = Layout { ring: 7, ..l };
        let bytes = bincode::serde::encode_to_vec(on_ring, config).unwrap();
        let (back, _): (Layout, _) = bincode::serde::decode_from_slice(&bytes, config).unwrap();
        assert_eq!(back, on_ring);
    }

    #[test]
    fn an_added_device_never_remaps_an_existing_file() {
        let rings = Rings::initial(3);
        let old = Layout::new(65536, 3, 2);
        assert_eq!(rings.devices_of(&old), [2, 0, 1]);
        let grown = rings.with_device(3);
        assert_eq!(grown.devices_of(&old), [2, 0, 1]);
        let new = Layout {
            ring: grown.current(),
            width: 4,
            ..old
        };
        assert_eq!(grown.devices_of(&new), [2, 3, 0, 1]);
        assert!(grown.validate(&new).is_ok());
        assert!(
            rings.validate(&new).is_err(),
            "ring 1 is unknown before the add"
        );
    }

    #[test]
    fn validate_checks_every_field() {
        assert!(Layout::new(12 * 1024, 2, 0).validate(4).is_err());
        assert!(Layout::new(8 * 1024, 5, 0).validate(4).is_err());
        assert!(Layout::new(8 * 1024, 0, 0).validate(4).is_err());
        assert!(Layout::new(64 * 1024, 2, 4).validate(4).is_err());
        assert!(Layout::new(256 * 1024, 4, 3).validate(4).is_ok());
    }

    #[test]
    fn a_small_request_is_one_share_planned_inline() {
        let l = Layout::new(64 * 1024, 4, 1);
        let unit = 64 * 1024u64;
        for (offset, len) in [
            (0, 4096),
            (unit * 5 + 100, 4096),
            (unit * 3 - 4096, 4096),
            (unit * 2, unit as usize),
        ] {
            let (slot, obj_offset) = l.map(offset);
            let one = SlotIo {
                slot,
                obj_offset,
                segments: smallvec![(0, len)],
            };
            let plan = l.plan(offset, len);
            assert_eq!(plan.as_slice(), [one], "{offset} +{len}");
            assert!(!plan.spilled() && !plan[0].segments.spilled());
        }
        // A byte past the unit's end: the next slot's share too.
        assert_eq!(l.plan(unit - 4096, 4097).len(), 2);
        assert!(l.plan(0, 0).is_empty());
    }
}
