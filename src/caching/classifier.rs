//! IO classes, as Open CAS's classifier: rules of conditions (a folder, name extensions, a
//! file size range, the request's direction) with a cache setting each, and the choice of a
//! request's class among them, the folder targets and the volume default.
//!
//! The choice, for a request to a file:
//! 1. the IO classes whose every condition the request meets; a name condition (directory,
//!    extension) is met when one of the file's names meets all of them, the size by the file's
//!    size with the request (a write counts where it ends), the direction by the request. The
//!    lowest priority number wins; a tie goes to the class listed first (the config's order,
//!    then live classes in the order they were added);
//! 2. else the folder targets holding a name of the file (each name's nearest targeted
//!    folder): the lowest priority number wins, a tie goes to the lower directory inode (the
//!    older folder);
//! 3. else the volume default.
//!
//! What the names decide is worked out once per file and kept until its names, the targets or
//! the classes change; what is left for each request is a short list of the classes whose
//! size and direction conditions are still to be checked.

use cache::{ClassConfig, ClassId, Mode};
use mountcfg::Direction;
use serde::Serialize;

/// A class's conditions; those left out match everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rule {
    /// The folder (by inode, so it follows renames) a name must be under.
    pub directory: Option<u64>,
    /// A name must end in one of these (lower case, without the dot).
    pub extensions: Vec<String>,
    pub min_size: Option<u64>,
    pub max_size: Option<u64>,
    pub direction: Option<Direction>,
}

/// What an IO class asks of the cache.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClassSetting {
    pub mode: Mode,
    pub priority: u8,
    pub allocation: f64,
    pub min_allocation: f64,
    pub pinned: bool,
}

impl ClassSetting {
    pub fn config(&self, name: String) -> ClassConfig {
        ClassConfig {
            name,
            mode: self.mode,
            priority: self.priority,
            allocation: self.allocation,
            min_allocation: self.min_allocation,
            pinned: self.pinned,
        }
    }
}

/// One IO class of the volume.
#[derive(Clone, Debug)]
pub struct IoClass {
    pub name: String,
    pub rule: Rule,
    /// The folder as the config or the command named it ("/vm").
    pub directory_path: Option<String>,
    pub setting: ClassSetting,
    /// The cache's class.
    pub class: ClassId,
    pub from_config: bool,
}

/// A name of a file, as the classifier needs it: the folders above it (its directory first,
/// up to the root) and its extension.
pub struct NameView {
    pub folders: Vec<u64>,
    pub extension: Option<String>,
}

/// The extension of a name: what follows its last dot, in lower case; none for a name without
/// a dot or whose only dot leads (".profile").
pub fn extension(name: &[u8]) -> Option<String> {
    let at = name.iter().rposition(|&b| b == b'.')?;
    if at == 0 || at + 1 == name.len() {
        return None;
    }
    let ext = &name[at + 1..];
    (ext.len() <= 32).then(|| String::from_utf8_lossy(ext).to_ascii_lowercase())
}

impl Rule {
    /// The name conditions (directory, extension), met by one name.
    fn names_match(&self, names: &[NameView]) -> bool {
        names.iter().any(|n| {
            self.directory.is_none_or(|d| n.folders.contains(&d))
                && (self.extensions.is_empty()
                    || n.extension
                        .as_ref()
                        .is_some_and(|e| self.extensions.contains(e)))
        })
    }

    fn per_request(&self) -> bool {
        self.min_size.is_some() || self.max_size.is_some() || self.direction.is_some()
    }
}

/// A class whose request conditions are checked at each request.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Candidate {
    class: ClassId,
    min_size: Option<u64>,
    max_size: Option<u64>,
    direction: Option<Direction>,
}

impl Candidate {
    fn matches(&self, size: u64, direction: Direction) -> bool {
        self.min_size.is_none_or(|m| size >= m)
            && self.max_size.is_none_or(|m| size <= m)
            && self.direction.is_none_or(|d| d == direction)
    }
}

/// What a file's names decide: the classes still to be checked per request, in the order
/// they are chosen, and the class otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    candidates: Vec<Candidate>,
    otherwise: ClassId,
}

impl Resolved {
    /// The class of a request to the file: `size` is the file's size with the request.
    pub fn pick(&self, size: u64, direction: Direction) -> ClassId {
        self.candidates
            .iter()
            .find(|c| c.matches(size, direction))
            .map_or(self.otherwise, |c| c.class)
    }

    pub fn fixed(class: ClassId) -> Resolved {
        Resolved {
            candidates: Vec::new(),
            otherwise: class,
        }
    }
}

