use super::*;
use std::mem::offset_of;

#[test]
fn offsets_match_the_kernel() {
    assert_eq!(offset_of!(fuse_in_header, total_extlen), 36);
    assert_eq!(offset_of!(fuse_init_out, flags2), 32);
    assert_eq!(offset_of!(fuse_init_out, request_timeout), 40);
    assert_eq!(offset_of!(fuse_statx, ino), 32);
    assert_eq!(offset_of!(fuse_statx, atime), 64);
    assert_eq!(offset_of!(fuse_statx, rdev_major), 128);
    assert_eq!(offset_of!(fuse_uring_req_header, op_in), 128);
    assert_eq!(offset_of!(fuse_uring_req_header, ring_ent_in_out), 256);
    assert_eq!(offset_of!(fuse_uring_ent_in_out, payload_sz), 16);
    assert_eq!(offset_of!(fuse_uring_cmd_req, qid), 16);
    assert_eq!(offset_of!(fuse_direntplus, dirent), 128);
}

#[test]
fn ioctl_number() {
    // _IOR(229, 0, uint32_t) as the kernel computes it on x86-64 and arm64.
    assert_eq!(FUSE_DEV_IOC_CLONE, 0x8004_e500);
}

#[test]
fn short_reads() {
    assert!(read::<fuse_in_header>(&[0u8; 39]).is_none());
    let v: fuse_setxattr_in = read_prefix(&[1, 0, 0, 0, 2, 0, 0, 0]);
    assert_eq!((v.size, v.flags, v.setxattr_flags), (1, 2, 0));
    assert_eq!(dirent_size(24, 1), 32);
    assert_eq!(dirent_size(24, 8), 32);
    assert_eq!(dirent_size(24, 9), 40);
}
