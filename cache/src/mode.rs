//! The cache modes, exactly as Open CAS defines them, and the per-class settings.

use serde::Serialize;
use std::fmt;
use std::time::Duration;

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

/// Open CAS's promotion policies: whether a missed line is inserted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Promotion {
    Always,
    /// Insert a request's lines once each was missed `insertion_threshold` times; below
    /// `trigger_threshold` percent occupancy every miss inserts (OCF's nhit).
    Nhit {
        insertion_threshold: u32,
        trigger_threshold: u8,
    },
}

impl Promotion {
    /// nhit with OCF's defaults (3 misses, from 80 % occupancy).
    pub fn nhit(insertion_threshold: u32) -> Promotion {
        Promotion::Nhit {
            insertion_threshold,
            trigger_threshold: 80,
        }
    }
}

/// Open CAS's cleaning policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CleaningPolicy {
    /// Approximately LRU: stale dirty lines, oldest write first.
    Alru,
    /// Aggressive: the core region (100 MiB chunk) with the most dirty lines, in address
    /// order, every `wake_up`.
    Acp,
    /// Never: dirty lines leave by flush, mode change or unmount only.
    Nop,
}

impl CleaningPolicy {
    pub fn parse(s: &str) -> Option<CleaningPolicy> {
        Some(match s {
            "alru" => CleaningPolicy::Alru,
            "acp" => CleaningPolicy::Acp,
            "nop" => CleaningPolicy::Nop,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            CleaningPolicy::Alru => "alru",
            CleaningPolicy::Acp => "acp",
            CleaningPolicy::Nop => "nop",
        }
    }
}

/// The cleaner's settings (OCF's cleaning parameters); the keys of `[cache.cleaner]`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cleaner {
    pub policy: CleaningPolicy,
    /// alru: the sleep after a pass that found nothing to clean (a productive pass runs the
    /// next at once); acp: the time between passes.
    pub wake_up: Duration,
    /// alru: a dirty line whose last write is older than this is written back.
    pub staleness: Duration,
    /// Lines written back per pass.
    pub flush_max_buffers: usize,
    /// alru: no cleaning while a request came within this (0: clean under load).
    pub activity_threshold: Duration,
    /// alru: percent of the cache dirty above which lines are cleaned whatever their age
    /// (100: never).
    pub dirty_ratio_threshold: u8,
    /// alru: once over the threshold, cleaning goes on down to threshold minus this (bytes).
    pub dirty_ratio_inertia: u64,
    /// Write-back bandwidth limit of the cleaner in MB/s (10^6 bytes), 0: none.
    pub max_mbps: u64,
}

impl Cleaner {
    /// alru, as stripefs always cleaned: under load too.
    pub fn alru() -> Cleaner {
        Cleaner {
            policy: CleaningPolicy::Alru,
            wake_up: Duration::from_secs(1),
            staleness: Duration::from_secs(30),
            flush_max_buffers: 128,
            activity_threshold: Duration::ZERO,
            dirty_ratio_threshold: 80,
            dirty_ratio_inertia: 128 << 20,
            max_mbps: 0,
        }
    }

    /// acp with OCF's defaults: 128 lines every 10 ms.
    pub fn acp() -> Cleaner {
        Cleaner {
            policy: CleaningPolicy::Acp,
            wake_up: Duration::from_millis(10),
            ..Cleaner::alru()
        }
    }

    /// One line for `stats` and `stripefs cleaner`.
    pub fn summary(&self) -> String {
        let limit = if self.max_mbps == 0 {
            String::new()
        } else {
            format!(", max {} MB/s", self.max_mbps)
        };
        match self.policy {
            CleaningPolicy::Alru => format!(
                "alru: wake_up {:?}, staleness {:?}, {} lines/pass, activity threshold {:?}, \
                 dirty ratio {}% (inertia {} MiB){limit}",
                self.wake_up,
                self.staleness,
                self.flush_max_buffers,
                self.activity_threshold,
                self.dirty_ratio_threshold,
                self.dirty_ratio_inertia >> 20
            ),
            CleaningPolicy::Acp => format!(
                "acp: wake_up {:?}, {} lines/pass{limit}",
                self.wake_up, self.flush_max_buffers
            ),
            CleaningPolicy::Nop => "nop: never cleans (flush, mode change, unmount)".into(),
        }
    }
}

impl Default for Cleaner {
    fn default() -> Cleaner {
        Cleaner::alru()
    }
}

/// Settings of the whole cache.
#[derive(Clone, Debug, Serialize)]
pub struct Policy {
    pub seq_cutoff: SeqCutoff,
    /// A stream is cut once its bytes with the request's reach this.
    pub seq_threshold: u64,
    /// A stream is cut only once this many requests were seen in it (OCF: 8).
    pub seq_promotion_count: u32,
    /// ... or once it has this many bytes (0: by count only).
    pub seq_promotion_threshold: u64,
    pub promotion: Promotion,
    pub cleaner: Cleaner,
    /// Requests that met a cache device error before the cache goes pass-through for good
    /// (OCF's fallback_pt_error_threshold); 0: never, each such request is served by the core.
    pub error_threshold: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            seq_cutoff: SeqCutoff::Full,
            seq_threshold: 1 << 20,
            seq_promotion_count: 8,
            seq_promotion_threshold: 0,
            promotion: Promotion::Always,
            cleaner: Cleaner::default(),
            error_threshold: 1000,
        }
    }
}
