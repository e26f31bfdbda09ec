//! `[[cache.class]]`: IO classes as Open CAS's classifier has them. A rule of conditions
//! (a folder, name extensions, a file size range, the request direction) and the cache setting
//! of the requests that meet them all. The checks here are shared with the live control
//! (`stripefs class add`), which reports the same messages without a file and line.

use super::*;
use crate::cache::mode_value;
use crate::values::*;

/// The most IO classes a volume has (Open CAS has 33 IO classes, the unclassified one
/// included).
pub const MAX_CLASSES: usize = 32;

/// A request's direction, for a class's `direction` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Read,
    Write,
}

impl Direction {
    pub fn parse(text: &str) -> Option<Direction> {
        match text {
            "read" => Some(Direction::Read),
            "write" => Some(Direction::Write),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
        }
    }
}

/// A validated `[[cache.class]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassSection {
    pub name: String,
    /// A folder of the volume, from its root ("/vm"); requests to files with a name under it.
    pub directory: Option<String>,
    /// Lower case, without the dot; requests to files with a name ending so.
    pub extensions: Vec<String>,
    /// The file's size, both bounds included.
    pub min_size: Option<u64>,
    pub max_size: Option<u64>,
    pub direction: Option<Direction>,
    pub mode: String,
    pub priority: u8,
    pub allocation: f64,
    pub min_allocation: f64,
    pub pinned: bool,
    /// Where it is in the config file, for messages at mount.
    pub line: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawClass {
    name: Spanned<String>,
    directory: Option<Spanned<String>>,
    extension: Option<Spanned<OneOrMany>>,
    min_size: Option<Spanned<SizeValue>>,
    max_size: Option<Spanned<SizeValue>>,
    direction: Option<Spanned<String>>,
    mode: Option<Spanned<String>>,
    priority: Option<Spanned<i64>>,
    allocation: Option<Spanned<f64>>,
    min_allocation: Option<Spanned<f64>>,
    pinned: Option<bool>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// A class name: 1 to 64 letters, digits, `-`, `_` or `.`; "default" is the volume's own.
pub fn check_class_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err(format!(
            "name = \"{name}\": must be 1 to 64 characters long"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(format!(
            "name = \"{name}\": letters, digits, '-', '_' and '.' only"
        ));
    }
    if name == "default" {
        return Err("name = \"default\" is the volume default's; choose another".into());
    }
    Ok(())
}

/// An extension as a condition matches it: lower case, without a leading dot. It is what
/// follows the last dot of a name, so it has no dot itself.
pub fn normalize_extension(ext: &str) -> Result<String, String> {
    let e = ext.strip_prefix('.').unwrap_or(ext).to_ascii_lowercase();
    if e.is_empty() || e.len() > 32 {
        return Err(format!(
            "extension \"{ext}\": must be 1 to 32 characters long"
        ));
    }
    if e.contains('.') {
        return Err(format!(
            "extension \"{ext}\": the extension is what follows the last dot of a name (\"{}\", not \"{ext}\")",
            e.rsplit('.').next().unwrap_or("")
        ));
    }
    if e.contains('/') || e.contains('\0') {
        return Err(format!("extension \"{ext}\": no '/' in an extension"));
    }
    Ok(e)
}

/// A folder of the volume from its root: "/vm" (the leading '/' may be left out), no . or ..
pub fn volume_folder(path: &str) -> Result<String, String> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if parts.iter().any(|p| *p == "." || *p == "..") || path.contains('\0') {
        return Err(format!(
            "\"{path}\": must be a folder of the volume, from its root (\"/vm-images\"), without . or .."
        ));
    }
    Ok(format!("/{}", parts.join("/")))
}

/// The size range's rule: min_size at most max_size.
pub fn check_size_range(min: Option<u64>, max: Option<u64>) -> Result<(), String> {
    match (min, max) {
        (Some(lo), Some(hi)) if lo > hi => Err(format!(
            "min_size = {} is above max_size = {}: no file would match",
            format_size(lo),
            format_size(hi)
        )),
        _ => Ok(()),
    }
}

/// min_allocation's rule: a share from 0 to the class's allocation.
pub fn check_min_allocation(min: f64, allocation: f64) -> Result<(), String> {
    if (0.0..=allocation).contains(&min) {
        Ok(())
    } else {
        Err(format!(
            "min_allocation = {min}: must be a share from 0 to the class's allocation ({allocation})"
        ))
    }
}

