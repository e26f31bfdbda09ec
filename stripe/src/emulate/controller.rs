//! The controller model: devices behind one RAID card share it. Every command (one per stripe
//! unit a request touches on a device) takes a slot of the card's `max_commands`, then a turn
//! of its one processor (`command_cost` plus the bytes at `processor_bps`), and its bytes cross
//! the shared host link at `link_bps`; the device behind it keeps its own model. An optional
//! cache (write-back, read-ahead) has its own size, memory bandwidth and per-command cost.
//!
//! Shared pipes (processor, link, cache memory) are booked when a command is issued, not when
//! its device finishes: devices that finish out of order would otherwise queue behind each
//! other on the link, which a real card does not do.

use super::device::{DeviceModel, ModelState};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Clone, Debug, PartialEq)]
pub struct ControllerModel {
    /// Profile name, shown in reports ("lsi-9260-8i", "custom").
    pub name: String,
    /// Host link (PCIe), bytes per second, shared by every device behind the card.
    pub link_bps: f64,
    /// Processor time per command.
    pub command_cost: Duration,
    /// Bytes per second the processor's data path moves (DMA through the card).
    pub processor_bps: f64,
    /// Commands the card keeps in flight at most, over all its devices.
    pub max_commands: usize,
    pub cache: Option<CacheModel>,
}

/// The card's write-back and read-ahead cache.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheModel {
    pub size: u64,
    /// Bytes per second of the cache memory.
    pub bps: f64,
    /// Processor time each command costs on top when the cache handles it (lookup, line
    /// allocation): why small stripes make a cached card slower than an uncached one.
    pub command_cost: Duration,
    /// A sequential read miss also reads the next command's worth ahead into the cache.
    pub read_ahead: bool,
}

impl ControllerModel {
    /// `lsi-9260-8i`: the seed's LSI MegaRAID SAS 9260-8i, PCIe 2.0 x8, 512 MB DDR2-800
    /// cache. The link and cache size are the card's specification; the processor's figures
    /// are fitted to the seed (see README, "The RAID-card preset").
    pub fn profile(name: &str) -> Option<ControllerModel> {
        match name {
            "lsi-9260-8i" => Some(ControllerModel {
                name: name.into(),
                // 8 lanes of 500 MB/s after 8b/10b, less about 20 % of packet overhead.
                link_bps: 3200e6,
                command_cost: Duration::from_micros(2),
                processor_bps: 1000e6,
                max_commands: 128,
                cache: Some(CacheModel {
                    size: 512 << 20,
                    bps: 6400e6,
                    command_cost: Duration::from_micros(7),
                    read_ahead: true,
                }),
            }),
            _ => None,
        }
    }

    pub fn profile_names() -> &'static [&'static str] {
        &["lsi-9260-8i"]
    }

    /// One line for reports.
    pub fn describe(&self) -> String {
        let cache = match &self.cache {
            Some(c) => format!(
                "cache {} MiB at {:.0} MB/s, {:?}/command, read-ahead {}",
                c.size >> 20,
                c.bps / 1e6,
                c.command_cost,
                if c.read_ahead { "on" } else { "off" }
            ),
            None => "cache off".into(),
        };
        format!(
            "{} (emulated controller: link {:.0} MB/s, processor {:?}/command + {:.0} MB/s, \
             {} commands in flight, {cache})",
            self.name,
            self.link_bps / 1e6,
            self.command_cost,
            self.processor_bps / 1e6,
            self.max_commands
        )
    }
}

/// A device behind the card: its own model, if it has one (else it answers at once).
#[derive(Debug)]
struct Behind {
    own: Option<(DeviceModel, ModelState)>,
    /// Where the last read ended (object, offset), to tell a sequential stream for read-ahead.
    last_read: Option<(u64, u64)>,
}

/// A cache line: one command's range of one device's object.
type LineKey = (usize, u64, u64);

#[derive(Debug)]
struct Line {
    gen: u64,
    len: u64,
    /// When its bytes are in the cache (a read-ahead still on its way is not yet).
    ready: Duration,
}

/// Where the card stands on the virtual clock.
#[derive(Debug)]
pub struct ControllerState {
    slots: Vec<Duration>,
    processor_free: Duration,
    link_free: Duration,
    cache_free: Duration,
    devices: Vec<Option<Behind>>,
    lines: HashMap<LineKey, Line>,
    /// Lines in the order they came in (evicted first in, first out), with when each may
    /// leave: a dirty line once it is on its device.
    order: VecDeque<(LineKey, u64, u64, Duration)>,
    used: u64,
    gen: u64,
}

fn secs(bytes: u64, bps: f64) -> Duration {
    Duration::from_secs_f64(bytes as f64 / bps)
}

