//! Changes to the tree: creating, linking, unlinking and renaming names, each one transaction
//! of the store under the namespace's lock.

use super::*;

impl Namespace {
    /// Creates a node. A regular file gets the layout its directory gives (looked up under
    /// the same lock as the creation, so a layout set on the directory before is never
    /// missed), else `default_layout`; its first device is chosen here.
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        node: NewNode,
        default_layout: Layout,
        ring_len: u32,
    ) -> Result<Inode> {
        self.create_in(parent, Some(name), node, default_layout, ring_len)
    }

    /// O_TMPFILE: a regular file in `parent` with no name (nlink 0), opened once here; it
    /// lives until its last close unless `link` gives it a name first.
    pub fn create_unnamed(
        &self,
        parent: u64,
        node: NewNode,
        default_layout: Layout,
        ring_len: u32,
    ) -> Result<Inode> {
        if node.kind != Kind::File {
            return errno(libc::EINVAL);
        }
        self.create_in(parent, None, node, default_layout, ring_len)
    }

    fn create_in(
        &self,
        parent: u64,
        name: Option<&[u8]>,
        node: NewNode,
        default_layout: Layout,
        ring_len: u32,
    ) -> Result<Inode> {
        if let Some(name) = name {
            check_name(name)?;
        }
        self.room_to_grow()?;
        self.reserve_numbers()?;
        self.mutate_tx(|st, ch, tx| {
            let file_layout = st.inherited_layout(parent, default_layout);
            let p = st.dir(parent)?;
            if p.nlink == 0 {
                return errno(libc::ENOENT);
            }
            if name.is_some_and(|name| st.child(parent, name).is_some()) {
                return errno(libc::EEXIST);
            }
            let (mut perm, mut gid) = (node.perm & 0o7777, node.gid);
            // The directory's default ACL, if any, decides instead of the umask
            // (posix_acl_create): the node's access ACL, and a directory's default.
            let mut acls: Vec<(&[u8], Vec<u8>)> = Vec::new();
            match st.acl(tx, parent, acl::DEFAULT)? {
                _ if node.kind == Kind::Symlink => {}
                Some(default) => {
                    if let Some(access) = default.inherit(&mut perm) {
                        acls.push((acl::ACCESS, access.to_bytes()));
                    }
                    if node.kind == Kind::Dir {
                        acls.push((acl::DEFAULT, default.to_bytes()));
                    }
                }
                None => perm &= !(node.umask & 0o777),
            }
            // BSD group semantics of a set-group-id directory.
            if p.perm & libc::S_ISGID as u16 != 0 {
                gid = p.gid;
                if node.kind == Kind::Dir {
                    perm |= libc::S_ISGID as u16;
                }
            }
            let ino = st.alloc_ino();
            let now = Time::now();
            let layout = match node.kind {
                Kind::File => Some(Layout {
                    // New files go on the ring the volume lays new files on.
                    first_device: (ino % ring_len as u64) as u32,
                    ring: default_layout.ring,
                    ..file_layout
                }),
                _ => None,
            };
            let inode = Inode {
                ino,
                kind: node.kind,
                perm,
                uid: node.uid,
                gid,
                nlink: match (node.kind, name) {
                    (_, None) => 0,
                    (Kind::Dir, _) => 2,
                    _ => 1,
                },
                size: if node.kind == Kind::Symlink {
                    node.symlink.len() as u64
                } else {
                    0
                },
                rdev: node.rdev,
                atime: now,
                mtime: now,
                ctime: now,
                crtime: now,
                parent,
                layout,
                object: ino,
                has_data: false,
                symlink: node.symlink.to_vec(),
            };
            for (xattr, value) in &acls {
                st.put_xattr(ch, tx, ino, xattr, Some(value), 0)?;
            }
            st.inodes.insert(ino, inode.clone());
            ch.inodes.insert(ino);
            let Some(name) = name else {
                // Open before the lock is let go: no release can find it unopened.
                *st.open.entry(ino).or_insert(0) += 1;
                return Ok(inode);
            };
            st.set_entry(ch, parent, name, Some(ino));
            st.touch_dir(ch, parent, now)?;
            if node.kind == Kind::Dir {
                st.inode_mut(parent, ch)?.nlink += 1;
            }
            Ok(inode)
        })
    }

    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> Result<Inode> {
        check_name(newname)?;
        self.room_to_grow()?;
        self.mutate(|st, ch| {
            let p = st.dir(newparent)?;
            if p.nlink == 0 {
                return errno(libc::ENOENT);
            }
            let i = st.inode(ino)?;
            if i.kind == Kind::Dir {
                return errno(libc::EPERM);
            }
            if i.nlink >= u32::MAX - 1 {
                return errno(libc::EMLINK);
            }
            if st.child(newparent, newname).is_some() {
                return errno(libc::EEXIST);
            }
            let now = Time::now();
            st.set_entry(ch, newparent, newname, Some(ino));
            st.touch_dir(ch, newparent, now)?;
            let i = st.inode_mut(ino, ch)?;
            i.nlink += 1;
            i.ctime = now;
            Ok(i.clone())
        })
    }

    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.mutate(|st, ch| {
            st.dir(parent)?;
            let ino = st.child(parent, name).ok_or(Error::Errno(libc::ENOENT))?;
            if st.inode(ino)?.kind == Kind::Dir {
                return errno(libc::EISDIR);
            }
            let now = Time::now();
            st.set_entry(ch, parent, name, None);
            st.touch_dir(ch, parent, now)?;
            st.drop_link(ch, ino, now)
        })
    }

    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<()> {
        if name == b"." {
            return errno(libc::EINVAL);
        }
        if name == b".." {
            return errno(libc::ENOTEMPTY);
        }
        self.mutate(|st, ch| {
            st.dir(parent)?;
            let ino = st.child(parent, name).ok_or(Error::Errno(libc::ENOENT))?;
            st.dir(ino)?;
            if st.children.get(&ino).is_some_and(|c| !c.is_empty()) {
                return errno(libc::ENOTEMPTY);
            }
            let now = Time::now();
            st.set_entry(ch, parent, name, None);
            st.touch_dir(ch, parent, now)?;
            st.inode_mut(parent, ch)?.nlink -= 1;
            st.drop_link(ch, ino, now)
        })
    }

    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        noreplace: bool,
        exchange: bool,
    ) -> Result<()> {
        let how = RenameHow {
            noreplace,
            exchange,
            whiteout: None,
        };
        self.rename_how(parent, name, newparent, newname, how)
    }

    /// rename with renameat2's flags. With `how.whiteout` the source name becomes a whiteout
    /// (a character device 0:0, as overlayfs marks a deleted lower file) in the same
    /// transaction as the move, as ext4 does it.
    pub fn rename_how(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        how: RenameHow,
    ) -> Result<()> {
        let RenameHow {
            noreplace,
            exchange,
            whiteout,
        } = how;
        check_name(newname)?;
        if whiteout.is_some() {
            if exchange {
                return errno(libc::EINVAL);
            }
            self.room_to_grow()?;
            self.reserve_numbers()?;
        }
        self.mutate(|st, ch| {
            st.dir(parent)?;
            // A removed directory (kept while open) takes no new names.
            if st.dir(newparent)?.nlink == 0 {
                return errno(libc::ENOENT);
            }
            let src = st.child(parent, name).ok_or(Error::Errno(libc::ENOENT))?;
            let dst = st.child(newparent, newname);
            let src_is_dir = st.inode(src)?.kind == Kind::Dir;
            let now = Time::now();
            if exchange {
                let dst = dst.ok_or(Error::Errno(libc::ENOENT))?;
                if dst == src {
                    return Ok(());
                }
                let dst_is_dir = st.inode(dst)?.kind == Kind::Dir;
                // Neither may end up inside itself.
                if (src_is_dir && st.is_ancestor(src, newparent))
                    || (dst_is_dir && st.is_ancestor(dst, parent))
                {
                    return errno(libc::EINVAL);
                }
                st.set_entry(ch, parent, name, Some(dst));
                st.set_entry(ch, newparent, newname, Some(src));
                for (ino, new_parent) in [(src, newparent), (dst, parent)] {
                    let i = st.inode_mut(ino, ch)?;
                    i.ctime = now;
                    i.parent = new_parent;
                }
                if parent != newparent && src_is_dir != dst_is_dir {
                    let (gains, loses) = if src_is_dir {
                        (newparent, parent)
                    } else {
                        (parent, newparent)
                    };
                    st.inode_mut(gains, ch)?.nlink += 1;
                    st.inode_mut(loses, ch)?.nlink -= 1;
                }
                st.touch_dir(ch, parent, now)?;
                st.touch_dir(ch, newparent, now)?;
                return Ok(());
            }
            if let Some(dst) = dst {
                if noreplace {
                    return errno(libc::EEXIST);
                }
                if dst == src {
                    return Ok(()); // two names of one inode: POSIX says do nothing
                }
                let d = st.inode(dst)?;
                match (src_is_dir, d.kind == Kind::Dir) {
                    (true, false) => return errno(libc::ENOTDIR),
                    (false, true) => return errno(libc::EISDIR),
                    (true, true) if st.children.get(&dst).is_some_and(|c| !c.is_empty()) => {
                        return errno(libc::ENOTEMPTY)
                    }
                    _ => {}
                }
            }
            if src_is_dir && st.is_ancestor(src, newparent) {
                return errno(libc::EINVAL);
            }
            // Checked; now change.
            if let Some(dst) = dst {
                if src_is_dir {
                    st.inode_mut(newparent, ch)?.nlink -= 1;
                }
                st.drop_link(ch, dst, now)?;
            }
            st.set_entry(ch, parent, name, None);
            st.set_entry(ch, newparent, newname, Some(src));
            if let Some((uid, gid)) = whiteout {
                let gid = match st.inode(parent)?.perm & libc::S_ISGID as u16 {
                    0 => gid,
                    _ => st.inode(parent)?.gid,
                };
                let ino = st.alloc_ino();
                let whiteout = Inode {
                    ino,
                    kind: Kind::CharDev,
                    perm: 0,
                    uid,
                    gid,
                    nlink: 1,
                    size: 0,
                    rdev: 0,
                    atime: now,
                    mtime: now,
                    ctime: now,
                    crtime: now,
                    parent,
                    layout: None,
                    object: ino,
                    has_data: false,
                    symlink: Vec::new(),
                };
                st.inodes.insert(ino, whiteout);
                ch.inodes.insert(ino);
                st.set_entry(ch, parent, name, Some(ino));
            }
            let moved = st.inode_mut(src, ch)?;
            moved.ctime = now;
            // Files remember the folder they were last named in (it decides their cache class).
            moved.parent = newparent;
            if src_is_dir && parent != newparent {
                st.inode_mut(parent, ch)?.nlink -= 1;
                st.inode_mut(newparent, ch)?.nlink += 1;
            }
            st.touch_dir(ch, parent, now)?;
            st.touch_dir(ch, newparent, now)?;
            Ok(())
        })
    }
}
