//! Open files: open/create (and O_TMPFILE), read, write, release, copy_file_range.

use super::*;
use crate::namespace::SetAttr;
use fusewire::DataReply;
use stripe::{IoBuf, ReadTarget, WriteSource};

/// A READ reply's own buffer as a device read's target.
struct InPlace(DataReply);

// SAFETY: the buffer is the transport's (a ring entry's payload), which stays where it is
// while the reply lives; moving the reply moves only the pointer to it.
unsafe impl ReadTarget for InPlace {
    fn target(&mut self) -> &mut [u8] {
        self.0.buf()
    }
}

/// A WRITE's data where the transport read it: a device write takes it with no copy.
pub(super) struct KeptWrite(fusewire::Payload);

// SAFETY: the payload's bytes stay where they are, unchanged, while it lives (the transport
// reads its next request elsewhere); moving it moves only the handle.
unsafe impl WriteSource for KeptWrite {
    fn source(&self) -> &[u8] {
        &self.0
    }
}

/// Writes from this size on keep their data in the request buffer, which each then holds
/// while in flight (`max_write` and 68 KiB more, whatever the write's size): from half of it
/// on, that costs at most twice the copy's memory. Smaller ones are copied.
const KEEP_FROM: usize = 512 * 1024;

/// The WRITE's data kept in place, when it is worth it.
pub(super) fn keep_in_place(req: &fusewire::Request<'_>) -> Option<KeptWrite> {
    match req.op {
        fusewire::Operation::Write { data, .. } if data.len() >= KEEP_FROM => {
            req.write_payload().map(KeptWrite)
        }
        _ => None,
    }
}

impl StripeFs {
    pub(super) fn open(&self, ino: u64, flags: u32, reply: Reply) {
        match self.engine.ns.get(ino) {
            Ok(i) if i.kind == Kind::Dir => reply.error(libc::EISDIR),
            Ok(i) => {
                // With FUSE_ATOMIC_O_TRUNC the truncation comes with the open, not as a setattr.
                if flags as i32 & libc::O_TRUNC != 0 && i.kind == Kind::File {
                    let size = SetAttr {
                        size: Some(0),
                        ..SetAttr::default()
                    };
                    let truncated = self.engine.set_size(ino, &size);
                    if let Err(e) = truncated {
                        return reply.error(e.errno());
                    }
                }
                if let Err(e) = self.engine.ns.opened(ino) {
                    return reply.error(e.errno());
                }
                reply.open(0, self.open_flags(flags));
            }
            Err(e) => reply.error(e.errno()),
        }
    }

    /// CREATE (a name) and TMPFILE (none: an O_TMPFILE file, nlink 0, open once).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create(
        &self,
        c: &Caller,
        parent: u64,
        name: Option<&OsStr>,
        mode: u32,
        umask: u32,
        flags: u32,
        reply: Reply,
    ) {
        let node = NewNode {
            umask: self.umask(umask),
            ..NewNode::new(Kind::File, mode)
        };
        let created = match name {
            Some(name) => self.new_node(c, parent, name, node).and_then(|i| {
                self.engine.ns.opened(i.ino)?;
                Ok(i)
            }),
            None => self.engine.ns.create_unnamed(
                parent,
                NewNode {
                    uid: c.uid,
                    gid: c.gid,
                    ..node
                },
                self.engine.volume_layout(),
                self.engine.volume.current_ring().1,
            ),
        };
        match created {
            Ok(i) => reply.create(&self.entry_of(&i), 0, self.open_flags(flags)),
            Err(e) => reply.error(e.errno()),
        }
    }

    /// Over io_uring the devices read straight into the ring entry the kernel copies the
    /// reply from; over /dev/fuse into a pooled buffer written to the device.
    pub(super) fn read(&self, ino: u64, offset: u64, size: u32, reply: Reply) {
        match reply.in_place(size as usize) {
            Ok(in_place) => {
                let into = InPlace(in_place);
                self.engine
                    .read(ino, offset, size, into, |InPlace(d), r| match r {
                        Ok(len) => d.send(len),
                        Err(e) => d.error(e.errno()),
                    })
            }
            Err(reply) => {
                let buf = IoBuf::stale(size as usize);
                self.engine
                    .read(ino, offset, size, buf, move |buf, r| match r {
                        Ok(len) => reply.data(&buf[..len]),
                        Err(e) => reply.error(e.errno()),
                    })
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn write(
        &self,
        c: &Caller,
        ino: u64,
        offset: u64,
        data: &[u8],
        kept: Option<KeptWrite>,
        flags: u32,
        reply: Reply,
    ) {
        let len = data.len() as u32;
        // O_SYNC/O_DSYNC (and `-o sync`): durable before the reply. The kernel asks for an
        // fsync after buffered writes itself, not after direct I/O.
        let durable = self.engine.config.mount.sync || flags as i32 & libc::O_DSYNC != 0;
        // Taken only when needed: every clone is a write to the count both CPUs share.
        let syncer = durable.then(|| self.engine.clone());
        let kept = kept.map(|k| Box::new(k) as Box<dyn WriteSource>);
        self.engine
            .write(*c, ino, offset, data, kept, move |r| match (r, syncer) {
                (Ok(_), Some(engine)) => engine.fsync_then(ino, move |r| match r {
                    Ok(()) => reply.write(len),
                    Err(e) => reply.error(e.errno()),
                }),
                (Ok(_), None) => reply.write(len),
                (Err(e), _) => reply.error(e.errno()),
            });
    }

    pub(super) fn release(&self, ino: u64, reply: Reply) {
        let object = self.engine.ns.get(ino).map(|i| i.object);
        match self.engine.ns.released(ino) {
            Ok(true) => {
                if let Ok(object) = object {
                    self.engine.volume.close(object);
                }
                self.engine.reclaim_if_short();
                reply.ok()
            }
            Ok(false) => reply.ok(),
            Err(e) => reply.error(e.errno()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn copy_file_range(
        &self,
        c: &Caller,
        ino_in: u64,
        offset_in: u64,
        ino_out: u64,
        offset_out: u64,
        len: u64,
        flags: u64,
        wide: bool,
        reply: Reply,
    ) {
        if flags != 0 {
            return reply.error(libc::EINVAL);
        }
        let r = self
            .engine
            .copy_range(*c, ino_in, offset_in, ino_out, offset_out, len);
        match r {
            Ok(n) if wide => reply.copied(n),
            // At most COPY_MAX, far below u32::MAX.
            Ok(n) => reply.write(n as u32),
            Err(e) => reply.error(e.errno()),
        }
    }
}
