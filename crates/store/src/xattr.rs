//! Extended attributes (`-X`) and POSIX ACLs (`-A`, which Linux keeps as the extended
//! attributes `system.posix_acl_access` and `system.posix_acl_default`): read from an open
//! file or directory, or from a FIFO, socket or device that is never opened ([`Unopened`]),
//! and made on one exactly as listed within a scope.
//!
//! A scope is a set of namespaces ([`USER`], [`SYSTEM`], [`ACL`]; the same bits as the
//! protocol's): what is read is only what the scope covers, and applying a list makes the
//! item's attributes in that scope exactly the list, removing the others there and leaving
//! every attribute outside it alone. ACLs are copied as the kernel's binary form, not
//! translated (a copy between Linux hosts; rsync translates between systems, sprat does not).
//! What this module does not decide: which scope a copy asks for, and what a writer that is
//! not root may set ([`crate::TreeWriter::xattrs`]).

use rustix::fs::XattrFlags;
use rustix::io::Errno;
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};

/// What attributes are read from and set on.
pub trait Target {
    fn list(&self, buf: &mut [u8]) -> Result<usize, Errno>;
    fn get(&self, name: &OsStr, buf: &mut [u8]) -> Result<usize, Errno>;
    fn set(&self, name: &OsStr, value: &[u8]) -> Result<(), Errno>;
    fn remove(&self, name: &OsStr) -> Result<(), Errno>;
}

/// An open file or directory.
impl<T: AsFd> Target for T {
    fn list(&self, buf: &mut [u8]) -> Result<usize, Errno> {
        rustix::fs::flistxattr(self, buf)
    }
    fn get(&self, name: &OsStr, buf: &mut [u8]) -> Result<usize, Errno> {
        rustix::fs::fgetxattr(self, name, buf)
    }
    fn set(&self, name: &OsStr, value: &[u8]) -> Result<(), Errno> {
        rustix::fs::fsetxattr(self, name, value, XattrFlags::empty())
    }
    fn remove(&self, name: &OsStr) -> Result<(), Errno> {
        rustix::fs::fremovexattr(self, name)
    }
}

/// A FIFO, socket or device, whose attributes are read and set without opening it (which
/// would run a device's driver or wait on a FIFO): through its `O_PATH` descriptor's name in
/// `/proc/self/fd`, which the kernel resolves to the very inode.
pub struct Unopened {
    _fd: OwnedFd,
    proc: String,
}

impl Unopened {
    /// The item open as `fd` with `O_PATH`.
    pub fn new(fd: OwnedFd) -> Unopened {
        let proc = crate::regular::proc_path(&fd);
        Unopened { _fd: fd, proc }
    }

    /// The item `name` in `dir`, not following a symlink.
    pub fn at(dir: impl AsFd, name: &[u8]) -> Result<Unopened, Errno> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        Ok(Unopened::new(rustix::fs::openat(
            dir,
            os(name),
            flags,
            Mode::empty(),
        )?))
    }
}

impl Target for Unopened {
    fn list(&self, buf: &mut [u8]) -> Result<usize, Errno> {
        rustix::fs::listxattr(self.proc.as_str(), buf)
    }
    fn get(&self, name: &OsStr, buf: &mut [u8]) -> Result<usize, Errno> {
        rustix::fs::getxattr(self.proc.as_str(), name, buf)
    }
    fn set(&self, name: &OsStr, value: &[u8]) -> Result<(), Errno> {
        rustix::fs::setxattr(self.proc.as_str(), name, value, XattrFlags::empty())
    }
    fn remove(&self, name: &OsStr) -> Result<(), Errno> {
        rustix::fs::removexattr(self.proc.as_str(), name)
    }
}

/// `user.*`.
pub const USER: u8 = 1;
/// `trusted.*` and `security.*` (read and written only by root).
pub const SYSTEM: u8 = 2;
/// `system.posix_acl_access` and `system.posix_acl_default`.
pub const ACL: u8 = 4;

/// Most bytes of one item's attributes, names and values together (the protocol's cap).
pub const MAX_BYTES: usize = 64 << 10;

/// An item's extended attributes: (name, value) pairs sorted by name.
pub type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// The scope bit of `name` (0: a name no scope covers, never copied).
pub fn scope_of(name: &[u8]) -> u8 {
    if name.starts_with(b"user.") {
        USER
    } else if name.starts_with(b"trusted.") || name.starts_with(b"security.") {
        SYSTEM
    } else if name == b"system.posix_acl_access" || name == b"system.posix_acl_default" {
        ACL
    } else {
        0
    }
}

/// Why an item's attributes could not be read whole.
#[derive(Debug)]
pub enum ReadError {
    Os(Errno),
    /// More than [`MAX_BYTES`] in the scope.
    TooLarge(usize),
}

/// The names of `fd`'s attributes (a NUL-separated list).
fn names(fd: &impl Target) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; 4096];
    loop {
        match fd.list(&mut buf[..]) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(Errno::RANGE) if buf.len() < 2 * MAX_BYTES => buf.resize(buf.len() * 4, 0),
            Err(e) => return Err(e),
        }
    }
}

/// The value of `name` on `fd`; `None` if it went away meanwhile.
fn value(fd: &impl Target, name: &[u8]) -> Result<Option<Vec<u8>>, ReadError> {
    let name = os(name);
    let mut buf = vec![0u8; 256];
    loop {
        match fd.get(name, &mut buf[..]) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(Some(buf));
            }
            Err(Errno::RANGE) if buf.len() < MAX_BYTES => {
                buf.resize((buf.len() * 16).min(MAX_BYTES), 0)
            }
            Err(Errno::RANGE) => return Err(ReadError::TooLarge(buf.len())),
            Err(Errno::NODATA) => return Ok(None),
            Err(e) => return Err(ReadError::Os(e)),
        }
    }
}

