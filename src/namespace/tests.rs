use super::*;

fn ns() -> (tempfile::TempDir, Namespace) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ns.redb");
    Namespace::format(&p, Uuid::new_v4(), 0, 0).unwrap();
    let ns = Namespace::open(&p).unwrap();
    (d, ns)
}

fn node(kind: Kind) -> NewNode<'static> {
    NewNode {
        kind,
        perm: 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
        symlink: b"",
        umask: 0,
    }
}

const L: Layout = Layout {
    stripe_size: 65536,
    width: 2,
    first_device: 0,
    ring: 0,
};

#[test]
fn tree_survives_a_reopen_after_sync() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ns.redb");
    Namespace::format(&p, Uuid::new_v4(), 0, 0).unwrap();
    {
        let ns = Namespace::open(&p).unwrap();
        let dir = ns.create(ROOT, b"dir", node(Kind::Dir), L, 2).unwrap();
        let f = ns.create(dir.ino, b"f", node(Kind::File), L, 2).unwrap();
        ns.note_write(f.ino, 1000).unwrap();
        ns.link(f.ino, ROOT, b"hard").unwrap();
        ns.setxattr(f.ino, b"user.a", b"1", 0).unwrap();
        ns.sync().unwrap();
    }
    let ns = Namespace::open(&p).unwrap();
    let dir = ns.lookup(ROOT, b"dir").unwrap();
    let f = ns.lookup(dir.ino, b"f").unwrap();
    assert_eq!(f.size, 1000);
    assert_eq!(f.nlink, 2);
    assert_eq!(ns.getxattr(f.ino, b"user.a").unwrap(), b"1");
    assert_eq!(ns.get(ROOT).unwrap().nlink, 3);
}

/// Rows of the store's xattr table for `ino`.
fn stored_xattrs(ns: &Namespace, ino: u64) -> usize {
    let tx = ns.db.read().begin_read().unwrap();
    let t = tx.open_table(XATTRS).unwrap();
    t.range((ino, &b""[..])..(ino + 1, &b""[..]))
        .unwrap()
        .count()
}