pub const NO_CONDITION: &str = "a class needs at least one condition: directory, extension, \
    min_size, max_size or direction (a folder's own setting is a [[cache.target]])";

pub(crate) fn validate_classes(
    ctx: &Ctx,
    raw: Vec<Spanned<RawClass>>,
    default_mode: &str,
) -> Result<Vec<ClassSection>, ConfigError> {
    let mut out: Vec<ClassSection> = Vec::new();
    for c in raw {
        let line = ctx.line_of(c.span().start);
        let entry = c.span();
        let c = c.into_inner();
        if out.len() == MAX_CLASSES {
            return Err(ctx.err(
                entry,
                "cache.class",
                format!("a volume has at most {MAX_CLASSES} IO classes"),
            ));
        }
        let name_span = c.name.span();
        let name = c.name.into_inner();
        check_class_name(&name).map_err(|m| ctx.err(name_span.clone(), "cache.class.name", m))?;
        if out.iter().any(|o| o.name == name) {
            return Err(ctx.err(
                name_span.clone(),
                "cache.class.name",
                format!("name = \"{name}\" is a class twice"),
            ));
        }
        let directory = match c.directory {
            None => None,
            Some(d) => {
                let span = d.span();
                Some(volume_folder(d.get_ref()).map_err(|m| {
                    ctx.err(span, "cache.class.directory", format!("directory = {m}"))
                })?)
            }
        };
        let extensions = match c.extension {
            None => Vec::new(),
            Some(e) => {
                let span = e.span();
                let list = match e.into_inner() {
                    OneOrMany::One(s) => vec![s],
                    OneOrMany::Many(v) => v,
                };
                if list.is_empty() {
                    return Err(ctx.err(
                        span,
                        "cache.class.extension",
                        "extension = []: list at least one, e.g. [\"img\", \"qcow2\"]",
                    ));
                }
                let mut exts = Vec::new();
                for x in list {
                    let x = normalize_extension(&x)
                        .map_err(|m| ctx.err(span.clone(), "cache.class.extension", m))?;
                    if !exts.contains(&x) {
                        exts.push(x);
                    }
                }
                exts
            }
        };
        let min_size = c
            .min_size
            .map(|v| size_value(ctx, v, "cache.class.min_size").map(|s| s.0))
            .transpose()?;
        let max_span = c.max_size.as_ref().map(|m| m.span());
        let max_size = c
            .max_size
            .map(|v| size_value(ctx, v, "cache.class.max_size").map(|s| s.0))
            .transpose()?;
        if let (Err(m), Some(span)) = (check_size_range(min_size, max_size), max_span) {
            return Err(ctx.err(span, "cache.class.max_size", m));
        }
        let direction = c
            .direction
            .map(|d| {
                one_of(
                    ctx,
                    d,
                    "cache.class.direction",
                    &[(&["read"], Direction::Read), (&["write"], Direction::Write)],
                )
            })
            .transpose()?;
        if directory.is_none()
            && extensions.is_empty()
            && min_size.is_none()
            && max_size.is_none()
            && direction.is_none()
        {
            return Err(ctx.err(name_span, "cache.class", NO_CONDITION));
        }
        let mode = mode_value(ctx, c.mode, "cache.class.mode", default_mode)?;
        let priority = c
            .priority
            .map(|p| {
                checked(
                    ctx,
                    p,
                    "cache.class.priority",
                    |n| (0..=255).contains(&n),
                    "must be from 0 (kept longest, and chosen first) to 255",
                )
            })
            .transpose()?
            .unwrap_or(0) as u8;
        let allocation = c
            .allocation
            .map(|a| {
                checked(
                    ctx,
                    a,
                    "cache.class.allocation",
                    |x| x > 0.0 && x <= 1.0,
                    SHARE_RULE,
                )
            })
            .transpose()?
            .unwrap_or(1.0);
        let min_allocation = match c.min_allocation {
            None => 0.0,
            Some(m) => {
                let span = m.span();
                let v = m.into_inner();
                check_min_allocation(v, allocation)
                    .map_err(|e| ctx.err(span, "cache.class.min_allocation", e))?;
                v
            }
        };
        out.push(ClassSection {
            name,
            directory,
            extensions,
            min_size,
            max_size,
            direction,
            mode,
            priority,
            allocation,
            min_allocation,
            pinned: c.pinned.unwrap_or(false),
            line,
        });
    }
    Ok(out)
}
