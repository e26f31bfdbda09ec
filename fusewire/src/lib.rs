//! fusewire: the FUSE kernel protocol for stripefs, over /dev/fuse and over io_uring.
//!
//! It knows nothing of striping or caching: it decodes the kernel's requests into
//! [`request::Request`]s, encodes replies through [`reply::Reply`] (a `Send` handle that may be
//! completed on any thread), and runs the transports that carry them.

pub mod abi;
pub mod mount;
pub mod reply;
pub mod request;
pub mod session;
pub mod uring;

pub use reply::{DirBuf, Entry, Reply, ReplySink};
pub use request::{Operation, Request};
pub use session::{Config, Filesystem, InitInfo, Notifier, Running, Session};
pub use uring::UringConfig;
