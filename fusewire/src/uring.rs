//! FUSE over io_uring (placeholder until the transport lands).

use crate::session::{Filesystem, Shared};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// The io_uring queues.
#[derive(Debug, Clone, Default)]
pub struct UringConfig {
    pub threads: usize,
    pub depth: usize,
}

/// Why the kernel did not offer FUSE over io_uring.
pub fn why_unavailable() -> String {
    "not offered by the kernel".into()
}

pub(crate) struct Ring;

impl Ring {
    pub fn stop(self) {}
}

pub(crate) fn start<F: Filesystem>(
    _fd: Arc<OwnedFd>,
    _shared: Arc<Shared<F>>,
    _cfg: &UringConfig,
    _payload: usize,
) -> io::Result<Ring> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}
