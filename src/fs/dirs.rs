//! Directory streams: opendir, readdir, releasedir.

use super::*;
use fusewire::reply::DirBuf;

impl StripeFs {
    pub(super) fn opendir(&self, ino: u64, reply: Reply) {
        match self.engine.ns.open_dir(ino) {
            Ok(entries) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                self.dirs.insert(fh, Arc::new(entries));
                reply.open(fh, 0);
            }
            Err(e) => reply.error(e.errno()),
        }
    }

    pub(super) fn readdir(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        size: u32,
        plus: bool,
        reply: Reply,
    ) {
        // READDIRPLUS is not asked for at INIT (FUSE_DO_READDIRPLUS off).
        if plus {
            return reply.error(libc::ENOSYS);
        }
        // A rewind (offset 0) sees the directory as it is now.
        if offset == 0 {
            self.engine.ns.note_read(ino);
            match self.engine.ns.list(ino) {
                Ok(entries) => {
                    self.dirs.insert(fh, Arc::new(entries));
                }
                Err(e) => return reply.error(e.errno()),
            }
        }
        let Some(entries) = self.dirs.get(&fh).map(|e| e.clone()) else {
            return reply.error(libc::EBADF);
        };
        let parent = self.engine.ns.get(ino).map(|i| i.parent).unwrap_or(ino);
        let dots = [
            (b".".to_vec(), ino, Kind::Dir),
            (b"..".to_vec(), parent, Kind::Dir),
        ];
        let mut buf = DirBuf::new(size);
        for (i, (name, child, kind)) in dots
            .iter()
            .chain(entries.iter())
            .enumerate()
            .skip(usize::try_from(offset).unwrap_or(usize::MAX))
        {
            let dt = fusewire::reply::dt_of_mode(mode_of_kind(*kind));
            if !buf.add(*child, i as u64 + 1, dt, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.dirents(&buf);
    }

    pub(super) fn releasedir(&self, ino: u64, fh: u64, reply: Reply) {
        self.dirs.remove(&fh);
        // The last handle of a removed directory frees it.
        Self::empty(reply, self.engine.ns.released(ino).map(|_| ()));
    }
}
