use std::path::PathBuf;

pub type Result<T> = std::result::Result<T, StripeError>;

#[derive(Debug, thiserror::Error)]
pub enum StripeError {
    #[error("device {index} ({}): {source}", path.display())]
    Io {
        index: usize,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A device set that cannot be mounted or formatted; the message names the device.
    #[error("{0}")]
    Devices(String),
    #[error("invalid layout: {0}")]
    Layout(String),
}

impl StripeError {
    /// The errno a filesystem call should fail with.
    pub fn errno(&self) -> i32 {
        match self {
            StripeError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            StripeError::Devices(_) => libc::EIO,
            StripeError::Layout(_) => libc::EINVAL,
        }
    }
}
