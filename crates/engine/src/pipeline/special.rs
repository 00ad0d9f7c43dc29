//! Special files (FIFOs, sockets, devices) between the store's [`Special`] and the wire's
//! forms: a batch's [`sprat_proto::EntryKind::Special`] and a listing's
//! [`sprat_proto::namespace::NsKind::Special`] entry.

use sprat_proto::namespace::NsEntry;
use sprat_proto::SpecialKind;
use sprat_store::Special;

/// `special` as a batch entry carries it: its kind, and a device's major and minor number.
pub(crate) fn to_wire(special: Special) -> (SpecialKind, (u32, u32)) {
    match special {
        Special::Fifo => (SpecialKind::Fifo, (0, 0)),
        Special::Socket => (SpecialKind::Socket, (0, 0)),
        Special::CharDevice { major, minor } => (SpecialKind::CharDevice, (major, minor)),
        Special::BlockDevice { major, minor } => (SpecialKind::BlockDevice, (major, minor)),
    }
}

/// The special file a batch entry of `kind` and device number `major`, `minor` describes.
pub(crate) fn from_wire(kind: SpecialKind, major: u32, minor: u32) -> Special {
    match kind {
        SpecialKind::Fifo => Special::Fifo,
        SpecialKind::Socket => Special::Socket,
        SpecialKind::CharDevice => Special::CharDevice { major, minor },
        SpecialKind::BlockDevice => Special::BlockDevice { major, minor },
    }
}

/// The special file a listed entry is (`None`: not one, or of a type this side does not know).
pub(crate) fn of_listed(e: &NsEntry) -> Option<Special> {
    e.special()
        .map(|(kind, major, minor)| from_wire(kind, major, minor))
}

/// The `mode` and `size` a listing gives `special` with permission bits `perm`.
pub(crate) fn listed_fields(special: Special, perm: u32) -> (u32, u64) {
    let (kind, number) = to_wire(special);
    NsEntry::special_fields(kind, perm, number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprat_proto::namespace::NsKind;

    #[test]
    fn every_special_file_survives_a_batch_and_a_listing() {
        for s in [
            Special::Fifo,
            Special::Socket,
            Special::CharDevice { major: 1, minor: 3 },
            Special::BlockDevice {
                major: 259,
                minor: 1 << 20,
            },
        ] {
            let (kind, (major, minor)) = to_wire(s);
            assert_eq!(from_wire(kind, major, minor), s);
            let (mode, size) = listed_fields(s, 0o640);
            assert_eq!(mode & 0o7777, 0o640);
            let listed = NsEntry {
                path: b"x".to_vec(),
                kind: NsKind::Special,
                size,
                mode,
                mtime_sec: 0,
                mtime_nsec: 0,
                target: Vec::new(),
                owner: None,
            };
            assert_eq!(of_listed(&listed), Some(s));
        }
    }
}
