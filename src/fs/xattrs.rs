//! Extended attributes: user ones, POSIX ACLs, and stripefs's control keys.

use super::*;
use crate::acl;
use crate::control;
use crate::error::Error;

impl StripeFs {
    /// A collapse or insert (`user.stripefs.shift`) moves the file's bytes behind the kernel's
    /// back: its dirty pages (writeback cache, shared maps) are written back first, to the
    /// offsets they were written at, and its cached pages and size are dropped after. The
    /// kernel writes back through the FUSE threads, so this one must not wait on a FUSE
    /// thread: it runs on the admin thread and replies from there.
    fn shift(&self, c: &Caller, ino: u64, value: &[u8], reply: Reply) {
        let (engine, kernel) = (self.engine.clone(), self.kernel.clone());
        let (caller, value) = (*c, value.to_vec());
        self.engine.run_admin(move || {
            let invalidate = || {
                if let Some(k) = kernel.get() {
                    let _ = k.inval_inode(ino, 0, -1);
                }
            };
            invalidate();
            let r = control::set_for(&engine, &caller, ino, control::Key::Shift, &value);
            invalidate();
            StripeFs::empty(reply, r);
        });
    }

    /// An ACL xattr: set or removed as ext4 does it when ACLs are on, refused when off.
    fn set_acl(&self, c: &Caller, ino: u64, name: &[u8], value: Option<&[u8]>) -> Result<()> {
        if !self.acl() {
            return Err(Error::Errno(libc::EOPNOTSUPP));
        }
        // As posix_acl_update_mode: set-group-ID falls unless root or in the file's group.
        let gid = self.engine.ns.get(ino)?.gid;
        let kill_sgid = c.uid != 0 && !c.in_group(gid);
        self.engine
            .ns
            .set_acl(ino, name == acl::DEFAULT, value, kill_sgid)
            .map(|_| ())
    }

    pub(super) fn setxattr(
        &self,
        c: &Caller,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        reply: Reply,
    ) {
        let name = name.as_bytes();
        let r = match control::key(name) {
            Some(control::Key::Shift) => return self.shift(c, ino, value, reply),
            Some(key) => control::set_for(&self.engine, c, ino, key, value),
            None if acl::is_acl(name) => self.set_acl(c, ino, name, Some(value)),
            None => self.engine.ns.setxattr(ino, name, value, flags),
        };
        Self::empty(reply, r);
    }

    pub(super) fn getxattr(&self, c: &Caller, ino: u64, name: &OsStr, size: u32, reply: Reply) {
        let name = name.as_bytes();
        let r = match control::key(name) {
            Some(key) => control::get_for(&self.engine, c, ino, key, size),
            None if acl::is_acl(name) && !self.acl() => Err(Error::Errno(libc::EOPNOTSUPP)),
            None => self.engine.ns.getxattr(ino, name),
        };
        match r {
            Ok(v) if size == 0 => reply.xattr_size(v.len() as u32),
            Ok(v) if v.len() <= size as usize => reply.data(&v),
            Ok(_) => reply.error(libc::ERANGE),
            Err(e) => reply.error(e.errno()),
        }
    }

    pub(super) fn listxattr(&self, ino: u64, size: u32, reply: Reply) {
        match self.engine.ns.listxattr(ino) {
            Ok(names) => {
                let mut out = Vec::new();
                for n in names.into_iter().filter(|n| self.acl() || !acl::is_acl(n)) {
                    out.extend_from_slice(&n);
                    out.push(0);
                }
                if size == 0 {
                    reply.xattr_size(out.len() as u32)
                } else if out.len() <= size as usize {
                    reply.data(&out)
                } else {
                    reply.error(libc::ERANGE)
                }
            }
            Err(e) => reply.error(e.errno()),
        }
    }

    pub(super) fn removexattr(&self, c: &Caller, ino: u64, name: &OsStr, reply: Reply) {
        let name = name.as_bytes();
        let r = match control::key(name) {
            Some(key) => control::remove_for(&self.engine, c, ino, key),
            None if acl::is_acl(name) => self.set_acl(c, ino, name, None),
            None => self.engine.ns.removexattr(ino, name),
        };
        Self::empty(reply, r);
    }
}
