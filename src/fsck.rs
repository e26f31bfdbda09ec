//! Offline check of a volume: the namespace against itself and against the object files.

use crate::engine::namespace_path;
use crate::error::{Error, Result};
use crate::namespace::{Inode, Kind, Namespace, ROOT};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use stripe::Volume;

#[derive(Serialize, Debug, Clone)]
pub struct Problem {
    pub kind: &'static str,
    pub detail: String,
    pub repaired: bool,
}

#[derive(Serialize, Debug, Default)]
pub struct Report {
    pub inodes: usize,
    pub entries: usize,
    pub objects: usize,
    pub problems: Vec<Problem>,
}

impl Report {
    pub fn clean(&self) -> bool {
        self.problems.is_empty()
    }

    pub fn unrepaired(&self) -> usize {
        self.problems.iter().filter(|p| !p.repaired).count()
    }
}

/// Checks (and with `repair`, mends) the volume a config describes. The volume must not be
/// mounted: its device locks are taken for the duration. An error means the volume could not
/// be checked (a device or the namespace store cannot be opened, or is damaged past reading).
/// Without `repair` nothing on the volume is written.
pub fn check(config: &mountcfg::Config, repair: bool) -> Result<Report> {
    let volume = Volume::open_with(&config.volume.devices, false, repair)?;
    let ns_path = namespace_path(config);
    // Either way every checksum of the store is verified first; without --repair its writes
    // (a recovery after a crash) stay in memory.
    let ns = if repair {
        Namespace::open(&ns_path)?
    } else {
        Namespace::open_detached(&ns_path)?
    };
    if ns.uuid() != volume.uuid() {
        return Err(Error::Usage(format!(
            "namespace store {} belongs to volume {}, but the devices are volume {}: \
             it is another volume's (check volume.meta)",
            ns_path.display(),
            ns.uuid(),
            volume.uuid()
        )));
    }
    let mut report = Report::default();
    // Repairs can expose more (an unreachable directory's children), so go until stable.
    for _ in 0..16 {
        let repaired = pass(&volume, &ns, repair, &mut report)?;
        if repaired == 0 {
            break;
        }
    }
    check_cache(config, &ns, &mut report)?;
    if repair {
        for object in ns.sync()? {
            let _ = volume.remove(object);
        }
        volume.sync_all()?;
    }
    Ok(report)
}

/// The cache file, if the config has one: every record's checksum, and the files whose
/// unwritten data a damaged record may have held (left for the user: mount refuses such a
/// cache until `--cache-reset --discard-dirty` gives that data up).
fn check_cache(config: &mountcfg::Config, ns: &Namespace, report: &mut Report) -> Result<()> {
    let Some(mountcfg::CacheStore::File(store)) = config.cache.as_ref().map(|c| &c.store) else {
        return Ok(());
    };
    let Some(path) = cache::cache_file(&cache::StoreKind::File(store.clone())) else {
        return Ok(());
    };
    let binding = ns.cache_binding()?;
    if !path.exists() {
        if binding.dirty {
            report.problems.push(Problem {
                kind: "cache-missing",
                detail: format!(
                    "cache file {} is missing, and the volume records that it holds data not \
                     yet on the devices",
                    path.display()
                ),
                repaired: false,
            });
        }
        return Ok(());
    }
    let found = cache::inspect(&path)
        .map_err(|e| Error::Usage(format!("cache file {}: {e}", path.display())))?;
    if let Some(why) = found.unreadable {
        report.problems.push(Problem {
            kind: "cache-unreadable",
            detail: format!("cache file {}: {why}", path.display()),
            repaired: false,
        });
    }
    let (inodes, entries) = ns.snapshot();
    let owner: HashMap<u64, &Inode> = inodes
        .iter()
        .filter(|i| i.kind == Kind::File)
        .map(|i| (i.object, i))
        .collect();
    let named: HashMap<u64, (u64, &[u8])> = entries
        .iter()
        .map(|(parent, name, ino)| (*ino, (*parent, name.as_slice())))
        .collect();
    for (slot, object, line) in found.damaged {
        let file = match owner.get(&object) {
            Some(i) => match named.get(&i.ino) {
                Some((dir, name)) => format!(
                    "file {}/{} (inode {})",
                    crate::caching::path_of(ns, *dir).trim_end_matches('/'),
                    String::from_utf8_lossy(name),
                    i.ino
                ),
                None => format!("inode {} (unlinked)", i.ino),
            },
            None => "no file the namespace knows (the claim itself may be damaged)".into(),
        };
        report.problems.push(Problem {
            kind: "cache-damaged-record",
            detail: format!(
                "cache file {}: the record of slot {slot} fails its checksum; it claims line \
                 {line} of object {object}: {file}, whose unwritten data there may be lost",
                path.display()
            ),
            repaired: false,
        });
    }
    Ok(())
}

