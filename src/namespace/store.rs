//! The redb store under the namespace: its tables and records, opening it (recovered and
//! checked over an overlay before anything writes), and writing changes.

use super::reserve;
use super::xattrs::acl_bit;
use super::*;

/// Xattr values waiting for the next durable commit past this make it now: they are kept in
/// memory until then, for a store that has to be written again after a failed write.
const UNSYNCED_MAX: usize = 4 << 20;
/// Inode numbers reserved durably at a time, and how close to the end a new block is taken.
const NUMBERS_BLOCK: u64 = 4096;
const NUMBERS_SLACK: u64 = 256;
/// How often a store that could not be written again is tried.
const RETRY: std::time::Duration = std::time::Duration::from_secs(1);

pub(super) fn encode(inode: &Inode) -> Vec<u8> {
    bincode::serde::encode_to_vec(inode, bincode::config::standard()).expect("inode encodes")
}

pub(super) fn decode(bytes: &[u8]) -> Result<Inode> {
    // A damaged record must not make bincode allocate what its length fields claim.
    let config = bincode::config::standard().with_limit::<{ 1 << 20 }>();
    bincode::serde::decode_from_slice(bytes, config)
        .map(|(i, _)| i)
        .map_err(|e| Error::Store(format!("damaged inode record: {e}")))
}

