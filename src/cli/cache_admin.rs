//! `stripefs cache purge|attach|detach`, and what `flush` and `purge` reach on a volume.

use super::cache::has_cache;
use super::refusal;
use crate::error::{Error, Result};
use crate::xattr;
use std::path::{Path, PathBuf};

#[derive(clap::Subcommand)]
pub enum CacheAction {
    /// Drop the clean lines of the whole cache, of a target folder, or of one file
    #[command(
        after_help = "Dirty lines are kept (they hold data the devices lack): \
        `stripefs flush` writes them back. The whole cache: root or the user who mounted; a \
        target folder or a file: its owner too.\n\n\
        Example:\n  stripefs cache purge /mnt/vol vm-images"
    )]
    Purge {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
        /// A target folder or a file, as a path or from the mount's root; none: the whole cache
        path: Option<PathBuf>,
    },
    /// Write every dirty line back and run the volume without its cache, online
    #[command(
        after_help = "I/O goes on meanwhile; the volume records durably that no \
        cache holds its data. Root or the user who mounted only.\n\n\
        Example:\n  stripefs cache detach /mnt/vol"
    )]
    Detach {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
    },
    /// Bring the cache back on a mounted volume: the config's, or another file store
    #[command(
        after_help = "The cache starts empty. Root or the user who mounted only.\n\n\
        Example:\n  stripefs cache attach /mnt/vol\n  stripefs cache attach /mnt/vol --path \
        /ssd2/stripefs --size 8G"
    )]
    Attach {
        /// Any path on the mounted volume
        mountpoint: PathBuf,
        /// A file store other than the config's: a directory (holding stripefs.cache) or the file
        #[arg(long)]
        path: Option<PathBuf>,
        /// Its size (as 8G); default: the config's
        #[arg(long)]
        size: Option<String>,
    },
}

/// A path on the volume mounted at `root`: as given if it is there, else from the root.
pub(super) fn on_volume(root: &Path, path: &Path) -> Result<PathBuf> {
    let inside = |p: &Path| {
        std::fs::canonicalize(p)
            .ok()
            .filter(|full| full.starts_with(root))
    };
    let from_root = root.join(path.strip_prefix("/").unwrap_or(path));
    inside(path).or_else(|| inside(&from_root)).ok_or_else(|| {
        Error::Usage(format!(
            "{}: neither a path on the volume mounted at {} nor one from its root",
            path.display(),
            root.display()
        ))
    })
}

/// (clean, dirty) cache lines of what `at` reaches: the root the whole cache, a target
/// folder its lines, a file its own.
pub(super) fn lines_in_reach(at: &Path) -> Result<(u64, u64)> {
    let raw = xattr::control_get(at, "purge").map_err(refusal("cache", at, "purge"))?;
    let text = String::from_utf8_lossy(&raw);
    let value = |key: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| Error::Usage(format!("bad line counts from the daemon: {text}")))
    };
    Ok((value("clean_lines")?, value("dirty_lines")?))
}

pub fn cache(action: CacheAction) -> Result<()> {
    match action {
        CacheAction::Purge { mountpoint, path } => {
            let root = has_cache(&mountpoint)?;
            let at = match path {
                Some(p) => on_volume(&root, &p)?,
                None => root.clone(),
            };
            let (clean, _) = lines_in_reach(&at)?;
            xattr::control_set(&at, "purge", b"1").map_err(refusal("cache purge", &at, "purge"))?;
            let (left, dirty) = lines_in_reach(&at)?;
            println!(
                "{}: dropped {} clean lines{}",
                at.display(),
                clean.saturating_sub(left),
                if left > 0 {
                    format!(" ({left} clean lines in reach now: in use, or cached since)")
                } else {
                    String::new()
                }
            );
            if dirty > 0 {
                println!(
                    "{dirty} dirty lines kept: they hold data the devices lack (`stripefs flush \
                     {}` writes them back)",
                    root.display()
                );
            }
            Ok(())
        }
        CacheAction::Detach { mountpoint } => {
            let root = has_cache(&mountpoint)?;
            let (_, dirty) = lines_in_reach(&root)?;
            xattr::control_set(&root, "detach", b"1").map_err(refusal(
                "cache detach",
                &root,
                "detach",
            ))?;
            println!(
                "{}: cache detached: {dirty} dirty lines were written back, and the volume runs \
                 without a cache until `stripefs cache attach` (a remount attaches the config's)",
                root.display()
            );
            Ok(())
        }
        CacheAction::Attach {
            mountpoint,
            path,
            size,
        } => {
            let root = has_cache(&mountpoint)?;
            let mut value = String::from("1");
            if let Some(p) = path {
                let full = std::path::absolute(&p)
                    .map_err(|e| Error::Usage(format!("--path {}: {e}", p.display())))?;
                let shown = full.display().to_string();
                if shown.contains(char::is_whitespace) {
                    return Err(Error::Usage(format!("--path {shown}: no spaces")));
                }
                value = format!("path={shown}");
            }
            if let Some(s) = size {
                mountcfg::parse_size(&s).map_err(|e| Error::Usage(format!("--size {s}: {e}")))?;
                value += &format!(" size={s}");
            }
            xattr::control_set(&root, "attach", value.as_bytes()).map_err(refusal(
                "cache attach",
                &root,
                "attach",
            ))?;
            let status = xattr::volume_status(&root)?;
            let c = &status["cache"];
            println!(
                "{}: cache attached: {} store{}, {} bytes",
                root.display(),
                c["store"].as_str().unwrap_or("?"),
                c["path"]
                    .as_str()
                    .map(|p| format!(" at {p}"))
                    .unwrap_or_default(),
                c["size_bytes"]
            );
            Ok(())
        }
    }
}
