//! Taking up a cache store at mount: a RAM store is always new; a cache file is checked
//! against what the volume knows of it (which cache holds its unwritten data, the volume
//! generation its lines belong to) before any of its lines is trusted.

use crate::engine::{auto_shards, CacheConfig, CacheError, StoreKind};
use crate::store::{Header, HeaderError, Record, Store, EMPTY};
use std::path::{Path, PathBuf};

/// A store ready for use, with the lines it holds (`valid` as trusted) and its identity.
pub(crate) struct Attached {
    pub store: Store,
    pub records: Vec<Record>,
    pub id: [u8; 16],
    /// Metadata shards the records are placed by.
    pub shards: usize,
}

fn new_id() -> [u8; 16] {
    *uuid::Uuid::new_v4().as_bytes()
}

/// Opens the store `cfg` describes.
pub(crate) fn attach(cfg: &CacheConfig, line: u64, nslots: u64) -> Result<Attached, CacheError> {
    let new_shards = match cfg.shards {
        0 => auto_shards(nslots),
        n => n.min(u16::MAX as usize),
    };
    let Some(path) = cache_file(&cfg.store) else {
        return Ok(Attached {
            store: Store::ram(line, nslots)?,
            records: Vec::new(),
            id: new_id(),
            shards: new_shards,
        });
    };
    let shown = path.display().to_string();
    let (store, found) = if path.exists() {
        examine(cfg, &path, line, nslots)?
    } else if cfg.holds_dirty && !cfg.discard_dirty {
        return Err(CacheError::Missing(shown));
    } else {
        (None, None)
    };
    let header = |id, shards: usize| Header {
        volume: cfg.volume,
        id,
        generation: cfg.generation,
        line_size: line,
        slots: nslots,
        clean: false,
        shards: shards as u16,
    };
    match (store, found) {
        (Some(store), Some((id, records, shards))) => {
            store.write_header(&header(id, shards))?;
            Ok(Attached {
                store,
                records,
                id,
                shards,
            })
        }
        (old, _) => {
            // New, or replaced (atomically) as the checks allowed.
            drop(old);
            let id = new_id();
            Ok(Attached {
                store: Store::create(&path, &header(id, new_shards))?,
                records: Vec::new(),
                id,
                shards: new_shards,
            })
        }
    }
}

/// An existing cache file: its lines and id if it may be used as it is, `None` if it may be
/// replaced (what the config asks, and nothing unwritten is lost that was not given up), or
/// why it must be left alone.
/// What an existing cache file holds: its id, its lines, and the shards they are placed by.
type Found = ([u8; 16], Vec<Record>, usize);

fn examine(
    cfg: &CacheConfig,
    path: &Path,
    line: u64,
    nslots: u64,
) -> Result<(Option<Store>, Option<Found>), CacheError> {
    let shown = path.display().to_string();
    // The header says how many records there are; first read it with any geometry.
    let header = Store::open_existing(path, 0, 0)?.read_header();
    let replace = |why: &str| {
        log::warn!("cache file {shown}: {why}; it is replaced by an empty cache");
        Ok((None, None))
    };
    let h = match header {
        Ok(h) => h,
        Err(HeaderError::Io(e)) => return Err(e.into()),
        Err(HeaderError::NotCache) => return Err(CacheError::NotCache(shown)),
        Err(e @ (HeaderError::Blank | HeaderError::Damaged)) => {
            let what = match e {
                HeaderError::Blank => "its header is blank: a crash cut its making short",
                _ => "its header fails its checksum",
            };
            // What it held cannot be read: replaced only when nothing unwritten is at stake.
            if cfg.discard_dirty || (cfg.reset && !cfg.holds_dirty) {
                return replace(what);
            }
            return Err(CacheError::Damaged {
                path: shown,
                what: what.into(),
            });
        }
        Err(HeaderError::Format1 { clean }) => {
            // A clean stop wrote everything back; otherwise only --discard-dirty gives it up.
            if clean || cfg.discard_dirty {
                return replace("format 1 (an older stripefs, no checksums)");
            }
            return Err(CacheError::Format1(shown));
        }
    };
    let store = Store::open_existing(path, h.line_size, h.slots).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            CacheError::Damaged {
                path: shown.clone(),
                what: e.to_string(),
            }
        } else {
            e.into()
        }
    })?;
    let records = store.read_records()?;
    let dirty_lines = records
        .iter()
        .filter(|r| matches!(r, Ok(r) if r.object != EMPTY && r.dirty != 0))
        .count();
    let damaged: Vec<(u32, u64)> = records
        .iter()
        .enumerate()
        .filter_map(|(slot, r)| {
            r.as_ref()
                .err()
                .map(|claimed| (slot as u32, claimed.object))
        })
        .collect();
    // What stands to be lost if this file is replaced.
    let at_stake = dirty_lines > 0 || !damaged.is_empty();
    let may_replace = cfg.discard_dirty || !at_stake;
    if h.volume != cfg.volume {
        if cfg.reset && may_replace {
            return replace("it belonged to another volume and --cache-reset was given");
        }
        return Err(CacheError::Foreign {
            path: shown,
            dirty_lines,
        });
    }
    if cfg.holds_dirty && cfg.bound != Some(h.id) {
        if cfg.discard_dirty {
            return replace("it is not the cache that held the volume's unwritten data, and --discard-dirty was given");
        }
        return Err(CacheError::NotBound(shown));
    }
    if cfg.reset || h.line_size != line || h.slots != nslots {
        if !cfg.reset {
            return Err(CacheError::Mismatch {
                path: shown,
                line_size: h.line_size,
                slots: h.slots,
                want: format!("line size {line} and {nslots} lines"),
            });
        }
        if !may_replace {
            return Err(CacheError::DirtyReset {
                path: shown,
                dirty_lines,
                damaged: damaged.len(),
            });
        }
        return replace("--cache-reset was given");
    }
    if !damaged.is_empty() {
        return Err(CacheError::Damaged {
            path: shown,
            what: damaged_records(&damaged),
        });
    }
    let records: Vec<Record> = records
        .into_iter()
        .map(|r| r.unwrap_or(Record::EMPTY))
        .collect();
    // Lines of another generation were made before the volume was used without this cache:
    // the devices may hold newer data under them, so none of them is trusted.
    if cfg.bound != Some(h.id) || h.generation != cfg.generation {
        if dirty_lines > 0 {
            log::warn!(
                "cache file {shown}: dropping {dirty_lines} dirty lines of generation {} (the \
                 volume is at {}: it was used without this cache since)",
                h.generation,
                cfg.generation
            );
        } else {
            log::info!("cache file {shown}: its lines are stale (the volume was used without it)");
        }
        store.wipe_records()?;
        let shards = usize::from(h.shards.max(1));
        return Ok((Some(store), Some((h.id, Vec::new(), shards))));
    }
    let records = records
        .into_iter()
        .map(|r| {
            // After a crash only dirty sectors are known to be right.
            if h.clean {
                r
            } else {
                Record {
                    valid: r.dirty,
                    ..r
                }
            }
        })
        .collect();
    Ok((
        Some(store),
        Some((h.id, records, usize::from(h.shards.max(1)))),
    ))
}

