//! fusewire over /dev/fuse: a RAM filesystem mounted, used through the kernel, unmounted.
//! Needs root (mount(2)); skipped otherwise.

mod common;

use common::{
    abort_connection, exercise, files, interrupt_a_held_read, notifications, MemFs, Mounted,
};
use fusewire::Config;

fn root() -> bool {
    // SAFETY: plain getter.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: mounting needs root");
    }
    root
}

#[test]
fn dev_fuse_serves_a_ram_filesystem() {
    if !root() {
        return;
    }
    let mut m = Mounted::new(files(), Config::default());
    assert!(!m.info.uring);
    assert!(m.info.minor >= 31);
    exercise(&m);
    notifications(&m);
    assert!(m.finish(), "the session did not end after the unmount");
}

#[test]
fn dev_fuse_with_cloned_descriptors_and_readdirplus() {
    if !root() {
        return;
    }
    // READDIRPLUS too: readdir entries come with their attributes.
    let base = Config::default();
    let config = Config {
        threads: 3,
        clone_fd: true,
        want: base.want | fusewire::abi::FUSE_DO_READDIRPLUS,
        ..base
    };
    let mut m = Mounted::new(files(), config);
    exercise(&m);
    assert!(m.fs.plus.load(std::sync::atomic::Ordering::SeqCst) > 0);
    assert!(m.finish(), "the session did not end after the unmount");
}

#[test]
fn dev_fuse_interrupts_reach_the_filesystem() {
    if !root() {
        return;
    }
    let mut m = Mounted::new(MemFs::new(&[("slow", b"0123456789")]), Config::default());
    interrupt_a_held_read(&m);
    assert!(m.finish(), "the session did not end after the unmount");
}

#[test]
fn dev_fuse_ends_when_the_connection_is_aborted() {
    if !root() {
        return;
    }
    let mut m = Mounted::new(files(), Config::default());
    assert_eq!(std::fs::read(m.path("hello")).unwrap(), b"hello world\n");
    abort_connection(m.conn);
    let e = std::fs::read(m.path("hello")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTCONN));
    assert!(m.finish(), "the session did not end after the abort");
}
