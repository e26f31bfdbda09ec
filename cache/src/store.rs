//! Where cache lines live: RAM (anonymous memory, so it only takes the pages it uses, and a
//! hit is a copy, not a system call) or a preallocated file on a fast device with a header and
//! one 64-byte record per line.
//!
//! File layout: 4 KiB header | records (64 bytes per slot, padded to 4 KiB) | line data.
//! The header and every record carry a crc32c; a record's covers its slot number too, so a
//! record written to the wrong place is as damaged as a garbage one. A 64-byte record never
//! straddles a 512-byte sector, so a torn write damages whole records, which the crc finds.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

const MAGIC_V1: &[u8; 16] = b"stripefs-cache\0\x01";
const MAGIC: &[u8; 16] = b"stripefs-cache\0\x02";
const HEADER: u64 = 4096;
/// Bytes of the header the checksum covers; the crc follows them.
const HEADER_LEN: usize = 76;
pub(crate) const RECORD: u64 = 64;
pub(crate) const EMPTY: u64 = u64::MAX;

/// The header of a cache file.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub volume: [u8; 16],
    /// Made at creation: the namespace names the cache that holds its dirty data by this.
    pub id: [u8; 16],
    /// The volume generation the cache's lines belong to (mounts without it advance it).
    pub generation: u64,
    pub line_size: u64,
    pub slots: u64,
    /// Set at clean shutdown, cleared at mount: clean lines are trusted only after a clean stop.
    pub clean: bool,
    /// Metadata shards the lines are placed by (a line's slot is in its shard's range); 0 in
    /// files made before shards, which are one.
    pub shards: u16,
}

/// What is wrong with an existing cache file's header.
#[derive(Debug)]
pub(crate) enum HeaderError {
    Io(io::Error),
    /// Not a cache file at all.
    NotCache,
    /// A first block of zeros: a cache file whose making a crash cut short (older versions
    /// made the file in place).
    Blank,
    /// A cache file of format 1 (no checksums); `clean` from its header.
    Format1 {
        clean: bool,
    },
    Damaged,
}

/// One line's persistent record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub object: u64,
    pub line: u64,
    pub valid: u64,
    pub dirty: u64,
}

impl Record {
    pub(crate) const EMPTY: Record = Record {
        object: EMPTY,
        line: EMPTY,
        valid: 0,
        dirty: 0,
    };
}

/// The records of a cache file as read back: `Err` (with what it claims) where a record fails
/// its checksum.
pub(crate) type Records = Vec<Result<Record, Record>>;

/// Where a store's lines are.
enum Lines {
    /// A line's bytes are touched only by the request that holds its slot busy
    /// (`Cache::acquire`), or by mount and unmount when no request runs: no two copies of one
    /// line overlap.
    Ram(memmap2::MmapRaw),
    File(File),
}

pub(crate) struct Store {
    lines: Lines,
    /// Set by `Cache::fail_store`: every I/O fails, as a dead cache device's would.
    pub(crate) broken: std::sync::atomic::AtomicBool,
    pub(crate) throttle: Option<std::sync::Arc<dyn crate::Throttle>>,
    pub(crate) path: Option<PathBuf>,
    /// The medium is memory (RAM, or a file on tmpfs or ramfs): I/O is a copy.
    pub(crate) medium_in_memory: bool,
    line_size: u64,
    slots: u64,
    data_start: u64,
}

pub(crate) fn records_len(slots: u64) -> u64 {
    (slots * RECORD).div_ceil(4096) * 4096
}