fn pass(volume: &Volume, ns: &Namespace, repair: bool, report: &mut Report) -> Result<usize> {
    let before = report.problems.len();
    let (inodes, entries) = ns.snapshot();
    let by_ino: HashMap<u64, &Inode> = inodes.iter().map(|i| (i.ino, i)).collect();
    report.inodes = inodes.len();
    report.entries = entries.len();
    let mut problem = |kind: &'static str, detail: String, repaired: bool| {
        report.problems.push(Problem {
            kind,
            detail,
            repaired,
        })
    };

    let mut refs: HashMap<u64, u32> = HashMap::new();
    let mut subdirs: HashMap<u64, u32> = HashMap::new();
    for (parent, name, ino) in &entries {
        let shown = String::from_utf8_lossy(name);
        match by_ino.get(ino) {
            None => {
                if repair {
                    ns.repair_entry(*parent, name)?;
                }
                problem(
                    "dangling-entry",
                    format!("entry \"{shown}\" in directory {parent} names missing inode {ino}"),
                    repair,
                );
            }
            Some(i) => {
                *refs.entry(*ino).or_default() += 1;
                if i.kind == Kind::Dir {
                    *subdirs.entry(*parent).or_default() += 1;
                    if i.parent != *parent {
                        if repair {
                            ns.repair_inode(
                                i.ino,
                                Some(Inode {
                                    parent: *parent,
                                    ..(*i).clone()
                                }),
                            )?;
                        }
                        problem(
                            "wrong-parent",
                            format!("directory {ino} (\"{shown}\") records parent {} but lives in {parent}", i.parent),
                            repair,
                        );
                    }
                }
            }
        }
    }

    for i in &inodes {
        let links = refs.get(&i.ino).copied().unwrap_or(0);
        // Unlinked (or removed) while open when the daemon stopped: an orphan, not damage.
        // The next mount frees it (`reap_orphans`), as ext4 frees its orphan list; --repair
        // does so now.
        if i.ino != ROOT && links == 0 && i.nlink == 0 {
            if repair {
                ns.repair_inode(i.ino, None)?;
                if i.kind == Kind::File {
                    ns.discard_object(i.object);
                }
            }
            continue;
        }
        if i.ino != ROOT && links == 0 {
            if repair {
                ns.repair_inode(i.ino, None)?;
                if i.kind == Kind::File {
                    ns.discard_object(i.object);
                }
            }
            problem(
                "unreachable-inode",
                format!(
                    "inode {} ({:?}, {} bytes) has no name",
                    i.ino, i.kind, i.size
                ),
                repair,
            );
            continue;
        }
        let want = match i.kind {
            Kind::Dir => 2 + subdirs.get(&i.ino).copied().unwrap_or(0),
            _ => links,
        };
        if i.nlink != want {
            if repair {
                ns.repair_inode(
                    i.ino,
                    Some(Inode {
                        nlink: want,
                        ..i.clone()
                    }),
                )?;
            }
            problem(
                "wrong-link-count",
                format!(
                    "inode {} has link count {} but {want} links",
                    i.ino, i.nlink
                ),
                repair,
            );
        }
        if i.kind == Kind::File && i.layout.is_none() {
            problem(
                "no-layout",
                format!("file inode {} has no layout", i.ino),
                false,
            );
        }
        if let Some(e) = i.layout.and_then(|l| volume.validate(&l).err()) {
            // Its objects are left alone: which ones are its data the layout cannot say.
            problem(
                "bad-layout",
                format!(
                    "inode {} has a layout the devices cannot hold ({e}): a namespace that \
                     does not go with these devices (older devices, or a newer namespace?)",
                    i.ino
                ),
                false,
            );
        }
    }

    // Objects against the files that own them.
    let owners: HashMap<u64, &Inode> = inodes
        .iter()
        .filter(|i| i.kind == Kind::File)
        .map(|i| (i.object, i))
        .collect();
    let objects = volume.list_objects()?;
    report.objects = objects.len();
    let mut seen: HashSet<u64> = HashSet::new();
    for o in &objects {
        if !o.regular {
            // Never followed nor opened by the daemon; a repair removes the planted entry.
            if repair {
                volume.remove_from(o.device, o.ino)?;
            }
            problem(
                "foreign-object",
                format!(
                    "object {} on device {} is not a regular file (a symlink or other planted \
                     entry): {}",
                    o.ino,
                    o.device,
                    volume.object_path(o.device, o.ino).display()
                ),
                repair,
            );
            continue;
        }
        let Some(owner) = owners.get(&o.ino) else {
            if repair {
                volume.remove_from(o.device, o.ino)?;
            }
            problem(
                "orphan-object",
                format!(
                    "object {} on device {} ({} bytes) belongs to no file",
                    o.ino, o.device, o.len
                ),
                repair,
            );
            continue;
        };
        seen.insert(o.ino);
        let Some(layout) = owner.layout.filter(|l| volume.validate(l).is_ok()) else {
            continue;
        };
        let Some(slot) = volume.slot_of_device(&layout, o.device) else {
            if repair {
                volume.remove_from(o.device, o.ino)?;
            }
            problem(
                "stray-object",
                format!(
                    "file inode {} has an object on device {}, outside its layout",
                    owner.ino, o.device
                ),
                repair,
            );
            continue;
        };
        // A cache writes whole 4K sectors back, so the last one may run past the end.
        let want = layout.object_len(owner.size.next_multiple_of(cache::SECTOR), slot);
        if o.len > want {
            if repair {
                volume.truncate(o.ino, &layout, owner.size)?;
            }
            problem(
                "stale-tail",
                format!(
                    "file inode {} object on device {} is {} bytes; the file's size ({}) needs {want}",
                    owner.ino, o.device, o.len, owner.size
                ),
                repair,
            );
        }
    }
    for (object, owner) in &owners {
        if owner.has_data && owner.size > 0 && !seen.contains(object) {
            problem(
                "missing-objects",
                format!(
                    "file inode {} ({} bytes) has no object files on any device: its data is lost",
                    owner.ino, owner.size
                ),
                false,
            );
        }
    }
    Ok(report.problems[before..]
        .iter()
        .filter(|p| p.repaired)
        .count())
}
