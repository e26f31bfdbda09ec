//! Mount life outside the FUSE protocol: our own mount(2) of type `fuse.stripefs`
//! ([`kernel`]), mountinfo ([`mountinfo`]), waiting at mount for a daemon that is still
//! unmounting the same volume ([`busy`]), and the helpers that mount(8) and umount(8) run,
//! with `stripefs install-helper` that links them ([`helper`]), and the utab entry that
//! makes umount(8) run its helper ([`utab`]); the `-o` options and remount ([`options`]).

pub mod busy;
pub mod fusermount;
pub mod helper;
pub mod kernel;
pub mod mountinfo;
pub mod options;
pub mod utab;

pub use kernel::{FuseMount, MountSpec, FSTYPE};
