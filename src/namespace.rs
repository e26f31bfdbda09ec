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
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use stripe::Layout;
use uuid::Uuid;

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

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDev,
    BlockDev,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Time {
    pub secs: i64,
    pub nsecs: u32,
}

impl Time {
    pub fn now() -> Time {
        Time::from(SystemTime::now())
    }
}

impl From<SystemTime> for Time {
    fn from(t: SystemTime) -> Time {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Time {
                secs: d.as_secs() as i64,
                nsecs: d.subsec_nanos(),
            },
            Err(e) => {
                let d = e.duration();
                let (mut secs, mut nsecs) = (-(d.as_secs() as i64), d.subsec_nanos());
                if nsecs > 0 {
                    secs -= 1;
                    nsecs = 1_000_000_000 - nsecs;
                }
                Time { secs, nsecs }
            }
        }
    }
}

impl From<Time> for SystemTime {
    fn from(t: Time) -> SystemTime {
        if t.secs >= 0 {
            UNIX_EPOCH + std::time::Duration::new(t.secs as u64, t.nsecs)
        } else {
            UNIX_EPOCH - std::time::Duration::from_secs((-t.secs) as u64)
                + std::time::Duration::from_nanos(t.nsecs as u64)
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Inode {
    pub ino: u64,
    pub kind: Kind,
    /// Permission bits including suid, sgid and sticky (07777).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub rdev: u32,
    pub atime: Time,
    pub mtime: Time,
    pub ctime: Time,
    pub crtime: Time,
    /// Directories: the parent directory (the root is its own parent).
    pub parent: u64,
    /// Files: where the data lives. Directories: the default for new files beneath, if set.
    pub layout: Option<Layout>,
    /// Files: the object id naming the data's object files (changes when migrated).
    pub object: u64,
    /// Files: data was ever written, so objects are expected on the devices.
    pub has_data: bool,
    pub symlink: Vec<u8>,
}

/// What the volume knows durably of its cache: the volume generation (every mount without a
/// cache file advances it, so a cache file's lines count only for the generation it used),
/// which cache file it last used, and whether that one may hold data the devices lack.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CacheBinding {
    pub generation: u64,
    /// The id of the cache file last used, and where it was.
    pub cache: Option<[u8; 16]>,
    pub path: String,
    /// That cache may hold dirty data: it must be there, undamaged, at the next mount.
    pub dirty: bool,
}

/// A directory entry: (parent, name, inode).
pub type Entry = (u64, Vec<u8>, u64);

/// What a new node is made of.
pub struct NewNode<'a> {
    pub kind: Kind,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub symlink: &'a [u8],
    /// The creator's umask, for the daemon to apply (FUSE_DONT_MASK) unless the directory
    /// has a default ACL; 0 when the kernel applied it already.
    pub umask: u16,
}

impl NewNode<'static> {
    /// A node of `kind` and permission bits `perm` (07777), owned by root until the caller
    /// says otherwise.
    pub fn new(kind: Kind, perm: u32) -> NewNode<'static> {
        NewNode {
            kind,
            perm: (perm & 0o7777) as u16,
            uid: 0,
            gid: 0,
            rdev: 0,
            symlink: b"",
            umask: 0,
        }
    }
}

/// Attribute changes, as setattr(2)-family calls ask for them.
#[derive(Default)]
pub struct SetAttr {
    pub perm: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<Time>,
    pub mtime: Option<Time>,
    pub ctime: Option<Time>,
}

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
    /// Open handles per inode: an unlinked inode lives on until its last close.
    open: HashMap<u64, u32>,
    /// Inodes changed in memory only (by writes), written with the next transaction.
    dirty: BTreeSet<u64>,
    /// Object ids whose inodes are gone; deleted once that is durable.
    doomed_objects: Vec<u64>,
    /// Object ids made obsolete since the last durable commit; doomed at the next one.
    doomed_pending: Vec<u64>,
    changed_since_sync: bool,
}

/// Changes one operation makes, written in one transaction.
#[derive(Default)]
struct Changes {
    inodes: BTreeSet<u64>,
    dirents: Vec<(u64, Vec<u8>, Option<u64>)>,
    xattrs: Vec<(u64, Vec<u8>, Option<Vec<u8>>)>,
    /// Inodes whose every xattr goes.
    drop_xattrs: Vec<u64>,
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
        match ino {
            Some(i) => entries.insert(name.to_vec(), i),
            None => entries.remove(name),
        };
        ch.dirents.push((parent, name.to_vec(), ino));
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
            }
        }
        ch.inodes.insert(ino);
        self.children.remove(&ino);
        self.acls.remove(&ino);
        if self.internal.remove(&ino).is_some() | self.xattr_bytes.remove(&ino).is_some() {
            ch.drop_xattrs.push(ino);
        }
        self.dirty.remove(&ino);
    }

    /// Sets (or with `None` removes) xattr `name` of `ino` in this operation, keeping the
    /// inode's total: ENOSPC past `XATTR_SPACE`, ENODATA to remove what is not there,
    /// EEXIST/ENODATA for XATTR_CREATE/XATTR_REPLACE. Checks come before any change.
    fn put_xattr(
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
            .push((ino, name.to_vec(), value.map(<[u8]>::to_vec)));
        Ok(())
    }

    /// The ACL `name` of `ino`, if it has one.
    fn acl(&self, tx: &WriteTransaction, ino: u64, name: &[u8]) -> Result<Option<acl::Acl>> {
        if self.acls.get(&ino).copied().unwrap_or(0) & acl_bit(name) == 0 {
            return Ok(None);
        }
        let table = tx.open_table(XATTRS)?;
        let value = table.get((ino, name))?;
        Ok(value.and_then(|v| acl::Acl::parse(v.value())))
    }

    /// True if `ancestor` is `dir` or one of its ancestors.
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

