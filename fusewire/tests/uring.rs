//! fusewire over io_uring: the same RAM filesystem and scenario as over /dev/fuse, with the
//! kernel's FUSE-over-io_uring switched on for the test (and restored after it, also when the
//! test fails). Needs root and a kernel with CONFIG_FUSE_IO_URING; skipped otherwise.

mod common;

use common::{abort_connection, exercise, files, interrupt_a_held_read, MemFs, Mounted};
use fusewire::{Config, UringConfig};

const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Sets `enable_uring` to Y and puts the previous value back when dropped.
struct EnableUring {
    previous: String,
}

impl EnableUring {
    fn new() -> Option<EnableUring> {
        // SAFETY: plain getter.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return None;
        }
        let Ok(previous) = std::fs::read_to_string(PARAM) else {
            eprintln!("skipped: this kernel has no FUSE over io_uring");
            return None;
        };
        let guard = EnableUring {
            previous: previous.trim().to_string(),
        };
        std::fs::write(PARAM, "Y").ok()?;
        Some(guard)
    }
}

impl Drop for EnableUring {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(PARAM, &self.previous) {
            eprintln!("could not restore {PARAM} to {}: {e}", self.previous);
        }
    }
}

fn uring_config(threads: usize, depth: usize) -> Config {
    let base = Config::default();
    Config {
        uring: Some(UringConfig { threads, depth }),
        // READDIRPLUS on the single-thread run: its entries cross the ring too.
        want: match threads {
            1 => base.want | fusewire::abi::FUSE_DO_READDIRPLUS,
            _ => base.want,
        },
        ..base
    }
}

#[test]
fn uring_serves_a_ram_filesystem() {
    let Some(_on) = EnableUring::new() else {
        return;
    };
    for (threads, depth) in [(0, 8), (1, 4)] {
        let mut m = Mounted::new(files(), uring_config(threads, depth));
        assert!(m.info.uring, "io_uring not running: {:?}", m.info);
        assert_ne!(m.info.flags & fusewire::abi::FUSE_OVER_IO_URING, 0);
        exercise(&m);
        if threads == 1 {
            assert!(m.fs.plus.load(std::sync::atomic::Ordering::SeqCst) > 0);
        }
        let seen = m.fs.seen.lock().clone();
        eprintln!("reads served by: {seen:?}");
        assert!(
            seen.iter().any(|t| t.starts_with("fuse-ring")),
            "no read came over the ring: {seen:?}"
        );
        assert!(m.finish(), "the session did not end after the unmount");
    }
    // Interrupts still come over /dev/fuse; the held read's reply goes back over the ring.
    let mut m = Mounted::new(MemFs::new(&[("slow", b"0123456789")]), uring_config(0, 4));
    assert!(m.info.uring);
    interrupt_a_held_read(&m);
    assert!(m.finish(), "the session did not end after the unmount");
    // An aborted connection (what `fusectl abort` or a dying daemon's kernel side does) ends
    // the ring threads and the session too.
    let mut m = Mounted::new(files(), uring_config(0, 4));
    assert_eq!(std::fs::read(m.path("hello")).unwrap(), b"hello world\n");
    abort_connection(m.conn);
    let e = std::fs::read(m.path("hello")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTCONN));
    assert!(m.finish(), "the session did not end after the abort");
}
