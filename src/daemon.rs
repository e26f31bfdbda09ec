//! Daemon life: mounting in the foreground or as a background daemon that reports readiness,
//! the periodic committer, clean unmount on SIGTERM/SIGINT, and `stripefs umount`.

use crate::caching::CacheReset;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::fs::StripeFs;
use crate::mount::{self, mountinfo, MountSpec};
use crate::xattr;
use std::io::{Read, Write};
use std::os::unix::io::{FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Env var that tells a re-executed binary it is the daemon child.
pub const DAEMON_ENV: &str = "STRIPEFS_DAEMON_CHILD";
/// How the last daemon's unmount went, beside the namespace: `stripefs umount` reads it once
/// the daemon is gone, so it never exits 0 when data was left behind.
pub const STOP_REPORT: &str = "stripefs.stop";

#[derive(serde::Serialize, serde::Deserialize)]
struct StopReport {
    pid: u32,
    ok: bool,
    error: String,
}

/// Before a mount: a dead mount on the mountpoint (its daemon killed) is detached, saying so.
pub fn clear_mountpoint(mountpoint: &Path) -> Result<()> {
    if let Some(source) = clear_dead_mount(mountpoint)? {
        eprintln!(
            "stripefs: {} held a dead mount of {source} (its daemon had stopped); detached it \
             before mounting: {DEAD_MOUNT_DATA} (this mount, if it is the same volume)",
            mountpoint.display()
        );
    }
    Ok(())
}

/// The mountpoint must be a directory apart from every device.
fn check_mountpoint(config: &mountcfg::Config, mountpoint: &Path) -> Result<PathBuf> {
    let mp = std::fs::canonicalize(mountpoint)
        .map_err(|e| Error::Usage(format!("mountpoint {}: {e}", mountpoint.display())))?;
    if !mp.is_dir() {
        return Err(Error::Usage(format!(
            "mountpoint {} is not a directory",
            mp.display()
        )));
    }
    for dev in &config.volume.devices {
        if dev.starts_with(&mp) || mp.starts_with(dev) {
            return Err(Error::Usage(format!(
                "mountpoint {} and device {} overlap; mount the volume elsewhere",
                mp.display(),
                dev.display()
            )));
        }
    }
    Ok(mp)
}

/// Where a background daemon writes its log.
pub fn default_log_path(config: &mountcfg::Config) -> PathBuf {
    let dir = crate::engine::meta_dir(config);
    match &config.volume.meta {
        Some(_) => dir.join("stripefs.log"),
        None => dir.join("daemon.log"),
    }
}

/// Tells the waiting parent how the mount went (background mode).
pub struct Ready(Option<std::fs::File>);

impl Ready {
    pub fn none() -> Ready {
        Ready(None)
    }

    /// # Safety
    /// `fd` must be an open pipe inherited from the parent and owned by nobody else.
    pub unsafe fn from_fd(fd: RawFd) -> Ready {
        Ready(Some(std::fs::File::from_raw_fd(fd)))
    }

    fn send(&mut self, msg: &str) {
        if let Some(mut f) = self.0.take() {
            let _ = f.write_all(msg.as_bytes());
        }
    }
}

/// Who unmounts: we, for a mount we made; fusermount3, for one it made for a user.
enum Unmounter {
    Own(mount::FuseMount),
    User(mount::fusermount::UserMount),
}

impl Unmounter {
    /// Unmounts (`detach`: lazily) if the mount is still there; nothing otherwise.
    fn unmount(&mut self, detach: bool) -> std::io::Result<()> {
        match self {
            Unmounter::Own(m) => m.unmount(detach),
            Unmounter::User(u) => u.unmount(detach),
        }
    }
}

/// Env var that overrides `[mount] transport` (auto, uring or dev): the CI runs the I/O tests
/// once per transport, as `STRIPEFS_IO_ENGINE` does for the I/O engine.
pub const TRANSPORT_ENV: &str = "STRIPEFS_TRANSPORT";

/// The transport a mount asks for: the config's `[mount] transport`, unless
/// `STRIPEFS_TRANSPORT` says otherwise.
fn transport_choice(config: mountcfg::Transport) -> Result<mountcfg::Transport> {
    use mountcfg::Transport;
    match std::env::var(TRANSPORT_ENV) {
        Ok(v) => match v.as_str() {
            "auto" => Ok(Transport::Auto),
            "uring" | "io_uring" => Ok(Transport::Uring),
            "dev" => Ok(Transport::Dev),
            _ => Err(Error::Usage(format!(
                "{TRANSPORT_ENV}={v}: must be auto, uring or dev"
            ))),
        },
        Err(std::env::VarError::NotPresent) => Ok(config),
        Err(std::env::VarError::NotUnicode(v)) => Err(Error::Usage(format!(
            "{TRANSPORT_ENV}={}: must be auto, uring or dev",
            v.to_string_lossy()
        ))),
    }
}

/// `[mount] transport` (or `STRIPEFS_TRANSPORT`) as fusewire's io_uring request: `auto` asks
/// for it where the kernel allows it (`enable_uring`), `uring` insists (the mount fails where
/// it cannot be had), `dev` never asks. The kernel parameter is the administrator's: never
/// changed here.
fn uring_config(mount: &mountcfg::MountSection) -> Result<Option<fusewire::UringConfig>> {
    let t = transport_choice(mount.transport)?;
    let asked = match std::env::var(TRANSPORT_ENV) {
        Ok(v) => format!("{TRANSPORT_ENV}={v}"),
        Err(_) => "transport = \"uring\"".to_string(),
    };
    let ring = fusewire::UringConfig {
        threads: mount.uring_threads,
        depth: mount.uring_depth,
        // Settled once the volume is open (`auto` looks at its devices).
        pinned: false,
    };
    let enabled = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|v| matches!(v.trim(), "Y" | "1"));
    Ok(match t {
        mountcfg::Transport::Dev => None,
        mountcfg::Transport::Uring if !enabled => {
            return Err(Error::Usage(format!(
                "{asked}: FUSE over io_uring is {}",
                fusewire::uring::why_unavailable()
            )))
        }
        mountcfg::Transport::Uring => Some(ring),
        mountcfg::Transport::Auto if enabled => Some(ring),
        mountcfg::Transport::Auto => {
            log::info!(
                "FUSE over /dev/fuse: io_uring is {}",
                fusewire::uring::why_unavailable()
            );
            None
        }
    })
}

