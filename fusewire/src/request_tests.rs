use super::*;
use proptest::prelude::*;

/// A request as the kernel writes it to /dev/fuse.
fn req(opcode: u32, arg0: &[u8], rest: &[u8]) -> Vec<u8> {
    let len = size_of::<fuse_in_header>() + arg0.len() + rest.len();
    let h = fuse_in_header {
        len: len as u32,
        opcode,
        unique: 7,
        nodeid: 3,
        uid: 1000,
        gid: 100,
        pid: 42,
        ..Default::default()
    };
    let mut v = abi::bytes(&h).to_vec();
    v.extend_from_slice(arg0);
    v.extend_from_slice(rest);
    v
}

fn proto() -> Proto {
    Proto {
        minor: 45,
        setxattr_ext: true,
    }
}

/// One well-formed request of every opcode we decode.
fn samples() -> Vec<Vec<u8>> {
    let w = fuse_write_in {
        fh: 9,
        offset: 4096,
        size: 5,
        ..Default::default()
    };
    let c = fuse_create_in {
        flags: libc::O_RDWR as u32,
        mode: 0o100644,
        umask: 0o22,
        open_flags: 0,
    };
    vec![
        req(FUSE_LOOKUP, &[], b"name\0"),
        req(FUSE_FORGET, abi::bytes(&fuse_forget_in { nlookup: 2 }), &[]),
        req(FUSE_GETATTR, abi::bytes(&fuse_getattr_in::default()), &[]),
        req(FUSE_SETATTR, abi::bytes(&fuse_setattr_in::default()), &[]),
        req(FUSE_READLINK, &[], &[]),
        req(FUSE_SYMLINK, &[], b"l\0target\0"),
        req(FUSE_MKNOD, abi::bytes(&fuse_mknod_in::default()), b"n\0"),
        req(FUSE_MKDIR, abi::bytes(&fuse_mkdir_in::default()), b"d\0"),
        req(FUSE_UNLINK, &[], b"u\0"),
        req(FUSE_RMDIR, &[], b"r\0"),
        req(
            FUSE_RENAME,
            abi::bytes(&fuse_rename_in { newdir: 5 }),
            b"a\0b\0",
        ),
        req(
            FUSE_RENAME2,
            abi::bytes(&fuse_rename2_in::default()),
            b"a\0b\0",
        ),
        req(
            FUSE_LINK,
            abi::bytes(&fuse_link_in { oldnodeid: 4 }),
            b"l\0",
        ),
        req(FUSE_OPEN, abi::bytes(&fuse_open_in::default()), &[]),
        req(FUSE_READ, abi::bytes(&fuse_read_in::default()), &[]),
        req(FUSE_WRITE, abi::bytes(&w), b"hello"),
        req(FUSE_STATFS, &[], &[]),
        req(FUSE_RELEASE, abi::bytes(&fuse_release_in::default()), &[]),
        req(FUSE_FSYNC, abi::bytes(&fuse_fsync_in::default()), &[]),
        req(
            FUSE_SETXATTR,
            abi::bytes(&fuse_setxattr_in {
                size: 3,
                ..Default::default()
            }),
            b"user.a\0abc",
        ),
        req(
            FUSE_GETXATTR,
            abi::bytes(&fuse_getxattr_in::default()),
            b"user.a\0",
        ),
        req(
            FUSE_LISTXATTR,
            abi::bytes(&fuse_getxattr_in::default()),
            &[],
        ),
        req(FUSE_REMOVEXATTR, &[], b"user.a\0"),
        req(FUSE_FLUSH, abi::bytes(&fuse_flush_in::default()), &[]),
        req(FUSE_INIT, abi::bytes(&fuse_init_in::default()), &[]),
        req(FUSE_OPENDIR, abi::bytes(&fuse_open_in::default()), &[]),
        req(FUSE_READDIR, abi::bytes(&fuse_read_in::default()), &[]),
        req(FUSE_READDIRPLUS, abi::bytes(&fuse_read_in::default()), &[]),
        req(
            FUSE_RELEASEDIR,
            abi::bytes(&fuse_release_in::default()),
            &[],
        ),
        req(FUSE_FSYNCDIR, abi::bytes(&fuse_fsync_in::default()), &[]),
        req(FUSE_ACCESS, abi::bytes(&fuse_access_in::default()), &[]),
        req(FUSE_CREATE, abi::bytes(&c), b"new\0"),
        req(FUSE_TMPFILE, abi::bytes(&c), &[]),
        req(
            FUSE_INTERRUPT,
            abi::bytes(&fuse_interrupt_in { unique: 6 }),
            &[],
        ),
        req(FUSE_DESTROY, &[], &[]),
        req(FUSE_IOCTL, abi::bytes(&fuse_ioctl_in::default()), &[]),
        req(
            FUSE_FALLOCATE,
            abi::bytes(&fuse_fallocate_in::default()),
            &[],
        ),
        req(FUSE_LSEEK, abi::bytes(&fuse_lseek_in::default()), &[]),
        req(
            FUSE_COPY_FILE_RANGE,
            abi::bytes(&fuse_copy_file_range_in::default()),
            &[],
        ),
        req(FUSE_STATX, abi::bytes(&fuse_statx_in::default()), &[]),
        req(FUSE_SYNCFS, abi::bytes(&fuse_syncfs_in::default()), &[]),
        req(
            FUSE_BATCH_FORGET,
            abi::bytes(&fuse_batch_forget_in { count: 1, dummy: 0 }),
            abi::bytes(&fuse_forget_one {
                nodeid: 8,
                nlookup: 1,
            }),
        ),
    ]
}

