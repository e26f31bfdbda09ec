//! The log: env_logger (`RUST_LOG`, `info` by default) behind two guards. The same warning or
//! error is written at most once per `REPEAT_WINDOW`; the next one that gets through says how
//! many were held back ("(repeated K times)"), and so does the daemon's last flush. A
//! background daemon's log file is bounded: past its size cap (`[mount] log_size`, 8 MiB by
//! default) it is renamed to `FILE.1` (replacing the older one) and a new file begun, so the
//! two never hold more than twice the cap.

use log::{Level, Log, Metadata, Record};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Set by `stripefs mount` for its background daemon: the log file it writes to.
pub const LOG_FILE_ENV: &str = "STRIPEFS_LOG_FILE";
/// The same warning at most once in this long.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(10);
/// The log file's size cap unless the config says otherwise.
pub const DEFAULT_LOG_SIZE: u64 = 8 << 20;

static LOG_SIZE: AtomicU64 = AtomicU64::new(DEFAULT_LOG_SIZE);

/// Sets the log file's size cap (at least 64 KiB).
pub fn set_log_size(bytes: u64) {
    LOG_SIZE.store(bytes.max(64 << 10), Ordering::Relaxed);
}

/// Installs the logger; the first call wins (later ones do nothing).
pub fn init() {
    let mut builder =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    builder.format_timestamp_millis();
    if let Some(path) = std::env::var_os(LOG_FILE_ENV) {
        match RotatingFile::open(PathBuf::from(path)) {
            Ok(file) => {
                builder.target(env_logger::Target::Pipe(Box::new(file)));
            }
            Err(e) => eprintln!("stripefs: log file: {e}; logging to stderr"),
        }
    }
    let inner = builder.build();
    let level = inner.filter();
    if log::set_boxed_logger(Box::new(RateLimited::new(inner, REPEAT_WINDOW))).is_ok() {
        log::set_max_level(level);
    }
}

struct Seen {
    last: Instant,
    held: u64,
}

/// Writes each distinct warning or error at most once per `window`.
pub struct RateLimited<L> {
    inner: L,
    window: Duration,
    seen: Mutex<HashMap<(Level, String, String), Seen>>,
}

impl<L: Log> RateLimited<L> {
    pub fn new(inner: L, window: Duration) -> Self {
        RateLimited {
            inner,
            window,
            seen: Mutex::new(HashMap::new()),
        }
    }

    fn log_repeated(&self, record: &Record, msg: &str, held: u64) {
        self.inner.log(
            &Record::builder()
                .args(format_args!("{msg} (repeated {held} times)"))
                .level(record.level())
                .target(record.target())
                .module_path(record.module_path())
                .file(record.file())
                .line(record.line())
                .build(),
        );
    }
}

impl<L: Log> Log for RateLimited<L> {
    fn enabled(&self, metadata: &Metadata) -> bool {
        self.inner.enabled(metadata)
    }

    fn log(&self, record: &Record) {
        if !self.inner.enabled(record.metadata()) {
            return;
        }
        if record.level() > Level::Warn {
            return self.inner.log(record);
        }
        let msg = record.args().to_string();
        let key = (record.level(), record.target().to_string(), msg);
        let now = Instant::now();
        let held = {
            let mut seen = self.seen.lock();
            if seen.len() >= 4096 {
                let window = self.window;
                seen.retain(|_, s| s.held > 0 || now.duration_since(s.last) < window);
                if seen.len() >= 4096 {
                    seen.clear();
                }
            }
            match seen.get_mut(&key) {
                Some(s) if now.duration_since(s.last) < self.window => {
                    s.held += 1;
                    return;
                }
                Some(s) => {
                    s.last = now;
                    std::mem::take(&mut s.held)
                }
                None => {
                    seen.insert(key.clone(), Seen { last: now, held: 0 });
                    0
                }
            }
        };
        if held == 0 {
            self.inner.log(record);
        } else {
            // This one and the `held` before it.
            self.log_repeated(record, &key.2, held + 1);
        }
    }

    /// Writes what was held back, then flushes.
    fn flush(&self) {
        let held: Vec<_> = self
            .seen
            .lock()
            .iter_mut()
            .filter(|(_, s)| s.held > 0)
            .map(|(k, s)| (k.clone(), std::mem::take(&mut s.held)))
            .collect();
        for ((level, target, msg), n) in held {
            self.inner.log(
                &Record::builder()
                    .args(format_args!("{msg} (repeated {n} times)"))
                    .level(level)
                    .target(&target)
                    .build(),
            );
        }
        self.inner.flush();
    }
}

