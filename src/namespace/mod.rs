//! The namespace: inodes, directory entries, xattrs and layouts.
//!
//! The whole tree is held in memory (reads never touch the store) and every change is written
//! to an embedded ACID store (redb) in one transaction per operation. Those transactions are
//! not synced; `sync` makes everything so far durable in one fsync, which is what fsync,
//! fsyncdir, syncfs, the periodic committer and unmount call. After a crash the store opens at
//! its last durable commit, which is always a consistent tree.
//!
//! Extended attributes are the exception to "all in memory": their values stay in the store
//! and memory holds only each inode's total (names and values, at most `XATTR_SPACE`) and
//! which ACLs it has, so the daemon does not grow with the xattr bytes of the volume.
//! getxattr and listxattr read the store; a read transaction sees every commit so far,
//! unsynced ones included.

use crate::acl;
use crate::error::{errno, Error, Result};
use parking_lot::RwLock;
use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction,
};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use stripe::Layout;
use uuid::Uuid;

mod reserve;
mod store;
mod tree;
mod types;
mod xattrs;

pub use types::*;

const INODES: TableDefinition<u64, &[u8]> = TableDefinition::new("inodes");
const DIRENTS: TableDefinition<(u64, &[u8]), u64> = TableDefinition::new("dirents");
const XATTRS: TableDefinition<(u64, &[u8]), &[u8]> = TableDefinition::new("xattrs");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

pub const ROOT: u64 = 1;
/// Prefix of internal xattr names: the kernel passes only names with a namespace prefix.
const INTERNAL: &[u8] = b"\0stripefs.";
const NAME_MAX: usize = 255;
/// The most one xattr value may hold (Linux's XATTR_SIZE_MAX): E2BIG past it.
pub const XATTR_SIZE_MAX: usize = 64 * 1024;
/// The most the xattr names and values of one inode may hold together: ENOSPC past it, as
/// ext4 refuses what does not fit its xattr space.
pub const XATTR_SPACE: usize = 64 * 1024;
/// What the store keeps in memory (its page cache and write buffer): the namespace itself is
/// in memory already, so the store's cache only has to spare it re-reading the pages a
/// transaction changes, and must not hold the volume's xattr values.
const STORE_CACHE: usize = 4 << 20;

#[derive(Default)]
struct State {
    inodes: HashMap<u64, Inode>,
    children: HashMap<u64, BTreeMap<Vec<u8>, u64>>,
    /// stripefs's own settings per inode (small: a folder's cache target).
    internal: HashMap<u64, BTreeMap<Vec<u8>, Vec<u8>>>,
    /// Bytes of xattr names and values per inode (values live in the store only).
    xattr_bytes: HashMap<u64, usize>,
    /// Which ACLs an inode has (`HAS_ACCESS`, `HAS_DEFAULT`); the ACLs are in the store.
    acls: HashMap<u64, u8>,
    next_ino: u64,
    /// Numbers below this are durably reserved: handed out only below it.
    ino_reserved: u64,
    /// Open handles per inode: an unlinked inode lives on until its last close.
    open: HashMap<u64, u32>,
    /// Inodes changed in memory only (by writes), written with the next transaction.
    dirty: BTreeSet<u64>,
    /// The names of every regular file (directory, name): hard links give one file several.
    /// In memory only, built at load from the entries; what decides a file's cache class.
    names: HashMap<u64, Vec<Name>>,
    /// A file open after its last name went: that name, until the file is freed.
    last_name: HashMap<u64, Name>,
    /// Object ids whose inodes are gone; deleted once that is durable.
    doomed_objects: Vec<u64>,
    /// Object ids made obsolete since the last durable commit; doomed at the next one.
    doomed_pending: Vec<u64>,
    /// What the files of `doomed_pending` held.
    doomed_bytes: u64,
    changed_since_sync: bool,
    /// Every change since the last durable commit: what a store reopened after a failed
    /// write is written again from.
    unsynced: Changes,
    /// The store failed a write and could not be reopened (ENOSPC or EIO): changes are
    /// refused until it can.
    failed: Option<StoreDown>,
    last_recovery: Option<std::time::Instant>,
    recoveries: u64,
}

/// Why the store cannot be written, and the errno changes are refused with meanwhile.
#[derive(Clone)]
struct StoreDown {
    errno: i32,
    why: String,
}

