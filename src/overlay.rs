//! A redb storage backend that reads a file and keeps every write in memory: the namespace
//! store can be opened, recovered, checked (every checksum) and read without a byte of the
//! file being written, and without copying it.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

const BLOCK: u64 = 4096;

#[derive(Debug)]
pub struct Overlay {
    file: File,
    state: parking_lot::Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The length redb sees.
    len: u64,
    /// Bytes of the file below this are still visible where no block was written (a shrink
    /// hides what lay beyond, also after a later growth).
    visible: u64,
    /// Written blocks, whole, by index.
    blocks: HashMap<u64, Vec<u8>>,
}

impl Overlay {
    /// Opens `path` for reading only.
    pub fn open(path: &Path) -> io::Result<Overlay> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Ok(Overlay {
            file,
            state: parking_lot::Mutex::new(State {
                len,
                visible: len,
                blocks: HashMap::new(),
            }),
        })
    }

    /// Fills `out` from the file at `offset`, zeros at and past `visible`.
    fn read_base(&self, visible: u64, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let from_file = visible.saturating_sub(offset).min(out.len() as u64) as usize;
        self.file.read_exact_at(&mut out[..from_file], offset)?;
        out[from_file..].fill(0);
        Ok(())
    }
}

/// The pieces of `[offset, offset + len)`: (block index, offset in the block, length).
fn pieces(offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize)> {
    let end = offset + len as u64;
    let mut at = offset;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let (index, within) = (at / BLOCK, (at % BLOCK) as usize);
        let n = ((BLOCK - within as u64).min(end - at)) as usize;
        at += n as u64;
        Some((index, within, n))
    })
}

impl redb::StorageBackend for Overlay {
    fn len(&self) -> io::Result<u64> {
        Ok(self.state.lock().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let st = self.state.lock();
        if offset
            .checked_add(out.len() as u64)
            .is_none_or(|end| end > st.len)
        {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the store",
            ));
        }
        let mut done = 0;
        for (index, within, n) in pieces(offset, out.len()) {
            let dest = &mut out[done..done + n];
            match st.blocks.get(&index) {
                Some(block) => dest.copy_from_slice(&block[within..within + n]),
                None => self.read_base(st.visible, index * BLOCK + within as u64, dest)?,
            }
            done += n;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut st = self.state.lock();
        if len < st.len {
            st.visible = st.visible.min(len);
            st.blocks.retain(|&index, _| index * BLOCK < len);
            if let Some(block) = st.blocks.get_mut(&(len / BLOCK)) {
                block[(len % BLOCK) as usize..].fill(0);
            }
        }
        st.len = len;
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut st = self.state.lock();
        let visible = st.visible;
        let mut done = 0;
        for (index, within, n) in pieces(offset, data.len()) {
            let block = match st.blocks.entry(index) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let mut block = vec![0u8; BLOCK as usize];
                    self.read_base(visible, index * BLOCK, &mut block)?;
                    e.insert(block)
                }
            };
            block[within..within + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        let end = offset + data.len() as u64;
        st.len = st.len.max(end);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::StorageBackend;

    #[test]
    fn writes_stay_in_memory_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let base: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        std::fs::write(&path, &base).unwrap();
        let o = Overlay::open(&path).unwrap();
        o.write(4000, &[0xAA; 200]).unwrap();
        let mut all = vec![0u8; 10_000];
        o.read(0, &mut all).unwrap();
        let mut want = base.clone();
        want[4000..4200].fill(0xAA);
        assert_eq!(all, want);
        // Cut inside a written block, grow again: zeros past the cut, base bytes hidden.
        o.set_len(4100).unwrap();
        o.set_len(9000).unwrap();
        let mut grown = vec![1u8; 9000];
        o.read(0, &mut grown).unwrap();
        want.truncate(4100);
        want.resize(9000, 0);
        assert_eq!(grown, want);
        assert!(o.read(8990, &mut [0u8; 20]).is_err(), "past the end");
        o.write(12_000, b"tail").unwrap();
        assert_eq!(o.len().unwrap(), 12_004);
        assert_eq!(std::fs::read(&path).unwrap(), base, "the file is untouched");
    }
}
