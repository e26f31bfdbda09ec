//! INIT negotiation against a fake kernel: a SOCK_SEQPACKET pair keeps /dev/fuse's one
//! message per read and write.

use super::*;
use std::time::Duration;

struct Nop;

impl Filesystem for Nop {
    fn request(&self, _req: Request<'_>, reply: Reply) {
        reply.error(libc::ENOSYS)
    }
}

fn pair() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: socketpair fills two descriptors, owned at once below.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(r, 0);
    // SAFETY: fresh descriptors.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn init_msg(unique: u64, major: u32, minor: u32, flags: u64) -> Vec<u8> {
    let body = fuse_init_in {
        major,
        minor,
        max_readahead: 128 << 10,
        flags: flags as u32,
        flags2: (flags >> 32) as u32,
        ..Default::default()
    };
    let h = fuse_in_header {
        len: (size_of::<fuse_in_header>() + size_of::<fuse_init_in>()) as u32,
        opcode: FUSE_INIT,
        unique,
        ..Default::default()
    };
    [abi::bytes(&h), abi::bytes(&body)].concat()
}

fn send(fd: &OwnedFd, msg: &[u8]) {
    // SAFETY: writes our buffer.
    let n = unsafe { libc::write(fd.as_raw_fd(), msg.as_ptr().cast(), msg.len()) };
    assert_eq!(n as usize, msg.len());
}

/// The next reply: its header and body (bounded wait).
fn recv(fd: &OwnedFd) -> (fuse_out_header, Vec<u8>) {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd.
    assert_eq!(unsafe { libc::poll(&mut p, 1, 5000) }, 1, "no reply in 5 s");
    let mut buf = vec![0u8; 4096];
    // SAFETY: reads into our buffer.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 16);
    let h: fuse_out_header = abi::read(&buf).unwrap();
    assert_eq!(h.len as isize, n);
    (h, buf[16..n as usize].to_vec())
}

fn start(config: Config) -> (OwnedFd, Running) {
    let (ours, kernel) = pair();
    let running = Session::new(ours, Nop, config).spawn().unwrap();
    (kernel, running)
}

fn finish(kernel: OwnedFd, running: Running) -> io::Result<()> {
    drop(kernel);
    let end = std::time::Instant::now() + Duration::from_secs(5);
    while !running.is_finished() {
        assert!(std::time::Instant::now() < end, "session did not end");
        std::thread::sleep(Duration::from_millis(5));
    }
    running.join()
}

#[test]
fn init_takes_what_both_sides_want() {
    let config = Config {
        uring: Some(UringConfig::default()),
        ..Config::default()
    };
    let (k, running) = start(config);
    let offered = FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_INIT_EXT | FUSE_MAX_PAGES;
    let offered = offered | FUSE_WRITEBACK_CACHE | FUSE_SETXATTR_EXT;
    send(&k, &init_msg(1, 7, 50, offered));
    let (h, body) = recv(&k);
    assert_eq!((h.unique, h.error), (1, 0));
    let out: fuse_init_out = abi::read(&body).unwrap();
    assert_eq!((out.major, out.minor), (7, KERNEL_MINOR_VERSION));
    let flags = out.flags as u64 | (out.flags2 as u64) << 32;
    assert_eq!(flags & !offered, 0, "only what was offered");
    assert_eq!(flags & FUSE_WRITEBACK_CACHE, 0, "only what we want");
    assert_ne!(flags & FUSE_MAX_PAGES, 0);
    assert_eq!((out.max_write, out.max_pages), (1 << 20, 256));
    assert_eq!(out.max_readahead, 128 << 10);
    let info = running.wait_init(Duration::from_secs(5)).unwrap().clone();
    assert!(!info.uring);
    // Asked for, not offered: says why.
    assert!(info.uring_unavailable.is_some());
    assert!(finish(k, running).is_ok());
}

#[test]
fn a_newer_major_gets_ours_and_a_second_init() {
    let (k, running) = start(Config::default());
    send(&k, &init_msg(1, 8, 0, 0));
    let (h, body) = recv(&k);
    assert_eq!(h.error, 0);
    let out: fuse_init_out = abi::read(&body).unwrap();
    assert_eq!(out.major, 7);
    assert!(running.info().is_none());
    send(&k, &init_msg(2, 7, 45, FUSE_INIT_EXT));
    let (h, _) = recv(&k);
    assert_eq!((h.unique, h.error), (2, 0));
    assert_eq!(running.wait_init(Duration::from_secs(5)).unwrap().minor, 45);
    assert!(finish(k, running).is_ok());
}

#[test]
fn an_old_kernel_is_refused() {
    let (k, running) = start(Config::default());
    send(&k, &init_msg(1, 7, 20, 0));
    let (h, _) = recv(&k);
    assert_eq!(h.error, -libc::EPROTO);
    assert!(finish(k, running).is_err());
}

#[test]
fn garbage_before_init_is_answered_and_skipped() {
    let (k, running) = start(Config::default());
    // A header claiming more bytes than sent, then a non-INIT request, then INIT.
    let mut bad = init_msg(5, 7, 45, 0);
    bad[..4].copy_from_slice(&1000u32.to_ne_bytes());
    send(&k, &bad);
    assert_eq!(recv(&k).0.error, -libc::EIO);
    let h = fuse_in_header {
        len: 40,
        opcode: FUSE_STATFS,
        unique: 6,
        ..Default::default()
    };
    send(&k, abi::bytes(&h));
    assert_eq!(
        recv(&k).0,
        fuse_out_header {
            len: 16,
            error: -libc::EIO,
            unique: 6
        }
    );
    send(&k, &[0u8; 7]);
    send(&k, &init_msg(7, 7, 45, 0));
    assert_eq!(recv(&k).0.unique, 7);
    // After INIT, requests reach the filesystem; unknown opcodes get ENOSYS.
    let h = fuse_in_header {
        len: 40,
        opcode: 9999,
        unique: 8,
        ..Default::default()
    };
    send(&k, abi::bytes(&h));
    assert_eq!(recv(&k).0.error, -libc::ENOSYS);
    send(&k, &[0xffu8; 100]);
    assert!(finish(k, running).is_ok());
}
