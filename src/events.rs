//! Events for the administrator's program (`[mount] on_event`), as `mdadm --monitor
//! --program`: when a device joins the volume or fails, a rebalance ends, the cache gives up (pass-through for good), write-back of
//! dirty lines fails, or the namespace store cannot be written, the program runs as
//! `PROGRAM EVENT MOUNTPOINT [DEVICE]` with the details in its environment (`STRIPEFS_EVENT`,
//! `STRIPEFS_MOUNTPOINT`, `STRIPEFS_VOLUME`, `STRIPEFS_DEVICE`, `STRIPEFS_DEVICE_INDEX`,
//! `STRIPEFS_DETAIL`). The daemon looks every second (its committer's tick) at what changed;
//! each change is one run, and a failing write-back at most one a minute.

use crate::engine::Engine;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How often a condition that persists (write-back failing) is told again.
const REPEAT: Duration = Duration::from_secs(60);

/// What was seen at the last look.
#[derive(Default)]
struct Seen {
    /// Devices in the set at the last look.
    devices: usize,
    failed_devices: Vec<bool>,
    cache_failed: bool,
    cleaner_errors: u64,
    writeback_told: Option<Instant>,
    store_down: bool,
    rebalances_ended: u64,
}

pub struct Events {
    program: Option<PathBuf>,
    seen: Mutex<Seen>,
}

/// One event: its name, the device it concerns, and a sentence for the log and the program.
struct Event {
    name: &'static str,
    device: Option<(usize, PathBuf)>,
    detail: String,
}

impl Events {
    /// Events of a volume of `devices` devices.
    pub fn new(program: Option<PathBuf>, devices: usize) -> Events {
        Events {
            program,
            seen: Mutex::new(Seen {
                devices,
                ..Seen::default()
            }),
        }
    }

    /// Looks at the devices, the cache and the namespace store; runs the program once for
    /// each change since the last look.
    pub fn watch(&self, engine: &Engine) {
        if self.program.is_none() {
            return;
        }
        let mut seen = self.seen.lock();
        let mut events = Vec::new();
        let health = engine.volume.health();
        for i in seen.devices..health.len() {
            let path = engine.volume.device_path(i).to_path_buf();
            events.push(Event {
                name: "device-added",
                detail: format!("device {i} ({}) joined the volume", path.display()),
                device: Some((i, path)),
            });
        }
        seen.devices = health.len();
        seen.failed_devices.resize(health.len(), false);
        for (i, h) in health.iter().enumerate() {
            if h.failed && !h.removed && !seen.failed_devices[i] {
                let path = engine.volume.device_path(i).to_path_buf();
                events.push(Event {
                    name: "device-failed",
                    detail: format!(
                        "device {i} ({}) is gone or holds another disk: its I/O fails with EIO",
                        path.display()
                    ),
                    device: Some((i, path)),
                });
            }
            seen.failed_devices[i] = h.failed;
        }
        if let Some(cache) = engine.caching.as_ref().and_then(|c| c.cache()) {
            let st = cache.stats();
            if st.failed && !seen.cache_failed {
                events.push(Event {
                    name: "cache-failed",
                    device: None,
                    detail: format!(
                        "the cache device failed: the cache runs pass-through for good; {} \
                         dirty lines stay in it",
                        st.dirty_lines
                    ),
                });
            }
            seen.cache_failed = st.failed;
            let due = seen.writeback_told.is_none_or(|t| t.elapsed() >= REPEAT);
            if st.cleaner_errors > seen.cleaner_errors && due {
                events.push(Event {
                    name: "writeback-failed",
                    device: None,
                    detail: format!(
                        "dirty data cannot be written back to the devices ({} failed \
                         write-backs so far; {} dirty lines wait in the cache)",
                        st.cleaner_errors, st.dirty_lines
                    ),
                });
                seen.writeback_told = Some(Instant::now());
                seen.cleaner_errors = st.cleaner_errors;
            }
        }
        let store = engine.ns.store_health();
        let down = store.state != "ok";
        if down && !seen.store_down {
            events.push(Event {
                name: "namespace-store-down",
                device: None,
                detail: format!(
                    "the namespace store cannot be written ({}): changes are refused",
                    store.state
                ),
            });
        }
        seen.store_down = down;
        let rebalance = engine.rebalancer.progress();
        if rebalance.runs_ended > seen.rebalances_ended {
            let (name, what) = match rebalance.replacing {
                Some((old, new)) => ("replace-ended", format!("replace of device {old} by {new}")),
                None => ("rebalance-ended", "rebalance".to_string()),
            };
            let lost = match rebalance.lost.len() {
                0 => String::new(),
                n => format!(", {n} file ranges lost (unreadable on the old device)"),
            };
            events.push(Event {
                name,
                device: rebalance
                    .replacing
                    .map(|(old, _)| (old, engine.volume.device_path(old).to_path_buf())),
                detail: format!(
                    "{what} {}: {} of {} files moved ({} bytes), {} failed{lost}{}",
                    rebalance.state,
                    rebalance.files_done,
                    rebalance.files_total,
                    rebalance.bytes_moved,
                    rebalance.files_failed,
                    rebalance
                        .last_error
                        .map(|e| format!(" (last: {e})"))
                        .unwrap_or_default()
                ),
            });
        }
        seen.rebalances_ended = rebalance.runs_ended;
        drop(seen);
        for e in events {
            self.run(engine, e);
        }
    }

    /// Runs the program for one event, on a thread of its own: the daemon never waits for it.
    fn run(&self, engine: &Engine, e: Event) {
        let Some(program) = self.program.clone() else {
            return;
        };
        log::warn!("event {}: {}", e.name, e.detail);
        let mut cmd = Command::new(&program);
        cmd.arg(e.name)
            .arg(&engine.mountpoint)
            .env("STRIPEFS_EVENT", e.name)
            .env("STRIPEFS_MOUNTPOINT", &engine.mountpoint)
            .env("STRIPEFS_VOLUME", engine.volume.uuid().to_string())
            .env("STRIPEFS_DETAIL", &e.detail)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some((index, path)) = &e.device {
            cmd.arg(path)
                .env("STRIPEFS_DEVICE", path)
                .env("STRIPEFS_DEVICE_INDEX", index.to_string());
        }
        let name = e.name;
        let spawned = std::thread::Builder::new()
            .name("on-event".into())
            .spawn(move || report(&program, name, cmd.output()));
        if let Err(err) = spawned {
            log::error!("on_event: no thread to run {}: {err}", name);
        }
    }
}

fn report(program: &Path, event: &str, out: std::io::Result<std::process::Output>) {
    match out {
        Ok(o) if o.status.success() => {
            log::info!("on_event: {} {event}: done", program.display())
        }
        Ok(o) => log::error!(
            "on_event: {} {event}: {}{}",
            program.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .next()
                .map(|l| format!(": {l}"))
                .unwrap_or_default()
        ),
        Err(err) => log::error!("on_event: {} {event}: {err}", program.display()),
    }
}