/// A log file with a size cap: past it, FILE becomes FILE.1 and a new FILE is begun. Standard
/// output and error (panics, anything printed) follow it to the new file.
pub struct RotatingFile {
    path: PathBuf,
    file: File,
    size: u64,
}

impl RotatingFile {
    pub fn open(path: PathBuf) -> std::io::Result<RotatingFile> {
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let size = file.metadata()?.len();
        Ok(RotatingFile { path, file, size })
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let mut old = self.path.clone().into_os_string();
        old.push(".1");
        std::fs::rename(&self.path, &old)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        // Our stdout and stderr were the old file (the daemon was started so): move them too.
        for fd in [1, 2] {
            if same_file(fd, &self.file) {
                // SAFETY: dup2 onto a standard descriptor from one we own.
                unsafe { libc::dup2(file.as_raw_fd(), fd) };
            }
        }
        self.file = file;
        self.size = 0;
        Ok(())
    }
}

/// Does descriptor `fd` refer to the same file as `file`?
fn same_file(fd: i32, file: &File) -> bool {
    // SAFETY: fstat fills the zeroed structs.
    let (mut a, mut b): (libc::stat, libc::stat) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    unsafe {
        libc::fstat(fd, &mut a) == 0
            && libc::fstat(file.as_raw_fd(), &mut b) == 0
            && a.st_dev == b.st_dev
            && a.st_ino == b.st_ino
    }
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.size > 0 && self.size + buf.len() as u64 > LOG_SIZE.load(Ordering::Relaxed) {
            if let Err(e) = self.rotate() {
                // Go on in the old file rather than lose the line; say why once.
                let _ = writeln!(
                    self.file,
                    "log rotation of {} failed: {e}",
                    self.path.display()
                );
                self.size = 0;
            }
        }
        let n = self.file.write(buf)?;
        self.size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<String>>>);

    impl Log for Lines {
        fn enabled(&self, _: &Metadata) -> bool {
            true
        }
        fn log(&self, record: &Record) {
            self.0.lock().push(record.args().to_string());
        }
        fn flush(&self) {}
    }

    fn warn(l: &impl Log, msg: &str) {
        l.log(
            &Record::builder()
                .args(format_args!("{msg}"))
                .level(Level::Warn)
                .target("t")
                .build(),
        );
    }

    #[test]
    fn the_same_warning_is_held_back_and_counted() {
        let lines = Lines::default();
        let limited = RateLimited::new(lines.clone(), Duration::from_secs(3600));
        for _ in 0..100 {
            warn(&limited, "disk slow");
        }
        warn(&limited, "other");
        assert_eq!(*lines.0.lock(), ["disk slow", "other"]);
        limited.flush();
        assert_eq!(lines.0.lock()[2], "disk slow (repeated 99 times)");
        // Infos pass untouched.
        for _ in 0..3 {
            limited.log(
                &Record::builder()
                    .args(format_args!("hello"))
                    .level(Level::Info)
                    .build(),
            );
        }
        assert_eq!(lines.0.lock().len(), 6);
    }

    #[test]
    fn after_the_window_the_next_one_carries_the_count() {
        let lines = Lines::default();
        let limited = RateLimited::new(lines.clone(), Duration::ZERO);
        warn(&limited, "a");
        warn(&limited, "a");
        assert_eq!(*lines.0.lock(), ["a", "a"]);
        let limited = RateLimited::new(lines.clone(), Duration::from_millis(1));
        lines.0.lock().clear();
        warn(&limited, "b");
        warn(&limited, "b");
        std::thread::sleep(Duration::from_millis(5));
        warn(&limited, "b");
        let got = lines.0.lock().clone();
        assert_eq!(got[0], "b");
        // Either the second was held back and counted, or it came after the window itself.
        assert!(
            got[1..] == ["b (repeated 2 times)"] || got[1..] == ["b", "b"],
            "{got:?}"
        );
    }

    #[test]
    fn a_full_log_file_rotates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.log");
        set_log_size(64 << 10);
        let mut f = RotatingFile::open(path.clone()).unwrap();
        let line = [b'x'; 1000];
        for _ in 0..200 {
            f.write_all(&line).unwrap();
        }
        let now = std::fs::metadata(&path).unwrap().len();
        let old = std::fs::metadata(dir.path().join("daemon.log.1"))
            .unwrap()
            .len();
        assert!(now <= 64 << 10 && old <= 64 << 10, "{now} {old}");
        set_log_size(DEFAULT_LOG_SIZE);
    }
}