impl ControllerState {
    /// `devices[i]` is `Some(model)` when volume device `i` is behind this card (`model` None
    /// for a device without a model of its own).
    pub fn new(model: &ControllerModel, devices: Vec<Option<Option<DeviceModel>>>) -> Self {
        ControllerState {
            slots: vec![Duration::ZERO; model.max_commands.max(1)],
            processor_free: Duration::ZERO,
            link_free: Duration::ZERO,
            cache_free: Duration::ZERO,
            devices: devices
                .into_iter()
                .map(|d| {
                    d.map(|m| Behind {
                        own: m.map(|m| {
                            let state = ModelState::new(&m);
                            (m, state)
                        }),
                        last_read: None,
                    })
                })
                .collect(),
            lines: HashMap::new(),
            order: VecDeque::new(),
            used: 0,
            gen: 0,
        }
    }

    pub fn serves(&self, device: usize) -> bool {
        self.devices.get(device).is_some_and(Option::is_some)
    }

    /// Completion time of one device's share of a request, submitted at `now`: the commands
    /// of `lens` bytes each, back to back from `offset` of `object`.
    #[allow(clippy::too_many_arguments)]
    pub fn schedule(
        &mut self,
        m: &ControllerModel,
        now: Duration,
        device: usize,
        write: bool,
        object: u64,
        offset: u64,
        lens: &[u64],
    ) -> Duration {
        let mut at = offset;
        let mut done = now;
        for &len in lens {
            done = done.max(self.command(m, now, device, write, object, at, len));
            at += len;
        }
        done
    }

    #[allow(clippy::too_many_arguments)]
    fn command(
        &mut self,
        m: &ControllerModel,
        now: Duration,
        device: usize,
        write: bool,
        object: u64,
        offset: u64,
        len: u64,
    ) -> Duration {
        let (slot, free) = self
            .slots
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(_, t)| t)
            .expect("at least one slot");
        let cache = m.cache.as_ref();
        let cost = m.command_cost
            + cache.map_or(Duration::ZERO, |c| c.command_cost)
            + secs(len, m.processor_bps);
        let issued = free.max(now).max(self.processor_free) + cost;
        self.processor_free = issued;
        let link = self.link(m, issued, len);
        let key = (device, object, offset);
        let done = match (cache, write) {
            (None, false) => self
                .device(device, issued, false, object, offset, len)
                .max(link),
            (None, true) => self.device(device, link, true, object, offset, len),
            (Some(c), true) => {
                let in_cache = self.through_cache(c, link, len);
                let on_disk = self.device(device, in_cache, true, object, offset, len);
                let room = self.insert(c, key, len, in_cache, on_disk);
                in_cache.max(room)
            }
            (Some(c), false) => {
                let hit = self
                    .lines
                    .get(&key)
                    .filter(|l| l.len >= len)
                    .map(|l| l.ready);
                let via_cache = self.through_cache(c, issued, len);
                let done = match hit {
                    Some(ready) => ready.max(via_cache).max(link),
                    None => {
                        let read = self.device(device, issued, false, object, offset, len);
                        let room = self.insert(c, key, len, read, read);
                        read.max(room).max(via_cache).max(link)
                    }
                };
                self.read_ahead(c, issued, device, object, offset, len);
                done
            }
        };
        self.slots[slot] = done;
        done
    }

    /// On a sequential read, the next `len` bytes are read into the cache unless there.
    fn read_ahead(
        &mut self,
        c: &CacheModel,
        at: Duration,
        device: usize,
        object: u64,
        offset: u64,
        len: u64,
    ) {
        let Some(b) = self.devices.get_mut(device).and_then(Option::as_mut) else {
            return;
        };
        let sequential = b.last_read == Some((object, offset));
        b.last_read = Some((object, offset + len));
        let next = (device, object, offset + len);
        if c.read_ahead && sequential && !self.lines.contains_key(&next) {
            let ready = self.device(device, at, false, object, offset + len, len);
            self.through_cache(c, at, len);
            self.insert(c, next, len, ready, ready);
        }
    }

    fn link(&mut self, m: &ControllerModel, at: Duration, len: u64) -> Duration {
        self.link_free = at.max(self.link_free) + secs(len, m.link_bps);
        self.link_free
    }

    fn through_cache(&mut self, c: &CacheModel, at: Duration, len: u64) -> Duration {
        self.cache_free = at.max(self.cache_free) + secs(len, c.bps);
        self.cache_free
    }

    fn device(
        &mut self,
        device: usize,
        at: Duration,
        write: bool,
        object: u64,
        offset: u64,
        len: u64,
    ) -> Duration {
        match self.devices.get_mut(device).and_then(Option::as_mut) {
            Some(Behind {
                own: Some((model, state)),
                ..
            }) => state.schedule(model, at, write, object, offset, len),
            _ => at,
        }
    }

    /// Puts a line in the cache, evicting the oldest lines for room; returns when the room is
    /// there (a dirty line leaves only once on its device). A line larger than the cache is
    /// not kept.
    fn insert(
        &mut self,
        c: &CacheModel,
        key: LineKey,
        len: u64,
        ready: Duration,
        leave: Duration,
    ) -> Duration {
        if len > c.size {
            return Duration::ZERO;
        }
        if let Some(old) = self.lines.remove(&key) {
            self.used -= old.len;
        }
        let mut room = Duration::ZERO;
        while self.used + len > c.size {
            let Some((k, gen, l, free)) = self.order.pop_front() else {
                break;
            };
            if self.lines.get(&k).is_some_and(|line| line.gen == gen) {
                self.lines.remove(&k);
                self.used -= l;
                room = room.max(free);
            }
        }
        self.gen += 1;
        self.lines.insert(
            key,
            Line {
                gen: self.gen,
                len,
                ready,
            },
        );
        self.order.push_back((key, self.gen, len, leave));
        self.used += len;
        // Rewritten lines leave stale entries behind: drop them before they pile up.
        if self.order.len() > 4 * self.lines.len() + 1024 {
            let lines = &self.lines;
            self.order
                .retain(|(k, gen, _, _)| lines.get(k).is_some_and(|l| l.gen == *gen));
        }
        room
    }
}