/// "slots 3 (object 17), 9 (object 4)": the damaged records, and the objects they claim to
/// belong to (a claim only: the record failed its checksum).
fn damaged_records(damaged: &[(u32, u64)]) -> String {
    let shown: Vec<String> = damaged
        .iter()
        .take(8)
        .map(|(slot, object)| format!("slot {slot} (object {object}?)"))
        .collect();
    let more = damaged.len().saturating_sub(8);
    format!(
        "{} damaged line record(s): {}{}",
        damaged.len(),
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}

/// The cache file a store setting names.
pub fn cache_file(store: &StoreKind) -> Option<PathBuf> {
    match store {
        StoreKind::Ram => None,
        StoreKind::File(p) if p.is_dir() => Some(p.join("stripefs.cache")),
        StoreKind::File(p) => Some(p.clone()),
    }
}

/// What a cache file holds, read without changing it (for fsck).
#[derive(Debug, Default)]
pub struct Inspection {
    /// Why the file cannot be read as a cache at all (not a cache, damaged header, truncated).
    pub unreadable: Option<String>,
    pub dirty_lines: usize,
    /// Records that fail their checksum: (slot, the object and line they claim).
    pub damaged: Vec<(u32, u64, u64)>,
}

/// Reads the cache file at `path` and checks every checksum.
pub fn inspect(path: &Path) -> std::io::Result<Inspection> {
    let mut found = Inspection::default();
    let header = match Store::open_existing(path, 0, 0)?.read_header() {
        Ok(h) => h,
        Err(HeaderError::Io(e)) => return Err(e),
        Err(HeaderError::NotCache) => {
            found.unreadable = Some("not a stripefs cache file".into());
            return Ok(found);
        }
        Err(HeaderError::Blank) => {
            found.unreadable = Some("its header is blank (a crash cut its making short)".into());
            return Ok(found);
        }
        Err(HeaderError::Format1 { .. }) => {
            found.unreadable = Some("format 1 (an older stripefs): no checksums to check".into());
            return Ok(found);
        }
        Err(HeaderError::Damaged) => {
            found.unreadable = Some("its header fails its checksum".into());
            return Ok(found);
        }
    };
    let store = match Store::open_existing(path, header.line_size, header.slots) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            found.unreadable = Some(e.to_string());
            return Ok(found);
        }
        Err(e) => return Err(e),
    };
    for (slot, r) in store.read_records()?.into_iter().enumerate() {
        match r {
            Ok(r) if r.object != EMPTY && r.dirty != 0 => found.dirty_lines += 1,
            Ok(_) => {}
            Err(claimed) => found
                .damaged
                .push((slot as u32, claimed.object, claimed.line)),
        }
    }
    Ok(found)
}