/// Mounts and serves until unmounted or signalled.
pub fn run_foreground(
    config: mountcfg::Config,
    mountpoint: &Path,
    cache_reset: CacheReset,
    mut ready: Ready,
) -> Result<()> {
    let result = serve(config, mountpoint, cache_reset, &mut ready);
    if let Err(e) = &result {
        ready.send(&format!("error: {e}\n"));
    }
    result
}

fn serve(
    config: mountcfg::Config,
    mountpoint: &Path,
    cache_reset: CacheReset,
    ready: &mut Ready,
) -> Result<()> {
    let mountpoint = check_mountpoint(&config, mountpoint)?;
    // Before the volume is opened: a transport that cannot be had fails the mount untouched.
    let uring = uring_config(&config.mount)?;
    raise_open_file_limit();
    let engine = Arc::new(Engine::open(config, &mountpoint, cache_reset)?);
    let m = &engine.config.mount;
    crate::logging::set_log_size(m.log_size);
    let source = match &m.fsname {
        Some(name) => name.clone(),
        None => std::path::absolute(&engine.config.source)
            .unwrap_or_else(|_| engine.config.source.clone())
            .display()
            .to_string(),
    };
    let fs = StripeFs::new(engine.clone());
    let mut fuse_config = fs.session_config(m.fuse_threads(engine.caching.is_some()));
    let in_memory = engine.volume.all_in_memory();
    let uring = uring.map(|u| fusewire::UringConfig {
        // Pinned, a ring thread shares its CPU with the application: worth it where the
        // thread's work is copying to and from memory (no cross-CPU wake-ups), not where
        // it waits on disks while the other CPUs idle (measured in the README).
        pinned: match m.uring_affinity {
            mountcfg::UringAffinity::Queue => true,
            mountcfg::UringAffinity::Any => false,
            mountcfg::UringAffinity::Auto => in_memory,
        },
        // Over disks two threads share each queue (0 is one per queue): an application's
        // requests all come to its CPU's queue, and one thread submitting every write of a
        // Q32 job held it back (measured in the README).
        threads: match u.threads {
            0 if !in_memory => 2 * fusewire::uring::kernel_queues(),
            n => n,
        },
        ..u
    });
    let pinned = uring.as_ref().is_some_and(|u| u.pinned);
    let ring_threads = uring.as_ref().map_or(0, |u| u.ring_threads());
    let dev_ring = fuse_config.dev_ring;
    fuse_config.uring = uring;
    let kernel = fs.kernel.clone();
    let interval = m.commit_interval;
    let mount_error =
        |e: std::io::Error| Error::Usage(format!("mount on {}: {e}", mountpoint.display()));

    // As root, our own mount(2) of type fuse.stripefs; as another user, fusermount3's
    // (which takes the subtype too). fusewire serves the descriptor either way.
    // SAFETY: plain getter.
    let (fd, unmounter) = if unsafe { libc::geteuid() } == 0 {
        let spec = MountSpec {
            source,
            read_only: m.read_only,
            // The security options are the kernel's to enforce; stripefs honours atime and
            // sync itself (FUSE leaves both to the daemon) and passes them on so findmnt
            // shows them.
            nosuid: m.nosuid,
            nodev: m.nodev,
            noexec: m.noexec,
            noatime: m.atime == mountcfg::Atime::Never,
            sync: m.sync,
            dirsync: m.dirsync,
            allow_other: m.allow_other,
            default_permissions: m.default_permissions,
            max_read: 1 << 20,
        };
        let (fd, mounted) = mount::kernel::mount(&spec, &mountpoint)?;
        // So that umount(8) runs umount.fuse.stripefs, which waits for us (see utab.rs).
        if let Err(e) = mount::utab::add(&spec.source, &mountpoint) {
            log::warn!("umount(8) will not wait for this daemon: /run/mount/utab: {e}");
        }
        (fd, Unmounter::Own(mounted))
    } else {
        // fusermount3 reads options separated by commas: one in a name would split it.
        let mut options = vec![
            format!("fsname={}", source.replace(',', "_")),
            "subtype=stripefs".into(),
            "max_read=1048576".into(),
        ];
        let flags = [
            (m.default_permissions, "default_permissions"),
            (m.allow_other, "allow_other"),
            (m.read_only, "ro"),
            (m.nosuid, "nosuid"),
            (!m.nosuid, "suid"),
            (m.nodev, "nodev"),
            (!m.nodev, "dev"),
            (m.noexec, "noexec"),
            (m.atime == mountcfg::Atime::Never, "noatime"),
            (m.sync, "sync"),
            (m.dirsync, "dirsync"),
        ];
        options.extend(flags.iter().filter(|f| f.0).map(|f| f.1.to_string()));
        let (fd, mounted) = mount::fusermount::mount(&options.join(","), &mountpoint)?;
        (fd, Unmounter::User(mounted))
    };
    let session = fusewire::Session::new(fd, fs, fuse_config);
    let _ = kernel.set(session.notifier());
    let unmounter = Arc::new(parking_lot::Mutex::new(unmounter));
    // A failure from here until the session runs must not leave the mount behind (dead once
    // the session's descriptor is closed).
    let abandon = |e: String| {
        match &*unmounter.lock() {
            Unmounter::Own(m) => {
                let _ = m.unmount(true);
                let _ = mount::utab::remove_if_unmounted(&mountpoint);
            }
            Unmounter::User(m) => {
                let _ = m.unmount(true);
            }
        }
        Error::Usage(e)
    };

    // Background commits: what was written becomes durable within `interval`, as ext4's commit=.
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let committer = {
        let engine = engine.clone();
        let events = crate::events::Events::new(
            engine.config.mount.on_event.clone(),
            engine.volume.device_count() as usize,
        );
        std::thread::Builder::new()
            .name("committer".into())
            .spawn(move || {
                // Every second: are the devices still there? Every `interval`: commit.
                let tick = interval.min(Duration::from_secs(1));
                let mut last = Instant::now();
                while let Err(mpsc::RecvTimeoutError::Timeout) = stop_rx.recv_timeout(tick) {
                    engine.volume.check_devices();
                    events.watch(&engine);
                    // `-o remount,ro` reaches the kernel, not us: write no access times then.
                    if let Some(m) = mountinfo::mount_at(&engine.mountpoint) {
                        engine.set_read_only(m.options.split(',').any(|o| o == "ro"));
                    }
                    if last.elapsed() >= interval {
                        last = Instant::now();
                        if let Err(e) = engine.sync_all() {
                            log::error!("periodic commit failed: {e}");
                        }
                    }
                }
            })
            .map_err(|e| abandon(format!("cannot start the committer: {e}")))?
    };

    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| abandon(format!("cannot watch signals: {e}")))?;
    let signal_handle = signals.handle();
    let mp_for_signal = mountpoint.clone();
    let signal_unmounter = unmounter.clone();
    let signal_thread = std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            log::info!("signal {sig}: unmounting {}", mp_for_signal.display());
            // The first lock is let go before the second is taken.
            let unmounted = signal_unmounter.lock().unmount(false);
            if let Err(e) = unmounted {
                log::warn!(
                    "unmount failed ({e}); detaching {}",
                    mp_for_signal.display()
                );
                let _ = signal_unmounter.lock().unmount(true);
            }
        }
    });

    let session = match session.spawn() {
        Ok(s) => s,
        Err(e) => return Err(abandon(mount_error(e).to_string())),
    };
    // The readahead and the transport are known once INIT is answered.
    match session.wait_init(Duration::from_secs(30)) {
        Some(info) => {
            let why = info.uring_unavailable.clone();
            if let Some(why) = &why {
                log::info!("FUSE over /dev/fuse, not io_uring: {why}");
            }
            let threads = match (info.uring, pinned) {
                (true, true) => format!(", {ring_threads} ring threads on their queues' CPUs"),
                (true, false) => format!(", {ring_threads} ring threads on any CPU"),
                _ => String::new(),
            };
            log::info!("FUSE transport {}{threads}", info.transport());
            if !info.uring {
                let wait = if dev_ring {
                    "on rings of their own"
                } else {
                    "in read(2)"
                };
                log::info!("/dev/fuse workers wait for requests {wait} (dev_wait)");
            }
            let _ = engine.transport.set(crate::engine::Transport {
                name: info.transport().into(),
                why_not_uring: why,
                dev_ring_workers: (!info.uring).then(|| session.dev_ring_workers()),
                ring_threads: info.uring.then_some(ring_threads),
            });
        }
        // Ended before it served (its io_uring queues refused after INIT): not mounted.
        None if session.is_finished() => {
            let why = match session.join() {
                Err(e) => e.to_string(),
                Ok(()) => "the kernel ended the connection".into(),
            };
            return Err(abandon(format!("the FUSE session ended at once: {why}")));
        }
        None => log::warn!("no FUSE INIT within 30 s"),
    }
    set_readahead(&mountpoint, m.readahead);
    log::info!(
        "mounted volume {} on {} (pid {})",
        engine.volume.uuid(),
        mountpoint.display(),
        std::process::id()
    );
    let dev = match &*unmounter.lock() {
        Unmounter::Own(m) if !m.dev().is_empty() => Some(m.dev().to_string()),
        _ => None,
    };
    mount::busy::write_run_record(&engine.config, &mountpoint, dev);
    engine.resume_rebalance();
    ready.send("ok\n");
    let served = session.join();
    // The session ends when the kernel has unmounted (umount(8), `stripefs umount`, a
    // signal): then there is nothing to unmount. Had it ended on an error while still
    // mounted, detach, so that no dead mount stays behind.
    if let (Unmounter::User(m), Err(_)) = (&*unmounter.lock(), &served) {
        let _ = m.unmount(true);
    }
    if let Unmounter::Own(m) = &*unmounter.lock() {
        if let Err(e) = m.unmount(true) {
            log::warn!(
                "detaching {} after the session ended: {e}",
                mountpoint.display()
            );
        }
        if let Err(e) = mount::utab::remove_if_unmounted(&mountpoint) {
            log::warn!("/run/mount/utab: {e}");
        }
    }
    drop(stop_tx);
    let _ = committer.join();
    signal_handle.close();
    let _ = signal_thread.join();
    let synced = engine.shutdown();
    let report = StopReport {
        pid: std::process::id(),
        ok: synced.is_ok(),
        error: synced
            .as_ref()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default(),
    };
    let report_path = crate::engine::namespace_path(&engine.config).with_file_name(STOP_REPORT);
    if let Err(e) = serde_json::to_vec(&report)
        .map_err(std::io::Error::other)
        .and_then(|b| std::fs::write(&report_path, b))
    {
        log::error!("cannot write {}: {e}", report_path.display());
    }
    if let Err(e) = &synced {
        log::error!("unmount of {} left work undone: {e}", mountpoint.display());
    }
    log::info!("unmounted {}", mountpoint.display());
    log::logger().flush();
    served.map_err(|e| Error::Usage(format!("serving {}: {e}", mountpoint.display())))?;
    synced
}