/// What a sequential test gets from the card and its devices alone (no FUSE, no host), on the
/// virtual clock: the file of `file` bytes striped over `ports` devices in `stripe` units is
/// laid out first (written whole, then a quiet second), then `qd` requests of `req` bytes are
/// kept in flight, wrapping over the file, for `duration`. MB/s (10^6 bytes).
#[allow(clippy::too_many_arguments)]
pub fn predict_sequential(
    card: &ControllerModel,
    device: &DeviceModel,
    ports: usize,
    stripe: u32,
    write: bool,
    qd: usize,
    req: u64,
    file: u64,
    duration: Duration,
) -> f64 {
    let mut s = ControllerState::new(card, vec![Some(Some(device.clone())); ports]);
    let layout = crate::layout::Layout::new(stripe, ports as u32, 0);
    let req = req.clamp(1, file.max(1));
    let requests = file / req;
    let run = |s: &mut ControllerState, write: bool, start: Duration, until: Option<Duration>| {
        let mut queue = vec![start; qd.max(1)];
        let (mut end, mut bytes, mut k) = (start, 0u64, 0u64);
        loop {
            let i = (0..queue.len()).min_by_key(|&i| queue[i]).expect("a slot");
            let now = queue[i];
            match until {
                Some(u) if now >= u => break,
                None if k == requests => break,
                _ => {}
            }
            let mut done = now;
            for io in layout.plan((k % requests.max(1)) * req, req as usize) {
                let lens: Vec<u64> = io.segments.iter().map(|x| x.1 as u64).collect();
                let d = s.schedule(card, now, io.slot as usize, write, 1, io.obj_offset, &lens);
                done = done.max(d);
            }
            queue[i] = done;
            end = end.max(done);
            bytes += req;
            k += 1;
        }
        (end, bytes)
    };
    let (laid, _) = run(&mut s, true, Duration::ZERO, None);
    let start = laid + Duration::from_secs(1);
    let (end, bytes) = run(&mut s, write, start, Some(start + duration));
    bytes as f64 / (end - start).as_secs_f64().max(1e-9) / 1e6
}

/// A controller model applied to real devices, on the wall clock.
pub struct Controller {
    pub model: ControllerModel,
    /// Which volume devices are behind it (read without the lock, on every I/O).
    served: Vec<bool>,
    state: Mutex<ControllerState>,
    epoch: Instant,
}

impl Controller {
    pub fn new(model: ControllerModel, devices: Vec<Option<Option<DeviceModel>>>) -> Controller {
        Controller {
            served: devices.iter().map(Option::is_some).collect(),
            state: Mutex::new(ControllerState::new(&model, devices)),
            model,
            epoch: Instant::now(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ControllerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn serves(&self, device: usize) -> bool {
        self.served.get(device).copied().unwrap_or(false)
    }

    /// Books one device's share of a request (commands of `lens` bytes from `offset`) and
    /// returns when the card would have finished it.
    pub fn book(
        &self,
        device: usize,
        write: bool,
        object: u64,
        offset: u64,
        lens: &[u64],
    ) -> Instant {
        let now = self.epoch.elapsed();
        let done = self
            .state()
            .schedule(&self.model, now, device, write, object, offset, lens);
        self.epoch + done
    }
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;
