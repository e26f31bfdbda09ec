//! The cache modes, exactly as Open CAS defines them, and the per-class settings.

use serde::Serialize;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Write-through: reads insert; writes go to cache and core.
    Wt,
    /// Write-back: reads insert; writes go to cache only, dirty, cleaned later.
    Wb,
    /// Write-around: reads insert; writes update the cache only where the line is cached.
    Wa,
    /// Write-invalidate: reads insert; writes go to core and invalidate cached lines.
    Wi,
    /// Write-only: writes as write-back; reads never insert.
    Wo,
    /// Pass-through: everything to core; cached lines are cleaned and invalidated.
    Pt,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s.to_ascii_lowercase().as_str() {
            "wt" | "write-through" => Mode::Wt,
            "wb" | "write-back" => Mode::Wb,
            "wa" | "write-around" => Mode::Wa,
            "wi" | "write-invalidate" => Mode::Wi,
            "wo" | "write-only" => Mode::Wo,
            "pt" | "pass-through" => Mode::Pt,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Wt => "wt",
            Mode::Wb => "wb",
            Mode::Wa => "wa",
            Mode::Wi => "wi",
            Mode::Wo => "wo",
            Mode::Pt => "pt",
        }
    }

    /// Modes that hold data the core has not seen.
    pub fn holds_dirty(self) -> bool {
        self.rules().write_back
    }

    /// What the engine does with each kind of request in this mode: its row of `RULES`.
    pub(crate) fn rules(self) -> &'static Rules {
        &RULES[self as usize]
    }
}

/// One mode, as the request path sees it (OCF: the engine each mode routes to).
pub(crate) struct Rules {
    /// A read miss inserts the line.
    pub read_inserts: bool,
    /// A write miss inserts the line (and a write hit takes every sector it touches).
    pub write_inserts: bool,
    /// Writes go to the cache only, dirty; the cleaner writes them back.
    pub write_back: bool,
    /// Writes go to the core and invalidate what the cache held of the line.
    pub write_invalidates: bool,
    /// Everything goes to the core; dirty sectors a read meets are cleaned first.
    pub pass_through: bool,
}

/// The modes' rules, in the order of `Mode`'s variants.
const RULES: [Rules; 6] = [
    // wt: reads insert; writes to cache and core.
    Rules {
        read_inserts: true,
        write_inserts: true,
        write_back: false,
        write_invalidates: false,
        pass_through: false,
    },
    // wb: reads insert; writes to cache only, dirty.
    Rules {
        read_inserts: true,
        write_inserts: true,
        write_back: true,
        write_invalidates: false,
        pass_through: false,
    },
    // wa: reads insert; writes update only what is cached, and go to the core.
    Rules {
        read_inserts: true,
        write_inserts: false,
        write_back: false,
        write_invalidates: false,
        pass_through: false,
    },
    // wi: reads insert; writes go to the core and invalidate.
    Rules {
        read_inserts: true,
        write_inserts: false,
        write_back: false,
        write_invalidates: true,
        pass_through: false,
    },
    // wo: reads never insert; writes as write-back.
    Rules {
        read_inserts: false,
        write_inserts: true,
        write_back: true,
        write_invalidates: false,
        pass_through: false,
    },
    // pt: everything to the core.
    Rules {
        read_inserts: false,
        write_inserts: false,
        write_back: false,
        write_invalidates: true,
        pass_through: true,
    },
];

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a class (a folder target, or the volume default) asks of the cache.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClassConfig {
    pub name: String,
    pub mode: Mode,
    /// Eviction priority: 0 is kept longest; higher numbers go first.
    pub priority: u8,
    /// Most of the cache this class may hold, 0.0..=1.0.
    pub allocation: f64,
    /// Least of the cache kept for this class, 0.0..=allocation: other classes do not evict
    /// its lines while it holds no more than this share (OCF's min allocation).
    pub min_allocation: f64,
    /// Lines of a pinned class are never evicted.
    pub pinned: bool,
}

impl ClassConfig {
    pub fn new(name: &str, mode: Mode) -> ClassConfig {
        ClassConfig {
            name: name.into(),
            mode,
            priority: 0,
            allocation: 1.0,
            min_allocation: 0.0,
            pinned: false,
        }
    }
}

/// Open CAS's sequential cutoff policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SeqCutoff {
    Always,
    /// Only when the cache is full.
    Full,
    Never,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Promotion {
    Always,
    /// Insert a line after it was missed this many times.
    Nhit(u32),
}

/// Settings of the whole cache.
#[derive(Clone, Debug, Serialize)]
pub struct Policy {
    pub seq_cutoff: SeqCutoff,
    pub seq_threshold: u64,
    pub promotion: Promotion,
    /// A dirty line older than this is written back.
    pub staleness: std::time::Duration,
    pub wake_up: std::time::Duration,
    /// Lines per cleaning pass.
    pub batch: usize,
    /// Above this share of dirty lines, clean regardless of staleness.
    pub dirty_high: f64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            seq_cutoff: SeqCutoff::Full,
            seq_threshold: 1 << 20,
            promotion: Promotion::Always,
            staleness: std::time::Duration::from_secs(30),
            wake_up: std::time::Duration::from_secs(1),
            batch: 128,
            dirty_high: 0.8,
        }
    }
}