impl StoreDown {
    fn error(&self) -> Error {
        Error::StoreDown {
            errno: self.errno,
            why: self.why.clone(),
        }
    }
}

/// Changes one operation makes, written in one transaction; also every change since the last
/// durable commit, which a store reopened after a failed write lacks. Keys only where memory
/// has the value (inodes, entries); xattr values, which memory does not keep, with them.
#[derive(Default)]
struct Changes {
    inodes: BTreeSet<u64>,
    dirents: BTreeMap<(u64, Vec<u8>), Option<u64>>,
    xattrs: BTreeMap<(u64, Vec<u8>), Option<Vec<u8>>>,
    /// Inodes whose every xattr goes (inode numbers are never reused: no xattr comes after).
    drop_xattrs: BTreeSet<u64>,
}

impl Changes {
    /// Adds `later`'s changes; where both change one key, `later`'s stands.
    fn absorb(&mut self, later: &Changes) {
        self.inodes.extend(&later.inodes);
        self.dirents
            .extend(later.dirents.iter().map(|(k, v)| (k.clone(), *v)));
        self.xattrs
            .extend(later.xattrs.iter().map(|(k, v)| (k.clone(), v.clone())));
        for &ino in &later.drop_xattrs {
            self.xattrs.retain(|(i, _), _| *i != ino);
            self.drop_xattrs.insert(ino);
        }
    }

    /// Bytes of xattr values held.
    fn xattr_bytes(&self) -> usize {
        self.xattrs.values().flatten().map(Vec::len).sum()
    }
}

impl State {
    fn inode(&self, ino: u64) -> Result<&Inode> {
        self.inodes.get(&ino).ok_or(Error::Errno(libc::ENOENT))
    }

    fn inode_mut(&mut self, ino: u64, ch: &mut Changes) -> Result<&mut Inode> {
        ch.inodes.insert(ino);
        self.inodes.get_mut(&ino).ok_or(Error::Errno(libc::ENOENT))
    }

    fn dir(&self, ino: u64) -> Result<&Inode> {
        let i = self.inode(ino)?;
        if i.kind != Kind::Dir {
            return errno(libc::ENOTDIR);
        }
        Ok(i)
    }

    fn child(&self, parent: u64, name: &[u8]) -> Option<u64> {
        self.children.get(&parent)?.get(name).copied()
    }

    fn set_entry(&mut self, ch: &mut Changes, parent: u64, name: &[u8], ino: Option<u64>) {
        let entries = self.children.entry(parent).or_default();
        let old = match ino {
            Some(i) => entries.insert(name.to_vec(), i),
            None => entries.remove(name),
        };
        ch.dirents.insert((parent, name.to_vec()), ino);
        if old != ino {
            if let Some(old) = old {
                self.name_gone(old, parent, name);
            }
            if let Some(new) = ino {
                self.name_added(new, parent, name);
            }
        }
    }

    /// A regular file got a name.
    fn name_added(&mut self, ino: u64, parent: u64, name: &[u8]) {
        if self.inodes.get(&ino).is_some_and(|i| i.kind == Kind::File) {
            self.last_name.remove(&ino);
            self.names
                .entry(ino)
                .or_default()
                .push((parent, name.into()));
        }
    }

    /// A name of a regular file went; its last one is kept while the file lives on (open).
    fn name_gone(&mut self, ino: u64, parent: u64, name: &[u8]) {
        let Some(list) = self.names.get_mut(&ino) else {
            return;
        };
        if let Some(at) = list.iter().position(|(p, n)| *p == parent && **n == *name) {
            let gone = list.swap_remove(at);
            if list.is_empty() {
                self.names.remove(&ino);
                if self.inodes.contains_key(&ino) {
                    self.last_name.insert(ino, gone);
                }
            }
        }
    }

    fn touch_dir(&mut self, ch: &mut Changes, dir: u64, now: Time) -> Result<()> {
        let d = self.inode_mut(dir, ch)?;
        d.mtime = now;
        d.ctime = now;
        Ok(())
    }