/// Sets the mount's readahead (`/sys/class/bdi/<dev>/read_ahead_kb`) once INIT is answered
/// (FUSE caps it at what INIT negotiated, and INIT would lower an earlier value). The mount is found in
/// mountinfo, not by a stat of the mountpoint: nothing of ours may be inside the mount (an
/// umount right after the mount would find it busy).
fn set_readahead(mountpoint: &Path, bytes: u64) {
    let Some(dev) = mountinfo::mount_at(mountpoint)
        .filter(|m| mountinfo::is_fuse(&m.fstype))
        .map(|m| m.dev)
    else {
        return log::warn!("readahead not set: {} is not listed", mountpoint.display());
    };
    let path = format!("/sys/class/bdi/{dev}/read_ahead_kb");
    match std::fs::write(&path, format!("{}\n", bytes / 1024)) {
        Ok(()) => log::info!("readahead {} KiB ({path})", bytes / 1024),
        Err(e) => log::warn!("readahead not set ({path}): {e}"),
    }
}

/// A volume keeps an object file open per device for each file in use: take what the hard
/// limit allows, as storage daemons do.
fn raise_open_file_limit() {
    // SAFETY: getrlimit/setrlimit on a zeroed struct we own.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Starts the daemon and returns once the mount is ready (or says why it is not).
pub fn spawn_background(args: &[String], log_path: &Path) -> Result<()> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::Usage(format!(
            "pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    let (read_fd, write_fd) = (fds[0], fds[1]);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .map_err(|e| Error::Usage(format!("log file {}: {e}", log_path.display())))?;
    let exe = std::env::current_exe()
        .map_err(|e| Error::Usage(format!("cannot find my own binary: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .arg("--foreground")
        .arg("--ready-fd")
        .arg(write_fd.to_string())
        .env(DAEMON_ENV, "1")
        // The daemon's log is bounded: it rotates this file (crate::logging).
        .env(crate::logging::LOG_FILE_ENV, log_path)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| Error::Usage(e.to_string()))?)
        .stderr(log);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::setsid();
            // What the caller has open is not the daemon's to keep: a flock held for as long
            // as the volume stays mounted, or a file of a lazily detached volume keeping its
            // daemon alive. Closed at exec (Linux 5.11+; older kernels keep them, as before).
            let write = write_fd as libc::c_uint;
            mount::close_all_but(3, write, libc::CLOSE_RANGE_CLOEXEC);
            let flags = libc::fcntl(write_fd, libc::F_GETFD);
            libc::fcntl(write_fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::Usage(format!("cannot start the daemon: {e}")))?;
    // SAFETY: both ends are ours; the child holds its own copy of the write end.
    unsafe { libc::close(write_fd) };
    let mut answer = String::new();
    let mut pipe = unsafe { std::fs::File::from_raw_fd(read_fd) };
    let _ = pipe.read_to_string(&mut answer);
    if answer.starts_with("ok") {
        return Ok(());
    }
    let status = child.wait().ok();
    let msg = answer
        .strip_prefix("error: ")
        .unwrap_or(&answer)
        .trim()
        .to_string();
    Err(Error::Usage(if msg.is_empty() {
        format!(
            "the daemon exited ({}) before the mount was ready; see {}",
            status.map(|s| s.to_string()).unwrap_or_default(),
            log_path.display()
        )
    } else {
        msg
    }))
}

/// What a dead mount's detach leaves to be done, said wherever one is cleared: the daemon is
/// gone, so nothing was written back now.
const DEAD_MOUNT_DATA: &str = "nothing was written back (the daemon is gone): dirty lines of a \
     file cache are written back by the volume's next mount; those of a RAM cache were lost \
     with the daemon";

/// A FUSE mount whose daemon is gone ([`mount::daemon_gone`]). statfs always asks the daemon
/// (a stat may be answered from the kernel's attribute cache).
fn is_dead_mount(path: &Path) -> Result<bool> {
    let asked = mount::statfs_answered(path, mount::ANSWER_WITHIN)?;
    Ok(asked.is_err_and(|e| mount::daemon_gone(e.raw_os_error())))
}

/// Detaches the mount on `path` (lazily: a dead mount cannot be unmounted otherwise), with
/// fusermount3 where the kernel refuses us.
fn detach(path: &Path) -> Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::Usage("mountpoint has a NUL byte".into()))?;
    // SAFETY: plain syscall with a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    let ok = e.raw_os_error() == Some(libc::EPERM)
        && Command::new("fusermount3")
            .arg("-uz")
            .arg(path)
            .status()
            .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err(Error::Usage(format!("detach {}: {e}", path.display())))
    }
}