/// Works out what a file's names decide. `classes` in their listed order; `by_targets` is the
/// class the folder targets (else the default) give the file.
pub fn resolve(names: &[NameView], classes: &[IoClass], by_targets: ClassId) -> Resolved {
    let mut matching: Vec<(usize, &IoClass)> = classes
        .iter()
        .enumerate()
        .filter(|(_, c)| c.rule.names_match(names))
        .collect();
    matching.sort_by_key(|&(order, c)| (c.setting.priority, order));
    let mut candidates = Vec::new();
    for (_, c) in matching {
        if !c.rule.per_request() {
            // Every request meets it: nothing after it is ever chosen.
            return Resolved {
                candidates,
                otherwise: c.class,
            };
        }
        candidates.push(Candidate {
            class: c.class,
            min_size: c.rule.min_size,
            max_size: c.rule.max_size,
            direction: c.rule.direction,
        });
    }
    Resolved {
        candidates,
        otherwise: by_targets,
    }
}

/// A live class as `stripefs class add` sends it: `name=N [directory=/vm] [extension=img,qcow2]
/// [min_size=1G] [max_size=4G] [direction=read|write] [mode=wb] [priority=0] [allocation=1]
/// [min_allocation=0] [pinned=0]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    pub name: String,
    pub directory: Option<String>,
    pub rule: Rule,
    pub setting: ClassSetting,
}

/// Parses a live class; the checks and their words are the config's.
pub fn parse_spec(text: &str, default_mode: Mode) -> Result<Spec, String> {
    let mut name = None;
    let mut directory = None;
    let mut rule = Rule::default();
    let mut setting = ClassSetting {
        mode: default_mode,
        priority: 0,
        allocation: 1.0,
        min_allocation: 0.0,
        pinned: false,
    };
    let size =
        |k: &str, v: &str| mountcfg::parse_size(v).map_err(|e| format!("{k} = \"{v}\": {e}"));
    for part in text.split_whitespace() {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("\"{part}\" is not key=value"))?;
        match k {
            "name" => {
                mountcfg::check_class_name(v)?;
                name = Some(v.to_string());
            }
            "directory" => {
                directory =
                    Some(mountcfg::volume_folder(v).map_err(|m| format!("directory = {m}"))?)
            }
            "extension" => {
                rule.extensions.clear();
                for x in v.split(',').filter(|x| !x.is_empty()) {
                    let x = mountcfg::normalize_extension(x)?;
                    if !rule.extensions.contains(&x) {
                        rule.extensions.push(x);
                    }
                }
                if rule.extensions.is_empty() {
                    return Err("extension=: list at least one, e.g. extension=img,qcow2".into());
                }
            }
            "min_size" => rule.min_size = Some(size(k, v)?),
            "max_size" => rule.max_size = Some(size(k, v)?),
            "direction" => {
                rule.direction =
                    Some(Direction::parse(v).ok_or_else(|| {
                        format!("direction = \"{v}\": must be \"read\" or \"write\"")
                    })?)
            }
            "mode" => {
                setting.mode = Mode::parse(v)
                    .ok_or_else(|| format!("mode = \"{v}\": must be wt, wb, wa, wi, wo or pt"))?
            }
            "priority" => {
                setting.priority = v.parse().map_err(|_| {
                    format!(
                        "priority = {v}: must be from 0 (kept longest, and chosen first) to 255"
                    )
                })?
            }
            "allocation" => {
                setting.allocation = v
                    .parse::<f64>()
                    .ok()
                    .filter(|a| *a > 0.0 && *a <= 1.0)
                    .ok_or_else(|| {
                        format!("allocation = {v}: must be a share above 0 and at most 1")
                    })?
            }
            "min_allocation" => {
                setting.min_allocation = v
                    .parse::<f64>()
                    .map_err(|_| format!("min_allocation = {v}: not a number"))?
            }
            "pinned" => {
                setting.pinned = match v {
                    "1" | "true" | "yes" => true,
                    "0" | "false" | "no" => false,
                    _ => return Err(format!("pinned = {v}: must be 0 or 1")),
                }
            }
            other => {
                return Err(format!(
                    "unknown key \"{other}\" (name, directory, extension, min_size, max_size, \
                     direction, mode, priority, allocation, min_allocation, pinned)"
                ))
            }
        }
    }
    let name = name.ok_or("a class needs a name (name=big-images)")?;
    mountcfg::check_size_range(rule.min_size, rule.max_size)?;
    mountcfg::check_min_allocation(setting.min_allocation, setting.allocation)?;
    if directory.is_none()
        && rule.extensions.is_empty()
        && rule.min_size.is_none()
        && rule.max_size.is_none()
        && rule.direction.is_none()
    {
        return Err(mountcfg::NO_CONDITION.into());
    }
    Ok(Spec {
        name,
        directory,
        rule,
        setting,
    })
}