    fn alloc_ino(&mut self) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        ino
    }

    /// Drops one link; frees the inode when nothing names or holds it any more.
    fn drop_link(&mut self, ch: &mut Changes, ino: u64, now: Time) -> Result<()> {
        let i = self.inode_mut(ino, ch)?;
        i.ctime = now;
        if i.kind == Kind::Dir {
            i.nlink = 0;
        } else {
            i.nlink = i.nlink.saturating_sub(1);
        }
        self.free_if_unused(ch, ino);
        Ok(())
    }

    fn free_if_unused(&mut self, ch: &mut Changes, ino: u64) {
        let unused = matches!(self.inodes.get(&ino), Some(i) if i.nlink == 0)
            && self.open.get(&ino).copied().unwrap_or(0) == 0;
        if !unused {
            return;
        }
        if let Some(i) = self.inodes.remove(&ino) {
            if i.kind == Kind::File {
                self.doomed_pending.push(i.object);
                self.doomed_bytes += i.size;
            }
        }
        ch.inodes.insert(ino);
        self.children.remove(&ino);
        self.names.remove(&ino);
        self.last_name.remove(&ino);
        self.acls.remove(&ino);
        if self.internal.remove(&ino).is_some() | self.xattr_bytes.remove(&ino).is_some() {
            ch.drop_xattrs.insert(ino);
        }
        self.dirty.remove(&ino);
    }

    /// The layout the nearest ancestor directory (from `dir` up) sets, else `default`.
    fn inherited_layout(&self, dir: u64, default: Layout) -> Layout {
        let mut at = dir;
        loop {
            match self.inodes.get(&at) {
                Some(d) => {
                    if let Some(l) = d.layout {
                        return l;
                    }
                    if d.parent == at {
                        return default;
                    }
                    at = d.parent;
                }
                None => return default,
            }
        }
    }

    /// True if `ancestor` is `dir` or one of its ancestors.
    fn is_ancestor(&self, ancestor: u64, mut dir: u64) -> bool {
        loop {
            if dir == ancestor {
                return true;
            }
            match self.inodes.get(&dir) {
                Some(d) if d.parent != dir => dir = d.parent,
                _ => return false,
            }
        }
    }
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return errno(libc::ENAMETOOLONG);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return errno(libc::EINVAL);
    }
    Ok(())
}

pub struct Namespace {
    /// Replaced by a reopened store after a failed write (redb refuses all after one).
    db: RwLock<Database>,
    reserve: reserve::Reserve,
    /// The store's file, for messages.
    path: PathBuf,
    uuid: Uuid,
    state: RwLock<State>,
    policy: PolicyCell,
}

/// How the mount wants times and durability (mount(8)'s atime and sync options).
#[derive(Clone, Copy, Debug, Default)]
pub struct Policy {
    pub atime: mountcfg::Atime,
    pub nodiratime: bool,
    /// Every change durable when it returns (`sync`, `dirsync`).
    pub durable_changes: bool,
}

/// The mount's policy, read on every file read without a lock: a shared lock is still a
/// write to it, which every CPU would make on every read.
#[derive(Default)]
struct PolicyCell(std::sync::atomic::AtomicU8);

impl PolicyCell {
    const NODIRATIME: u8 = 1 << 2;
    const DURABLE: u8 = 1 << 3;

    fn get(&self) -> Policy {
        let bits = self.0.load(std::sync::atomic::Ordering::Relaxed);
        Policy {
            atime: match bits & 3 {
                1 => mountcfg::Atime::Strict,
                2 => mountcfg::Atime::Never,
                _ => mountcfg::Atime::Relatime,
            },
            nodiratime: bits & Self::NODIRATIME != 0,
            durable_changes: bits & Self::DURABLE != 0,
        }
    }

    fn set(&self, p: Policy) {
        let atime = match p.atime {
            mountcfg::Atime::Relatime => 0,
            mountcfg::Atime::Strict => 1,
            mountcfg::Atime::Never => 2,
        };
        let bits = atime
            | if p.nodiratime { Self::NODIRATIME } else { 0 }
            | if p.durable_changes { Self::DURABLE } else { 0 };
        self.0.store(bits, std::sync::atomic::Ordering::Relaxed);
    }
}

/// relatime also updates an access time this old.
const RELATIME_MAX_AGE: i64 = 24 * 3600;

