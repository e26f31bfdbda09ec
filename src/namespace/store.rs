//! The redb store under the namespace: its tables and records, opening it (recovered and
//! checked over an overlay before anything writes), and writing changes.

use super::xattrs::acl_bit;
use super::*;

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
        Ok(Namespace::loaded(db, path, uuid, st))
    }

    /// The store at `path`, checked and loaded as `open` does, with every write kept in memory:
    /// the file is never written (fsck without --repair).
    pub fn open_detached(path: &Path) -> Result<Namespace> {
        guarded(path, || {
            let db = verified(path)?;
            let (uuid, st) = load(&db)?;
            Ok(Namespace::loaded(db, path, uuid, st))
        })
    }

    fn loaded(db: Database, path: &Path, uuid: Uuid, st: State) -> Namespace {
        Namespace {
            db,
            path: path.to_path_buf(),
            uuid,
            state: RwLock::new(st),
            policy: RwLock::new(Policy::default()),
        }
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

    pub(super) fn set_meta_durably(&self, key: &str, value: &[u8]) -> Result<()> {
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

    pub(super) fn persist(
        &self,
        st: &mut State,
        ch: Changes,
        durability: Durability,
    ) -> Result<()> {
        // A damaged page met by the write is an error for this call, not a panic of the daemon.
        guarded_as("written", &self.path, || {
            let mut tx = self.db.begin_write()?;
            tx.set_durability(durability)?;
            self.persist_in(st, ch, tx)
        })
    }

    pub(super) fn persist_in(
        &self,
        st: &mut State,
        mut ch: Changes,
        tx: WriteTransaction,
    ) -> Result<()> {
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

    pub(super) fn make_durable(&self, st: &mut State) -> Result<()> {
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
}