impl Store {
    /// A volatile store in memory.
    pub(crate) fn ram(line_size: u64, slots: u64) -> io::Result<Store> {
        let len = usize::try_from(line_size * slots)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "cache too large"))?;
        // Not counted against the overcommit limit up front, as a memfd's pages were not.
        let map = memmap2::MmapOptions::new()
            .len(len.max(1))
            .no_reserve_swap()
            .map_anon()?;
        let map = memmap2::MmapRaw::from(map);
        // Huge pages where the kernel gives them for asking: a random hit then seldom misses
        // the TLB. Refused is harmless.
        let _ = map.advise(memmap2::Advice::HugePage);
        Ok(Store {
            lines: Lines::Ram(map),
            broken: Default::default(),
            throttle: None,
            path: None,
            medium_in_memory: true,
            line_size,
            slots,
            data_start: 0,
        })
    }

    /// Makes a new cache file at `path` with `header` and every record empty, preallocated,
    /// under a temporary name renamed into place once whole: a crash on the way leaves the old
    /// file (or none), never a half-made one.
    pub(crate) fn create(path: &Path, header: &Header) -> io::Result<Store> {
        let tmp = path.with_extension("cache.new");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        let data_start = HEADER + records_len(header.slots);
        let store = Store {
            lines: Lines::File(file),
            broken: Default::default(),
            throttle: None,
            path: Some(path.to_path_buf()),
            medium_in_memory: false,
            line_size: header.line_size,
            slots: header.slots,
            data_start,
        };
        let total = data_start + header.line_size * header.slots;
        // SAFETY: plain syscall on our descriptor.
        if unsafe { libc::fallocate(store.file()?.as_raw_fd(), 0, 0, total as i64) } != 0 {
            let e = io::Error::last_os_error();
            let _ = std::fs::remove_file(&tmp);
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "cannot reserve {total} bytes for the cache file {}: {e}",
                    path.display()
                ),
            ));
        }
        store.wipe_records()?;
        store.write_header(header)?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(store)
    }

    /// Opens an existing cache file as its header describes it; a file shorter than that
    /// is damaged.
    pub(crate) fn open_existing(path: &Path, line_size: u64, slots: u64) -> io::Result<Store> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let data_start = HEADER + records_len(slots);
        let want = line_size
            .checked_mul(slots)
            .and_then(|d| d.checked_add(data_start))
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "impossible geometry"))?;
        let have = file.metadata()?.len();
        if slots > 0 && have < want {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "cache file {} is {have} bytes, its header says {want}: it was truncated",
                    path.display()
                ),
            ));
        }
        Ok(Store {
            lines: Lines::File(file),
            broken: Default::default(),
            throttle: None,
            path: Some(path.to_path_buf()),
            medium_in_memory: false,
            line_size,
            slots,
            data_start,
        })
    }

    /// Writes every record empty and syncs.
    pub(crate) fn wipe_records(&self) -> io::Result<()> {
        let empty: Vec<u8> = (0..records_len(self.slots) / RECORD)
            .flat_map(|slot| encode(slot as u32, &Record::EMPTY))
            .collect();
        self.file()?.write_all_at(&empty, HEADER)?;
        self.file()?.sync_data()
    }

    /// Data I/O is a copy, never a device's wait; a store made to behave like a slower
    /// device (`throttle`) adds its modelled wait, which a caller that must not wait defers
    /// ([`defer_emulated_waits`]). A file store's records and durability may still wait.
    pub(crate) fn in_memory(&self) -> bool {
        self.medium_in_memory
    }

    pub(crate) fn persistent(&self) -> bool {
        self.path.is_some()
    }

    pub(crate) fn read_header(&self) -> Result<Header, HeaderError> {
        let mut h = [0u8; HEADER_LEN + 4];
        match self.file().and_then(|f| f.read_exact_at(&mut h, 0)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Err(HeaderError::NotCache)
            }
            Err(e) => return Err(HeaderError::Io(e)),
        }
        if &h[..16] == MAGIC_V1 {
            return Err(HeaderError::Format1 { clean: h[48] == 1 });
        }
        if h.iter().all(|&b| b == 0) {
            return Err(HeaderError::Blank);
        }
        if &h[..16] != MAGIC {
            return Err(HeaderError::NotCache);
        }
        let crc = u32::from_le_bytes(h[HEADER_LEN..].try_into().unwrap());
        if crc32c::crc32c(&h[..HEADER_LEN]) != crc {
            return Err(HeaderError::Damaged);
        }
        let u = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().unwrap());
        let bytes16 = |at: usize| -> [u8; 16] { h[at..at + 16].try_into().unwrap() };
        Ok(Header {
            volume: bytes16(16),
            id: bytes16(32),
            generation: u(48),
            line_size: u(56),
            slots: u(64),
            clean: h[72] == 1,
            shards: u16::from_le_bytes([h[74], h[75]]),
        })
    }

    pub(crate) fn write_header(&self, h: &Header) -> io::Result<()> {
        let mut b = [0u8; HEADER_LEN + 4];
        b[..16].copy_from_slice(MAGIC);
        b[16..32].copy_from_slice(&h.volume);
        b[32..48].copy_from_slice(&h.id);
        b[48..56].copy_from_slice(&h.generation.to_le_bytes());
        b[56..64].copy_from_slice(&h.line_size.to_le_bytes());
        b[64..72].copy_from_slice(&h.slots.to_le_bytes());
        b[72] = u8::from(h.clean);
        b[74..76].copy_from_slice(&h.shards.to_le_bytes());
        let crc = crc32c::crc32c(&b[..HEADER_LEN]);
        b[HEADER_LEN..].copy_from_slice(&crc.to_le_bytes());
        self.file()?.write_all_at(&b, 0)?;
        self.file()?.sync_data()
    }

    /// The file of a store on a device (the header and records live only there).
    fn file(&self) -> io::Result<&File> {
        match &self.lines {
            Lines::File(f) => Ok(f),
            Lines::Ram(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a RAM cache has no header or records",
            )),
        }
    }

    fn check(&self) -> io::Result<()> {
        if self.broken.load(std::sync::atomic::Ordering::Relaxed) {
            Err(io::Error::from_raw_os_error(libc::EIO))
        } else {
            Ok(())
        }
    }

    pub(crate) fn read_records(&self) -> io::Result<Records> {
        let mut buf = vec![0u8; (self.slots * RECORD) as usize];
        self.file()?.read_exact_at(&mut buf, HEADER)?;
        Ok(buf
            .chunks(RECORD as usize)
            .enumerate()
            .map(|(slot, b)| decode(slot as u32, b))
            .collect())
    }

    pub(crate) fn write_record(&self, slot: u32, r: &Record) -> io::Result<()> {
        self.check()?;
        self.file()?
            .write_all_at(&encode(slot, r), HEADER + slot as u64 * RECORD)
    }

    pub(crate) fn sync(&self) -> io::Result<()> {
        if self.persistent() {
            self.file()?.sync_data()
        } else {
            Ok(())
        }
    }

    fn at(&self, slot: u32, offset: u64) -> u64 {
        debug_assert!((slot as u64) < self.slots && offset < self.line_size);
        self.data_start + slot as u64 * self.line_size + offset
    }

    pub(crate) fn read(&self, slot: u32, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.check()?;
        let at = self.at(slot, offset);
        let until = self
            .throttle
            .as_ref()
            .map(|t| t.book(false, at, buf.len() as u64));
        let r = match &self.lines {
            Lines::File(f) => f.read_exact_at(buf, at),
            Lines::Ram(map) => {
                let at = in_map(map, at, buf.len())?;
                // SAFETY: `in_map` checked the bytes are inside the map, and no one writes
                // them now (see `Lines::Ram`).
                unsafe {
                    std::ptr::copy_nonoverlapping(map.as_ptr().add(at), buf.as_mut_ptr(), buf.len())
                };
                Ok(())
            }
        };
        hold_until(until);
        r
    }

    pub(crate) fn write(&self, slot: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        self.check()?;
        let at = self.at(slot, offset);
        let until = self
            .throttle
            .as_ref()
            .map(|t| t.book(true, at, data.len() as u64));
        let r = match &self.lines {
            Lines::File(f) => f.write_all_at(data, at),
            Lines::Ram(map) => {
                let at = in_map(map, at, data.len())?;
                // SAFETY: as in `read`; no one else reads or writes these bytes now.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        data.as_ptr(),
                        map.as_mut_ptr().add(at),
                        data.len(),
                    )
                };
                Ok(())
            }
        };
        hold_until(until);
        r
    }
}