/// The namespace store's state, for status output.
#[derive(Clone, Debug, Serialize)]
pub struct StoreHealth {
    /// "ok", or why changes are refused.
    pub state: String,
    /// Room kept beside the store so deletes commit on a full filesystem (0: spent).
    pub reserve_bytes: u64,
    /// Times the store was reopened and written again after a failed write.
    pub recoveries: u64,
}

/// Counts for status output.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Counts {
    pub inodes: u64,
    pub files: u64,
    pub directories: u64,
    pub bytes: u64,
}

impl Namespace {
    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    pub fn set_policy(&self, policy: Policy) {
        self.policy.set(policy);
    }

    /// Object ids are never reused: after a crash, ids handed out by lost transactions may
    /// name object files on the devices, so counting resumes above them.
    pub fn skip_ids_to(&self, next: u64) {
        let mut st = self.state.write();
        if st.next_ino < next {
            st.next_ino = next;
            st.changed_since_sync = true;
        }
    }

    /// Inodes left with no links by a crash while they were open are freed now.
    pub fn reap_orphans(&self) -> Result<()> {
        self.mutate(|st, ch| {
            let orphans: Vec<u64> = st
                .inodes
                .values()
                .filter(|i| i.nlink == 0)
                .map(|i| i.ino)
                .collect();
            for ino in orphans {
                log::info!("freeing inode {ino}, unlinked while open before a crash");
                st.free_if_unused(ch, ino);
            }
            Ok(())
        })
    }

    pub fn get(&self, ino: u64) -> Result<Inode> {
        self.state.read().inode(ino).cloned()
    }

    /// The parent of directory `dir` (the root is its own): the kernel's lookup of "..".
    pub fn parent_of(&self, dir: u64) -> Result<Inode> {
        let st = self.state.read();
        let parent = st.dir(dir)?.parent;
        st.inode(parent).cloned()
    }

    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Inode> {
        let st = self.state.read();
        st.dir(parent)?;
        if name.len() > NAME_MAX {
            return errno(libc::ENAMETOOLONG);
        }
        let ino = st.child(parent, name).ok_or(Error::Errno(libc::ENOENT))?;
        st.inode(ino).cloned()
    }

    /// The layout new files under `dir` get: the nearest ancestor's, else `default`.
    pub fn inherited_layout(&self, dir: u64, default: Layout) -> Layout {
        self.state.read().inherited_layout(dir, default)
    }

    pub fn setattr(&self, ino: u64, a: &SetAttr) -> Result<Inode> {
        self.mutate_tx(|st, ch, tx| {
            let i = st.inode(ino)?;
            if a.size.is_some() && i.kind == Kind::Dir {
                return errno(libc::EISDIR);
            }
            if a.size.is_some() && i.kind != Kind::File {
                return errno(libc::EINVAL);
            }
            // chmod rewrites an access ACL: owner, mask (else group) and other follow the mode.
            if let Some(p) = a.perm {
                if let Some(mut acl) = st.acl(tx, ino, acl::ACCESS)? {
                    acl.chmod(p);
                    st.put_xattr(ch, tx, ino, acl::ACCESS, Some(&acl.to_bytes()), 0)?;
                }
            }
            let now = Time::now();
            let i = st.inode_mut(ino, ch)?;
            if let Some(p) = a.perm {
                i.perm = p & 0o7777;
            }
            if let Some(u) = a.uid {
                i.uid = u;
            }
            if let Some(g) = a.gid {
                i.gid = g;
            }
            if let Some(s) = a.size {
                i.size = s;
                i.mtime = now;
            }
            if let Some(t) = a.atime {
                i.atime = t;
            }
            if let Some(t) = a.mtime {
                i.mtime = t;
            }
            i.ctime = a.ctime.unwrap_or(now);
            Ok(i.clone())
        })
    }

    /// A write ended at `end`: size, mtime and ctime change in memory, persisted with the next
    /// transaction or sync.
    pub fn note_write(&self, ino: u64, end: u64) -> Result<Inode> {
        let mut st = self.state.write();
        let now = Time::now();
        let i = st.inodes.get_mut(&ino).ok_or(Error::Errno(libc::ENOENT))?;
        i.size = i.size.max(end);
        i.mtime = now;
        i.ctime = now;
        i.has_data = true;
        let out = i.clone();
        st.dirty.insert(ino);
        Ok(out)
    }

