//! Where cache lines live: a RAM buffer (a memfd, so it only takes the pages it uses) or a
//! preallocated file on a fast device with a header and one 32-byte record per line.
//!
//! File layout: 4 KiB header | records (32 bytes per slot, padded to 4 KiB) | line data.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 16] = b"stripefs-cache\0\x01";
const HEADER: u64 = 4096;
pub(crate) const RECORD: u64 = 32;
pub(crate) const EMPTY: u64 = u64::MAX;

/// The header of a cache file.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub volume: [u8; 16],
    pub line_size: u64,
    pub slots: u64,
    /// Set at clean shutdown, cleared at mount: clean lines are trusted only after a clean stop.
    pub clean: bool,
}

/// One line's persistent record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub object: u64,
    pub line: u64,
    pub valid: u64,
    pub dirty: u64,
}

pub(crate) struct Store {
    file: File,
    /// Set by `Cache::fail_store`: every I/O fails, as a dead cache device's would.
    pub(crate) broken: std::sync::atomic::AtomicBool,
    pub(crate) throttle: Option<std::sync::Arc<dyn crate::Throttle>>,
    pub(crate) path: Option<PathBuf>,
    line_size: u64,
    slots: u64,
    data_start: u64,
}

fn records_len(slots: u64) -> u64 {
    (slots * RECORD).div_ceil(4096) * 4096
}

impl Store {
    /// A volatile store in memory.
    pub(crate) fn ram(line_size: u64, slots: u64) -> io::Result<Store> {
        let name = c"stripefs-cache";
        // SAFETY: memfd_create with a valid C string.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we own.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(line_size * slots)?;
        Ok(Store {
            file,
            broken: Default::default(),
            throttle: None,
            path: None,
            line_size,
            slots,
            data_start: 0,
        })
    }

    /// Opens an existing cache file, or creates and preallocates one.
    pub(crate) fn file(
        path: &Path,
        line_size: u64,
        slots: u64,
    ) -> io::Result<(Store, Option<Header>)> {
        let existing = path.exists();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        let data_start = HEADER + records_len(slots);
        let store = Store {
            file,
            broken: Default::default(),
            throttle: None,
            path: Some(path.to_path_buf()),
            line_size,
            slots,
            data_start,
        };
        if existing {
            let header = store.read_header()?;
            return Ok((store, Some(header)));
        }
        let total = data_start + line_size * slots;
        // SAFETY: plain syscall on our descriptor.
        if unsafe { libc::fallocate(store.file.as_raw_fd(), 0, 0, total as i64) } != 0 {
            let e = io::Error::last_os_error();
            let _ = std::fs::remove_file(path);
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "cannot reserve {total} bytes for the cache file {}: {e}",
                    path.display()
                ),
            ));
        }
        // Every record starts empty.
        let empty: Vec<u8> = (0..records_len(slots) / RECORD)
            .flat_map(|_| {
                encode(&Record {
                    object: EMPTY,
                    line: EMPTY,
                    valid: 0,
                    dirty: 0,
                })
            })
            .collect();
        store.file.write_all_at(&empty, HEADER)?;
        Ok((store, None))
    }

    pub(crate) fn persistent(&self) -> bool {
        self.path.is_some()
    }

    pub(crate) fn read_header(&self) -> io::Result<Header> {
        let mut h = [0u8; 64];
        self.file.read_exact_at(&mut h, 0)?;
        if &h[..16] != MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a stripefs cache file",
            ));
        }
        let u = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().unwrap());
        let mut volume = [0u8; 16];
        volume.copy_from_slice(&h[16..32]);
        Ok(Header {
            volume,
            line_size: u(32),
            slots: u(40),
            clean: h[48] == 1,
        })
    }

    pub(crate) fn write_header(&self, h: &Header) -> io::Result<()> {
        let mut b = [0u8; 64];
        b[..16].copy_from_slice(MAGIC);
        b[16..32].copy_from_slice(&h.volume);
        b[32..40].copy_from_slice(&h.line_size.to_le_bytes());
        b[40..48].copy_from_slice(&h.slots.to_le_bytes());
        b[48] = u8::from(h.clean);
        self.file.write_all_at(&b, 0)?;
        self.file.sync_data()
    }

    fn check(&self) -> io::Result<()> {
        if self.broken.load(std::sync::atomic::Ordering::Relaxed) {
            Err(io::Error::from_raw_os_error(libc::EIO))
        } else {
            Ok(())
        }
    }

    pub(crate) fn read_records(&self) -> io::Result<Vec<Record>> {
        let mut buf = vec![0u8; (self.slots * RECORD) as usize];
        self.file.read_exact_at(&mut buf, HEADER)?;
        Ok(buf.chunks(RECORD as usize).map(decode).collect())
    }

    pub(crate) fn write_record(&self, slot: u32, r: &Record) -> io::Result<()> {
        self.check()?;
        self.file
            .write_all_at(&encode(r), HEADER + slot as u64 * RECORD)
    }

    pub(crate) fn sync(&self) -> io::Result<()> {
        if self.persistent() {
            self.file.sync_data()
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
        let r = self.file.read_exact_at(buf, at);
        wait_until(until);
        r
    }

    pub(crate) fn write(&self, slot: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        self.check()?;
        let at = self.at(slot, offset);
        let until = self
            .throttle
            .as_ref()
            .map(|t| t.book(true, at, data.len() as u64));
        let r = self.file.write_all_at(data, at);
        wait_until(until);
        r
    }
}

fn wait_until(until: Option<std::time::Instant>) {
    if let Some(t) = until {
        let left = t.saturating_duration_since(std::time::Instant::now());
        if !left.is_zero() {
            std::thread::sleep(left);
        }
    }
}

fn encode(r: &Record) -> [u8; 32] {
    let mut b = [0u8; 32];
    for (i, v) in [r.object, r.line, r.valid, r.dirty].iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    b
}

fn decode(b: &[u8]) -> Record {
    let u = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
    Record {
        object: u(0),
        line: u(1),
        valid: u(2),
        dirty: u(3),
    }
}