/// `at` as an index into `map`, checked that `len` bytes from there are inside it.
fn in_map(map: &memmap2::MmapRaw, at: u64, len: usize) -> io::Result<usize> {
    usize::try_from(at)
        .ok()
        .filter(|&a| a.checked_add(len).is_some_and(|end| end <= map.len()))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "past the end of the RAM cache"))
}

thread_local! {
    /// Inside `defer_emulated_waits`: the latest time an emulated store I/O of the scope ends.
    static DEFERRED: std::cell::Cell<Option<Option<Instant>>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with the emulated waits of throttled stores (see `CacheConfig::throttle`) not
/// slept on this thread but gathered: returns what `f` returned and when the last of its store
/// I/Os would have ended on the modelled device, for the caller to hold its answer until then
/// without holding a thread.
///
/// The request's waits are taken as overlapping (the latest end, not their sum): right for
/// the lines of one request, generous for a store read and write that depend on each other
/// (a partial sector's read-modify-write).
pub fn defer_emulated_waits<T>(f: impl FnOnce() -> T) -> (T, Option<Instant>) {
    /// Ends the scope also when `f` panics (a thread that survives the panic must not go on
    /// deferring).
    struct Scope(Option<Option<Instant>>);
    impl Drop for Scope {
        fn drop(&mut self) {
            let until = DEFERRED.with(|d| d.replace(self.0)).flatten();
            // A nested scope's waits are the enclosing one's too.
            if let Some(t) = until {
                defer(t);
            }
        }
    }
    let scope = Scope(DEFERRED.with(|d| d.replace(Some(None))));
    let r = f();
    let until = DEFERRED.with(|d| d.get()).flatten();
    drop(scope);
    (r, until)
}

/// Folds `t` into the open `defer_emulated_waits` scope, if there is one.
fn defer(t: Instant) -> bool {
    DEFERRED.with(|d| match d.get() {
        Some(latest) => {
            d.set(Some(Some(latest.map_or(t, |l| l.max(t)))));
            true
        }
        None => false,
    })
}

/// Waits until an emulated store I/O ends, or leaves that to the enclosing
/// `defer_emulated_waits`.
fn hold_until(until: Option<Instant>) {
    if let Some(t) = until {
        if !defer(t) {
            wait_until(t);
        }
    }
}

fn wait_until(t: Instant) {
    let left = t.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        std::thread::sleep(left);
    }
}

