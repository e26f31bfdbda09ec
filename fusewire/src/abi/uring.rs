//! The FUSE-over-io_uring part of the ABI (7.42): the commands and the ring entry's header.

use super::Pod;

/// Room for the in/out header in a ring entry's header buffer.
pub const FUSE_URING_IN_OUT_HEADER_SZ: usize = 128;
/// Room for the per-opcode first argument (`op_in`).
pub const FUSE_URING_OP_IN_OUT_SZ: usize = 128;
/// `fuse_uring_cmd`: register an entry's buffers and wait for a request.
pub const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
/// `fuse_uring_cmd`: commit the reply in the entry and wait for the next request.
pub const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;

/// Per-entry values the kernel and the daemon exchange in the header buffer.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct fuse_uring_ent_in_out {
    pub flags: u64,
    /// The id to commit the reply with (the request's unique).
    pub commit_id: u64,
    /// Bytes of payload: the request's arguments after the first, or the reply's body.
    pub payload_sz: u32,
    pub padding: u32,
    pub reserved: u64,
}

/// The header buffer of a ring entry (the first of its two iovecs).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct fuse_uring_req_header {
    /// `fuse_in_header` of the request, `fuse_out_header` of the reply.
    pub in_out: [u8; FUSE_URING_IN_OUT_HEADER_SZ],
    /// The request's first (per-opcode) argument.
    pub op_in: [u8; FUSE_URING_OP_IN_OUT_SZ],
    pub ring_ent_in_out: fuse_uring_ent_in_out,
}

impl Default for fuse_uring_req_header {
    fn default() -> Self {
        fuse_uring_req_header {
            in_out: [0; FUSE_URING_IN_OUT_HEADER_SZ],
            op_in: [0; FUSE_URING_OP_IN_OUT_SZ],
            ring_ent_in_out: fuse_uring_ent_in_out::default(),
        }
    }
}

/// The command in the 80-byte area of a 128-byte SQE.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct fuse_uring_cmd_req {
    pub flags: u64,
    /// The entry's commit id (COMMIT_AND_FETCH only).
    pub commit_id: u64,
    /// The queue: the CPU whose requests the entry serves.
    pub qid: u16,
    pub padding: [u8; 6],
}

pod! {
    fuse_uring_ent_in_out = 32,
    fuse_uring_req_header = 288,
    fuse_uring_cmd_req = 24,
}

// The command must fit the SQE128 command area.
const _: () = assert!(size_of::<fuse_uring_cmd_req>() <= 80);
