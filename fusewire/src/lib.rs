//! fusewire: the FUSE kernel protocol for stripefs, over /dev/fuse and over io_uring.
//!
//! It knows nothing of striping or caching: it decodes the kernel's requests into
//! [`request::Request`]s, encodes replies through [`reply::Reply`] (a `Send` handle that may be
//! completed on any thread), and runs the transports that carry them.

pub mod abi;
mod dev_ring;
mod lent_ring;
pub mod mount;
mod payload;
pub mod reply;
pub mod request;
pub mod session;
pub mod uring;

/// The io_uring crate fusewire builds on, for SQEs given to [`RingCtx::push`].
pub use io_uring;
pub use lent_ring::RingCtx;
pub use payload::Payload;
pub use reply::{DataReply, DirBuf, Entry, Reply, ReplySink};
pub use request::{Operation, Request};
pub use session::{Config, Filesystem, InitInfo, Notifier, Running, Session};
pub use uring::UringConfig;