const HAS_ACCESS: u8 = 1;
const HAS_DEFAULT: u8 = 2;

fn acl_bit(name: &[u8]) -> u8 {
    match name {
        acl::ACCESS => HAS_ACCESS,
        acl::DEFAULT => HAS_DEFAULT,
        _ => 0,
    }
}

/// Bytes of xattr `name` of `ino` (name and value) as the store has it in `tx`.
fn stored_size(tx: &WriteTransaction, ino: u64, name: &[u8]) -> Result<Option<usize>> {
    let table = tx.open_table(XATTRS)?;
    let size = table
        .get((ino, name))?
        .map(|v| name.len() + v.value().len());
    Ok(size)
}

fn encode(inode: &Inode) -> Vec<u8> {
    bincode::serde::encode_to_vec(inode, bincode::config::standard()).expect("inode encodes")
}

fn decode(bytes: &[u8]) -> Result<Inode> {
    // A damaged record must not make bincode allocate what its length fields claim.
    let config = bincode::config::standard().with_limit::<{ 1 << 20 }>();
    bincode::serde::decode_from_slice(bytes, config)
        .map(|(i, _)| i)
        .map_err(|e| Error::Store(format!("damaged inode record: {e}")))
}

fn open_error(path: &Path, e: redb::DatabaseError) -> Error {
    match e {
        redb::DatabaseError::DatabaseAlreadyOpen => Error::Usage(format!(
            "namespace store {} is in use by another stripefs mount",
            path.display()
        )),
        e => Error::Store(e.to_string()),
    }
}

/// Runs `f` on the store at `path`: a panic inside (redb on a damaged page) becomes an error,
/// and every store error names the file.
fn guarded<T>(path: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    guarded_as("read", path, f)
}

/// `guarded`, for `doing` (read or written) in the messages.
fn guarded_as<T>(doing: &str, path: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match crate::panics::catch(f) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(Error::Store(msg))) => Err(Error::Store(format!(
            "{}: cannot be {doing}: {msg}",
            path.display()
        ))),
        Ok(Err(e)) => Err(e),
        Err(panic) => Err(Error::Store(format!(
            "{} is damaged: the store gave up as it was {doing} ({panic}); restore it from a \
             backup",
            path.display()
        ))),
    }
}

/// The first bytes of every redb file.
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

/// The store at `path` over an overlay (its writes stay in memory), recovered if it was not
/// closed cleanly, with every checksum verified: redb checks them only when repairing, so a
/// damaged page would otherwise read as data.
fn verified(path: &Path) -> Result<Database> {
    let overlay = crate::overlay::Overlay::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::Usage(format!(
            "namespace store {} is missing; was `stripefs mkfs` run, and is volume.meta right?",
            path.display()
        )),
        _ => Error::Store(e.to_string()),
    })?;
    // Without the magic number redb would make a new store (in the overlay) and find it sound.
    let mut magic = [0u8; REDB_MAGIC.len()];
    let has_magic = std::fs::File::open(path)
        .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut magic, 0))
        .is_ok();
    if !has_magic || magic != REDB_MAGIC {
        return Err(Error::Store(
            "not a redb store (its first bytes are not redb's magic number)".into(),
        ));
    }
    let mut db = redb::Builder::new()
        .create_with_backend(overlay)
        .map_err(|e| open_error(path, e))?;
    match db.check_integrity() {
        Ok(true) => Ok(db),
        Ok(false) => Err(Error::Store(
            "damaged: its checksums do not match its contents".into(),
        )),
        Err(e) => Err(Error::Store(format!(
            "damaged: the check of its checksums failed ({e})"
        ))),
    }
}

