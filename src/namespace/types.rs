//! The namespace's data as callers see it: kinds, times, inodes, and the arguments of its
//! changes.

use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};
use stripe::Layout;

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDev,
    BlockDev,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Time {
    pub secs: i64,
    pub nsecs: u32,
}

impl Time {
    pub fn now() -> Time {
        Time::from(SystemTime::now())
    }
}

impl From<SystemTime> for Time {
    fn from(t: SystemTime) -> Time {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Time {
                secs: d.as_secs() as i64,
                nsecs: d.subsec_nanos(),
            },
            Err(e) => {
                let d = e.duration();
                let (mut secs, mut nsecs) = (-(d.as_secs() as i64), d.subsec_nanos());
                if nsecs > 0 {
                    secs -= 1;
                    nsecs = 1_000_000_000 - nsecs;
                }
                Time { secs, nsecs }
            }
        }
    }
}

impl From<Time> for SystemTime {
    fn from(t: Time) -> SystemTime {
        if t.secs >= 0 {
            UNIX_EPOCH + std::time::Duration::new(t.secs as u64, t.nsecs)
        } else {
            UNIX_EPOCH - std::time::Duration::from_secs((-t.secs) as u64)
                + std::time::Duration::from_nanos(t.nsecs as u64)
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Inode {
    pub ino: u64,
    pub kind: Kind,
    /// Permission bits including suid, sgid and sticky (07777).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub rdev: u32,
    pub atime: Time,
    pub mtime: Time,
    pub ctime: Time,
    pub crtime: Time,
    /// Directories: the parent directory (the root is its own parent).
    pub parent: u64,
    /// Files: where the data lives. Directories: the default for new files beneath, if set.
    pub layout: Option<Layout>,
    /// Files: the object id naming the data's object files (changes when migrated).
    pub object: u64,
    /// Files: data was ever written, so objects are expected on the devices.
    pub has_data: bool,
    pub symlink: Vec<u8>,
}

/// What the volume knows durably of its cache: the volume generation (every mount without a
/// cache file advances it, so a cache file's lines count only for the generation it used),
/// which cache file it last used, and whether that one may hold data the devices lack.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CacheBinding {
    pub generation: u64,
    /// The id of the cache file last used, and where it was.
    pub cache: Option<[u8; 16]>,
    pub path: String,
    /// That cache may hold dirty data: it must be there, undamaged, at the next mount.
    pub dirty: bool,
}

/// A directory entry: (parent, name, inode).
pub type Entry = (u64, Vec<u8>, u64);

/// One name of a file: (directory, name).
pub type Name = (u64, Box<[u8]>);

/// What a new node is made of.
pub struct NewNode<'a> {
    pub kind: Kind,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub symlink: &'a [u8],
    /// The creator's umask, for the daemon to apply (FUSE_DONT_MASK) unless the directory
    /// has a default ACL; 0 when the kernel applied it already.
    pub umask: u16,
}

impl NewNode<'static> {
    /// A node of `kind` and permission bits `perm` (07777), owned by root until the caller
    /// says otherwise.
    pub fn new(kind: Kind, perm: u32) -> NewNode<'static> {
        NewNode {
            kind,
            perm: (perm & 0o7777) as u16,
            uid: 0,
            gid: 0,
            rdev: 0,
            symlink: b"",
            umask: 0,
        }
    }
}

/// How a rename goes: renameat2's flags.
#[derive(Clone, Copy, Debug, Default)]
pub struct RenameHow {
    /// RENAME_NOREPLACE: EEXIST if the new name exists.
    pub noreplace: bool,
    /// RENAME_EXCHANGE: the two names swap their inodes.
    pub exchange: bool,
    /// RENAME_WHITEOUT: the old name is left to a whiteout owned by (uid, gid).
    pub whiteout: Option<(u32, u32)>,
}

/// Attribute changes, as setattr(2)-family calls ask for them.
#[derive(Default)]
pub struct SetAttr {
    pub perm: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<Time>,
    pub mtime: Option<Time>,
    pub ctime: Option<Time>,
}