pub(super) fn open_error(path: &Path, e: redb::DatabaseError) -> Error {
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
pub(super) fn guarded<T>(path: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    guarded_as("read", path, f)
}

/// `guarded`, for `doing` (read or written) in the messages.
pub(super) fn guarded_as<T>(doing: &str, path: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
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
pub(super) const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

/// The store at `path` over an overlay (its writes stay in memory), recovered if it was not
/// closed cleanly, with every checksum verified: redb checks them only when repairing, so a
/// damaged page would otherwise read as data.
pub(super) fn verified(path: &Path) -> Result<Database> {
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
pub(super) fn load(db: &impl ReadableDatabase) -> Result<(Uuid, State)> {
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
    // Numbers up to the reservation may have been handed out by a session that crashed
    // before its creations were durable: they are never handed out again.
    if let Some(r) = meta.get("ino_reserved")? {
        let r: [u8; 8] = r
            .value()
            .try_into()
            .map_err(|_| Error::Store("bad inode reservation in the namespace".into()))?;
        st.next_ino = st.next_ino.max(u64::from_le_bytes(r));
    }
    st.ino_reserved = st.next_ino;
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
    for (&parent, entries) in &st.children {
        for (name, &ino) in entries {
            if st.inodes.get(&ino).is_some_and(|i| i.kind == Kind::File) {
                st.names
                    .entry(ino)
                    .or_default()
                    .push((parent, name.as_slice().into()));
            }
        }
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

    /// Why the store at `path` cannot keep its reserve, if it cannot (see `reserve`): mkfs
    /// and mount say so.
    pub fn reserve_shortfall(path: &Path) -> Option<String> {
        reserve::shortfall(path)
    }

    /// Opens a volume's namespace store and loads it into memory. A damaged store is an error
    /// naming the file, never a panic, and is left as it was: it is recovered (after a crash),
    /// checked (every checksum) and loaded over an in-memory overlay first, and opened for
    /// writing only once that went well.
    pub fn open(path: &Path) -> Result<Namespace> {
        let (uuid, st) = guarded(path, || load(&verified(path)?))?;
        let reserve = reserve::Reserve::of(path);
        reserve.give_up_if_full();
        let db = guarded(path, || {
            Database::builder()
                .set_cache_size(STORE_CACHE)
                .open(path)
                .map_err(|e| open_error(path, e))
        })?;
        reserve.make();
        Ok(Namespace::loaded(db, reserve, uuid, st))
    }

    /// The store at `path`, checked and loaded as `open` does, with every write kept in memory:
    /// the file is never written (fsck without --repair).
    pub fn open_detached(path: &Path) -> Result<Namespace> {
        guarded(path, || {
            let db = verified(path)?;
            let (uuid, st) = load(&db)?;
            Ok(Namespace::loaded(db, reserve::Reserve::of(path), uuid, st))
        })
    }

    fn loaded(db: Database, reserve: reserve::Reserve, uuid: Uuid, st: State) -> Namespace {
        Namespace {
            db: RwLock::new(db),
            path: reserve.store().to_path_buf(),
            reserve,
            uuid,
            state: RwLock::new(st),
            policy: Default::default(),
        }
    }

    /// Whether the last mount ended with `mark_clean` (false after a crash).
    pub fn was_clean(&self) -> Result<bool> {
        guarded(&self.path, || {
            let tx = self.db.read().begin_read()?;
            let meta = tx.open_table(META)?;
            // A store from mkfs has no flag yet: nothing ran on it, so it is clean.
            Ok(meta.get("clean")?.is_none_or(|v| v.value() == [1]))
        })
    }

    /// Records durably whether the volume is cleanly stopped (mount sets false, unmount true).
    pub fn set_clean(&self, clean: bool) -> Result<()> {
        self.set_meta_durably("clean", &[u8::from(clean)])
    }

    /// The generation of the device set the namespace last saw (0 before devices could
    /// change).
    pub fn device_generation(&self) -> Result<u64> {
        guarded(&self.path, || {
            let tx = self.db.read().begin_read()?;
            let meta = tx.open_table(META)?;
            Ok(match meta.get("device_generation")? {
                Some(v) => {
                    v.value().try_into().map(u64::from_le_bytes).map_err(|_| {
                        Error::Store("bad device generation in the namespace".into())
                    })?
                }
                None => 0,
            })
        })
    }

    /// Records durably the device set's generation the namespace goes with.
    pub fn set_device_generation(&self, generation: u64) -> Result<()> {
        self.set_meta_durably("device_generation", &generation.to_le_bytes())
    }

    pub fn cache_binding(&self) -> Result<CacheBinding> {
        let tx = self.db.read().begin_read()?;
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

    pub(super) fn set_meta_durably(&self, key: &str, value: &[u8]) -> Result<()> {
        let mut st = self.state.write();
        self.usable(&mut st)?;
        let write = || {
            guarded_as("written", &self.path, || {
                let tx = self.db.read().begin_write()?;
                tx.open_table(META)?.insert(key, value)?;
                tx.commit()?;
                Ok(())
            })
        };
        if let Err(e) = write() {
            self.recover(&mut st, e)?;
            write()?;
        }
        st.changed_since_sync = true;
        // The objects this makes safe to delete wait for the next `sync`, whose caller
        // deletes them.
        self.make_durable(&mut st)
    }

    /// Runs one operation against the tree and writes what it changed in one transaction
    /// (durable at once under `sync`/`dirsync`, else at the next `sync`).
    /// `f` must check everything before it changes anything: an error leaves memory as it was.
    pub(super) fn mutate<T>(
        &self,
        f: impl FnOnce(&mut State, &mut Changes) -> Result<T>,
    ) -> Result<T> {
        self.mutate_tx(|st, ch, _| f(st, ch))
    }

    /// `mutate` for operations that read the store too (xattr values): `f` reads through the
    /// operation's own transaction.
    pub(super) fn mutate_tx<T>(
        &self,
        f: impl FnOnce(&mut State, &mut Changes, &WriteTransaction) -> Result<T>,
    ) -> Result<T> {
        let mut st = self.state.write();
        self.usable(&mut st)?;
        let mut ch = Changes::default();
        let mut out = None;
        // A damaged page met by the write is an error for this call, not a panic of the daemon.
        let written = guarded_as("written", &self.path, || {
            let db = self.db.read();
            let mut tx = db.begin_write()?;
            tx.set_durability(Durability::None)?;
            match f(&mut st, &mut ch, &tx) {
                Ok(o) => out = Some(o),
                Err(e) => {
                    tx.abort()?;
                    return Err(e);
                }
            }
            self.write_changes(&mut st, &mut ch, &tx)?;
            tx.commit()?;
            Ok(())
        });
        match (written, out) {
            (Ok(()), Some(out)) => {
                st.changed_since_sync = true;
                if self.policy.get().durable_changes || st.unsynced.xattr_bytes() > UNSYNCED_MAX {
                    self.make_durable(&mut st)?;
                }
                Ok(out)
            }
            // Memory has the change and `unsynced` too: recovery writes it. If the store
            // cannot be brought back, the change stands in memory like any change not yet
            // durable, and the next durable point (fsync, unmount) reports the failure, as
            // a write that fails in the page cache is reported by fsync.
            // Under `sync`/`dirsync` every change is acknowledged durable: not this one.
            (Err(e), Some(out)) => match self.recover(&mut st, e) {
                Err(e) if self.policy.get().durable_changes => Err(e),
                _ => Ok(out),
            },
            (Err(e), None) => Err(e),
            (Ok(()), None) => unreachable!("a written operation has its result"),
        }
    }

    /// Writes what the inodes changed in memory only (`dirty`) and `ch`, and notes both in
    /// `unsynced` first: if the commit fails, they are written again from there.
    fn write_changes(&self, st: &mut State, ch: &mut Changes, tx: &WriteTransaction) -> Result<()> {
        ch.inodes.extend(std::mem::take(&mut st.dirty));
        st.unsynced.absorb(ch);
        faultpoint::fault_point!("namespace.store-write");
        write_to(tx, st, ch)
    }

    /// A change with nothing to check first (a last close freeing an inode), not durable yet.
    pub(super) fn persist(&self, st: &mut State, mut ch: Changes) -> Result<()> {
        self.usable(st)?;
        let written = guarded_as("written", &self.path, || {
            let mut tx = self.db.read().begin_write()?;
            tx.set_durability(Durability::None)?;
            self.write_changes(st, &mut ch, &tx)?;
            tx.commit()?;
            Ok(())
        });
        match written {
            Ok(()) => st.changed_since_sync = true,
            // As in `mutate_tx`: the change stands, the next durable point reports.
            Err(e) => {
                let _ = self.recover(st, e);
            }
        }
        Ok(())
    }

    /// Makes every change so far durable. Returns the object ids that are now safe to delete.
    pub fn sync(&self) -> Result<Vec<u64>> {
        let mut st = self.state.write();
        self.make_durable(&mut st)?;
        Ok(std::mem::take(&mut st.doomed_objects))
    }

    pub(super) fn make_durable(&self, st: &mut State) -> Result<()> {
        if st.failed.is_some() {
            // Bringing the store back writes everything durably.
            return self.usable(st);
        }
        if !st.changed_since_sync && st.dirty.is_empty() {
            return Ok(());
        }
        faultpoint::fault_point!("namespace.commit");
        let written = guarded_as("written", &self.path, || {
            let mut tx = self.db.read().begin_write()?;
            tx.set_durability(Durability::Immediate)?;
            self.write_changes(st, &mut Changes::default(), &tx)?;
            tx.commit()?;
            Ok(())
        });
        match written {
            Ok(()) => {
                self.made_durable(st);
                Ok(())
            }
            Err(e) => self.recover(st, e),
        }
    }

    fn made_durable(&self, st: &mut State) {
        st.changed_since_sync = false;
        st.unsynced = Changes::default();
        st.doomed_bytes = 0;
        let pending = std::mem::take(&mut st.doomed_pending);
        st.doomed_objects.extend(pending);
        if !self.reserve.allows_growth() {
            log::debug!("the namespace's reserve waits for room");
        }
    }

    /// Inode and object numbers are reserved durably, a block at a time, before any is handed
    /// out: a creation lost in a crash never has its number given to another file, which a
    /// file handle (NFS, open_by_handle_at) naming the lost one would then open.
    pub(super) fn reserve_numbers(&self) -> Result<()> {
        let (next, reserved) = {
            let st = self.state.read();
            (st.next_ino, st.ino_reserved)
        };
        // Room for the creations that may run between this check and their allocation.
        if next + NUMBERS_SLACK < reserved {
            return Ok(());
        }
        let upto = next + NUMBERS_BLOCK;
        self.set_meta_durably("ino_reserved", &upto.to_le_bytes())?;
        let mut st = self.state.write();
        st.ino_reserved = st.ino_reserved.max(upto);
        Ok(())
    }

    /// New names and xattrs need room beyond the reserve: ENOSPC once it is spent and the
    /// filesystem has no room to make it again; deletes and other changes go on.
    pub(super) fn room_to_grow(&self) -> Result<()> {
        match self.reserve.allows_growth() {
            true => Ok(()),
            false => errno(libc::ENOSPC),
        }
    }

    /// Refuses changes while the store is down, after one more try to bring it back (at
    /// most one a second: reopening reads the whole store).
    fn usable(&self, st: &mut State) -> Result<()> {
        match &st.failed {
            None => Ok(()),
            Some(down) if st.last_recovery.is_some_and(|t| t.elapsed() < RETRY) => {
                Err(down.error())
            }
            Some(_) => self.recover_now(st),
        }
    }

    /// A write of the store failed (`cause`): redb refuses everything after that until it is
    /// reopened, and the reopened store is at its last durable commit. So: give it the
    /// reserve's room, reopen it and write every change since that commit again, durably.
    /// What memory holds is the truth throughout; if the store cannot be brought back, changes
    /// are refused (ENOSPC on a full filesystem, else EIO) until it can.
    fn recover(&self, st: &mut State, cause: Error) -> Result<()> {
        let errno = if reserve::free_bytes(&self.path) < (1 << 20) {
            libc::ENOSPC
        } else {
            libc::EIO
        };
        log::warn!("the namespace store failed a write: {cause}; reopening it");
        st.failed = Some(StoreDown {
            errno,
            why: cause.to_string(),
        });
        self.recover_now(st)
    }

    fn recover_now(&self, st: &mut State) -> Result<()> {
        st.last_recovery = Some(std::time::Instant::now());
        self.reserve.give_up();
        let reopened = guarded_as("written", &self.path, || {
            faultpoint::fault_point!("namespace.reopen");
            let mut db = self.db.write();
            // redb refuses a second handle on one file: the failed one goes first.
            drop(std::mem::replace(&mut *db, in_memory()?));
            *db = Database::builder()
                .set_cache_size(STORE_CACHE)
                .open(&self.path)
                .map_err(|e| open_error(&self.path, e))?;
            let mut tx = db.begin_write()?;
            tx.set_durability(Durability::Immediate)?;
            let again = std::mem::take(&mut st.unsynced);
            let r = write_to(&tx, st, &again);
            st.unsynced = again;
            r?;
            tx.commit()?;
            Ok(())
        });
        match reopened {
            Ok(()) => {
                log::warn!(
                    "the namespace store is back: {} inodes and {} names written again",
                    st.unsynced.inodes.len(),
                    st.unsynced.dirents.len()
                );
                st.failed = None;
                st.recoveries += 1;
                self.made_durable(st);
                Ok(())
            }
            Err(e) => {
                let down = StoreDown {
                    errno: st.failed.as_ref().map_or(libc::EIO, |d| d.errno),
                    why: e.to_string(),
                };
                log::error!("{}: changes are refused until it can", down.error());
                st.failed = Some(down.clone());
                Err(down.error())
            }
        }
    }
}

/// Writes the current value of every key `ch` names (memory's for inodes and entries, `ch`'s
/// own for xattrs) and the inode counter.
fn write_to(tx: &WriteTransaction, st: &State, ch: &Changes) -> Result<()> {
    let mut inodes = tx.open_table(INODES)?;
    for ino in &ch.inodes {
        match st.inodes.get(ino) {
            Some(i) => inodes.insert(*ino, encode(i).as_slice())?,
            None => inodes.remove(*ino)?,
        };
    }
    let mut dirents = tx.open_table(DIRENTS)?;
    for ((parent, name), ino) in &ch.dirents {
        match ino {
            Some(i) => dirents.insert((*parent, name.as_slice()), *i)?,
            None => dirents.remove((*parent, name.as_slice()))?,
        };
    }
    let mut xattrs = tx.open_table(XATTRS)?;
    for ((ino, name), value) in &ch.xattrs {
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
    Ok(())
}

/// A store in memory: what stands in for the file between closing and reopening it.
fn in_memory() -> Result<Database> {
    Ok(Database::builder().create_with_backend(redb::backends::InMemoryBackend::new())?)
}