    /// A read of `ino` (a file's data, or a directory's entries): its access time follows the
    /// mount's atime policy.
    pub fn note_read(&self, ino: u64) {
        if let Ok(seen) = self.get(ino) {
            self.note_read_of(&seen);
        }
    }

    /// As `note_read`, for an inode the reader looked up already (`seen`): most reads change
    /// nothing, and that is told from it without another lookup.
    pub fn note_read_of(&self, seen: &Inode) {
        if !self.atime_due(seen) {
            return;
        }
        let mut st = self.state.write();
        if let Some(i) = st.inodes.get_mut(&seen.ino) {
            if self.atime_due(i) {
                i.atime = Time::now();
                st.dirty.insert(seen.ino);
            }
        }
    }

    /// Whether a read of `i` now changes its access time, as the mount's atime policy says.
    pub fn atime_due(&self, i: &Inode) -> bool {
        let policy = self.policy.get();
        match policy.atime {
            _ if i.kind == Kind::Dir && policy.nodiratime => false,
            mountcfg::Atime::Never => false,
            mountcfg::Atime::Strict => true,
            mountcfg::Atime::Relatime => {
                i.atime <= i.mtime
                    || i.atime <= i.ctime
                    || Time::now().secs - i.atime.secs >= RELATIME_MAX_AGE
            }
        }
    }

    /// A handle on `ino` opens: the inode lives on, unlinked or removed, until the last one
    /// is released. ENOENT if it is gone already (freed between the kernel's lookup and now).
    pub fn opened(&self, ino: u64) -> Result<()> {
        let mut st = self.state.write();
        st.inode(ino)?;
        *st.open.entry(ino).or_insert(0) += 1;
        Ok(())
    }

    /// opendir: the directory's entries now (as `list`), and a handle that keeps the directory
    /// alive after rmdir or a rename over it, as an open file is kept: fstat then shows nlink
    /// 0, its stream reads only "." and "..", nothing can be made in it, and the last
    /// `released` frees it.
    pub fn open_dir(&self, dir: u64) -> Result<Vec<(Vec<u8>, u64, Kind)>> {
        // Listed under the shared lock (a large directory must not hold up every other
        // call); a directory removed and freed in between is ENOENT at `opened`.
        let entries = self.list(dir)?;
        self.opened(dir)?;
        Ok(entries)
    }

    /// Last close of an unlinked inode frees it. Returns true if that was the last handle.
    pub fn released(&self, ino: u64) -> Result<bool> {
        let mut st = self.state.write();
        let n = st.open.entry(ino).or_insert(1);
        *n = n.saturating_sub(1);
        if *n > 0 {
            return Ok(false);
        }
        st.open.remove(&ino);
        // Only an unlinked inode changes anything on its last close: most closes need no
        // transaction.
        if matches!(st.inodes.get(&ino), Some(i) if i.nlink == 0) {
            let mut ch = Changes::default();
            st.free_if_unused(&mut ch, ino);
            self.persist(&mut st, ch)?;
        }
        Ok(true)
    }

    /// How the store is doing: whether it takes changes, its reserve, how often it came back.
    pub fn store_health(&self) -> StoreHealth {
        let st = self.state.read();
        StoreHealth {
            state: match &st.failed {
                None => "ok".into(),
                Some(down) => down.error().to_string(),
            },
            reserve_bytes: self.reserve.held(),
            recoveries: st.recoveries,
        }
    }

    /// Bytes of deleted files that the next commit frees.
    pub fn freed_by_commit(&self) -> u64 {
        self.state.read().doomed_bytes
    }

    /// Directory entries, in name order (a snapshot for one directory stream).
    pub fn list(&self, dir: u64) -> Result<Vec<(Vec<u8>, u64, Kind)>> {
        let st = self.state.read();
        st.dir(dir)?;
        Ok(st
            .children
            .get(&dir)
            .map(|c| {
                c.iter()
                    .filter_map(|(n, &i)| Some((n.clone(), i, st.inodes.get(&i)?.kind)))
                    .collect()
            })
            .unwrap_or_default())
    }

