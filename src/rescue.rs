//! The rescue file: dirty data that a RAM cache could not write back at unmount (a device
//! failed), kept beside the namespace so that no acknowledged byte dies with the daemon. The
//! next mount writes it back before anything else and refuses to go on while it cannot.
//!
//! Format: a 16-byte magic, then entries of object (u64), offset (u64), length (u32), crc32c
//! (u32, over the three fields and the data), data.

use crate::error::{Error, Result};
use cache::{Backend, DirtyRun};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 16] = b"stripefs-rescue1";
pub const FILE: &str = "stripefs.rescue";

/// Where the rescue file of the namespace at `ns_path` lives.
pub fn path(ns_path: &Path) -> PathBuf {
    ns_path.with_file_name(FILE)
}

fn entry_crc(object: u64, offset: u64, data: &[u8]) -> u32 {
    let mut head = [0u8; 20];
    head[..8].copy_from_slice(&object.to_le_bytes());
    head[8..16].copy_from_slice(&offset.to_le_bytes());
    head[16..].copy_from_slice(&(data.len() as u32).to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&head), data)
}

/// Writes `runs` durably (a new file renamed into place, then the directory synced); adds to
/// what an earlier rescue file holds. Returns the bytes kept.
pub fn save(path: &Path, runs: &[DirtyRun]) -> io::Result<u64> {
    let mut all = match load(path) {
        Ok(old) => old,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    all.extend(runs.iter().cloned());
    let tmp = path.with_extension("rescue.new");
    let mut f = std::fs::File::create(&tmp)?;
    let mut bytes = 0;
    f.write_all(MAGIC)?;
    for (object, offset, data) in &all {
        f.write_all(&object.to_le_bytes())?;
        f.write_all(&offset.to_le_bytes())?;
        f.write_all(&(data.len() as u32).to_le_bytes())?;
        f.write_all(&entry_crc(*object, *offset, data).to_le_bytes())?;
        f.write_all(data)?;
        bytes += data.len() as u64;
    }
    f.sync_all()?;
    faultpoint::fault_point!("rescue.save");
    std::fs::rename(&tmp, path)?;
    sync_dir(path)?;
    Ok(bytes)
}

fn sync_dir(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

fn damaged(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("rescue file {} is damaged: {why}", path.display()),
    )
}

fn load(path: &Path) -> io::Result<Vec<DirtyRun>> {
    let bytes = std::fs::read(path)?;
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(damaged(path, "not a stripefs rescue file"));
    }
    let mut at = MAGIC.len();
    let mut runs = Vec::new();
    while at < bytes.len() {
        let Some(head) = bytes.get(at..at + 24) else {
            return Err(damaged(path, "cut short"));
        };
        let u64_at = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().unwrap());
        let (object, offset) = (u64_at(0), u64_at(8));
        let len = u32::from_le_bytes(head[16..20].try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(head[20..24].try_into().unwrap());
        let Some(data) = bytes.get(at + 24..at + 24 + len) else {
            return Err(damaged(path, "cut short"));
        };
        if entry_crc(object, offset, data) != crc {
            return Err(damaged(
                path,
                &format!("the entry at byte {at} fails its checksum"),
            ));
        }
        runs.push((object, offset, data.to_vec()));
        at += 24 + len;
    }
    Ok(runs)
}

/// Writes a rescue file's data back to the devices (clipped to each file's size now; data of
/// files that are gone is dropped), syncs it, and removes the file. Returns the bytes written.
pub fn replay(
    path: &Path,
    core: &dyn Backend,
    size_of: &dyn Fn(u64) -> Option<u64>,
) -> Result<Option<u64>> {
    let runs = match load(path) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::Usage(format!(
                "{e}; its data cannot be trusted. Move it away to mount (that data is LOST)"
            )))
        }
    };
    let refuse = |e: io::Error| {
        Error::Usage(format!(
            "rescue file {} holds data a RAM cache could not write back at the last unmount, \
             and it still cannot be written: {e}. Mend the device and mount again",
            path.display()
        ))
    };
    let mut written = 0;
    let mut objects = Vec::new();
    for (object, offset, data) in &runs {
        let size = size_of(*object).unwrap_or(0);
        let keep = size.saturating_sub(*offset).min(data.len() as u64) as usize;
        if keep == 0 {
            continue;
        }
        core.write(*object, *offset, &data[..keep])
            .map_err(refuse)?;
        written += keep as u64;
        objects.push(*object);
    }
    objects.sort_unstable();
    objects.dedup();
    for o in objects {
        core.sync(o).map_err(refuse)?;
    }
    std::fs::remove_file(path)
        .and_then(|()| sync_dir(path))
        .map_err(refuse)?;
    Ok(Some(written))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rescue_file_keeps_its_runs_and_finds_damage() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(FILE);
        save(&p, &[(3, 4096, vec![1u8; 4096])]).unwrap();
        save(&p, &[(4, 0, vec![2u8; 100])]).unwrap();
        let runs = load(&p).unwrap();
        assert_eq!(runs.len(), 2, "a second save adds to the first");
        assert_eq!(runs[1], (4, 0, vec![2u8; 100]));
        let mut bytes = std::fs::read(&p).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&p, &bytes).unwrap();
        assert!(load(&p).unwrap_err().to_string().contains("checksum"));
        std::fs::write(&p, &bytes[..bytes.len() - 10]).unwrap();
        assert!(load(&p).unwrap_err().to_string().contains("cut short"));
    }
}
