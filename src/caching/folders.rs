//! The folders the config names, bound to their directories' inodes across renames and
//! remounts.

use super::BINDING_KEY;
use crate::error::{Error, Result};
use crate::namespace::{Kind, Namespace, ROOT};
use std::collections::HashMap;

/// The folder at `path` (from the root), which must exist.
pub(super) fn lookup_dir(ns: &Namespace, path: &str) -> std::result::Result<u64, String> {
    let mut at = ROOT;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        at = match ns.lookup(at, part.as_bytes()) {
            Ok(i) if i.kind == Kind::Dir => i.ino,
            Ok(_) => return Err(format!("{part} is not a directory")),
            Err(_) => return Err(format!("no folder {part} there")),
        };
    }
    Ok(at)
}

/// The folders the config names (`[[cache.target]]` paths, `[[cache.class]]` directories),
/// by path. Each is bound to its directory's inode the first time a mount applies it, and
/// that binding (kept on the directory) is what later mounts use: a folder renamed meanwhile
/// stays the config's. A path never bound is looked up, and made if missing (`mkdir -p`);
/// a folder removed is made again. Bindings of paths the config no longer names go.
pub(super) fn bind_config_folders(
    config: &mountcfg::Config,
    section: &mountcfg::CacheSection,
    ns: &Namespace,
) -> Result<HashMap<String, u64>> {
    let mut wanted: Vec<(&str, usize, &str)> = Vec::new();
    let named = section
        .targets
        .iter()
        .map(|t| (t.path.as_str(), t.line, "cache.target.path"))
        .chain(section.classes.iter().filter_map(|c| {
            c.directory
                .as_deref()
                .map(|d| (d, c.line, "cache.class.directory"))
        }));
    for w in named {
        if !wanted.iter().any(|o| o.0 == w.0) {
            wanted.push(w);
        }
    }
    let bind = |dir: u64, path: Option<&str>| {
        if let Err(e) = ns.set_internal(dir, BINDING_KEY, path.map(str::as_bytes)) {
            log::warn!("binding config folder {path:?} to directory {dir}: {e}");
        }
    };
    let mut bound: HashMap<String, u64> = HashMap::new();
    let mut bindings = ns.internal(BINDING_KEY);
    bindings.sort();
    for (dir, value) in bindings {
        let path = String::from_utf8_lossy(&value).into_owned();
        let live = ns
            .get(dir)
            .is_ok_and(|i| i.kind == Kind::Dir && i.nlink > 0);
        if live && wanted.iter().any(|w| w.0 == path) && !bound.contains_key(&path) {
            bound.insert(path, dir);
        } else if live {
            bind(dir, None);
        }
    }
    for &(path, line, key) in &wanted {
        if bound.contains_key(path) {
            continue;
        }
        let dir = ensure_dir(ns, path).map_err(|e| {
            Error::Usage(format!(
                "{}:{line}: {key}: path = \"{path}\": {e}",
                config.source.display()
            ))
        })?;
        if let Some((owner, _)) = bound.iter().find(|(_, &d)| d == dir) {
            log::warn!(
                "{}:{line}: {key}: \"{path}\" is now the folder of config path \"{owner}\" \
                 (renamed there since a mount bound it); \"{path}\" is not applied: name \
                 another folder, or rename that one back",
                config.source.display()
            );
            continue;
        }
        bind(dir, Some(path));
        bound.insert(path.to_string(), dir);
    }
    Ok(bound)
}

/// The directory at `path` (from the root), made if missing, as `mkdir -p` would.
fn ensure_dir(ns: &Namespace, path: &str) -> std::result::Result<u64, String> {
    let mut at = ROOT;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        at = match ns.lookup(at, part.as_bytes()) {
            Ok(i) if i.kind == Kind::Dir => i.ino,
            Ok(_) => return Err(format!("{part} is not a directory")),
            Err(_) => {
                log::info!("creating the target folder {path}");
                let node = crate::namespace::NewNode::new(Kind::Dir, 0o755);
                let layout = stripe::Layout::new(65536, 1, 0);
                ns.create(at, part.as_bytes(), node, layout, 1)
                    .map_err(|e| e.to_string())?
                    .ino
            }
        };
    }
    Ok(at)
}