/// Reads the whole tree of a store.
fn load(db: &impl ReadableDatabase) -> Result<(Uuid, State)> {
    let mut st = State::default();
    let tx = db.begin_read()?;
    let meta = tx.open_table(META)?;
    let raw = meta
        .get("uuid")?
        .ok_or_else(|| Error::Store("no volume uuid in the namespace".into()))?;
    let uuid =
        Uuid::from_slice(raw.value()).map_err(|e| Error::Store(format!("bad volume uuid: {e}")))?;
    let next = meta
        .get("next_ino")?
        .ok_or_else(|| Error::Store("no inode counter in the namespace".into()))?;
    let next: [u8; 8] = next
        .value()
        .try_into()
        .map_err(|_| Error::Store("bad inode counter in the namespace".into()))?;
    st.next_ino = u64::from_le_bytes(next);
    for row in tx.open_table(INODES)?.iter()? {
        let (k, v) = row?;
        let inode = decode(v.value()).map_err(|e| match e {
            Error::Store(msg) => Error::Store(format!("inode {}: {msg}", k.value())),
            e => e,
        })?;
        st.inodes.insert(k.value(), inode);
    }
    for row in tx.open_table(DIRENTS)?.iter()? {
        let (k, v) = row?;
        let (parent, name) = k.value();
        st.children
            .entry(parent)
            .or_default()
            .insert(name.to_vec(), v.value());
    }
    for row in tx.open_table(XATTRS)?.iter()? {
        let (k, v) = row?;
        let (ino, name) = k.value();
        if name.starts_with(INTERNAL) {
            st.internal
                .entry(ino)
                .or_default()
                .insert(name.to_vec(), v.value().to_vec());
        } else {
            *st.xattr_bytes.entry(ino).or_default() += name.len() + v.value().len();
            if acl_bit(name) != 0 {
                *st.acls.entry(ino).or_default() |= acl_bit(name);
            }
        }
    }
    if !st.inodes.contains_key(&ROOT) {
        return Err(Error::Store("the namespace has no root directory".into()));
    }
    Ok((uuid, st))
}

pub struct Namespace {
    db: Database,
    /// The store's file, for messages.
    path: PathBuf,
    uuid: Uuid,
    state: RwLock<State>,
    policy: RwLock<Policy>,
}

/// How the mount wants times and durability (mount(8)'s atime and sync options).
#[derive(Clone, Copy, Debug, Default)]
pub struct Policy {
    pub atime: mountcfg::Atime,
    pub nodiratime: bool,
    /// Every change durable when it returns (`sync`, `dirsync`).
    pub durable_changes: bool,
}

/// relatime also updates an access time this old.
const RELATIME_MAX_AGE: i64 = 24 * 3600;

/// Counts for status output.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Counts {
    pub inodes: u64,
    pub files: u64,
    pub directories: u64,
    pub bytes: u64,
}

