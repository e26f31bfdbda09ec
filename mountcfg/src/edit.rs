//! Changes the daemon makes to the config file it was mounted from (a device added online),
//! edited in place: comments, order and formatting stay as the administrator wrote them, and
//! the file is replaced whole (written beside it, synced, renamed over it), so a crash leaves
//! the old file or the new one.

use std::io::Write;
use std::path::Path;
use toml_edit::{Array, DocumentMut, Item, Value};

/// Appends `device` to `[volume] devices` of the config at `path`, unless it is listed.
pub fn add_device(path: &Path, device: &Path) -> Result<(), String> {
    let device = device
        .to_str()
        .ok_or_else(|| format!("{}: the path is not UTF-8", device.display()))?;
    edit_devices(path, |devices| {
        if devices.iter().any(|d| d.as_str() == Some(device)) {
            return false;
        }
        push_like_the_others(devices, device);
        true
    })
}

/// Drops `device` from `[volume] devices` of the config at `path` (a device removed).
pub fn remove_device(path: &Path, device: &Path) -> Result<(), String> {
    let base = path.parent().unwrap_or(Path::new("."));
    let same = |d: &str| {
        let p = base.join(d);
        p == device || p.canonicalize().is_ok_and(|p| p == device)
    };
    edit_devices(path, |devices| {
        let at = devices.iter().position(|d| d.as_str().is_some_and(same));
        if let Some(at) = at {
            devices.remove(at);
        }
        at.is_some()
    })
}

/// Runs `change` on the config's device list; writes the file back if it says it changed.
fn edit_devices(path: &Path, change: impl FnOnce(&mut Array) -> bool) -> Result<(), String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{shown}: {e}"))?;
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e| format!("{shown}: not valid TOML any more ({e})"))?;
    let devices = doc
        .get_mut("volume")
        .and_then(Item::as_table_like_mut)
        .and_then(|v| v.get_mut("devices"))
        .and_then(Item::as_value_mut)
        .and_then(Value::as_array_mut)
        .ok_or_else(|| format!("{shown}: no `devices` list in [volume]"))?;
    if !change(devices) {
        return Ok(());
    }
    replace_durably(path, doc.to_string().as_bytes()).map_err(|e| format!("{shown}: {e}"))
}

/// Pushes `item` formatted as the list is: one per line when the list is written so.
fn push_like_the_others(list: &mut Array, item: &str) {
    let multiline = list.iter().any(|v| {
        v.decor()
            .prefix()
            .and_then(|p| p.as_str())
            .is_some_and(|p| p.contains('\n'))
    });
    list.push(item);
    if multiline {
        let indent = list
            .get(0)
            .and_then(|v| v.decor().prefix())
            .and_then(|p| p.as_str())
            .unwrap_or("\n    ")
            .to_string();
        if let Some(last) = list.iter_mut().last() {
            last.decor_mut().set_prefix(indent);
        }
        if list.trailing().as_str().is_none_or(|t| !t.contains('\n')) {
            list.set_trailing("\n");
        }
        list.set_trailing_comma(true);
    }
}

/// Replaces (or makes) the file at `path` with `bytes` so that a crash leaves the old
/// contents or the new: written to a fresh file beside it (created exclusively, never
/// through a link someone planted), synced, renamed over it, the directory synced. Its
/// mode and owner stay.
pub fn replace_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = dir.unwrap_or(Path::new("."));
    let old = std::fs::metadata(path).ok();
    let mut tmp = tempfile::Builder::new()
        .prefix(".stripefs-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(
            old.as_ref().map_or(0o600, |m| m.mode() & 0o7777),
        ))
        .tempfile_in(dir)?;
    if let Some(m) = &old {
        std::os::unix::fs::fchown(tmp.as_file(), Some(m.uid()), Some(m.gid()))?;
    }
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_is_appended_and_comments_stay() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("vol.toml");
        let before = "# my volume\n[volume]\n# the disks\ndevices = [\n    \"/d0\", # fast\n    \"/d1\",\n]\nstripe_size = \"64K\"\n\n[mount]\nmountpoint = \"/mnt\"\n";
        std::fs::write(&p, before).unwrap();
        add_device(&p, Path::new("/d2")).unwrap();
        let after = std::fs::read_to_string(&p).unwrap();
        assert!(after.contains("# my volume") && after.contains("# the disks"));
        assert!(after.contains("\"/d0\", # fast"), "{after}");
        assert!(after.contains("\n    \"/d2\",\n]"), "{after}");
        let doc: toml::Value = toml::from_str(&after).unwrap();
        let devices: Vec<&str> = doc["volume"]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap())
            .collect();
        assert_eq!(devices, ["/d0", "/d1", "/d2"]);
        // Listed already: unchanged.
        add_device(&p, Path::new("/d2")).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), after);

        std::fs::write(&p, "[volume]\ndevices = [\"/a\", \"/b\"]\n").unwrap();
        add_device(&p, Path::new("/c")).unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "[volume]\ndevices = [\"/a\", \"/b\", \"/c\"]\n"
        );
        std::fs::write(&p, "[mount]\n").unwrap();
        let e = add_device(&p, Path::new("/c")).unwrap_err();
        assert!(e.contains("no `devices` list"), "{e}");
    }
}
