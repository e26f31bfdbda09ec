//! POSIX ACLs in the form the kernel passes them (the `system.posix_acl_access` and
//! `system.posix_acl_default` xattrs), and the rules ext4 applies to them: the mode an access
//! ACL implies, chmod rewriting the ACL, and a new node's ACL from its directory's default.
//! With FUSE_POSIX_ACL the kernel enforces ACLs and leaves these rules to the daemon.

pub const ACCESS: &[u8] = b"system.posix_acl_access";
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    tag: u16,
    perm: u16,
    id: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl(Vec<Entry>);

/// Whether `name` is one of the two ACL xattrs.
pub fn is_acl(name: &[u8]) -> bool {
    name == ACCESS || name == DEFAULT
}

impl Acl {
    /// The xattr form: a version header and (tag, perm, id) entries, little-endian. An ACL
    /// the kernel would refuse (posix_acl_valid) is None.
    pub fn parse(bytes: &[u8]) -> Option<Acl> {
        let (head, rest) = bytes.split_first_chunk::<4>()?;
        if u32::from_le_bytes(*head) != VERSION || rest.is_empty() || rest.len() % 8 != 0 {
            return None;
        }
        let entries: Vec<Entry> = rest
            .chunks_exact(8)
            .map(|e| Entry {
                tag: u16::from_le_bytes([e[0], e[1]]),
                perm: u16::from_le_bytes([e[2], e[3]]),
                id: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            })
            .collect();
        let count = |tag| entries.iter().filter(|e| e.tag == tag).count();
        let named = count(USER) + count(GROUP);
        let valid = entries.iter().all(|e| {
            e.perm & !7 == 0 && matches!(e.tag, USER_OBJ | USER | GROUP_OBJ | GROUP | MASK | OTHER)
        }) && count(USER_OBJ) == 1
            && count(GROUP_OBJ) == 1
            && count(OTHER) == 1
            && count(MASK) <= 1
            && (named == 0 || count(MASK) == 1);
        valid.then_some(Acl(entries))
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = VERSION.to_le_bytes().to_vec();
        for e in &self.0 {
            out.extend_from_slice(&e.tag.to_le_bytes());
            out.extend_from_slice(&e.perm.to_le_bytes());
            out.extend_from_slice(&e.id.to_le_bytes());
        }
        out
    }

    fn perm(&self, tag: u16) -> Option<u16> {
        self.0.iter().find(|e| e.tag == tag).map(|e| e.perm)
    }

    /// True if the mode bits say all the ACL says (no named entries, no mask): ext4 then
    /// keeps no ACL.
    pub fn is_mode(&self) -> bool {
        self.0
            .iter()
            .all(|e| matches!(e.tag, USER_OBJ | GROUP_OBJ | OTHER))
    }

    /// The permission bits (0777) an access ACL gives the file: owner, mask (else owning
    /// group), other (posix_acl_equiv_mode).
    pub fn mode(&self) -> u16 {
        let group = self.perm(MASK).or(self.perm(GROUP_OBJ)).unwrap_or_default();
        self.perm(USER_OBJ).unwrap_or_default() << 6 | group << 3 | self.perm(OTHER).unwrap_or(0)
    }

    /// chmod on a file with an access ACL: owner, mask (else owning group) and other follow
    /// the new mode (posix_acl_chmod).
    pub fn chmod(&mut self, mode: u16) {
        let has_mask = self.perm(MASK).is_some();
        for e in &mut self.0 {
            match e.tag {
                USER_OBJ => e.perm = (mode >> 6) & 7,
                MASK => e.perm = (mode >> 3) & 7,
                GROUP_OBJ if !has_mask => e.perm = (mode >> 3) & 7,
                OTHER => e.perm = mode & 7,
                _ => {}
            }
        }
    }