    pub fn set_layout(&self, ino: u64, layout: Option<Layout>) -> Result<Inode> {
        self.mutate(|st, ch| {
            let i = st.inode(ino)?;
            match i.kind {
                Kind::Dir => {}
                Kind::File if layout.is_none() => return errno(libc::EINVAL),
                Kind::File if i.size != 0 || i.has_data => return errno(libc::EBUSY),
                Kind::File => {}
                _ => return errno(libc::EINVAL),
            }
            let i = st.inode_mut(ino, ch)?;
            i.layout = layout;
            i.ctime = Time::now();
            Ok(i.clone())
        })
    }

    /// A fresh object id for a migration's copy.
    pub fn new_object_id(&self) -> Result<u64> {
        self.reserve_numbers()?;
        self.mutate(|st, _| Ok(st.alloc_ino()))
    }

    /// Points a file at a new copy of its data; the old objects go after the next sync.
    pub fn switch_object(&self, ino: u64, object: u64, layout: Layout, size: u64) -> Result<Inode> {
        self.mutate(|st, ch| {
            let i = st.inode_mut(ino, ch)?;
            let old = i.object;
            let now = Time::now();
            if i.size != size {
                i.size = size;
                i.mtime = now;
            }
            i.object = object;
            i.layout = Some(layout);
            i.ctime = now;
            let out = i.clone();
            st.doomed_pending.push(old);
            Ok(out)
        })
    }

    /// Gives the file `ino` the layout `layout` over the same object (a device replaced: the
    /// layout's ring changes, every byte stays where it is). Its times stay: its data did not
    /// change.
    pub fn relayout(&self, ino: u64, layout: Layout) -> Result<Inode> {
        self.mutate(|st, ch| {
            let i = st.inode_mut(ino, ch)?;
            i.layout = Some(layout);
            Ok(i.clone())
        })
    }

    /// Marks an object id as garbage (a migration copy that was abandoned).
    pub fn discard_object(&self, object: u64) {
        self.state.write().doomed_pending.push(object);
    }

    /// Every name of the regular file `ino` (directory, name), in no set order; a file open
    /// after its last name went has that one. Empty for anything else.
    pub fn names_of(&self, ino: u64) -> Vec<Name> {
        let st = self.state.read();
        match st.names.get(&ino) {
            Some(list) => list.clone(),
            None => st.last_name.get(&ino).cloned().into_iter().collect(),
        }
    }

    /// The folders from `dir` up to the root, `dir` first (the root last).
    pub fn folders_above(&self, dir: u64) -> Vec<u64> {
        let st = self.state.read();
        let mut out = vec![dir];
        let mut at = dir;
        for _ in 0..4096 {
            match st.inodes.get(&at) {
                Some(d) if d.parent != at => {
                    at = d.parent;
                    out.push(at);
                }
                _ => break,
            }
        }
        out
    }

    /// The name of `ino` in `parent`, if it has one there.
    pub fn name_in(&self, parent: u64, ino: u64) -> Option<Vec<u8>> {
        let st = self.state.read();
        st.children
            .get(&parent)?
            .iter()
            .find(|(_, &i)| i == ino)
            .map(|(n, _)| n.clone())
    }

    pub fn counts(&self) -> Counts {
        let st = self.state.read();
        let mut c = Counts {
            inodes: st.inodes.len() as u64,
            ..Counts::default()
        };
        for i in st.inodes.values() {
            match i.kind {
                Kind::File => {
                    c.files += 1;
                    c.bytes += i.size;
                }
                Kind::Dir => c.directories += 1,
                _ => {}
            }
        }
        c
    }

    /// Every inode and every entry, for fsck.
    pub fn snapshot(&self) -> (Vec<Inode>, Vec<Entry>) {
        let st = self.state.read();
        let inodes = st.inodes.values().cloned().collect();
        let entries = st
            .children
            .iter()
            .flat_map(|(&p, c)| c.iter().map(move |(n, &i)| (p, n.clone(), i)))
            .collect();
        (inodes, entries)
    }

    /// fsck's repairs: replace an inode record, drop one, or drop an entry.
    pub fn repair_inode(&self, ino: u64, inode: Option<Inode>) -> Result<()> {
        self.mutate(|st, ch| {
            match inode {
                Some(i) => st.inodes.insert(ino, i),
                None => st.inodes.remove(&ino),
            };
            ch.inodes.insert(ino);
            Ok(())
        })
    }

    pub fn repair_entry(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.mutate(|st, ch| {
            st.set_entry(ch, parent, name, None);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests;