/// Reads the attributes of `fd` that `scope` covers, sorted by name. A file system without
/// extended attributes has none.
pub fn read(fd: &impl Target, scope: u8) -> Result<Xattrs, ReadError> {
    let list = match names(fd) {
        Ok(list) => list,
        Err(Errno::NOTSUP) => return Ok(Vec::new()),
        Err(e) => return Err(ReadError::Os(e)),
    };
    let mut out = Vec::new();
    let mut total = 0usize;
    for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        if scope & scope_of(name) == 0 {
            continue;
        }
        if let Some(v) = value(fd, name)? {
            total += name.len() + v.len();
            if total > MAX_BYTES {
                return Err(ReadError::TooLarge(total));
            }
            out.push((name.to_vec(), v));
        }
    }
    out.sort();
    Ok(out)
}

/// Makes the attributes of `fd` in `scope` exactly `wanted` (names outside `scope` in it
/// are skipped). `fresh`: `fd` is a file this writer just created, which can have no
/// attributes of its own but an access ACL inherited from its directory's default ACL:
/// nothing is listed, only that ACL removed when the scope covers ACLs and `wanted` has none.
pub fn apply<'a>(
    fd: &impl Target,
    scope: u8,
    wanted: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    fresh: bool,
) -> Result<(), Errno> {
    let in_scope = |n: &[u8]| scope & scope_of(n) != 0;
    if fresh {
        if scope & ACL != 0 && !wanted.clone().any(|(n, _)| n == b"system.posix_acl_access") {
            match fd.remove(OsStr::new("system.posix_acl_access")) {
                Ok(()) | Err(Errno::NODATA | Errno::NOTSUP) => {}
                Err(e) => return Err(e),
            }
        }
    } else {
        let present = match read(fd, scope) {
            Ok(p) => p,
            Err(ReadError::Os(e)) => return Err(e),
            // Too many to read back: replace them all.
            Err(ReadError::TooLarge(_)) => Vec::new(),
        };
        for (name, v) in &present {
            match wanted.clone().find(|(n, _)| n == name) {
                Some((_, w)) if w == v.as_slice() => continue,
                Some(_) => {}
                None => match fd.remove(os(name)) {
                    Ok(()) | Err(Errno::NODATA) => {}
                    Err(e) => return Err(e),
                },
            }
        }
        for (name, value) in wanted.clone().filter(|(n, _)| in_scope(n)) {
            let same = present.iter().any(|(n, v)| n == name && v == value);
            if !same {
                fd.set(os(name), value)?;
            }
        }
        return Ok(());
    }
    for (name, value) in wanted.filter(|(n, _)| in_scope(n)) {
        fd.set(os(name), value)?;
    }
    Ok(())
}

fn os(name: &[u8]) -> &std::ffi::OsStr {
    std::os::unix::ffi::OsStrExt::from_bytes(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn supported(dir: &std::path::Path) -> bool {
        let f = std::fs::File::create(dir.join("probe")).unwrap();
        rustix::fs::fsetxattr(&f, "user.probe", b"1", XattrFlags::empty()).is_ok()
    }

    #[test]
    fn a_list_is_applied_exactly_within_its_scope() {
        let dir = tempfile::tempdir().unwrap();
        if !supported(dir.path()) {
            eprintln!("no user xattrs here: skipped");
            return;
        }
        let f = std::fs::File::create(dir.path().join("f")).unwrap();
        let set = |n: &str, v: &[u8]| {
            rustix::fs::fsetxattr(&f, n, v, XattrFlags::empty()).unwrap();
        };
        set("user.keep", b"same");
        set("user.change", b"old");
        set("user.drop", b"x");
        let wanted: Vec<(&[u8], &[u8])> = vec![
            (b"user.add", b"new"),
            (b"user.change", b"new"),
            (b"user.keep", b"same"),
        ];
        apply(&f, USER, wanted.iter().copied(), false).unwrap();
        let got = read(&f, USER).unwrap();
        let want: Xattrs = vec![
            (b"user.add".to_vec(), b"new".to_vec()),
            (b"user.change".to_vec(), b"new".to_vec()),
            (b"user.keep".to_vec(), b"same".to_vec()),
        ];
        assert_eq!(got, want);
        // Outside the scope: nothing is read, nothing removed.
        assert!(read(&f, ACL).unwrap().is_empty());
        apply(&f, ACL, std::iter::empty(), false).unwrap();
        assert_eq!(read(&f, USER).unwrap().len(), 3);
    }

    #[test]
    fn more_than_the_cap_is_refused_when_read() {
        let dir = tempfile::tempdir().unwrap();
        if !supported(dir.path()) {
            return;
        }
        let f = std::fs::File::create(dir.path().join("f")).unwrap();
        let big = vec![7u8; 30_000];
        let mut stored = 0;
        for i in 0..3 {
            if rustix::fs::fsetxattr(&f, format!("user.b{i}").as_str(), &big, XattrFlags::empty())
                .is_ok()
            {
                stored += 1;
            }
        }
        if stored < 3 {
            // ext4 keeps at most a block of them: this file system cannot hold that many.
            return;
        }
        assert!(matches!(read(&f, USER), Err(ReadError::TooLarge(_))));
    }
}
