//! `stripefs rebalance`: after devices join, files laid on older rings are restriped onto the
//! ring new files use, so data spreads over every device (as `btrfs balance`). The same run,
//! draining one device, is `stripefs device remove`: every file on it moves to the others,
//! then it leaves the set (a removal stopped half way leaves new files avoiding the device;
//! asked again, it finishes).
//!
//! It runs in the daemon, one file at a time through `migrate` (each move atomic: a crash
//! shows the old copy or the new), the files on the fullest devices first, at most
//! `max_mbps`; the CLI attaches to watch it. A run that was going when the volume stopped
//! (unmount, crash) goes on at the next mount: its wish is kept in `rebalance.json` beside
//! the namespace.

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::namespace::{Inode, Kind};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stripe::Layout;

/// What `user.stripefs.rebalance` shows.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Progress {
    /// idle, running, done, stopped (asked to), failed (some files could not be moved)
    pub state: String,
    /// The directory whose tree is rebalanced (its inode).
    pub root: u64,
    /// The device being emptied for its removal, if that is what runs.
    pub removing: Option<usize>,
    /// The device being replaced, and the one taking its place, if that is what runs.
    pub replacing: Option<(usize, usize)>,
    pub files_total: u64,
    pub files_done: u64,
    pub files_failed: u64,
    pub bytes_total: u64,
    pub bytes_moved: u64,
    /// 0: no limit.
    pub max_mbps: u64,
    pub elapsed_secs: f64,
    pub eta_secs: Option<f64>,
    /// The last file that could not be moved, and why.
    pub last_error: Option<String>,
    /// Runs that ended (done, stopped or failed) since the mount: for the events.
    pub runs_ended: u64,
    /// What a replaced device could not give: those ranges of those files read as zeros.
    pub lost: Vec<LostRange>,
}

/// A file range a replaced device could not give (a hole now).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LostRange {
    pub ino: u64,
    /// One of the file's paths when the range was lost.
    pub path: String,
    pub offset: u64,
    pub len: u64,
}

/// What a run does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Job {
    /// Restripes a tree's files onto the ring new files use.
    Rebalance,
    /// Moves every file off a device, then drops it.
    Remove(usize),
    /// Copies a device's share of every file to the device taking its place, then drops it.
    Replace { old: usize, new: usize },
}

impl Job {
    fn removing(self) -> Option<usize> {
        match self {
            Job::Remove(d) => Some(d),
            _ => None,
        }
    }

    fn replacing(self) -> Option<(usize, usize)> {
        match self {
            Job::Replace { old, new } => Some((old, new)),
            _ => None,
        }
    }

    /// The device that leaves the set when the run ends.
    fn leaving(self) -> Option<usize> {
        match self {
            Job::Rebalance => None,
            Job::Remove(d) | Job::Replace { old: d, .. } => Some(d),
        }
    }

    fn busy_with(self) -> String {
        match self {
            Job::Rebalance => "a rebalance runs: wait for it, or stop it".into(),
            Job::Remove(d) => format!("device {d} is being removed: wait for it, or stop it"),
            Job::Replace { old, new } => {
                format!("device {old} is being replaced by device {new}: wait for it, or stop it")
            }
        }
    }
}

/// The wish that outlives the daemon.
#[derive(Serialize, Deserialize)]
struct Wish {
    root: u64,
    max_mbps: u64,
    #[serde(default)]
    removing: Option<usize>,
    #[serde(default)]
    replacing: Option<(usize, usize)>,
}

/// A replacement's report of lost ranges, kept beside the namespace until another
/// replacement starts: across a remount, a stop and a new run of the same replacement.
#[derive(Serialize, Deserialize)]
struct LostReport {
    replacing: (usize, usize),
    lost: Vec<LostRange>,
}

impl Wish {
    fn job(&self) -> Job {
        match (self.removing, self.replacing) {
            (_, Some((old, new))) => Job::Replace { old, new },
            (Some(d), None) => Job::Remove(d),
            (None, None) => Job::Rebalance,
        }
    }
}