fn encode(slot: u32, r: &Record) -> [u8; RECORD as usize] {
    let mut b = [0u8; RECORD as usize];
    for (i, v) in [r.object, r.line, r.valid, r.dirty].iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    let crc = record_crc(slot, &b);
    b[60..].copy_from_slice(&crc.to_le_bytes());
    b
}

fn record_crc(slot: u32, b: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&slot.to_le_bytes()), &b[..60])
}

/// A record, or what it claims if its checksum does not match.
fn decode(slot: u32, b: &[u8]) -> Result<Record, Record> {
    let u = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
    let r = Record {
        object: u(0),
        line: u(1),
        valid: u(2),
        dirty: u(3),
    };
    if record_crc(slot, b) == u32::from_le_bytes(b[60..64].try_into().unwrap()) {
        Ok(r)
    } else {
        Err(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_only_where_it_was_written_and_undamaged() {
        let r = Record {
            object: 7,
            line: 3,
            valid: 0b1011,
            dirty: 0b0010,
        };
        let mut b = encode(5, &r);
        assert_eq!(decode(5, &b), Ok(r));
        assert!(
            decode(6, &b).is_err(),
            "a record in another slot is damaged"
        );
        b[9] ^= 1;
        assert!(decode(5, &b).is_err(), "one flipped bit is found");
        assert!(decode(0, &[0u8; 64]).is_err(), "zeros are not a record");
    }

    #[test]
    fn a_ram_store_keeps_each_line_apart_and_refuses_bytes_past_its_end() {
        let store = Store::ram(4096, 3).unwrap();
        store.write(1, 512, &[7u8; 1024]).unwrap();
        store.write(2, 0, &[9u8; 4096]).unwrap();
        let mut line = vec![1u8; 4096];
        store.read(1, 0, &mut line).unwrap();
        assert!(line[..512].iter().all(|&b| b == 0), "never written: zeros");
        assert!(line[512..1536].iter().all(|&b| b == 7));
        assert!(line[1536..].iter().all(|&b| b == 0));
        store.read(2, 4095, &mut line[..1]).unwrap();
        assert_eq!(line[0], 9);
        // One byte over the last line's end is an error, never memory past the map.
        assert!(store.read(2, 4095, &mut line[..2]).is_err());
        assert!(store.write(2, 4095, &[0u8; 2]).is_err());
        assert!(store.read_header().is_err(), "a RAM store has no header");
    }

    /// Books every I/O to end at a fixed time.
    struct EndsAt(Instant);

    impl crate::Throttle for EndsAt {
        fn book(&self, _write: bool, _offset: u64, _len: u64) -> Instant {
            self.0
        }
        fn describe(&self) -> String {
            "fixed".into()
        }
    }

    #[test]
    fn an_emulated_wait_is_handed_to_the_caller_who_defers_it() {
        let mut store = Store::ram(4096, 2).unwrap();
        let soon = Instant::now() + std::time::Duration::from_millis(50);
        let later = soon + std::time::Duration::from_millis(10);
        store.throttle = Some(std::sync::Arc::new(EndsAt(soon)));
        let (r, until) = defer_emulated_waits(|| store.write(0, 0, &[3u8; 4096]));
        r.unwrap();
        assert_eq!(until, Some(soon), "the modelled end, not slept");
        // Nested: the inner scope's end is the outer one's too, the latest of them.
        let (inner, outer) = defer_emulated_waits(|| {
            let mut b = [0u8; 8];
            store.read(0, 0, &mut b).unwrap();
            assert_eq!(b, [3u8; 8]);
            defer_emulated_waits(|| {
                let throttled = Store {
                    throttle: Some(std::sync::Arc::new(EndsAt(later))),
                    ..Store::ram(4096, 1).unwrap()
                };
                throttled.read(0, 0, &mut b).unwrap();
            })
            .1
        });
        assert_eq!((inner, outer), (Some(later), Some(later)));
        assert_eq!(defer_emulated_waits(|| ()).1, None, "no store I/O, no wait");
    }

    #[test]
    fn the_header_round_trips_and_damage_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        let h = Header {
            volume: [1; 16],
            id: [2; 16],
            generation: 9,
            line_size: 4096,
            slots: 8,
            clean: true,
            shards: 3,
        };
        let store = Store::create(&path, &h).unwrap();
        assert!(!path.with_extension("cache.new").exists());
        assert_eq!(store.read_header().unwrap(), h);
        assert!(store
            .read_records()
            .unwrap()
            .iter()
            .all(|r| *r == Ok(Record::EMPTY)));
        store.file().unwrap().write_all_at(&[0xff], 60).unwrap();
        assert!(matches!(store.read_header(), Err(HeaderError::Damaged)));
        store
            .file()
            .unwrap()
            .write_all_at(b"not a cache file", 0)
            .unwrap();
        assert!(matches!(store.read_header(), Err(HeaderError::NotCache)));
    }
}