#[test]
fn every_sample_decodes() {
    for s in samples() {
        let r = parse(&s, &proto()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (r.unique, r.nodeid, r.uid, r.gid, r.pid),
            (7, 3, 1000, 100, 42)
        );
        assert!(!matches!(r.op, Operation::Unknown { .. }), "{:?}", r.op);
    }
}

#[test]
fn fields_land_where_they_belong() {
    let s = samples();
    let p = proto();
    let find = |op: u32| {
        s.iter()
            .find(|b| abi::read::<fuse_in_header>(b).unwrap().opcode == op)
            .unwrap()
    };
    match parse(find(FUSE_WRITE), &p).unwrap().op {
        Operation::Write {
            fh, offset, data, ..
        } => assert_eq!((fh, offset, data), (9, 4096, &b"hello"[..])),
        op => panic!("{op:?}"),
    }
    match parse(find(FUSE_RENAME), &p).unwrap().op {
        Operation::Rename {
            newdir,
            name,
            newname,
            flags,
        } => assert_eq!(
            (newdir, name.as_bytes(), newname.as_bytes(), flags),
            (5, &b"a"[..], &b"b"[..], 0)
        ),
        op => panic!("{op:?}"),
    }
    match parse(find(FUSE_SETXATTR), &p).unwrap().op {
        Operation::Setxattr { name, value, .. } => {
            assert_eq!((name.as_bytes(), value), (&b"user.a"[..], &b"abc"[..]))
        }
        op => panic!("{op:?}"),
    }
    assert_eq!(
        parse(find(FUSE_BATCH_FORGET), &p).unwrap().op,
        Operation::BatchForget {
            forgets: vec![(8, 1)]
        }
    );
    match parse(find(FUSE_TMPFILE), &p).unwrap().op {
        Operation::Tmpfile { mode, umask, .. } => assert_eq!((mode, umask), (0o100644, 0o22)),
        op => panic!("{op:?}"),
    }
}

#[test]
fn setxattr_without_the_extension_takes_eight_bytes() {
    let mut arg0 = Vec::new();
    arg0.extend_from_slice(&2u32.to_ne_bytes());
    arg0.extend_from_slice(&1u32.to_ne_bytes());
    let buf = req(FUSE_SETXATTR, &arg0, b"user.x\0vv");
    let r = parse(
        &buf,
        &Proto {
            minor: 31,
            setxattr_ext: false,
        },
    )
    .unwrap();
    assert_eq!(
        r.op,
        Operation::Setxattr {
            name: OsStr::new("user.x"),
            value: b"vv",
            flags: 1,
            setxattr_flags: 0
        }
    );
}

#[test]
fn the_two_part_form_decodes_like_the_whole() {
    // What the io_uring transport hands over: header, first argument, payload.
    for s in samples() {
        let h: fuse_in_header = abi::read(&s).unwrap();
        let body = &s[size_of::<fuse_in_header>()..];
        let first = if h.opcode == FUSE_INIT {
            body.len()
        } else {
            first_arg_len(h.opcode, &proto())
        };
        let (a0, rest) = body.split_at(first);
        assert_eq!(decode(&h, a0, rest, &proto()), parse(&s, &proto()));
    }
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    for s in samples() {
        for cut in 0..s.len() {
            // With the header's length left as it was: the length check catches it.
            assert!(parse(&s[..cut], &proto()).is_err());
            // With the length fixed up to the cut: the argument checks catch it.
            let mut t = s[..cut].to_vec();
            if cut >= 4 {
                t[..4].copy_from_slice(&(cut as u32).to_ne_bytes());
                let _ = parse(&t, &proto());
            }
        }
    }
}

#[test]
fn names_without_nul_and_hostile_counts() {
    assert!(matches!(
        parse(&req(FUSE_LOOKUP, &[], b"abc"), &proto()),
        Err(DecodeError::Name { .. })
    ));
    let buf = req(
        FUSE_BATCH_FORGET,
        abi::bytes(&fuse_batch_forget_in {
            count: u32::MAX,
            dummy: 0,
        }),
        &[1; 20],
    );
    let r = parse(&buf, &proto()).unwrap();
    assert!(matches!(r.op, Operation::BatchForget { forgets } if forgets.len() == 1));
    let w = fuse_write_in {
        size: u32::MAX,
        ..Default::default()
    };
    assert!(parse(&req(FUSE_WRITE, abi::bytes(&w), b"x"), &proto()).is_err());
    let mut h = req(FUSE_STATFS, &[], &[]);
    h[36] = 0xff; // total_extlen far beyond the buffer
    assert!(parse(&h, &proto()).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = parse(&bytes, &proto());
    }

    #[test]
    fn random_bodies_after_a_valid_header_never_panic(
        opcode in 0u32..60,
        body in proptest::collection::vec(any::<u8>(), 0..300),
        split in 0usize..300,
    ) {
        let s = req(opcode, &body, &[]);
        let _ = parse(&s, &proto());
        let h: fuse_in_header = abi::read(&s).unwrap();
        let (a0, rest) = body.split_at(split.min(body.len()));
        let _ = decode(&h, a0, rest, &proto());
    }
}
