//! Real volumes for integration tests: temporary device directories, `stripefs mkfs` and
//! `stripefs mount` through the CLI, and a guard that always unmounts.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_stripefs");

/// Runs a command, killing it if it outlives `timeout`. Its output is read while it runs, so
/// a command that prints more than a pipe holds (64 KiB) does not wait on us forever.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Drained while it runs: an output larger than a pipe holds must not stall it.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            buf
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{cmd:?} timed out after {timeout:?}; stderr: {}",
                String::from_utf8_lossy(&stderr.join().unwrap_or_default())
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// `stripefs ARGS`, bounded in time.
pub fn stripefs(args: &[&str]) -> Output {
    run_with_timeout(Command::new(BIN).args(args), Duration::from_secs(120))
}

pub fn stripefs_ok(args: &[&str]) -> String {
    let out = stripefs(args);
    assert!(
        out.status.success(),
        "stripefs {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A volume on temporary directories; unmounted when dropped, whatever happened.
pub struct TestVolume {
    pub root: tempfile::TempDir,
    pub devices: Vec<PathBuf>,
    pub mnt: PathBuf,
    pub config: PathBuf,
    mounted: bool,
}

impl TestVolume {
    /// A volume of `n` devices with `stripe` (e.g. "64K") and extra config text, formatted.
    pub fn new(n: usize, stripe: &str, extra: &str) -> TestVolume {
        let root = tempfile::tempdir().expect("tempdir");
        let devices: Vec<PathBuf> = (0..n).map(|i| root.path().join(format!("d{i}"))).collect();
        for d in &devices {
            std::fs::create_dir(d).unwrap();
        }
        TestVolume::on(root, devices, stripe, extra)
    }

    /// A volume on device directories made by the caller inside `root`.
    pub fn on(
        root: tempfile::TempDir,
        devices: Vec<PathBuf>,
        stripe: &str,
        extra: &str,
    ) -> TestVolume {
        let mnt = root.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let config = root.path().join("vol.toml");
        let list: Vec<String> = devices
            .iter()
            .map(|d| format!("\"{}\"", d.display()))
            .collect();
        std::fs::write(
            &config,
            format!(
                "[volume]\ndevices = [{}]\nstripe_size = \"{stripe}\"\n{extra}",
                list.join(", ")
            ),
        )
        .unwrap();
        let v = TestVolume {
            root,
            devices,
            mnt,
            config,
            mounted: false,
        };
        stripefs_ok(&["mkfs", v.cfg()]);
        v
    }

    pub fn cfg(&self) -> &str {
        self.config.to_str().unwrap()
    }

    pub fn mnt_str(&self) -> &str {
        self.mnt.to_str().unwrap()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    pub fn mount(&mut self) {
        self.mount_with(&[]);
    }

    pub fn mount_with(&mut self, extra: &[&str]) {
        let mut args = vec!["mount", self.cfg(), self.mnt_str()];
        args.extend_from_slice(extra);
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        stripefs_ok(&refs);
        self.mounted = true;
    }

    /// For a volume mounted by other means (mount(8)'s helper): the guard unmounts it.
    pub fn umount_on_drop(&mut self) {
        self.mounted = true;
    }

    pub fn umount(&mut self) {
        stripefs_ok(&["umount", self.mnt_str()]);
        self.mounted = false;
    }

    pub fn remount(&mut self) {
        self.umount();
        self.mount();
    }

    /// `stripefs fsck` of the (unmounted) volume finds nothing.
    pub fn assert_fsck_clean(&self, when: &str) {
        let out = stripefs(&["fsck", self.cfg()]);
        assert!(
            out.status.success(),
            "fsck {when}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    /// The daemon's pid, from the status xattr.
    pub fn daemon_pid(&self) -> i32 {
        let status = stripefs_ok(&["status", self.mnt_str(), "--json"]);
        let v: serde_json::Value = serde_json::from_str(&status).unwrap();
        v["pid"].as_i64().unwrap() as i32
    }

    /// The volume's mount went away by other means (detached lazily, its daemon gone): nothing
    /// to unmount on drop.
    pub fn forget_mount(&mut self) {
        self.mounted = false;
    }

    /// SIGKILLs the daemon, as a crash would, and clears the dead mount.
    pub fn crash(&mut self) {
        let pid = self.daemon_pid();
        // SAFETY: plain syscalls.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        self.forget_dead_daemon(pid);
    }

    /// The daemon `pid` died (a crash it was made to have): waits for it to be gone and clears
    /// the dead mount.
    pub fn forget_dead_daemon(&mut self, pid: i32) {
        let start = Instant::now();
        while Path::new(&format!("/proc/{pid}")).exists()
            && start.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        lazy_umount(&self.mnt);
        self.mounted = false;
    }

    /// Object file of inode-object `object` on device `dev`.
    pub fn object(&self, dev: usize, object: u64) -> PathBuf {
        self.devices[dev]
            .join(".stripefs/objects")
            .join(format!("{:02x}", object % 256))
            .join(object.to_string())
    }
}

pub fn lazy_umount(mnt: &Path) {
    let c = std::ffi::CString::new(mnt.to_str().unwrap()).unwrap();
    // SAFETY: plain syscall.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
}

/// The FUSE connection of the mount at `mnt` (its number under /sys/fs/fuse/connections):
/// taken while the daemon answers, to abort it if it stops answering.
pub fn fuse_connection(mnt: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(mnt).unwrap().dev();
    // The kernel's numbering (major << 20 | minor), not glibc's dev_t encoding.
    (u64::from(libc::major(dev)) << 20) | u64::from(libc::minor(dev))
}

/// Whether the kernel offers FUSE over io_uring (`enable_uring`): `transport = "auto"` takes
/// it then.
pub fn kernel_offers_fuse_uring() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|v| v.trim() == "Y")
}

/// Aborts a FUSE connection: every request waiting on a stalled daemon fails (ENOTCONN), so
/// a test that found a stall ends and unmounts instead of hanging in its threads' requests.
pub fn abort_fuse_connection(conn: u64) {
    let _ = std::fs::write(format!("/sys/fs/fuse/connections/{conn}/abort"), "1");
}

impl Drop for TestVolume {
    fn drop(&mut self) {
        if self.mounted {
            let out = run_with_timeout(
                Command::new(BIN).args(["umount", self.mnt_str()]),
                Duration::from_secs(60),
            );
            if !out.status.success() {
                lazy_umount(&self.mnt);
            }
        }
    }
}

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

pub fn getxattr(path: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    stripefs::xattr::get(path, name)
}

pub fn setxattr(path: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    stripefs::xattr::set(path, name, value)
}

/// `cmd` as the user `tests` (no supplementary groups; scripts/test.sh makes the user).
pub fn as_tests(cmd: &[&str]) -> Output {
    run_with_timeout(
        Command::new("setpriv")
            .args(["--reuid=tests", "--regid=tests", "--clear-groups"])
            .args(cmd),
        Duration::from_secs(30),
    )
}

/// A tmpfs of `size` (as mount(8) spells it: "64m") mounted over a directory, unmounted when
/// dropped: a small filesystem to fill, or to turn read-only.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    pub fn over(dir: &Path, size: &str) -> Tmpfs {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount tmpfs over {dir:?}");
        Tmpfs(dir.to_path_buf())
    }

    pub fn remount(&self, how: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,{how}")])
            .arg(&self.0)
            .status()
            .unwrap()
            .success();
        assert!(ok, "remount {how} {:?}", self.0);
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Free bytes of the filesystem at `dir`, for an unprivileged writer.
pub fn free_bytes(dir: &Path) -> u64 {
    let c = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
    // SAFETY: statvfs fills the struct we pass.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st.f_bavail * st.f_frsize
}

/// fallocate(2) of `len` bytes from 0, creating the file.
pub fn fallocate(path: &Path, len: u64) -> std::io::Result<()> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    // SAFETY: plain syscall on an open file.
    match unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, len as i64) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Whether something is mounted at `mnt` (by /proc/self/mountinfo, asking no daemon).
pub fn is_mounted(mnt: &Path) -> bool {
    let mnt = mnt.to_str().unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(mnt))
}

/// A 4K-aligned buffer, as O_DIRECT wants.
pub struct Aligned {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Aligned {
    pub fn new(len: usize) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: non-zero size; freed in Drop with the same layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Aligned { ptr, layout }
    }

    pub fn buf(&mut self) -> &mut [u8] {
        // SAFETY: `layout.size()` initialised bytes, borrowed through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}
