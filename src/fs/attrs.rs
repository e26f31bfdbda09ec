//! Nodes and their attributes: lookup, getattr/setattr, creation and removal of names.

use super::*;
use crate::namespace::{RenameHow, SetAttr};
use fusewire::request::SetAttr as WireSetAttr;

impl StripeFs {
    pub(super) fn new_node(
        &self,
        c: &Caller,
        parent: u64,
        name: &OsStr,
        node: NewNode,
    ) -> Result<Inode> {
        // Where a layout set on the directory meanwhile could once be missed (the tests hold
        // a create here while one is set).
        faultpoint::fault_point!("fs.create");
        self.engine.ns.create(
            parent,
            name.as_bytes(),
            NewNode {
                uid: c.uid,
                gid: c.gid,
                ..node
            },
            self.engine.volume_layout(),
            self.engine.volume.current_ring().1,
        )
    }

    pub(super) fn lookup(&self, parent: u64, name: &OsStr, reply: Reply) {
        // The kernel looks up "." and ".." by node id only with FUSE_EXPORT_SUPPORT: a file
        // handle (open_by_handle_at, NFS) names an inode its caches dropped, and ".." finds a
        // directory's parent to reconnect it. Node ids are our inode numbers, never reused (a
        // freed one answers ENOENT, which the kernel turns into ESTALE), so a handle can never
        // reach another file; generation 0 is therefore enough. One gap: a number handed out
        // by a creation that a crash lost before it was durable can be handed out again
        // (`skip_ids_to` covers only numbers that left objects on the devices).
        let r = match name_bytes(name) {
            b"." => self.engine.ns.get(parent),
            b".." => self.engine.ns.parent_of(parent),
            name => self.engine.ns.lookup(parent, name),
        };
        self.entry(reply, r);
    }

    pub(super) fn getattr(&self, ino: u64, reply: Reply) {
        match self.engine.ns.get(ino) {
            Ok(i) => reply.attr(&self.attr(&i), self.ttl),
            Err(e) => reply.error(e.errno()),
        }
    }

    pub(super) fn setattr(&self, ino: u64, a: WireSetAttr, reply: Reply) {
        let r = self.engine.set_size(
            ino,
            &SetAttr {
                perm: a.mode.map(|m| (m & 0o7777) as u16),
                uid: a.uid,
                gid: a.gid,
                size: a.size,
                atime: a.atime.map(time_of),
                mtime: a.mtime.map(time_of),
                ctime: a.ctime.map(|(secs, nsecs)| Time { secs, nsecs }),
            },
        );
        match r {
            Ok(i) => reply.attr(&self.attr(&i), self.ttl),
            Err(e) => reply.error(e.errno()),
        }
    }

    pub(super) fn readlink(&self, ino: u64, reply: Reply) {
        match self.engine.ns.get(ino) {
            Ok(i) if i.kind == Kind::Symlink => reply.data(&i.symlink),
            Ok(_) => reply.error(libc::EINVAL),
            Err(e) => reply.error(e.errno()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn mknod(
        &self,
        c: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: Reply,
    ) {
        let Some(kind) = kind_of_mode(mode) else {
            return reply.error(libc::EINVAL);
        };
        if kind == Kind::Dir || kind == Kind::Symlink {
            return reply.error(libc::EINVAL);
        }
        let node = NewNode {
            rdev,
            umask: self.umask(umask),
            ..NewNode::new(kind, mode)
        };
        self.entry(reply, self.new_node(c, parent, name, node));
    }

    pub(super) fn mkdir(
        &self,
        c: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: Reply,
    ) {
        let node = NewNode {
            umask: self.umask(umask),
            ..NewNode::new(Kind::Dir, mode)
        };
        self.entry(reply, self.new_node(c, parent, name, node));
    }

    pub(super) fn unlink(&self, parent: u64, name: &OsStr, reply: Reply) {
        Self::empty(reply, self.engine.unlink(parent, name.as_bytes()));
    }

    pub(super) fn rmdir(&self, parent: u64, name: &OsStr, reply: Reply) {
        Self::empty(reply, self.engine.rmdir(parent, name.as_bytes()));
    }

    pub(super) fn symlink(
        &self,
        c: &Caller,
        parent: u64,
        link_name: &OsStr,
        target: &OsStr,
        reply: Reply,
    ) {
        let target = target.as_bytes();
        if target.len() > 4095 {
            return reply.error(libc::ENAMETOOLONG);
        }
        let node = NewNode {
            symlink: target,
            ..NewNode::new(Kind::Symlink, 0o777)
        };
        self.entry(reply, self.new_node(c, parent, link_name, node));
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn rename(
        &self,
        c: &Caller,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: Reply,
    ) {
        let has = |f: libc::c_uint| flags & f != 0;
        let exchange = has(libc::RENAME_EXCHANGE);
        if exchange && (has(libc::RENAME_NOREPLACE) || has(libc::RENAME_WHITEOUT)) {
            return reply.error(libc::EINVAL);
        }
        // The whiteout belongs to the caller, as ext4's does (overlayfs renames with its
        // mounter's credentials).
        let how = RenameHow {
            noreplace: has(libc::RENAME_NOREPLACE),
            exchange,
            whiteout: has(libc::RENAME_WHITEOUT).then_some((c.uid, c.gid)),
        };
        Self::empty(
            reply,
            self.engine
                .rename(parent, name.as_bytes(), newparent, newname.as_bytes(), how),
        );
    }

    pub(super) fn link(&self, ino: u64, newparent: u64, newname: &OsStr, reply: Reply) {
        self.entry(reply, self.engine.link(ino, newparent, newname.as_bytes()));
    }

    pub(super) fn access(&self, c: &Caller, ino: u64, mask: u32, reply: Reply) {
        // Reached only without default_permissions: check the mode bits as the kernel would.
        match self.engine.ns.get(ino) {
            Ok(i) => {
                let want = mask as u16 & 0o7;
                let have = if c.uid == 0 {
                    if want & 1 != 0 && i.kind != Kind::Dir && i.perm & 0o111 == 0 {
                        0o6
                    } else {
                        0o7
                    }
                } else if c.uid == i.uid {
                    (i.perm >> 6) & 7
                } else if c.gid == i.gid {
                    (i.perm >> 3) & 7
                } else {
                    i.perm & 7
                };
                if want & !have == 0 {
                    reply.ok()
                } else {
                    reply.error(libc::EACCES)
                }
            }
            Err(e) => reply.error(e.errno()),
        }
    }

    pub(super) fn statfs(&self, reply: Reply) {
        let (total, avail) = self.engine.capacity();
        let counts = self.engine.ns.counts();
        let free_inodes = 1u64 << 32;
        reply.statfs(&abi::fuse_kstatfs {
            blocks: total / BLOCK as u64,
            bfree: avail / BLOCK as u64,
            bavail: avail / BLOCK as u64,
            files: counts.inodes + free_inodes,
            ffree: free_inodes,
            bsize: BLOCK,
            namelen: 255,
            frsize: BLOCK,
            ..Default::default()
        });
    }
}