#[derive(Default)]
pub struct Rebalancer {
    pub(super) progress: Arc<Mutex<Progress>>,
    stop: Arc<AtomicBool>,
    max_mbps: Arc<AtomicU64>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
    job: Mutex<Option<Job>>,
    started: Mutex<Option<Instant>>,
}

impl Rebalancer {
    pub fn progress(&self) -> Progress {
        let mut p = self.progress.lock().clone();
        if p.state.is_empty() {
            p.state = "idle".into();
        }
        p
    }

    fn running(&self) -> bool {
        self.worker
            .lock()
            .as_ref()
            .is_some_and(|w| !w.is_finished())
    }

    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Relaxed)
    }

    pub(super) fn started(&self) -> Instant {
        self.started.lock().unwrap_or_else(Instant::now)
    }

    pub(super) fn set_totals(&self, files: u64, bytes: u64) {
        let mut p = self.progress.lock();
        p.files_total = files;
        p.bytes_total = bytes;
    }

    /// A file moved; `bytes_moved` counts it whole.
    pub(super) fn file_done(&self, bytes_moved: u64) {
        let mut p = self.progress.lock();
        p.files_done += 1;
        p.bytes_moved = bytes_moved;
        self.note_pace(&mut p);
    }

    /// A file not moved: stopped in the middle (true: the run ends), gone meanwhile, or
    /// failed.
    pub(super) fn file_failed(&self, ino: u64, e: Error) -> bool {
        let mut p = self.progress.lock();
        if self.stopping() {
            // Stopped in the middle of the file: it keeps its old copy.
            return true;
        }
        if e.errno() == libc::ENOENT {
            // Deleted meanwhile: nothing left to move.
            p.files_done += 1;
        } else {
            p.files_failed += 1;
            p.last_error = Some(format!("inode {ino}: {e}"));
            log::error!("rebalance: inode {ino} not moved: {e}");
        }
        self.note_pace(&mut p);
        false
    }

    fn note_pace(&self, p: &mut Progress) {
        let elapsed = self.started().elapsed().as_secs_f64();
        p.elapsed_secs = elapsed;
        let rate = p.bytes_moved as f64 / elapsed.max(1e-3);
        p.eta_secs =
            (rate > 0.0).then(|| p.bytes_total.saturating_sub(p.bytes_moved) as f64 / rate);
        p.max_mbps = self.max_mbps.load(Relaxed);
    }

    /// Stops a run for the unmount, leaving its wish for the next mount.
    pub fn pause(&self) {
        self.stop.store(true, Relaxed);
        let worker = self.worker.lock().take();
        if let Some(w) = worker {
            let _ = w.join();
        }
    }
}

fn wish_path(engine: &Engine) -> PathBuf {
    crate::engine::meta_dir(&engine.config).join("rebalance.json")
}

fn lost_path(engine: &Engine) -> PathBuf {
    crate::engine::meta_dir(&engine.config).join("replace-lost.json")
}

impl Engine {
    /// Starts a rebalance of the tree under `root` (or, running already, sets its limit).
    pub fn rebalance(self: &Arc<Self>, root: u64, max_mbps: Option<u64>) -> Result<()> {
        self.start_job(root, max_mbps, Job::Rebalance)
    }

    /// Starts (or, running already, sets the limit of) a run: a rebalance of `root`'s tree,
    /// or the removal or replacement of a device.
    pub(super) fn start_job(
        self: &Arc<Self>,
        root: u64,
        max_mbps: Option<u64>,
        job: Job,
    ) -> Result<()> {
        if self.read_only.load(Relaxed) {
            return crate::control::refuse(libc::EROFS, "the volume is mounted read-only");
        }
        let r = &self.rebalancer;
        if let Some(m) = max_mbps {
            r.max_mbps.store(m, Relaxed);
        }
        if r.running() {
            let now = r.job.lock().unwrap_or(Job::Rebalance);
            // A rebalance asked for while a device leaves just watches it.
            if now != job && job != Job::Rebalance {
                return crate::control::refuse(libc::EBUSY, now.busy_with());
            }
            return Ok(());
        }
        let wish = Wish {
            root,
            max_mbps: r.max_mbps.load(Relaxed),
            removing: job.removing(),
            replacing: job.replacing(),
        };
        self.keep_wish(&wish)?;
        self.start_rebalance(root, job);
        Ok(())
    }

