//! The namespace: inodes, directory entries, xattrs and layouts.
//!
//! The whole tree is held in memory (reads never touch the store) and every change is written
//! to an embedded ACID store (redb) in one transaction per operation. Those transactions are
//! not synced; `sync` makes everything so far durable in one fsync, which is what fsync,
//! fsyncdir, syncfs, the periodic committer and unmount call. After a crash the store opens at
//! its last durable commit, which is always a consistent tree.

use crate::error::{errno, Error, Result};
use parking_lot::RwLock;
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
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
    xattrs: HashMap<u64, BTreeMap<Vec<u8>, Vec<u8>>>,
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
        if let Some(x) = self.xattrs.remove(&ino) {
            for name in x.into_keys() {
                ch.xattrs.push((ino, name, None));
            }
        }
        self.dirty.remove(&ino);
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
        st.xattrs
            .entry(ino)
            .or_default()
            .insert(name.to_vec(), v.value().to_vec());
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
    /// Makes a new, empty namespace with a root directory owned by `uid:gid`.
    pub fn format(path: &Path, uuid: Uuid, uid: u32, gid: u32) -> Result<()> {
        if path.exists() {
            std::fs::remove_file(path)
                .map_err(|e| Error::Store(format!("{}: {e}", path.display())))?;
        }
        let db = Database::create(path)?;
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
            Database::open(path).map_err(|e| open_error(path, e))
        })?;
        Ok(Namespace {
            db,
            path: path.to_path_buf(),
            uuid,
            state: RwLock::new(st),
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
            })
        })
    }

    pub fn uuid(&self) -> Uuid {
        self.uuid
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
        let mut st = self.state.write();
        guarded_as("written", &self.path, || {
            let tx = self.db.begin_write()?;
            tx.open_table(META)?
                .insert("clean", [u8::from(clean)].as_slice())?;
            tx.commit()?;
            Ok(())
        })?;
        st.changed_since_sync = true;
        drop(st);
        self.sync().map(|_| ())
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

    /// Runs one operation against the tree and writes what it changed in one transaction.
    /// `f` must check everything before it changes anything: an error leaves memory as it was.
    fn mutate<T>(&self, f: impl FnOnce(&mut State, &mut Changes) -> Result<T>) -> Result<T> {
        let mut st = self.state.write();
        let mut ch = Changes::default();
        let out = f(&mut st, &mut ch)?;
        self.persist(&mut st, ch, Durability::None)?;
        Ok(out)
    }

    fn persist(&self, st: &mut State, mut ch: Changes, durability: Durability) -> Result<()> {
        ch.inodes.extend(std::mem::take(&mut st.dirty));
        // A damaged page met by the write is an error for this call, not a panic of the daemon.
        guarded_as("written", &self.path, || self.write(st, &ch, durability))?;
        st.changed_since_sync = true;
        Ok(())
    }

    /// One transaction with `ch`'s rows as `st` now has them.
    fn write(&self, st: &State, ch: &Changes, durability: Durability) -> Result<()> {
        let mut tx = self.db.begin_write()?;
        tx.set_durability(durability)?;
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
            tx.open_table(META)?
                .insert("next_ino", st.next_ino.to_le_bytes().as_slice())?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Makes every change so far durable. Returns the object ids that are now safe to delete.
    pub fn sync(&self) -> Result<Vec<u64>> {
        let mut st = self.state.write();
        if !st.changed_since_sync && st.dirty.is_empty() {
            return Ok(std::mem::take(&mut st.doomed_objects));
        }
        self.persist(&mut st, Changes::default(), Durability::Immediate)?;
        st.changed_since_sync = false;
        let pending = std::mem::take(&mut st.doomed_pending);
        st.doomed_objects.extend(pending);
        Ok(std::mem::take(&mut st.doomed_objects))
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
        let st = self.state.read();
        let mut at = dir;
        loop {
            match st.inodes.get(&at) {
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

    /// Creates a node. `file_layout` is used for regular files (first device chosen here).
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        node: NewNode,
        file_layout: Layout,
        device_count: u32,
    ) -> Result<Inode> {
        check_name(name)?;
        self.mutate(|st, ch| {
            let p = st.dir(parent)?;
            if p.nlink == 0 {
                return errno(libc::ENOENT);
            }
            if st.child(parent, name).is_some() {
                return errno(libc::EEXIST);
            }
            let (mut perm, mut gid) = (node.perm & 0o7777, node.gid);
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
        self.mutate(|st, ch| {
            let i = st.inode(ino)?;
            if a.size.is_some() && i.kind == Kind::Dir {
                return errno(libc::EISDIR);
            }
            if a.size.is_some() && i.kind != Kind::File {
                return errno(libc::EINVAL);
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
    pub fn note_read(&self, ino: u64) {
        let stale = |i: &Inode| i.atime <= i.mtime || i.atime <= i.ctime;
        // Most reads change nothing: look under the shared lock first.
        if !self.state.read().inodes.get(&ino).is_some_and(stale) {
            return;
        }
        let mut st = self.state.write();
        if let Some(i) = st.inodes.get_mut(&ino) {
            if stale(i) {
                i.atime = Time::now();
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
        st.xattrs
            .get(&ino)
            .and_then(|x| x.get(name))
            .cloned()
            .ok_or(Error::Errno(libc::ENODATA))
    }

    pub fn listxattr(&self, ino: u64) -> Result<Vec<Vec<u8>>> {
        let st = self.state.read();
        st.inode(ino)?;
        Ok(st
            .xattrs
            .get(&ino)
            .map(|x| {
                x.keys()
                    .filter(|k| !k.starts_with(INTERNAL))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }

    /// stripefs's own per-inode settings (a folder's cache target), kept with the xattrs under
    /// names no client can spell, and so never listed.
    pub fn set_internal(&self, ino: u64, key: &str, value: Option<&[u8]>) -> Result<()> {
        let name = [INTERNAL, key.as_bytes()].concat();
        self.mutate(|st, ch| {
            st.inode(ino)?;
            match value {
                Some(v) => {
                    st.xattrs
                        .entry(ino)
                        .or_default()
                        .insert(name.clone(), v.to_vec());
                    ch.xattrs.push((ino, name, Some(v.to_vec())));
                }
                None => {
                    if let Some(x) = st.xattrs.get_mut(&ino) {
                        x.remove(&name);
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
        st.xattrs
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

    /// `flags` as setxattr(2): XATTR_CREATE, XATTR_REPLACE.
    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        if name.is_empty() || name.len() > 255 {
            return errno(libc::ERANGE);
        }
        if value.len() > 64 * 1024 {
            return errno(libc::E2BIG);
        }
        self.mutate(|st, ch| {
            st.inode(ino)?;
            let exists = st.xattrs.get(&ino).is_some_and(|x| x.contains_key(name));
            if flags & libc::XATTR_CREATE != 0 && exists {
                return errno(libc::EEXIST);
            }
            if flags & libc::XATTR_REPLACE != 0 && !exists {
                return errno(libc::ENODATA);
            }
            st.xattrs
                .entry(ino)
                .or_default()
                .insert(name.to_vec(), value.to_vec());
            ch.xattrs.push((ino, name.to_vec(), Some(value.to_vec())));
            st.inode_mut(ino, ch)?.ctime = Time::now();
            Ok(())
        })
    }

    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        self.mutate(|st, ch| {
            st.inode(ino)?;
            let removed = st.xattrs.get_mut(&ino).and_then(|x| x.remove(name));
            if removed.is_none() {
                return errno(libc::ENODATA);
            }
            ch.xattrs.push((ino, name.to_vec(), None));
            st.inode_mut(ino, ch)?.ctime = Time::now();
            Ok(())
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
