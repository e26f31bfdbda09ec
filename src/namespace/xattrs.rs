//! Extended attributes: values live in the store, memory keeps each inode's total and
//! which ACLs it has.

use super::*;

impl State {
    /// Sets (or with `None` removes) xattr `name` of `ino` in this operation, keeping the
    /// inode's total: ENOSPC past `XATTR_SPACE`, ENODATA to remove what is not there,
    /// EEXIST/ENODATA for XATTR_CREATE/XATTR_REPLACE. Checks come before any change.
    pub(super) fn put_xattr(
        &mut self,
        ch: &mut Changes,
        tx: &WriteTransaction,
        ino: u64,
        name: &[u8],
        value: Option<&[u8]>,
        flags: i32,
    ) -> Result<()> {
        let total = self.xattr_bytes.get(&ino).copied().unwrap_or(0);
        let old = match total {
            0 => None,
            _ => stored_size(tx, ino, name)?,
        };
        if flags & libc::XATTR_CREATE != 0 && old.is_some() {
            return errno(libc::EEXIST);
        }
        if (flags & libc::XATTR_REPLACE != 0 || value.is_none()) && old.is_none() {
            return errno(libc::ENODATA);
        }
        let total = total - old.unwrap_or(0) + value.map_or(0, |v| name.len() + v.len());
        if total > XATTR_SPACE {
            return errno(libc::ENOSPC);
        }
        match total {
            0 => self.xattr_bytes.remove(&ino),
            t => self.xattr_bytes.insert(ino, t),
        };
        let bit = acl_bit(name);
        if bit != 0 {
            let flags = self.acls.entry(ino).or_default();
            match value {
                Some(_) => *flags |= bit,
                None => *flags &= !bit,
            }
            if *flags == 0 {
                self.acls.remove(&ino);
            }
        }
        ch.xattrs
            .insert((ino, name.to_vec()), value.map(<[u8]>::to_vec));
        Ok(())
    }

    /// The ACL `name` of `ino`, if it has one.
    pub(super) fn acl(
        &self,
        tx: &WriteTransaction,
        ino: u64,
        name: &[u8],
    ) -> Result<Option<acl::Acl>> {
        if self.acls.get(&ino).copied().unwrap_or(0) & acl_bit(name) == 0 {
            return Ok(None);
        }
        let table = tx.open_table(XATTRS)?;
        let value = table.get((ino, name))?;
        Ok(value.and_then(|v| acl::Acl::parse(v.value())))
    }
}

pub(super) const HAS_ACCESS: u8 = 1;
pub(super) const HAS_DEFAULT: u8 = 2;

pub(super) fn acl_bit(name: &[u8]) -> u8 {
    match name {
        acl::ACCESS => HAS_ACCESS,
        acl::DEFAULT => HAS_DEFAULT,
        _ => 0,
    }
}

/// Bytes of xattr `name` of `ino` (name and value) as the store has it in `tx`.
pub(super) fn stored_size(tx: &WriteTransaction, ino: u64, name: &[u8]) -> Result<Option<usize>> {
    let table = tx.open_table(XATTRS)?;
    let size = table
        .get((ino, name))?
        .map(|v| name.len() + v.value().len());
    Ok(size)
}

