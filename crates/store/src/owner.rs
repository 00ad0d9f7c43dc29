//! Owners and groups by name: the sender's names for the ids it scanned, and the writing
//! side's ids for the names it was sent, each looked up once in the local user database
//! (`getpwuid_r`, `getgrgid_r`, `getpwnam_r`, `getgrnam_r`) and remembered.
//!
//! Whether ownership is applied at all is the writer's business ([`crate::TreeWriter::owners`]);
//! this module only translates. It is one of the two places in the storage layer with
//! `unsafe` (C calls into libc's name service), each block saying why it is sound.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::sync::Mutex;

/// Which database a lookup goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Db {
    Users,
    Groups,
}

/// Most bytes of the buffer a lookup may grow to (libc's answer `ERANGE` asks for more).
const MAX_LOOKUP_BUFFER: usize = 1 << 20;

/// The name of `id` in `db`, if the local database has one.
fn name_of(db: Db, id: u32) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 1024];
    loop {
        let mut result: *mut libc::c_void = std::ptr::null_mut();
        let (ret, name_ptr) = match db {
            Db::Users => {
                // SAFETY: a zeroed passwd is a valid value of a plain C struct; getpwuid_r
                // writes into it and into `buf` (whose length it is told), and sets `result`
                // to `&pwd` or null. `pw_name` points into `buf`, read before `buf` changes.
                let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
                let ret = unsafe {
                    libc::getpwuid_r(
                        id,
                        &mut pwd,
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        (&mut result as *mut *mut libc::c_void).cast(),
                    )
                };
                (ret, pwd.pw_name)
            }
            Db::Groups => {
                // SAFETY: as for users, with getgrgid_r and a zeroed group.
                let mut grp: libc::group = unsafe { std::mem::zeroed() };
                let ret = unsafe {
                    libc::getgrgid_r(
                        id,
                        &mut grp,
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        (&mut result as *mut *mut libc::c_void).cast(),
                    )
                };
                (ret, grp.gr_name)
            }
        };
        if ret == libc::ERANGE && buf.len() < MAX_LOOKUP_BUFFER {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if ret != 0 || result.is_null() || name_ptr.is_null() {
            return None;
        }
        // SAFETY: on success `name_ptr` is a NUL-terminated string inside `buf`, alive here.
        let name = unsafe { CStr::from_ptr(name_ptr) };
        return Some(name.to_bytes().to_vec());
    }
}

/// The id of `name` in `db`, if the local database has it.
fn id_of(db: Db, name: &[u8]) -> Option<u32> {
    let name = CString::new(name).ok()?;
    let mut buf = vec![0u8; 1024];
    loop {
        let mut result: *mut libc::c_void = std::ptr::null_mut();
        let (ret, id) = match db {
            Db::Users => {
                // SAFETY: as in `name_of`, with getpwnam_r; `name` is NUL-terminated.
                let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
                let ret = unsafe {
                    libc::getpwnam_r(
                        name.as_ptr(),
                        &mut pwd,
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        (&mut result as *mut *mut libc::c_void).cast(),
                    )
                };
                (ret, pwd.pw_uid)
            }
            Db::Groups => {
                // SAFETY: as in `name_of`, with getgrnam_r; `name` is NUL-terminated.
                let mut grp: libc::group = unsafe { std::mem::zeroed() };
                let ret = unsafe {
                    libc::getgrnam_r(
                        name.as_ptr(),
                        &mut grp,
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        (&mut result as *mut *mut libc::c_void).cast(),
                    )
                };
                (ret, grp.gr_gid)
            }
        };
        if ret == libc::ERANGE && buf.len() < MAX_LOOKUP_BUFFER {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        return (ret == 0 && !result.is_null()).then_some(id);
    }
}

/// Most ids a sender's [`NameCache`] keeps before it starts again.
const MAX_CACHED: usize = 4096;

/// Most distinct names a writer looks up ([`LocalIds`]): a peer sending endless distinct
/// names costs no more lookups and memory than this; names beyond it keep their numeric id.
pub const MAX_NAMES_LOOKED_UP: usize = 16_384;

/// A sender's names for the ids it scanned, each looked up once.
#[derive(Debug, Default)]
pub struct NameCache {
    users: HashMap<u32, Option<Vec<u8>>>,
    groups: HashMap<u32, Option<Vec<u8>>>,
}

impl NameCache {
    /// The local name of user `uid`, if it has one.
    pub fn user(&mut self, uid: u32) -> Option<&[u8]> {
        cached_name(&mut self.users, Db::Users, uid)
    }

    /// The local name of group `gid`, if it has one.
    pub fn group(&mut self, gid: u32) -> Option<&[u8]> {
        cached_name(&mut self.groups, Db::Groups, gid)
    }
}

fn cached_name(map: &mut HashMap<u32, Option<Vec<u8>>>, db: Db, id: u32) -> Option<&[u8]> {
    if map.len() >= MAX_CACHED && !map.contains_key(&id) {
        map.clear();
    }
    map.entry(id).or_insert_with(|| name_of(db, id)).as_deref()
}

/// The writing side's ids for the names a sender gave, each looked up once; a name the
/// local database does not know keeps the sender's numeric id, as rsync does (and so does
/// every name after the first [`MAX_NAMES_LOOKED_UP`]).
#[derive(Debug, Default)]
pub struct LocalIds {
    users: Mutex<HashMap<Vec<u8>, Option<u32>>>,
    groups: Mutex<HashMap<Vec<u8>, Option<u32>>>,
}

impl LocalIds {
    /// The local uid for the sender's `uid` named `name` (the id itself without a name or
    /// when the name is unknown here).
    pub fn uid(&self, uid: u32, name: Option<&[u8]>) -> u32 {
        name.and_then(|n| cached_id(&self.users, Db::Users, n))
            .unwrap_or(uid)
    }

    /// The local gid for the sender's `gid` named `name` (as [`LocalIds::uid`]).
    pub fn gid(&self, gid: u32, name: Option<&[u8]>) -> u32 {
        name.and_then(|n| cached_id(&self.groups, Db::Groups, n))
            .unwrap_or(gid)
    }
}

fn cached_id(map: &Mutex<HashMap<Vec<u8>, Option<u32>>>, db: Db, name: &[u8]) -> Option<u32> {
    let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(id) = map.get(name) {
        return *id;
    }
    if map.len() >= MAX_NAMES_LOOKED_UP {
        return None;
    }
    let id = id_of(db, name);
    map.insert(name.to_vec(), id);
    id
}

/// Whether this process runs as root (effective uid 0): only then are owners set.
pub fn running_as_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_named_both_ways() {
        let mut names = NameCache::default();
        assert_eq!(names.user(0), Some(&b"root"[..]));
        assert_eq!(names.group(0), Some(&b"root"[..]));
        let ids = LocalIds::default();
        assert_eq!(ids.uid(1234, Some(b"root")), 0);
        assert_eq!(ids.gid(1234, Some(b"root")), 0);
    }

    #[test]
    fn unknown_names_and_ids_fall_back_to_the_number() {
        let mut names = NameCache::default();
        assert_eq!(names.user(3_999_999_999), None);
        let ids = LocalIds::default();
        assert_eq!(ids.uid(4321, Some(b"no-such-user-sprat")), 4321);
        assert_eq!(ids.gid(4321, None), 4321);
        assert_eq!(ids.uid(7, Some(b"bad\0name")), 7);
    }
}
