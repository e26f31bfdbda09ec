//! A spinning disk's positioning time: a seek that grows with the square root of the distance
//! the head travels (track-to-track to full stroke) and a rotational wait, half a revolution on
//! average. With several I/Os queued (NCQ), the drive serves the one it reaches first, so both
//! the seek and the wait shrink with queue depth, then level off.
//!
//! Where each I/O lies: an object's bytes are contiguous on the platter, objects spread over
//! the disk, so a test file's random I/O seeks within the file's span (short seeks), not over
//! the whole disk.

use std::time::Duration;

#[derive(Clone, Debug, PartialEq)]
pub struct Spindle {
    pub rpm: f64,
    /// Seek to the neighbouring track.
    pub track_seek: Duration,
    /// Seek across the whole platter.
    pub full_seek: Duration,
    /// Bytes on the disk (sets how far apart the objects and the offsets of one object lie).
    pub capacity: u64,
    /// Commands the drive holds and reorders (NCQ); 1 serves them in order.
    pub ncq: usize,
}

impl Spindle {
    /// A 2.5-inch 5400 rpm laptop disk of 1 TB: 12 ms average seek over the whole disk
    /// (track-to-track 1 ms, full stroke 22 ms with the square-root law), NCQ 32.
    pub fn laptop_5400() -> Spindle {
        Spindle {
            rpm: 5400.0,
            track_seek: Duration::from_millis(1),
            full_seek: Duration::from_millis(22),
            capacity: 1_000_000_000_000,
            ncq: 32,
        }
    }

    pub fn revolution(&self) -> Duration {
        Duration::from_secs_f64(60.0 / self.rpm)
    }

    /// Where `offset` of `object` lies on the platter: objects at spread-out places (a
    /// multiplicative hash of the id), each one contiguous.
    pub fn position(&self, object: u64, offset: u64) -> u64 {
        let cap = u128::from(self.capacity.max(1));
        let base = u128::from(object.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        ((base + u128::from(offset)) % cap) as u64
    }

    /// Positioning time from `from` to `to` with `queued` commands (this one included) the
    /// drive may choose among. Reordering is not perfect shortest-positioning-first: the
    /// candidates a drive can actually reach sooner grow as about the square root of the
    /// queue (fitted to laptop disks' CrystalDiskMark RND4K Q32 over Q1 of about 2-2.5 on a
    /// 1 GB file), so the travelled distance shrinks by that count and the rotational wait
    /// to a revolution over that count plus one.
    pub fn positioning(&self, from: u64, to: u64, queued: usize) -> Duration {
        let choices = (queued.clamp(1, self.ncq.max(1)) as f64).sqrt();
        let distance = from.abs_diff(to) as f64 / self.capacity.max(1) as f64 / choices;
        let seek = if distance == 0.0 {
            0.0
        } else {
            let (track, full) = (self.track_seek.as_secs_f64(), self.full_seek.as_secs_f64());
            track + (full - track).max(0.0) * distance.min(1.0).sqrt()
        };
        let wait = self.revolution().as_secs_f64() / (choices + 1.0);
        Duration::from_secs_f64(seek + wait)
    }

    /// One line for reports: `5400 rpm, seek 1ms..22ms, NCQ 32`.
    pub fn describe(&self) -> String {
        format!(
            "{:.0} rpm, seek {:?}..{:?}, NCQ {}",
            self.rpm, self.track_seek, self.full_seek, self.ncq
        )
    }
}