impl Namespace {
    /// Makes a new, empty namespace with a root directory owned by `uid:gid`.
    pub fn format(path: &Path, uuid: Uuid, uid: u32, gid: u32) -> Result<()> {
        if path.exists() {
            std::fs::remove_file(path)
                .map_err(|e| Error::Store(format!("{}: {e}", path.display())))?;
        }
        let db = Database::builder()
            .set_cache_size(STORE_CACHE)
            .create(path)?;
        let now = Time::now();
        let root = Inode {
            ino: ROOT,
            kind: Kind::Dir,
            perm: 0o755,
            uid,
            gid,
            nlink: 2,
            size: 0,
            rdev: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            parent: ROOT,
            layout: None,
            object: 0,
            has_data: false,
            symlink: Vec::new(),
        };
        let tx = db.begin_write()?;
        {
            let mut meta = tx.open_table(META)?;
            meta.insert("uuid", uuid.as_bytes().as_slice())?;
            meta.insert("next_ino", 2u64.to_le_bytes().as_slice())?;
            tx.open_table(INODES)?
                .insert(ROOT, encode(&root).as_slice())?;
            tx.open_table(DIRENTS)?;
            tx.open_table(XATTRS)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Opens a volume's namespace store and loads it into memory. A damaged store is an error
    /// naming the file, never a panic, and is left as it was: it is recovered (after a crash),
    /// checked (every checksum) and loaded over an in-memory overlay first, and opened for
    /// writing only once that went well.
    pub fn open(path: &Path) -> Result<Namespace> {
        let (uuid, st) = guarded(path, || load(&verified(path)?))?;
        let db = guarded(path, || {
            Database::builder()
                .set_cache_size(STORE_CACHE)
                .open(path)
                .map_err(|e| open_error(path, e))
        })?;
        Ok(Namespace {
            db,
            path: path.to_path_buf(),
            uuid,
            state: RwLock::new(st),
            policy: RwLock::new(Policy::default()),
        })
    }

    /// The store at `path`, checked and loaded as `open` does, with every write kept in memory:
    /// the file is never written (fsck without --repair).
    pub fn open_detached(path: &Path) -> Result<Namespace> {
        guarded(path, || {
            let db = verified(path)?;
            let (uuid, st) = load(&db)?;
            Ok(Namespace {
                db,
                path: path.to_path_buf(),
                uuid,
                state: RwLock::new(st),
                policy: RwLock::new(Policy::default()),
            })
        })
    }

    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    pub fn set_policy(&self, policy: Policy) {
        *self.policy.write() = policy;
    }

    /// Whether the last mount ended with `mark_clean` (false after a crash).
    pub fn was_clean(&self) -> Result<bool> {
        guarded(&self.path, || {
            let tx = self.db.begin_read()?;
            let meta = tx.open_table(META)?;
            // A store from mkfs has no flag yet: nothing ran on it, so it is clean.
            Ok(meta.get("clean")?.is_none_or(|v| v.value() == [1]))
        })
    }

    /// Records durably whether the volume is cleanly stopped (mount sets false, unmount true).
    pub fn set_clean(&self, clean: bool) -> Result<()> {
        self.set_meta_durably("clean", &[u8::from(clean)])
    }

    pub fn cache_binding(&self) -> Result<CacheBinding> {
        let tx = self.db.begin_read()?;
        let meta = tx.open_table(META)?;
        match meta.get("cache")? {
            None => Ok(CacheBinding::default()),
            Some(v) => serde_json::from_slice(v.value())
                .map_err(|e| Error::Store(format!("the namespace's cache binding: {e}"))),
        }
    }

    /// Records the cache binding durably before returning.
    pub fn set_cache_binding(&self, binding: &CacheBinding) -> Result<()> {
        let bytes = serde_json::to_vec(binding).map_err(|e| Error::Store(e.to_string()))?;
        self.set_meta_durably("cache", &bytes)
    }

    fn set_meta_durably(&self, key: &str, value: &[u8]) -> Result<()> {
        let mut st = self.state.write();
        guarded_as("written", &self.path, || {
            let tx = self.db.begin_write()?;
            tx.open_table(META)?.insert(key, value)?;
            tx.commit()?;
            Ok(())
        })?;
        st.changed_since_sync = true;
        // The objects this makes safe to delete wait for the next `sync`, whose caller
        // deletes them.
        self.make_durable(&mut st)
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

    /// Runs one operation against the tree and writes what it changed in one transaction
    /// (durable at once under `sync`/`dirsync`, else at the next `sync`).
    /// `f` must check everything before it changes anything: an error leaves memory as it was.
    fn mutate<T>(&self, f: impl FnOnce(&mut State, &mut Changes) -> Result<T>) -> Result<T> {
        self.mutate_tx(|st, ch, _| f(st, ch))
    }

    /// `mutate` for operations that read the store too (xattr values): `f` reads through the
    /// operation's own transaction.
    fn mutate_tx<T>(
        &self,
        f: impl FnOnce(&mut State, &mut Changes, &WriteTransaction) -> Result<T>,
    ) -> Result<T> {
        let mut st = self.state.write();
        // A damaged page met by the write is an error for this call, not a panic of the daemon.
        let out = guarded_as("written", &self.path, || {
            let mut tx = self.db.begin_write()?;
            tx.set_durability(Durability::None)?;
            let mut ch = Changes::default();
            let out = match f(&mut st, &mut ch, &tx) {
                Ok(out) => out,
                Err(e) => {
                    tx.abort()?;
                    return Err(e);
                }
            };
            self.persist_in(&mut st, ch, tx)?;
            Ok(out)
        })?;
        if self.policy.read().durable_changes {
            self.make_durable(&mut st)?;
        }
        Ok(out)
    }

    fn persist(&self, st: &mut State, ch: Changes, durability: Durability) -> Result<()> {
        // A damaged page met by the write is an error for this call, not a panic of the daemon.
        guarded_as("written", &self.path, || {
            let mut tx = self.db.begin_write()?;
            tx.set_durability(durability)?;
            self.persist_in(st, ch, tx)
        })
    }

    fn persist_in(&self, st: &mut State, mut ch: Changes, tx: WriteTransaction) -> Result<()> {
        ch.inodes.extend(std::mem::take(&mut st.dirty));
        {
            let mut inodes = tx.open_table(INODES)?;
            for ino in &ch.inodes {
                match st.inodes.get(ino) {
                    Some(i) => inodes.insert(*ino, encode(i).as_slice())?,
                    None => inodes.remove(*ino)?,
                };
            }
            let mut dirents = tx.open_table(DIRENTS)?;
            for (parent, name, ino) in &ch.dirents {
                match ino {
                    Some(i) => dirents.insert((*parent, name.as_slice()), *i)?,
                    None => dirents.remove((*parent, name.as_slice()))?,
                };
            }
            let mut xattrs = tx.open_table(XATTRS)?;
            for (ino, name, value) in &ch.xattrs {
                match value {
                    Some(v) => xattrs.insert((*ino, name.as_slice()), v.as_slice())?,
                    None => xattrs.remove((*ino, name.as_slice()))?,
                };
            }
            for &ino in &ch.drop_xattrs {
                xattrs.retain_in((ino, &b""[..])..(ino + 1, &b""[..]), |_, _| false)?;
            }
            tx.open_table(META)?
                .insert("next_ino", st.next_ino.to_le_bytes().as_slice())?;
        }
        tx.commit()?;
        st.changed_since_sync = true;
        Ok(())
    }

    /// Makes every change so far durable. Returns the object ids that are now safe to delete.
    pub fn sync(&self) -> Result<Vec<u64>> {
        let mut st = self.state.write();
        self.make_durable(&mut st)?;
        Ok(std::mem::take(&mut st.doomed_objects))
    }

    fn make_durable(&self, st: &mut State) -> Result<()> {
        if !st.changed_since_sync && st.dirty.is_empty() {
            return Ok(());
        }
        faultpoint::fault_point!("namespace.commit");
        self.persist(st, Changes::default(), Durability::Immediate)?;
        st.changed_since_sync = false;
        let pending = std::mem::take(&mut st.doomed_pending);
        st.doomed_objects.extend(pending);
        Ok(())
    }

    pub fn get(&self, ino: u64) -> Result<Inode> {
        self.state.read().inode(ino).cloned()
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

    /// Creates a node. A regular file gets the layout its directory gives (looked up under
    /// the same lock as the creation, so a layout set on the directory before is never
    /// missed), else `default_layout`; its first device is chosen here.
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        node: NewNode,
        default_layout: Layout,
        device_count: u32,
    ) -> Result<Inode> {
        check_name(name)?;
        self.mutate_tx(|st, ch, tx| {
            let file_layout = st.inherited_layout(parent, default_layout);
            let p = st.dir(parent)?;
            if p.nlink == 0 {
                return errno(libc::ENOENT);
            }
            if st.child(parent, name).is_some() {
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
                    first_device: (ino % device_count as u64) as u32,
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
                nlink: if node.kind == Kind::Dir { 2 } else { 1 },
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
        check_name(newname)?;
        self.mutate(|st, ch| {
            st.dir(parent)?;
            st.dir(newparent)?;
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

    /// Relatime: atime moves on a read only when it is older than mtime or ctime.
    /// A read of `ino` (a file's data, or a directory's entries): its access time follows the
    /// mount's atime policy.
    pub fn note_read(&self, ino: u64) {
        let policy = *self.policy.read();
        let now = Time::now();
        let stale = |i: &Inode| match policy.atime {
            _ if i.kind == Kind::Dir && policy.nodiratime => false,
            mountcfg::Atime::Never => false,
            mountcfg::Atime::Strict => true,
            mountcfg::Atime::Relatime => {
                i.atime <= i.mtime
                    || i.atime <= i.ctime
                    || now.secs - i.atime.secs >= RELATIME_MAX_AGE
            }
        };
        // Most reads change nothing: look under the shared lock first.
        if !self.state.read().inodes.get(&ino).is_some_and(stale) {
            return;
        }
        let mut st = self.state.write();
        if let Some(i) = st.inodes.get_mut(&ino) {
            if stale(i) {
                i.atime = now;
                st.dirty.insert(ino);
            }
        }
    }

    pub fn opened(&self, ino: u64) {
        *self.state.write().open.entry(ino).or_insert(0) += 1;
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
            self.persist(&mut st, ch, Durability::None)?;
        }
        Ok(true)
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
        self.mutate(|st, _| Ok(st.alloc_ino()))
    }

    /// Points a file at a new copy of its data; the old objects go after the next sync.
    pub fn switch_object(&self, ino: u64, object: u64, layout: Layout) -> Result<Inode> {
        self.mutate(|st, ch| {
            let i = st.inode_mut(ino, ch)?;
            let old = i.object;
            i.object = object;
            i.layout = Some(layout);
            i.ctime = Time::now();
            let out = i.clone();
            st.doomed_pending.push(old);
            Ok(out)
        })
    }

    /// Marks an object id as garbage (a migration copy that was abandoned).
    pub fn discard_object(&self, object: u64) {
        self.state.write().doomed_pending.push(object);
    }

    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        let st = self.state.read();
        st.inode(ino)?;
        if !st.xattr_bytes.contains_key(&ino) || name.starts_with(INTERNAL) {
            return errno(libc::ENODATA);
        }
        // Under the shared lock no change is half-done: the store has every one so far.
        let tx = self.db.begin_read()?;
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
        let tx = self.db.begin_read()?;
        let table = tx.open_table(XATTRS)?;
        let mut names = Vec::new();
        for row in table.range((ino, &b""[..])..(ino + 1, &b""[..]))? {
            let (k, _) = row?;
            let (_, name) = k.value();
            if !name.starts_with(INTERNAL) {
                names.push(name.to_vec());
            }
        }
        Ok(names)
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
                    ch.xattrs.push((ino, name, Some(v.to_vec())));
                }
                None => {
                    if let Some(x) = st.internal.get_mut(&ino) {
                        x.remove(&name);
                        if x.is_empty() {
                            st.internal.remove(&ino);
                        }
                    }
                    ch.xattrs.push((ino, name, None));
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

    /// The name of `ino` in `parent`, if it has one there.
    pub fn name_in(&self, parent: u64, ino: u64) -> Option<Vec<u8>> {
        let st = self.state.read();
        st.children
            .get(&parent)?
            .iter()
            .find(|(_, &i)| i == ino)
            .map(|(n, _)| n.clone())
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
mod tests {
    use super::*;

    fn ns() -> (tempfile::TempDir, Namespace) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("ns.redb");
        Namespace::format(&p, Uuid::new_v4(), 0, 0).unwrap();
        let ns = Namespace::open(&p).unwrap();
        (d, ns)
    }

    fn node(kind: Kind) -> NewNode<'static> {
        NewNode {
            kind,
            perm: 0o644,
            uid: 0,
            gid: 0,
            rdev: 0,
            symlink: b"",
            umask: 0,
        }
    }

    const L: Layout = Layout {
        stripe_size: 65536,
        width: 2,
        first_device: 0,
    };

    #[test]
    fn tree_survives_a_reopen_after_sync() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("ns.redb");
        Namespace::format(&p, Uuid::new_v4(), 0, 0).unwrap();
        {
            let ns = Namespace::open(&p).unwrap();
            let dir = ns.create(ROOT, b"dir", node(Kind::Dir), L, 2).unwrap();
            let f = ns.create(dir.ino, b"f", node(Kind::File), L, 2).unwrap();
            ns.note_write(f.ino, 1000).unwrap();
            ns.link(f.ino, ROOT, b"hard").unwrap();
            ns.setxattr(f.ino, b"user.a", b"1", 0).unwrap();
            ns.sync().unwrap();
        }
        let ns = Namespace::open(&p).unwrap();
        let dir = ns.lookup(ROOT, b"dir").unwrap();
        let f = ns.lookup(dir.ino, b"f").unwrap();
        assert_eq!(f.size, 1000);
        assert_eq!(f.nlink, 2);
        assert_eq!(ns.getxattr(f.ino, b"user.a").unwrap(), b"1");
        assert_eq!(ns.get(ROOT).unwrap().nlink, 3);
    }

    /// Rows of the store's xattr table for `ino`.
    fn stored_xattrs(ns: &Namespace, ino: u64) -> usize {
        let tx = ns.db.begin_read().unwrap();
        let t = tx.open_table(XATTRS).unwrap();
        t.range((ino, &b""[..])..(ino + 1, &b""[..]))
            .unwrap()
            .count()
    }

    #[test]
    fn xattrs_are_read_from_the_store_and_capped_per_inode() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("ns.redb");
        Namespace::format(&p, Uuid::new_v4(), 0, 0).unwrap();
        let e = |r: Result<()>| r.unwrap_err().errno();
        let f;
        {
            let ns = Namespace::open(&p).unwrap();
            f = ns.create(ROOT, b"f", node(Kind::File), L, 2).unwrap().ino;
            // Unsynced changes are what reads see: set, replace, remove.
            ns.setxattr(f, b"user.a", b"one", 0).unwrap();
            assert_eq!(ns.getxattr(f, b"user.a").unwrap(), b"one");
            ns.setxattr(f, b"user.a", b"three", libc::XATTR_REPLACE)
                .unwrap();
            assert_eq!(ns.getxattr(f, b"user.a").unwrap(), b"three");
            assert_eq!(ns.xattr_bytes(f), 6 + 5);
            assert_eq!(
                e(ns.setxattr(f, b"user.a", b"x", libc::XATTR_CREATE)),
                libc::EEXIST
            );
            assert_eq!(
                e(ns.setxattr(f, b"user.b", b"x", libc::XATTR_REPLACE)),
                libc::ENODATA
            );
            ns.removexattr(f, b"user.a").unwrap();
            assert_eq!(
                ns.getxattr(f, b"user.a").unwrap_err().errno(),
                libc::ENODATA
            );
            assert_eq!(e(ns.removexattr(f, b"user.a")), libc::ENODATA);
            assert_eq!(ns.xattr_bytes(f), 0);
            // One value past XATTR_SIZE_MAX: E2BIG.
            let big = vec![7u8; XATTR_SIZE_MAX + 1];
            assert_eq!(e(ns.setxattr(f, b"user.big", &big, 0)), libc::E2BIG);
            // Names and values together: up to XATTR_SPACE, then ENOSPC.
            let v = vec![1u8; 16 * 1024 - 8];
            for n in 0..4 {
                ns.setxattr(f, format!("user.v{n}").as_bytes(), &v, 0)
                    .unwrap();
            }
            assert_eq!(ns.xattr_bytes(f), 4 * (7 + v.len()));
            assert_eq!(e(ns.setxattr(f, b"user.more", &[0; 64], 0)), libc::ENOSPC);
            // Replacing a value by a bigger one counts only the difference.
            let left = XATTR_SPACE - ns.xattr_bytes(f);
            let v3 = vec![3u8; v.len() + left];
            ns.setxattr(f, b"user.v3", &v3, 0).unwrap();
            assert_eq!(ns.xattr_bytes(f), XATTR_SPACE);
            // A smaller value fits again; a bigger one than the space left does not.
            ns.setxattr(f, b"user.v3", b"small", 0).unwrap();
            assert_eq!(ns.xattr_bytes(f), 4 * 7 + 3 * v.len() + 5);
            let too_big = vec![3u8; v3.len() + 1];
            assert_eq!(e(ns.setxattr(f, b"user.v3", &too_big, 0)), libc::ENOSPC);
            assert_eq!(ns.getxattr(f, b"user.v3").unwrap(), b"small");
            ns.setxattr(f, b"user.v3", &v3, 0).unwrap();
            ns.sync().unwrap();
        }
        // After a reopen: the values, their total, and the cap.
        let ns = Namespace::open(&p).unwrap();
        assert_eq!(ns.xattr_bytes(f), XATTR_SPACE);
        assert_eq!(
            ns.getxattr(f, b"user.v3").unwrap(),
            vec![3u8; 16 * 1024 - 4]
        );
        assert_eq!(
            ns.getxattr(f, b"user.v0").unwrap(),
            vec![1u8; 16 * 1024 - 8]
        );
        let mut names = ns.listxattr(f).unwrap();
        names.sort();
        assert_eq!(names, [&b"user.v0"[..], b"user.v1", b"user.v2", b"user.v3"]);
        assert_eq!(e(ns.setxattr(f, b"user.x", b"", 0)), libc::ENOSPC);
        // Internal settings are neither listed nor counted, and survive too.
        ns.set_internal(f, "cache", Some(b"mode=wb")).unwrap();
        assert_eq!(ns.listxattr(f).unwrap().len(), 4);
        assert_eq!(ns.xattr_bytes(f), XATTR_SPACE);
        // A freed inode takes its xattrs out of the store.
        assert_eq!(stored_xattrs(&ns, f), 5);
        ns.unlink(ROOT, b"f").unwrap();
        assert_eq!(stored_xattrs(&ns, f), 0);
        assert_eq!(ns.xattr_bytes(f), 0);
    }

    /// An ACL in xattr form: (tag, perm, id) entries.
    fn acl_bytes(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut out = 2u32.to_le_bytes().to_vec();
        for &(tag, perm, id) in entries {
            out.extend_from_slice(&tag.to_le_bytes());
            out.extend_from_slice(&perm.to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
        }
        out
    }

    #[test]
    fn acls_keep_the_mode_in_step_and_are_inherited() {
        let (_d, ns) = ns();
        let e = |r: Result<Inode>| r.unwrap_err().errno();
        const X: u32 = u32::MAX;
        let named = acl_bytes(&[
            (1, 6, X),
            (2, 0, 1001),
            (4, 4, X),
            (0x10, 4, X),
            (0x20, 4, X),
        ]);
        let f = ns.create(ROOT, b"f", node(Kind::File), L, 2).unwrap().ino;
        // An access ACL sets the mode (group bits from the mask) and is kept.
        let i = ns.set_acl(f, false, Some(&named), false).unwrap();
        assert_eq!(i.perm, 0o644);
        assert_eq!(ns.getxattr(f, acl::ACCESS).unwrap(), named);
        // chmod rewrites it; one the mode says all of is dropped, the mode set from it.
        ns.setattr(
            f,
            &SetAttr {
                perm: Some(0o2750),
                ..SetAttr::default()
            },
        )
        .unwrap();
        let got = acl::Acl::parse(&ns.getxattr(f, acl::ACCESS).unwrap()).unwrap();
        assert_eq!(got.mode(), 0o750);
        let plain = acl_bytes(&[(1, 7, X), (4, 0, X), (0x20, 0, X)]);
        // Set-group-ID falls for a caller outside the file's group.
        let i = ns.set_acl(f, false, Some(&plain), true).unwrap();
        assert_eq!(i.perm, 0o700);
        assert_eq!(
            ns.getxattr(f, acl::ACCESS).unwrap_err().errno(),
            libc::ENODATA
        );
        assert_eq!(ns.xattr_bytes(f), 0);
        // Removing what is not there succeeds, as on ext4; a default ACL on a file does not.
        ns.set_acl(f, false, None, false).unwrap();
        assert_eq!(e(ns.set_acl(f, true, Some(&named), false)), libc::EACCES);
        assert_eq!(e(ns.set_acl(f, false, Some(b"junk"), false)), libc::EINVAL);
        // Plain xattr calls cannot store an ACL behind these rules.
        assert_eq!(
            ns.setxattr(f, acl::ACCESS, &named, 0).unwrap_err().errno(),
            libc::EOPNOTSUPP
        );
        // Without a default ACL the umask applies; with one, the ACL decides.
        let masked = NewNode {
            umask: 0o027,
            ..NewNode::new(Kind::File, 0o666)
        };
        assert_eq!(ns.create(ROOT, b"m", masked, L, 2).unwrap().perm, 0o640);
        let d = ns.create(ROOT, b"d", node(Kind::Dir), L, 2).unwrap().ino;
        let default = acl_bytes(&[
            (1, 7, X),
            (2, 7, 1001),
            (4, 5, X),
            (0x10, 7, X),
            (0x20, 5, X),
        ]);
        ns.set_acl(d, true, Some(&default), false).unwrap();
        let new = NewNode {
            umask: 0o077,
            ..NewNode::new(Kind::File, 0o666)
        };
        let n = ns.create(d, b"n", new, L, 2).unwrap();
        assert_eq!(n.perm, 0o664);
        let inherited = acl::Acl::parse(&ns.getxattr(n.ino, acl::ACCESS).unwrap()).unwrap();
        assert_eq!(inherited.mode(), 0o664);
        assert!(ns.getxattr(n.ino, acl::DEFAULT).is_err());
        let sub = NewNode {
            umask: 0o077,
            ..NewNode::new(Kind::Dir, 0o777)
        };
        let sub = ns.create(d, b"sub", sub, L, 2).unwrap();
        assert_eq!(sub.perm, 0o775);
        assert_eq!(ns.getxattr(sub.ino, acl::DEFAULT).unwrap(), default);
        // The ACL's presence survives in the totals: removing the default works.
        ns.set_acl(d, true, None, false).unwrap();
        assert!(ns.getxattr(d, acl::DEFAULT).is_err());
        let after = NewNode {
            umask: 0o077,
            ..NewNode::new(Kind::File, 0o666)
        };
        assert_eq!(ns.create(d, b"after", after, L, 2).unwrap().perm, 0o600);
    }

    #[test]
    fn rename_rules() {
        let (_d, ns) = ns();
        let a = ns.create(ROOT, b"a", node(Kind::Dir), L, 2).unwrap();
        let b = ns.create(ROOT, b"b", node(Kind::Dir), L, 2).unwrap();
        ns.create(b.ino, b"x", node(Kind::File), L, 2).unwrap();
        let e = |r: Result<()>| r.unwrap_err().errno();
        assert_eq!(
            e(ns.rename(ROOT, b"a", b.ino, b"x", false, false)),
            libc::ENOTDIR
        );
        assert_eq!(
            e(ns.rename(ROOT, b"a", ROOT, b"b", false, false)),
            libc::ENOTEMPTY
        );
        assert_eq!(
            e(ns.rename(ROOT, b"a", a.ino, b"in", false, false)),
            libc::EINVAL
        );
        assert_eq!(
            e(ns.rename(ROOT, b"b", ROOT, b"a", true, false)),
            libc::EEXIST
        );
        // Move a directory: link counts of both parents follow.
        ns.rename(ROOT, b"a", b.ino, b"a2", false, false).unwrap();
        assert_eq!(ns.get(ROOT).unwrap().nlink, 3);
        assert_eq!(ns.get(b.ino).unwrap().nlink, 3);
        assert_eq!(ns.get(a.ino).unwrap().parent, b.ino);
        // Exchange a file and a directory.
        ns.rename(b.ino, b"x", b.ino, b"a2", false, true).unwrap();
        assert_eq!(ns.lookup(b.ino, b"x").unwrap().ino, a.ino);
        ns.rename(b.ino, b"x", ROOT, b"back", false, false).unwrap();
        assert_eq!(ns.get(ROOT).unwrap().nlink, 4);
        assert_eq!(ns.get(b.ino).unwrap().nlink, 2);
    }

    #[test]
    fn unlinked_open_file_lives_until_release() {
        let (_d, ns) = ns();
        let f = ns.create(ROOT, b"f", node(Kind::File), L, 2).unwrap();
        ns.opened(f.ino);
        ns.unlink(ROOT, b"f").unwrap();
        assert_eq!(ns.get(f.ino).unwrap().nlink, 0);
        assert!(ns.released(f.ino).unwrap());
        assert!(ns.get(f.ino).is_err());
        assert_eq!(ns.sync().unwrap(), vec![f.object]);
    }

    #[test]
    fn layouts_are_inherited_and_first_device_rotates() {
        let (_d, ns) = ns();
        let dir = ns.create(ROOT, b"d", node(Kind::Dir), L, 4).unwrap();
        let wide = Layout::new(131072, 3, 0);
        ns.set_layout(dir.ino, Some(wide)).unwrap();
        let sub = ns.create(dir.ino, b"s", node(Kind::Dir), L, 4).unwrap();
        assert_eq!(ns.inherited_layout(sub.ino, L), wide);
        let f1 = ns.create(sub.ino, b"1", node(Kind::File), wide, 4).unwrap();
        let f2 = ns.create(sub.ino, b"2", node(Kind::File), wide, 4).unwrap();
        assert_ne!(
            f1.layout.unwrap().first_device,
            f2.layout.unwrap().first_device
        );
        ns.note_write(f1.ino, 1).unwrap();
        assert_eq!(
            ns.set_layout(f1.ino, Some(L)).unwrap_err().errno(),
            libc::EBUSY
        );
        ns.set_layout(f2.ino, Some(L)).unwrap();
    }
}
