//! stripefs: a FUSE filesystem that stripes files RAID-0 style across backing devices.
//! The binary wires the crates below it: `stripe` (layout and devices), `mountcfg` (config).

pub mod acl;
pub mod bench_cmd;
pub mod caching;
pub mod cli;
pub mod control;
pub mod daemon;
pub mod engine;
pub mod error;
pub mod events;
pub mod fs;
pub mod fsck;
pub mod janitor;
pub mod logging;
pub mod mount;
pub mod namespace;
mod overlay;
pub mod panics;
pub mod rescue;
pub mod usage;
pub mod volume_life;
pub mod xattr;