    /// A new node under a directory with this default ACL, asked with `mode` (the umask does
    /// not apply): the ACL and mode both narrow to what the other allows (posix_acl_create).
    /// Returns the node's access ACL, or None when its mode says everything.
    pub fn inherit(&self, mode: &mut u16) -> Option<Acl> {
        let mut acl = self.clone();
        let mut m = *mode & 0o777;
        let has_mask = acl.perm(MASK).is_some();
        for e in &mut acl.0 {
            match e.tag {
                USER_OBJ => {
                    e.perm &= m >> 6;
                    m &= e.perm << 6 | 0o077;
                }
                OTHER => {
                    e.perm &= m & 7;
                    m &= e.perm | 0o770;
                }
                MASK => {
                    e.perm &= (m >> 3) & 7;
                    m &= e.perm << 3 | 0o707;
                }
                GROUP_OBJ if !has_mask => {
                    e.perm &= (m >> 3) & 7;
                    m &= e.perm << 3 | 0o707;
                }
                _ => {}
            }
        }
        *mode = (*mode & !0o777) | m;
        (!acl.is_mode()).then_some(acl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(u16, u16, u32)]) -> Acl {
        Acl(entries
            .iter()
            .map(|&(tag, perm, id)| Entry { tag, perm, id })
            .collect())
    }

    const NONE: u32 = u32::MAX;

    #[test]
    fn acls_parse_print_and_give_a_mode() {
        let a = acl(&[
            (USER_OBJ, 6, NONE),
            (USER, 0, 1001),
            (GROUP_OBJ, 4, NONE),
            (MASK, 4, NONE),
            (OTHER, 4, NONE),
        ]);
        assert_eq!(Acl::parse(&a.to_bytes()), Some(a.clone()));
        assert_eq!(a.mode(), 0o644);
        assert!(!a.is_mode());
        let plain = acl(&[(USER_OBJ, 7, NONE), (GROUP_OBJ, 5, NONE), (OTHER, 0, NONE)]);
        assert!(plain.is_mode());
        assert_eq!(plain.mode(), 0o750);
        // Refused: a named entry without a mask, no owner entry, a bad version or length.
        let no_mask = acl(&[
            (USER_OBJ, 6, NONE),
            (USER, 0, 1001),
            (GROUP_OBJ, 4, NONE),
            (OTHER, 4, NONE),
        ]);
        assert_eq!(Acl::parse(&no_mask.to_bytes()), None);
        assert_eq!(
            Acl::parse(&acl(&[(GROUP_OBJ, 4, NONE), (OTHER, 4, NONE)]).to_bytes()),
            None
        );
        let mut bad = a.to_bytes();
        bad[0] = 1;
        assert_eq!(Acl::parse(&bad), None);
        assert_eq!(Acl::parse(&a.to_bytes()[..10]), None);
    }

    #[test]
    fn chmod_moves_the_mask_and_inheritance_narrows_both_ways() {
        let mut a = acl(&[
            (USER_OBJ, 6, NONE),
            (USER, 7, 1001),
            (GROUP_OBJ, 4, NONE),
            (MASK, 7, NONE),
            (OTHER, 4, NONE),
        ]);
        a.chmod(0o640);
        assert_eq!(a.perm(MASK), Some(4));
        assert_eq!(a.perm(GROUP_OBJ), Some(4));
        assert_eq!(a.perm(OTHER), Some(0));
        assert_eq!(a.mode(), 0o640);
        // A default ACL giving user 1001 rwx: a file asked as 0666 gets mask rw-, mode 0664
        // (the default's other r-- narrows other).
        let d = acl(&[
            (USER_OBJ, 7, NONE),
            (USER, 7, 1001),
            (GROUP_OBJ, 5, NONE),
            (MASK, 7, NONE),
            (OTHER, 5, NONE),
        ]);
        let mut mode = 0o100666;
        let got = d.inherit(&mut mode).unwrap();
        assert_eq!(mode, 0o100664);
        assert_eq!(got.perm(MASK), Some(6));
        assert_eq!(got.perm(USER), Some(7));
        assert_eq!(got.mode(), 0o664);
        // A default that says no more than a mode: no access ACL, the mode narrowed.
        let plain = acl(&[(USER_OBJ, 7, NONE), (GROUP_OBJ, 0, NONE), (OTHER, 0, NONE)]);
        let mut mode = 0o755;
        assert_eq!(plain.inherit(&mut mode), None);
        assert_eq!(mode, 0o700);
    }
}
