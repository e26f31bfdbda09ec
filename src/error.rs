//! The binary's one error type; mapped to an errno once, at the FUSE boundary.

use std::fmt;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A plain filesystem error for the caller.
    #[error("{}", Errno(*.0))]
    Errno(i32),
    #[error("namespace store: {0}")]
    Store(String),
    /// The namespace store cannot be written (a full or failing filesystem): changes are
    /// refused with `errno` until it can, and those not yet durable are in memory only.
    #[error("the namespace store cannot be written ({why}); changes not yet durable are held in memory only")]
    StoreDown { errno: i32, why: String },
    #[error(transparent)]
    Stripe(#[from] stripe::StripeError),
    #[error(transparent)]
    Config(#[from] mountcfg::ConfigError),
    /// Something the user asked for that cannot be done, said in words.
    #[error("{0}")]
    Usage(String),
    /// A control request refused with this errno, for this reason (kept for
    /// `user.stripefs.error`, see control.rs).
    #[error("{1}")]
    Refused(i32, String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn errno(&self) -> i32 {
        match self {
            Error::Errno(e) => *e,
            Error::Stripe(e) => e.errno(),
            Error::Store(_) => libc::EIO,
            Error::StoreDown { errno, .. } => *errno,
            Error::Config(_) | Error::Usage(_) => libc::EINVAL,
            Error::Refused(e, _) => *e,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

/// Shorthand for `Err(Error::Errno(code))`.
pub fn errno<T>(code: i32) -> Result<T> {
    Err(Error::Errno(code))
}

impl From<redb::Error> for Error {
    fn from(e: redb::Error) -> Self {
        Error::Store(e.to_string())
    }
}

macro_rules! store_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Self {
                Error::Store(e.to_string())
            }
        }
    )*};
}
store_errors!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);

/// An errno printed as strerror does.
pub struct Errno(pub i32);

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}