    fn keep_wish(&self, wish: &Wish) -> Result<()> {
        let text = serde_json::to_vec(wish).map_err(|e| Error::Store(e.to_string()))?;
        mountcfg::edit::replace_durably(&wish_path(self), &text)?;
        Ok(())
    }

    /// Adds a file's lost ranges (file offsets) to the replacement's report, durably, and
    /// to the progress.
    pub(super) fn note_lost(&self, ino: u64, ranges: &[(u64, u64)]) -> Result<()> {
        let path = self.file_path(ino);
        let lost: Vec<LostRange> = ranges
            .iter()
            .map(|&(a, b)| LostRange {
                ino,
                path: path.clone(),
                offset: a,
                len: b - a,
            })
            .collect();
        for l in &lost {
            log::error!(
                "device replace: {} (inode {}): bytes {}..{} could not be read from the old \
                 device; they read as zeros now",
                l.path,
                l.ino,
                l.offset,
                l.offset + l.len
            );
        }
        let mut p = self.rebalancer.progress.lock();
        let Some(replacing) = p.replacing else {
            return Ok(());
        };
        // A file tried again (its move failed after its report) is not reported twice.
        p.lost.retain(|l| l.ino != ino);
        p.lost.extend(lost);
        let report = LostReport {
            replacing,
            lost: p.lost.clone(),
        };
        let text = serde_json::to_vec(&report).map_err(|e| Error::Store(e.to_string()))?;
        mountcfg::edit::replace_durably(&lost_path(self), &text)?;
        Ok(())
    }

    /// What earlier runs of the replacement `replacing` lost.
    fn lost_before(&self, replacing: (usize, usize)) -> Vec<LostRange> {
        std::fs::read(lost_path(self))
            .ok()
            .and_then(|t| serde_json::from_slice::<LostReport>(&t).ok())
            .filter(|r| r.replacing == replacing)
            .map_or_else(Vec::new, |r| r.lost)
    }