/// If `path` is a dead FUSE mount (its daemon killed or crashed), detaches it and says what it
/// was; `None` if it is no dead mount. A dead mount of any other kind is left alone.
pub fn clear_dead_mount(path: &Path) -> Result<Option<String>> {
    if !is_dead_mount(path)? {
        return Ok(None);
    }
    let Some(mountinfo::MountEntry { fstype, source, .. }) = mountinfo::mount_at(path) else {
        return Err(Error::Usage(format!(
            "{}: transport endpoint is not connected, but no mount is listed there",
            path.display()
        )));
    };
    if !mountinfo::is_fuse(&fstype) {
        return Err(Error::Usage(format!(
            "{} is a dead {fstype} mount of {source}, not a FUSE one: unmount it yourself",
            path.display()
        )));
    }
    detach(path)?;
    // Its daemon could not take its utab entry away.
    if let Some(p) = mountinfo::resolve(path) {
        let _ = mount::utab::remove_if_unmounted(&p);
    }
    Ok(Some(source))
}

/// Unmounts a stripefs mount and waits for its daemon to finish writing everything back. A
/// dead mount (the daemon killed) is detached, and said to have been.
pub fn umount(mountpoint: &Path, lazy: bool, timeout: Duration) -> Result<()> {
    if let Some(source) = clear_dead_mount(mountpoint)? {
        eprintln!(
            "stripefs: {} was a dead mount of {source} (its daemon had stopped); detached it: \
             {DEAD_MOUNT_DATA}",
            mountpoint.display()
        );
        return Ok(());
    }
    let status = xattr::volume_status(mountpoint)?;
    let pid = status["pid"].as_u64().unwrap_or(0) as i32;
    let c = std::ffi::CString::new(mountpoint.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::Usage("mountpoint has a NUL byte".into()))?;
    // Lazily only when busy: a volume nobody uses is unmounted and waited for as without
    // --lazy, so the caller can trust the devices when this returns.
    let mut detached = false;
    // SAFETY: plain syscall with a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), 0) } != 0 {
        let mut e = std::io::Error::last_os_error();
        if lazy && e.raw_os_error() == Some(libc::EBUSY) {
            // SAFETY: as above.
            if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
                detached = true;
            } else {
                e = std::io::Error::last_os_error();
            }
        }
        match e.raw_os_error() {
            _ if detached => {}
            Some(libc::EBUSY) => {
                return Err(Error::Usage(format!(
                    "{} is busy (files are open or a process is inside it); \
                     close them, or use --lazy",
                    mountpoint.display()
                )))
            }
            Some(libc::EPERM) => {
                let ok = Command::new("fusermount3")
                    .arg("-u")
                    .args(lazy.then_some("-z"))
                    .arg(mountpoint)
                    .status()
                    .map(|s| s.success())
                    .unwrap_or(false);
                if !ok {
                    return Err(Error::Usage(format!(
                        "unmount {}: {e}",
                        mountpoint.display()
                    )));
                }
            }
            _ => {
                return Err(Error::Usage(format!(
                    "unmount {}: {e}",
                    mountpoint.display()
                )))
            }
        }
    }
    if detached {
        // The daemon serves the files still open, and finishes after the last one is closed,
        // which may be never; waiting for it is what --lazy is not for.
        eprintln!(
            "stripefs: {} detached; its daemon (pid {pid}) writes everything back and exits once \
             the last file open on the volume is closed",
            mountpoint.display()
        );
        return Ok(());
    }
    // The daemon flushes after the kernel lets go; wait for it so the caller can trust the disks.
    let start = Instant::now();
    // SAFETY: signal 0 only checks that the process exists.
    while pid > 0 && process_alive(pid) {
        if start.elapsed() > timeout {
            return Err(Error::Usage(format!(
                "unmounted, but daemon {pid} is still writing back after {}s",
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let report_path = status["namespace"]
        .as_str()
        .map(|ns| Path::new(ns).with_file_name(STOP_REPORT));
    let read = report_path.as_ref().map(std::fs::read);
    let report = match &read {
        Some(Ok(b)) => serde_json::from_slice::<StopReport>(b).ok(),
        _ => None,
    };
    match report {
        Some(r) if r.pid == pid as u32 && r.ok => Ok(()),
        Some(r) if r.pid == pid as u32 => Err(Error::Usage(format!(
            "unmounted {}, but the daemon could not finish: {}",
            mountpoint.display(),
            r.error
        ))),
        // No report of its own: it died before writing one, or could not write it (the
        // namespace's device gone), which its log says.
        _ => Err(Error::Usage(format!(
            "unmounted {}, but daemon {pid} left no report of finishing its unmount{}: it was \
             killed or crashed, or could not write the report (see its log); the next mount \
             recovers what it left",
            mountpoint.display(),
            match (&report_path, &read) {
                (Some(p), Some(Err(e))) => format!(" ({}: {e})", p.display()),
                _ => String::new(),
            }
        ))),
    }
}

/// True while `pid` runs (a zombie counts as finished).
pub(crate) fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next()),
            Some("Z") | Some("X")
        ),
        Err(_) => false,
    }
}