impl Namespace {
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        let st = self.state.read();
        st.inode(ino)?;
        if !st.xattr_bytes.contains_key(&ino) || name.starts_with(INTERNAL) {
            return errno(libc::ENODATA);
        }
        if st.failed.is_some() {
            // The store is back at its last durable commit until it can be written again.
            if let Some(v) = st.unsynced.xattrs.get(&(ino, name.to_vec())) {
                return v.clone().ok_or(Error::Errno(libc::ENODATA));
            }
        }
        // Under the shared lock no change is half-done: the store has every one so far.
        let tx = self.db.read().begin_read()?;
        let value = tx.open_table(XATTRS)?.get((ino, name))?;
        value
            .map(|v| v.value().to_vec())
            .ok_or(Error::Errno(libc::ENODATA))
    }

    pub fn listxattr(&self, ino: u64) -> Result<Vec<Vec<u8>>> {
        let st = self.state.read();
        st.inode(ino)?;
        if !st.xattr_bytes.contains_key(&ino) {
            return Ok(Vec::new());
        }
        let tx = self.db.read().begin_read()?;
        let table = tx.open_table(XATTRS)?;
        let mut names = BTreeSet::new();
        for row in table.range((ino, &b""[..])..(ino + 1, &b""[..]))? {
            let (k, _) = row?;
            names.insert(k.value().1.to_vec());
        }
        if st.failed.is_some() {
            // The store is back at its last durable commit until it can be written again:
            // what changed since is in `unsynced`.
            for ((i, name), value) in st
                .unsynced
                .xattrs
                .range((ino, Vec::new())..(ino + 1, Vec::new()))
            {
                debug_assert_eq!(*i, ino);
                match value {
                    Some(_) => names.insert(name.clone()),
                    None => names.remove(name),
                };
            }
        }
        Ok(names
            .into_iter()
            .filter(|n| !n.starts_with(INTERNAL))
            .collect())
    }

    /// Bytes of xattr names and values `ino` holds (without stripefs's own settings).
    pub fn xattr_bytes(&self, ino: u64) -> usize {
        self.state
            .read()
            .xattr_bytes
            .get(&ino)
            .copied()
            .unwrap_or(0)
    }

    /// stripefs's own per-inode settings (a folder's cache target), kept with the xattrs under
    /// names no client can spell, and so never listed.
    pub fn set_internal(&self, ino: u64, key: &str, value: Option<&[u8]>) -> Result<()> {
        let name = [INTERNAL, key.as_bytes()].concat();
        self.mutate(|st, ch| {
            st.inode(ino)?;
            match value {
                Some(v) => {
                    st.internal
                        .entry(ino)
                        .or_default()
                        .insert(name.clone(), v.to_vec());
                    ch.xattrs.insert((ino, name), Some(v.to_vec()));
                }
                None => {
                    if let Some(x) = st.internal.get_mut(&ino) {
                        x.remove(&name);
                        if x.is_empty() {
                            st.internal.remove(&ino);
                        }
                    }
                    ch.xattrs.insert((ino, name), None);
                }
            }
            Ok(())
        })
    }

    /// Every inode holding an internal setting `key`, with its value.
    pub fn internal(&self, key: &str) -> Vec<(u64, Vec<u8>)> {
        let name = [INTERNAL, key.as_bytes()].concat();
        let st = self.state.read();
        st.internal
            .iter()
            .filter_map(|(&ino, x)| Some((ino, x.get(&name)?.clone())))
            .collect()
    }

    /// `flags` as setxattr(2): XATTR_CREATE, XATTR_REPLACE. A value past `XATTR_SIZE_MAX` is
    /// E2BIG; one that would take the inode's names and values past `XATTR_SPACE`, ENOSPC.
    /// ACLs go through `set_acl`.
    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        if name.is_empty() || name.len() > 255 {
            return errno(libc::ERANGE);
        }
        if value.len() > XATTR_SIZE_MAX {
            return errno(libc::E2BIG);
        }
        if acl::is_acl(name) {
            return errno(libc::EOPNOTSUPP);
        }
        self.room_to_grow()?;
        self.mutate_tx(|st, ch, tx| {
            st.inode(ino)?;
            st.put_xattr(ch, tx, ino, name, Some(value), flags)?;
            st.inode_mut(ino, ch)?.ctime = Time::now();
            Ok(())
        })
    }

    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        if acl::is_acl(name) {
            return errno(libc::EOPNOTSUPP);
        }
        self.mutate_tx(|st, ch, tx| {
            st.inode(ino)?;
            st.put_xattr(ch, tx, ino, name, None, 0)?;
            st.inode_mut(ino, ch)?.ctime = Time::now();
            Ok(())
        })
    }

    /// Sets (`Some`) or removes (`None`) an access or default ACL, as ext4 does: an access
    /// ACL sets the mode's permission bits (and is not kept when the mode says it all), and
    /// drops set-group-ID when `kill_sgid` (the caller is neither in the file's group nor
    /// root). A default ACL is for directories only (EACCES).
    pub fn set_acl(
        &self,
        ino: u64,
        default: bool,
        value: Option<&[u8]>,
        kill_sgid: bool,
    ) -> Result<Inode> {
        let acl = match value {
            Some(v) => Some(acl::Acl::parse(v).ok_or(Error::Errno(libc::EINVAL))?),
            None => None,
        };
        self.mutate_tx(|st, ch, tx| {
            let i = st.inode(ino)?;
            if default && i.kind != Kind::Dir {
                return match acl {
                    Some(_) => errno(libc::EACCES),
                    None => Ok(i.clone()),
                };
            }
            let had_access = st.acls.get(&ino).is_some_and(|a| a & HAS_ACCESS != 0);
            let mut perm = i.perm;
            match (&acl, default) {
                (Some(a), true) => {
                    st.put_xattr(ch, tx, ino, acl::DEFAULT, Some(&a.to_bytes()), 0)?;
                }
                // Removing an ACL that is not there succeeds, as on ext4.
                (None, true) if st.acls.get(&ino).is_some_and(|a| a & HAS_DEFAULT != 0) => {
                    st.put_xattr(ch, tx, ino, acl::DEFAULT, None, 0)?
                }
                (None, true) => {}
                (Some(a), false) => {
                    perm = (perm & !0o777) | a.mode();
                    if kill_sgid {
                        perm &= !(libc::S_ISGID as u16);
                    }
                    if !a.is_mode() {
                        st.put_xattr(ch, tx, ino, acl::ACCESS, Some(&a.to_bytes()), 0)?;
                    } else if had_access {
                        st.put_xattr(ch, tx, ino, acl::ACCESS, None, 0)?;
                    }
                }
                (None, false) if had_access => st.put_xattr(ch, tx, ino, acl::ACCESS, None, 0)?,
                (None, false) => {}
            }
            let i = st.inode_mut(ino, ch)?;
            i.perm = perm;
            i.ctime = Time::now();
            Ok(i.clone())
        })
    }
}