    /// Stops a running rebalance, and forgets it (the next mount does not go on with it).
    pub fn stop_rebalance(&self) -> Result<()> {
        self.rebalancer.pause();
        self.rebalancer.stop.store(false, Relaxed);
        match std::fs::remove_file(wish_path(self)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Goes on with a rebalance the last mount did not finish.
    pub fn resume_rebalance(self: &Arc<Self>) {
        if self.read_only.load(Relaxed) {
            return;
        }
        let Ok(text) = std::fs::read(wish_path(self)) else {
            return;
        };
        match serde_json::from_slice::<Wish>(&text) {
            Ok(w) if self.ns.get(w.root).is_ok() => {
                log::info!("going on with the rebalance the last mount left unfinished");
                self.rebalancer.max_mbps.store(w.max_mbps, Relaxed);
                self.start_rebalance(w.root, w.job());
            }
            _ => {
                log::warn!(
                    "{}: not a rebalance this volume can go on with; removed",
                    wish_path(self).display()
                );
                let _ = std::fs::remove_file(wish_path(self));
            }
        }
    }

    fn start_rebalance(self: &Arc<Self>, root: u64, job: Job) {
        let r = &self.rebalancer;
        r.stop.store(false, Relaxed);
        *r.job.lock() = Some(job);
        *r.started.lock() = Some(Instant::now());
        let runs_ended = r.progress.lock().runs_ended;
        *r.progress.lock() = Progress {
            state: "running".into(),
            root,
            removing: job.removing(),
            replacing: job.replacing(),
            max_mbps: r.max_mbps.load(Relaxed),
            runs_ended,
            lost: job
                .replacing()
                .map_or_else(Vec::new, |r| self.lost_before(r)),
            ..Progress::default()
        };
        let engine = self.clone();
        let spawned = std::thread::Builder::new()
            .name("stripefs-rebalance".into())
            .spawn(move || engine.run_rebalance(root, job));
        match spawned {
            Ok(w) => *r.worker.lock() = Some(w),
            Err(e) => {
                let mut p = r.progress.lock();
                p.state = "failed".into();
                p.last_error = Some(format!("no thread to run it: {e}"));
            }
        }
    }

    fn run_rebalance(&self, root: u64, job: Job) {
        let r = &self.rebalancer;
        match job {
            Job::Replace { old, new } => self.run_replace(old, new),
            Job::Remove(d) => {
                let drained = self.volume.drain(d);
                self.note_generation();
                if let Err(e) = drained {
                    let mut p = r.progress.lock();
                    p.state = "failed".into();
                    p.last_error = Some(e.to_string());
                    p.runs_ended += 1;
                    return;
                }
                self.run_moves(root, Some(d));
            }
            Job::Rebalance => self.run_moves(root, None),
        }
        let stopped = r.stopping();
        let left = match job.leaving() {
            Some(d) if !stopped => Some(self.finish_removal(d)),
            _ => None,
        };
        let mut p = r.progress.lock();
        if let Some(Err(e)) = left {
            p.files_failed = p.files_failed.max(1);
            p.last_error = Some(e.to_string());
        }
        p.elapsed_secs = r.started().elapsed().as_secs_f64();
        p.eta_secs = None;
        p.runs_ended += 1;
        p.state = match (stopped, p.files_failed) {
            (true, _) => "stopped",
            (false, 0) => "done",
            _ => "failed",
        }
        .into();
        log::info!(
            "rebalance {}: {} of {} files, {} bytes moved in {:.1}s",
            p.state,
            p.files_done,
            p.files_total,
            p.bytes_moved,
            p.elapsed_secs
        );
        // Done (or given up on some files): nothing to go on with at the next mount. A pause
        // for the unmount keeps the wish.
        if !stopped {
            let _ = std::fs::remove_file(wish_path(self));
        }
    }

    /// Moves the files `plan_rebalance` picks, one at a time.
    fn run_moves(&self, root: u64, removing: Option<usize>) {
        let r = &self.rebalancer;
        let moves = self.plan_rebalance(root, removing);
        r.set_totals(moves.len() as u64, moves.iter().map(|m| m.1).sum());
        for (ino, size, to) in moves {
            if r.stopping() {
                break;
            }
            let stop = self.move_one(ino, size, |pace| {
                self.migrate_paced(ino, to, pace).map(|_| ())
            });
            if stop {
                break;
            }
        }
    }

    /// Moves one file of `bytes` bytes with `mv`, which reports each chunk to the pace it is
    /// given (progress, the limit, a stop); true when the run is to end (stopped in the
    /// middle of the file, which keeps its old copy).
    pub(super) fn move_one(
        &self,
        ino: u64,
        bytes: u64,
        mv: impl FnOnce(&mut dyn FnMut(u64) -> bool) -> Result<()>,
    ) -> bool {
        let r = &self.rebalancer;
        let before = r.progress.lock().bytes_moved;
        let mut copied = 0;
        let moved = mv(&mut |chunk| {
            copied += chunk;
            r.progress.lock().bytes_moved = before + copied;
            self.throttle(r.started(), before + copied);
            !r.stopping()
        });
        match moved {
            Ok(()) => {
                r.file_done(before + bytes);
                false
            }
            Err(e) => {
                r.progress.lock().bytes_moved = before;
                r.file_failed(ino, e)
            }
        }
    }

    /// Waits until `moved` bytes since `start` are within the limit (checking for a stop):
    /// called before each chunk of a file is copied, so a large file keeps the limit too.
    pub(super) fn throttle(&self, start: Instant, moved: u64) {
        let r = &self.rebalancer;
        loop {
            let mbps = r.max_mbps.load(Relaxed);
            if mbps == 0 || r.stop.load(Relaxed) {
                return;
            }
            let due = Duration::from_secs_f64(moved as f64 / (mbps as f64 * 1e6));
            let Some(wait) = due.checked_sub(start.elapsed()) else {
                return;
            };
            std::thread::sleep(wait.min(Duration::from_millis(100)));
        }
    }

    /// The files under `root` to restripe (or, `removing` a device, every file on it), the
    /// fullest devices' first: each with its size and the layout it goes to.
    fn plan_rebalance(&self, root: u64, removing: Option<usize>) -> Vec<(u64, u64, Layout)> {
        let (inodes, entries) = self.ns.snapshot();
        let rings = self.volume.rings();
        let (ring, n) = self.volume.current_ring();
        let default_width = self.volume_layout().width;
        // What each device holds now, by the layouts.
        let mut load: HashMap<usize, u64> = HashMap::new();
        let share = |i: &Inode, l: &Layout| -> Vec<(usize, u64)> {
            (0..l.width)
                .map(|s| (rings.device_of_slot(l, s), l.object_len(i.size, s)))
                .collect()
        };
        for i in inodes.iter().filter(|i| i.kind == Kind::File) {
            if let Some(l) = &i.layout {
                for (d, b) in share(i, l) {
                    *load.entry(d).or_default() += b;
                }
            }
        }
        // The files of the tree.
        let mut children: HashMap<u64, Vec<u64>> = HashMap::new();
        for (parent, _, ino) in &entries {
            children.entry(*parent).or_default().push(*ino);
        }
        let mut tree = HashSet::new();
        let mut todo = vec![root];
        while let Some(ino) = todo.pop() {
            if tree.insert(ino) {
                todo.extend(children.get(&ino).into_iter().flatten());
            }
        }
        let mut candidates: Vec<&Inode> = inodes
            .iter()
            .filter(|i| i.kind == Kind::File)
            .filter(|i| match (removing, &i.layout) {
                (Some(d), Some(l)) => rings.devices_of(l).contains(&d),
                (None, Some(l)) => l.ring != ring && tree.contains(&i.ino),
                (_, None) => false,
            })
            .collect();
        let fullest = |i: &Inode| {
            let l = i.layout.unwrap();
            (0..l.width)
                .map(|s| load.get(&rings.device_of_slot(&l, s)).copied().unwrap_or(0))
                .max()
                .unwrap_or(0)
        };
        // Files striped over every device first: where they go is fixed (evenly over all),
        // and the narrower ones then fill what is least used.
        let all_devices = |i: &Inode| {
            let l = i.layout.unwrap();
            rings
                .ring(l.ring)
                .is_some_and(|r| r.len() == l.width as usize)
        };
        candidates.sort_by_key(|i| {
            (
                !all_devices(i),
                std::cmp::Reverse(fullest(i)),
                std::cmp::Reverse(i.size),
            )
        });
        let mut moves = Vec::new();
        for i in candidates {
            let from = i.layout.unwrap();
            let ring_len = rings.ring(from.ring).map_or(0, |r| r.len() as u32);
            // A file striped over every device keeps doing so; a narrower one keeps its width.
            let width = match from.width == ring_len {
                true => default_width,
                false => from.width,
            }
            .min(n);
            let place = |first: u32| Layout {
                ring,
                first_device: first,
                width,
                ..from
            };
            for (d, b) in share(i, &from) {
                *load.entry(d).or_default() -= b;
            }
            let cost = |l: &Layout| -> u64 {
                (0..width)
                    .map(|s| load.get(&rings.device_of_slot(l, s)).copied().unwrap_or(0))
                    .sum()
            };
            let to = match width == n {
                true => place((i.ino % n as u64) as u32),
                false => (0..n).map(place).min_by_key(cost).unwrap(),
            };
            // Where it is already: it stays.
            let to = match rings.devices_of(&to) == rings.devices_of(&from) {
                true => from,
                false => to,
            };
            for (d, b) in share(i, &to) {
                *load.entry(d).or_default() += b;
            }
            if to != from {
                moves.push((i.ino, i.size, to));
            }
        }
        moves
    }
}
