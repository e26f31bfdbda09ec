//! Live and config IO classes on the volume: added, replaced, removed, kept across mounts,
//! listed.

use super::classifier::{self, IoClass};
use super::folders::lookup_dir;
use super::{path_of, Caching, ClassInfo, LIVE_CLASSES};
use crate::error::Result;
use crate::namespace::{Kind, Namespace, ROOT};
use cache::ClassId;
use mountcfg::Direction;

impl Caching {
    /// Adds an IO class, or replaces the one of its name (which keeps its cache class).
    pub(super) fn put_class(&self, mut c: IoClass) -> ClassId {
        // Detached: kept here, and given a cache class at the attach. (The attach lock
        // before the classes' lock, as the attach takes them.)
        let (cache, _attach) = self.cache_for_change();
        let mut classes = self.classes.write();
        let name = format!("class {}", c.name);
        let id = match classes.iter_mut().find(|o| o.name == c.name) {
            Some(old) => {
                c.class = old.class;
                if let Some(Err(e)) = cache
                    .as_ref()
                    .map(|k| k.set_class(c.class, c.setting.config(name)))
                {
                    log::warn!("changing IO class {}: {e}", c.name);
                }
                *old = c;
                old.class
            }
            None => {
                c.class = cache.as_ref().map_or(cache::DEFAULT_CLASS, |k| {
                    k.add_class(c.setting.config(name))
                });
                classes.push(c);
                classes[classes.len() - 1].class
            }
        };
        drop(classes);
        self.tree_changed();
        id
    }

    /// The live IO classes kept on the root; a name the config has is the config's again.
    pub(super) fn load_live_classes(&self, ns: &Namespace) {
        let Some((_, raw)) = ns
            .internal(LIVE_CLASSES)
            .into_iter()
            .find(|(i, _)| *i == ROOT)
        else {
            return;
        };
        let mut dropped = false;
        for line in String::from_utf8_lossy(&raw).lines() {
            let Some((dir, spec)) = line.split_once(' ') else {
                continue;
            };
            let parsed = classifier::parse_spec(spec, self.target_mode);
            let spec = match parsed {
                Ok(s) => s,
                Err(e) => {
                    log::warn!("ignoring a damaged live IO class ({line}): {e}");
                    dropped = true;
                    continue;
                }
            };
            if self.classes.read().iter().any(|c| c.name == spec.name) {
                log::info!(
                    "IO class {} was changed live; the config's applies again",
                    spec.name
                );
                dropped = true;
                continue;
            }
            let directory = match dir.parse::<u64>() {
                Ok(ino)
                    if ns
                        .get(ino)
                        .is_ok_and(|i| i.kind == Kind::Dir && i.nlink > 0) =>
                {
                    Some(ino)
                }
                Ok(ino) => {
                    log::warn!(
                        "dropping live IO class {}: its folder (inode {ino}) is gone",
                        spec.name
                    );
                    dropped = true;
                    continue;
                }
                Err(_) => None,
            };
            self.put_class(IoClass {
                name: spec.name,
                rule: classifier::Rule {
                    directory,
                    ..spec.rule
                },
                directory_path: spec.directory,
                setting: spec.setting,
                class: 0,
                from_config: false,
            });
        }
        if dropped {
            if let Err(e) = self.save_live_classes(ns) {
                log::warn!("keeping the live IO classes: {e}");
            }
        }
    }

    fn save_live_classes(&self, ns: &Namespace) -> Result<()> {
        let text: String = self
            .classes
            .read()
            .iter()
            .filter(|c| !c.from_config)
            .map(|c| {
                let dir = c.rule.directory.map_or("-".to_string(), |d| d.to_string());
                format!("{dir} {}\n", classifier::format_spec(c))
            })
            .collect();
        let value = (!text.is_empty()).then_some(text.as_bytes());
        ns.set_internal(ROOT, LIVE_CLASSES, value)
    }

    /// `stripefs class add`: adds an IO class, or replaces the one of its name; kept across
    /// mounts. Refusals are `(errno, reason)`.
    pub fn add_class(
        &self,
        ns: &Namespace,
        text: &str,
    ) -> std::result::Result<ClassId, (i32, String)> {
        let spec = classifier::parse_spec(text, self.target_mode).map_err(|e| (libc::EINVAL, e))?;
        let directory = match &spec.directory {
            None => None,
            Some(path) => Some(lookup_dir(ns, path).map_err(|e| {
                (
                    libc::ENOENT,
                    format!("directory = \"{path}\": {e} (a live class's folder must exist)"),
                )
            })?),
        };
        {
            let classes = self.classes.read();
            if classes.len() >= mountcfg::MAX_CLASSES
                && !classes.iter().any(|c| c.name == spec.name)
            {
                return Err((
                    libc::ENOSPC,
                    format!(
                        "a volume has at most {} IO classes; `stripefs class rm` one first",
                        mountcfg::MAX_CLASSES
                    ),
                ));
            }
        }
        let id = self.put_class(IoClass {
            name: spec.name.clone(),
            rule: classifier::Rule {
                directory,
                ..spec.rule
            },
            directory_path: spec.directory,
            setting: spec.setting,
            class: 0,
            from_config: false,
        });
        self.save_live_classes(ns)
            .map_err(|e| (e.errno(), format!("keeping the class on the volume: {e}")))?;
        Ok(id)
    }

    /// `stripefs class rm`: its dirty lines are written back and its lines join the default.
    pub fn remove_class(
        &self,
        ns: &Namespace,
        name: &str,
    ) -> std::result::Result<bool, (i32, String)> {
        let Some(c) = self.classes.read().iter().find(|c| c.name == name).cloned() else {
            return Err((libc::ENOENT, format!("no IO class \"{name}\"")));
        };
        // Out of the classifier first, so nothing new lands in it while it is written back.
        self.classes.write().retain(|o| o.name != name);
        self.tree_changed();
        let (cache, _attach) = self.cache_for_change();
        if let Some(cache) = &cache {
            cache.remove_class(c.class).map_err(|e| {
                (
                    e.raw_os_error().unwrap_or(libc::EIO),
                    format!("removing class {name}: {e}"),
                )
            })?;
        }
        if !c.from_config {
            self.save_live_classes(ns).map_err(|e| {
                (
                    e.errno(),
                    format!("forgetting the class on the volume: {e}"),
                )
            })?;
        }
        Ok(c.from_config)
    }

    pub fn classes(&self, ns: &Namespace) -> Vec<ClassInfo> {
        let stats = self.cache().map(|c| c.stats());
        self.classes
            .read()
            .iter()
            .map(|c| {
                let s = stats
                    .as_ref()
                    .and_then(|st| st.classes.iter().find(|s| s.id == c.class));
                ClassInfo {
                    name: c.name.clone(),
                    class: c.class,
                    directory: c.directory_path.clone(),
                    directory_now: c.rule.directory.map(|d| path_of(ns, d)),
                    extensions: c.rule.extensions.clone(),
                    min_size: c.rule.min_size,
                    max_size: c.rule.max_size,
                    direction: c.rule.direction.map(Direction::name),
                    setting: c.setting.clone(),
                    from_config: c.from_config,
                    spec: classifier::format_spec(c),
                    occupancy_lines: s.map_or(0, |s| s.occupancy_lines),
                    dirty_lines: s.map_or(0, |s| s.dirty_lines),
                }
            })
            .collect()
    }
}