#[test]
fn xattrs_are_read_from_the_store_and_capped_per_inode() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ns.redb");
    Namespace::format(&p, Uuid::new_v4(), 0, 0).unwrap();
    let e = |r: Result<()>| r.unwrap_err().errno();
    let f;
    {
        let ns = Namespace::open(&p).unwrap();
        f = ns.create(ROOT, b"f", node(Kind::File), L, 2).unwrap().ino;
        // Unsynced changes are what reads see: set, replace, remove.
        ns.setxattr(f, b"user.a", b"one", 0).unwrap();
        assert_eq!(ns.getxattr(f, b"user.a").unwrap(), b"one");
        ns.setxattr(f, b"user.a", b"three", libc::XATTR_REPLACE)
            .unwrap();
        assert_eq!(ns.getxattr(f, b"user.a").unwrap(), b"three");
        assert_eq!(ns.xattr_bytes(f), 6 + 5);
        assert_eq!(
            e(ns.setxattr(f, b"user.a", b"x", libc::XATTR_CREATE)),
            libc::EEXIST
        );
        assert_eq!(
            e(ns.setxattr(f, b"user.b", b"x", libc::XATTR_REPLACE)),
            libc::ENODATA
        );
        ns.removexattr(f, b"user.a").unwrap();
        assert_eq!(
            ns.getxattr(f, b"user.a").unwrap_err().errno(),
            libc::ENODATA
        );
        assert_eq!(e(ns.removexattr(f, b"user.a")), libc::ENODATA);
        assert_eq!(ns.xattr_bytes(f), 0);
        // One value past XATTR_SIZE_MAX: E2BIG.
        let big = vec![7u8; XATTR_SIZE_MAX + 1];
        assert_eq!(e(ns.setxattr(f, b"user.big", &big, 0)), libc::E2BIG);
        // Names and values together: up to XATTR_SPACE, then ENOSPC.
        let v = vec![1u8; 16 * 1024 - 8];
        for n in 0..4 {
            ns.setxattr(f, format!("user.v{n}").as_bytes(), &v, 0)
                .unwrap();
        }
        assert_eq!(ns.xattr_bytes(f), 4 * (7 + v.len()));
        assert_eq!(e(ns.setxattr(f, b"user.more", &[0; 64], 0)), libc::ENOSPC);
        // Replacing a value by a bigger one counts only the difference.
        let left = XATTR_SPACE - ns.xattr_bytes(f);
        let v3 = vec![3u8; v.len() + left];
        ns.setxattr(f, b"user.v3", &v3, 0).unwrap();
        assert_eq!(ns.xattr_bytes(f), XATTR_SPACE);
        // A smaller value fits again; a bigger one than the space left does not.
        ns.setxattr(f, b"user.v3", b"small", 0).unwrap();
        assert_eq!(ns.xattr_bytes(f), 4 * 7 + 3 * v.len() + 5);
        let too_big = vec![3u8; v3.len() + 1];
        assert_eq!(e(ns.setxattr(f, b"user.v3", &too_big, 0)), libc::ENOSPC);
        assert_eq!(ns.getxattr(f, b"user.v3").unwrap(), b"small");
        ns.setxattr(f, b"user.v3", &v3, 0).unwrap();
        ns.sync().unwrap();
    }
    // After a reopen: the values, their total, and the cap.
    let ns = Namespace::open(&p).unwrap();
    assert_eq!(ns.xattr_bytes(f), XATTR_SPACE);
    assert_eq!(
        ns.getxattr(f, b"user.v3").unwrap(),
        vec![3u8; 16 * 1024 - 4]
    );
    assert_eq!(
        ns.getxattr(f, b"user.v0").unwrap(),
        vec![1u8; 16 * 1024 - 8]
    );
    let mut names = ns.listxattr(f).unwrap();
    names.sort();
    assert_eq!(names, [&b"user.v0"[..], b"user.v1", b"user.v2", b"user.v3"]);
    assert_eq!(e(ns.setxattr(f, b"user.x", b"", 0)), libc::ENOSPC);
    // Internal settings are neither listed nor counted, and survive too.
    ns.set_internal(f, "cache", Some(b"mode=wb")).unwrap();
    assert_eq!(ns.listxattr(f).unwrap().len(), 4);
    assert_eq!(ns.xattr_bytes(f), XATTR_SPACE);
    // A freed inode takes its xattrs out of the store.
    assert_eq!(stored_xattrs(&ns, f), 5);
    ns.unlink(ROOT, b"f").unwrap();
    assert_eq!(stored_xattrs(&ns, f), 0);
    assert_eq!(ns.xattr_bytes(f), 0);
}