/// A class's rule and setting in the words `parse_spec` reads (the folder as given).
pub fn format_spec(c: &IoClass) -> String {
    let mut out = format!("name={}", c.name);
    if let Some(d) = &c.directory_path {
        out += &format!(" directory={d}");
    }
    if !c.rule.extensions.is_empty() {
        out += &format!(" extension={}", c.rule.extensions.join(","));
    }
    if let Some(s) = c.rule.min_size {
        out += &format!(" min_size={}", mountcfg::format_size(s));
    }
    if let Some(s) = c.rule.max_size {
        out += &format!(" max_size={}", mountcfg::format_size(s));
    }
    if let Some(d) = c.rule.direction {
        out += &format!(" direction={}", d.name());
    }
    let s = &c.setting;
    out += &format!(
        " mode={} priority={} allocation={} min_allocation={} pinned={}",
        s.mode,
        s.priority,
        s.allocation,
        s.min_allocation,
        u8::from(s.pinned)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, class: ClassId, priority: u8, rule: Rule) -> IoClass {
        IoClass {
            name: name.into(),
            rule,
            directory_path: None,
            setting: ClassSetting {
                mode: Mode::Wb,
                priority,
                allocation: 1.0,
                min_allocation: 0.0,
                pinned: false,
            },
            class,
            from_config: true,
        }
    }

    fn name(folders: &[u64], file: &str) -> NameView {
        NameView {
            folders: folders.to_vec(),
            extension: extension(file.as_bytes()),
        }
    }

    #[test]
    fn extensions_follow_the_last_dot() {
        assert_eq!(extension(b"disk.IMG").as_deref(), Some("img"));
        assert_eq!(extension(b"a.tar.gz").as_deref(), Some("gz"));
        assert_eq!(extension(b".profile"), None);
        assert_eq!(extension(b"README"), None);
        assert_eq!(extension(b"trailing."), None);
    }

    #[test]
    fn name_conditions_are_met_by_one_name_and_size_per_request() {
        let big = Rule {
            extensions: vec!["img".into()],
            min_size: Some(1000),
            ..Rule::default()
        };
        let vm_logs = Rule {
            directory: Some(5),
            extensions: vec!["log".into()],
            ..Rule::default()
        };
        let writes = Rule {
            direction: Some(Direction::Write),
            ..Rule::default()
        };
        let classes = [
            class("big", 1, 0, big),
            class("vm-logs", 2, 0, vm_logs),
            class("writes", 3, 5, writes),
        ];
        // An image: big once it is 1000 bytes, else the writes class for writes.
        let r = resolve(&[name(&[9, 1], "a.img")], &classes, 0);
        assert_eq!(r.pick(10, Direction::Read), 0);
        assert_eq!(r.pick(10, Direction::Write), 3);
        assert_eq!(r.pick(1000, Direction::Read), 1);
        // A log under folder 5, and one whose .log name is elsewhere while the name under 5
        // is not a .log: both conditions must be met by one name.
        let r = resolve(&[name(&[5, 1], "x.log")], &classes, 7);
        assert_eq!(r, Resolved::fixed(2));
        let r = resolve(
            &[name(&[5, 1], "x.txt"), name(&[6, 1], "y.log")],
            &classes,
            7,
        );
        assert_eq!(r.pick(1, Direction::Read), 7);
        // Priority, then the listed order.
        let tie = [
            class(
                "first",
                1,
                3,
                Rule {
                    direction: Some(Direction::Read),
                    ..Rule::default()
                },
            ),
            class(
                "second",
                2,
                3,
                Rule {
                    direction: Some(Direction::Read),
                    ..Rule::default()
                },
            ),
            class(
                "urgent",
                4,
                1,
                Rule {
                    min_size: Some(0),
                    ..Rule::default()
                },
            ),
        ];
        let r = resolve(&[name(&[1], "f")], &tie, 0);
        assert_eq!(r.pick(0, Direction::Read), 4);
        let r = resolve(&[name(&[1], "f")], &tie[..2], 0);
        assert_eq!(r.pick(0, Direction::Read), 1);
    }

    #[test]
    fn live_specs_parse_print_and_refuse() {
        let s = parse_spec(
            "name=big directory=vm extension=img,.QCOW2 min_size=1G direction=write mode=wb \
             priority=2 allocation=0.5 min_allocation=0.1 pinned=1",
            Mode::Wt,
        )
        .unwrap();
        assert_eq!(s.directory.as_deref(), Some("/vm"));
        assert_eq!(s.rule.extensions, ["img", "qcow2"]);
        assert_eq!(s.rule.min_size, Some(1 << 30));
        let c = IoClass {
            name: s.name.clone(),
            rule: s.rule.clone(),
            directory_path: s.directory.clone(),
            setting: s.setting.clone(),
            class: 1,
            from_config: false,
        };
        assert_eq!(parse_spec(&format_spec(&c), Mode::Wt).unwrap(), s);
        for (bad, why) in [
            ("name=x", "at least one condition"),
            ("direction=read", "needs a name"),
            ("name=x direction=up", "must be \"read\" or \"write\""),
            ("name=x extension=tar.gz", "follows the last dot"),
            ("name=x min_size=2G max_size=1G", "no file would match"),
            (
                "name=x direction=read allocation=0.2 min_allocation=0.3",
                "from 0 to the class's allocation",
            ),
            ("name=x colour=red", "unknown key"),
            ("name=default direction=read", "volume default's"),
        ] {
            let e = parse_spec(bad, Mode::Wt).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