/// An ACL in xattr form: (tag, perm, id) entries.
fn acl_bytes(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut out = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

#[test]
fn acls_keep_the_mode_in_step_and_are_inherited() {
    let (_d, ns) = ns();
    let e = |r: Result<Inode>| r.unwrap_err().errno();
    const X: u32 = u32::MAX;
    let named = acl_bytes(&[
        (1, 6, X),
        (2, 0, 1001),
        (4, 4, X),
        (0x10, 4, X),
        (0x20, 4, X),
    ]);
    let f = ns.create(ROOT, b"f", node(Kind::File), L, 2).unwrap().ino;
    // An access ACL sets the mode (group bits from the mask) and is kept.
    let i = ns.set_acl(f, false, Some(&named), false).unwrap();
    assert_eq!(i.perm, 0o644);
    assert_eq!(ns.getxattr(f, acl::ACCESS).unwrap(), named);
    // chmod rewrites it; one the mode says all of is dropped, the mode set from it.
    ns.setattr(
        f,
        &SetAttr {
            perm: Some(0o2750),
            ..SetAttr::default()
        },
    )
    .unwrap();
    let got = acl::Acl::parse(&ns.getxattr(f, acl::ACCESS).unwrap()).unwrap();
    assert_eq!(got.mode(), 0o750);
    let plain = acl_bytes(&[(1, 7, X), (4, 0, X), (0x20, 0, X)]);
    // Set-group-ID falls for a caller outside the file's group.
    let i = ns.set_acl(f, false, Some(&plain), true).unwrap();
    assert_eq!(i.perm, 0o700);
    assert_eq!(
        ns.getxattr(f, acl::ACCESS).unwrap_err().errno(),
        libc::ENODATA
    );
    assert_eq!(ns.xattr_bytes(f), 0);
    // Removing what is not there succeeds, as on ext4; a default ACL on a file does not.
    ns.set_acl(f, false, None, false).unwrap();
    assert_eq!(e(ns.set_acl(f, true, Some(&named), false)), libc::EACCES);
    assert_eq!(e(ns.set_acl(f, false, Some(b"junk"), false)), libc::EINVAL);
    // Plain xattr calls cannot store an ACL behind these rules.
    assert_eq!(
        ns.setxattr(f, acl::ACCESS, &named, 0).unwrap_err().errno(),
        libc::EOPNOTSUPP
    );
    // Without a default ACL the umask applies; with one, the ACL decides.
    let masked = NewNode {
        umask: 0o027,
        ..NewNode::new(Kind::File, 0o666)
    };
    assert_eq!(ns.create(ROOT, b"m", masked, L, 2).unwrap().perm, 0o640);
    let d = ns.create(ROOT, b"d", node(Kind::Dir), L, 2).unwrap().ino;
    let default = acl_bytes(&[
        (1, 7, X),
        (2, 7, 1001),
        (4, 5, X),
        (0x10, 7, X),
        (0x20, 5, X),
    ]);
    ns.set_acl(d, true, Some(&default), false).unwrap();
    let new = NewNode {
        umask: 0o077,
        ..NewNode::new(Kind::File, 0o666)
    };
    let n = ns.create(d, b"n", new, L, 2).unwrap();
    assert_eq!(n.perm, 0o664);
    let inherited = acl::Acl::parse(&ns.getxattr(n.ino, acl::ACCESS).unwrap()).unwrap();
    assert_eq!(inherited.mode(), 0o664);
    assert!(ns.getxattr(n.ino, acl::DEFAULT).is_err());
    let sub = NewNode {
        umask: 0o077,
        ..NewNode::new(Kind::Dir, 0o777)
    };
    let sub = ns.create(d, b"sub", sub, L, 2).unwrap();
    assert_eq!(sub.perm, 0o775);
    assert_eq!(ns.getxattr(sub.ino, acl::DEFAULT).unwrap(), default);
    // The ACL's presence survives in the totals: removing the default works.
    ns.set_acl(d, true, None, false).unwrap();
    assert!(ns.getxattr(d, acl::DEFAULT).is_err());
    let after = NewNode {
        umask: 0o077,
        ..NewNode::new(Kind::File, 0o666)
    };
    assert_eq!(ns.create(d, b"after", after, L, 2).unwrap().perm, 0o600);
}

#[test]
fn rename_rules() {
    let (_d, ns) = ns();
    let a = ns.create(ROOT, b"a", node(Kind::Dir), L, 2).unwrap();
    let b = ns.create(ROOT, b"b", node(Kind::Dir), L, 2).unwrap();
    ns.create(b.ino, b"x", node(Kind::File), L, 2).unwrap();
    let e = |r: Result<()>| r.unwrap_err().errno();
    assert_eq!(
        e(ns.rename(ROOT, b"a", b.ino, b"x", false, false)),
        libc::ENOTDIR
    );
    assert_eq!(
        e(ns.rename(ROOT, b"a", ROOT, b"b", false, false)),
        libc::ENOTEMPTY
    );
    assert_eq!(
        e(ns.rename(ROOT, b"a", a.ino, b"in", false, false)),
        libc::EINVAL
    );
    assert_eq!(
        e(ns.rename(ROOT, b"b", ROOT, b"a", true, false)),
        libc::EEXIST
    );
    // Move a directory: link counts of both parents follow.
    ns.rename(ROOT, b"a", b.ino, b"a2", false, false).unwrap();
    assert_eq!(ns.get(ROOT).unwrap().nlink, 3);
    assert_eq!(ns.get(b.ino).unwrap().nlink, 3);
    assert_eq!(ns.get(a.ino).unwrap().parent, b.ino);
    // Exchange a file and a directory.
    ns.rename(b.ino, b"x", b.ino, b"a2", false, true).unwrap();
    assert_eq!(ns.lookup(b.ino, b"x").unwrap().ino, a.ino);
    ns.rename(b.ino, b"x", ROOT, b"back", false, false).unwrap();
    assert_eq!(ns.get(ROOT).unwrap().nlink, 4);
    assert_eq!(ns.get(b.ino).unwrap().nlink, 2);
}

#[test]
fn unlinked_open_file_lives_until_release() {
    let (_d, ns) = ns();
    let f = ns.create(ROOT, b"f", node(Kind::File), L, 2).unwrap();
    ns.opened(f.ino).unwrap();
    ns.unlink(ROOT, b"f").unwrap();
    assert_eq!(ns.get(f.ino).unwrap().nlink, 0);
    assert!(ns.released(f.ino).unwrap());
    assert!(ns.get(f.ino).is_err());
    assert_eq!(ns.sync().unwrap(), vec![f.object]);
}

#[test]
fn layouts_are_inherited_and_first_device_rotates() {
    let (_d, ns) = ns();
    let dir = ns.create(ROOT, b"d", node(Kind::Dir), L, 4).unwrap();
    let wide = Layout::new(131072, 3, 0);
    ns.set_layout(dir.ino, Some(wide)).unwrap();
    let sub = ns.create(dir.ino, b"s", node(Kind::Dir), L, 4).unwrap();
    assert_eq!(ns.inherited_layout(sub.ino, L), wide);
    let f1 = ns.create(sub.ino, b"1", node(Kind::File), wide, 4).unwrap();
    let f2 = ns.create(sub.ino, b"2", node(Kind::File), wide, 4).unwrap();
    assert_ne!(
        f1.layout.unwrap().first_device,
        f2.layout.unwrap().first_device
    );
    ns.note_write(f1.ino, 1).unwrap();
    assert_eq!(
        ns.set_layout(f1.ino, Some(L)).unwrap_err().errno(),
        libc::EBUSY
    );
    ns.set_layout(f2.ino, Some(L)).unwrap();
}

#[test]
fn a_removed_directory_lives_while_open() {
    let (_d, ns) = ns();
    let d = ns.create(ROOT, b"d", node(Kind::Dir), L, 2).unwrap();
    assert!(ns.open_dir(d.ino).unwrap().is_empty());
    ns.rmdir(ROOT, b"d").unwrap();
    assert_eq!(ns.get(d.ino).unwrap().nlink, 0);
    assert_eq!(ns.get(ROOT).unwrap().nlink, 2);
    assert!(ns.list(d.ino).unwrap().is_empty());
    let e = |r: Result<Inode>| r.unwrap_err().errno();
    assert_eq!(
        e(ns.create(d.ino, b"x", node(Kind::File), L, 2)),
        libc::ENOENT
    );
    ns.create(ROOT, b"f", node(Kind::File), L, 2).unwrap();
    assert_eq!(
        ns.rename(ROOT, b"f", d.ino, b"f", false, false)
            .unwrap_err()
            .errno(),
        libc::ENOENT
    );
    assert!(ns.released(d.ino).unwrap());
    assert!(ns.get(d.ino).is_err());
    // Open again after the inode is gone: ENOENT, no handle counted.
    assert_eq!(ns.opened(d.ino).unwrap_err().errno(), libc::ENOENT);
}

#[test]
fn rename_whiteout_leaves_a_whiteout() {
    let (_d, ns) = ns();
    let f = ns.create(ROOT, b"f", node(Kind::File), L, 2).unwrap();
    let how = RenameHow {
        whiteout: Some((7, 8)),
        ..RenameHow::default()
    };
    ns.rename_how(ROOT, b"f", ROOT, b"g", how).unwrap();
    assert_eq!(ns.lookup(ROOT, b"g").unwrap().ino, f.ino);
    let w = ns.lookup(ROOT, b"f").unwrap();
    assert_eq!(
        (w.kind, w.rdev, w.perm, w.uid, w.gid, w.nlink),
        (Kind::CharDev, 0, 0, 7, 8, 1)
    );
    let exchange = RenameHow {
        exchange: true,
        ..how
    };
    assert_eq!(
        ns.rename_how(ROOT, b"f", ROOT, b"g", exchange)
            .unwrap_err()
            .errno(),
        libc::EINVAL
    );
    // Refused renames leave nothing behind.
    let noreplace = RenameHow {
        noreplace: true,
        ..how
    };
    assert_eq!(
        ns.rename_how(ROOT, b"g", ROOT, b"f", noreplace)
            .unwrap_err()
            .errno(),
        libc::EEXIST
    );
    assert_eq!(ns.lookup(ROOT, b"g").unwrap().ino, f.ino);
}

#[test]
fn a_file_knows_its_current_names() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ns.redb");
    Namespace::format(&p, Uuid::new_v4(), 0, 0).unwrap();
    let sorted = |ns: &Namespace, ino| {
        let mut v = ns.names_of(ino);
        v.sort();
        v
    };
    let name = |dir: u64, n: &str| (dir, n.as_bytes().to_vec().into_boxed_slice());
    let (a, b, f) = {
        let ns = Namespace::open(&p).unwrap();
        let a = ns.create(ROOT, b"a", node(Kind::Dir), L, 2).unwrap().ino;
        let b = ns.create(ROOT, b"b", node(Kind::Dir), L, 2).unwrap().ino;
        let f = ns.create(a, b"f", node(Kind::File), L, 2).unwrap().ino;
        assert_eq!(ns.names_of(f), [name(a, "f")]);
        ns.link(f, b, b"g").unwrap();
        assert_eq!(sorted(&ns, f), [name(a, "f"), name(b, "g")]);
        // The first name goes: the file is named in b only (its parent field still says a).
        ns.unlink(a, b"f").unwrap();
        assert_eq!(ns.names_of(f), [name(b, "g")]);
        ns.rename(b, b"g", ROOT, b"top", false, false).unwrap();
        assert_eq!(ns.names_of(f), [name(ROOT, "top")]);
        ns.link(f, a, b"again").unwrap();
        // A rename over one of its names elsewhere replaces that one.
        let other = ns.create(b, b"o", node(Kind::File), L, 2).unwrap().ino;
        ns.rename(b, b"o", a, b"again", false, false).unwrap();
        assert_eq!(ns.names_of(f), [name(ROOT, "top")]);
        assert_eq!(ns.names_of(other), [name(a, "again")]);
        ns.link(f, b, b"h").unwrap();
        ns.sync().unwrap();
        (a, b, f)
    };
    // Built again from the entries at the next open.
    let ns = Namespace::open(&p).unwrap();
    assert_eq!(sorted(&ns, f), [name(ROOT, "top"), name(b, "h")]);
    assert!(ns.names_of(a).is_empty(), "directories are not indexed");
    // Open after its last name went: that name, until released.
    ns.opened(f).unwrap();
    ns.unlink(ROOT, b"top").unwrap();
    ns.unlink(b, b"h").unwrap();
    assert_eq!(ns.names_of(f), [name(b, "h")]);
    ns.released(f).unwrap();
    assert!(ns.names_of(f).is_empty());
    assert_eq!(ns.folders_above(b), [b, ROOT]);
}

#[test]
fn the_mount_policy_reads_back_as_set() {
    let cell = super::PolicyCell::default();
    assert!(matches!(cell.get().atime, mountcfg::Atime::Relatime));
    for atime in [
        mountcfg::Atime::Relatime,
        mountcfg::Atime::Strict,
        mountcfg::Atime::Never,
    ] {
        for nodiratime in [false, true] {
            for durable_changes in [false, true] {
                let p = Policy {
                    atime,
                    nodiratime,
                    durable_changes,
                };
                cell.set(p);
                let back = cell.get();
                assert_eq!(
                    (back.atime, back.nodiratime, back.durable_changes),
                    (atime, nodiratime, durable_changes)
                );
            }
        }
    }
}
