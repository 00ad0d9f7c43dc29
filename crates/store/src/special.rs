//! Special files: FIFOs, sockets and character and block devices, which a copy recreates as
//! what they are (a name with a type, and for a device its number) and never opens.
//!
//! Anyone may create FIFOs and sockets; devices need root (`CAP_MKNOD`), and a device file
//! gives whoever may open it the device itself, so a writer creates them only where its
//! caller allows it (see [`crate::TreeWriter::devices`]).

use rustix::fs::FileType;

/// What kind of special file an entry is; a device with its major and minor number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    Fifo,
    Socket,
    CharDevice { major: u32, minor: u32 },
    BlockDevice { major: u32, minor: u32 },
}

impl Special {
    /// The special file of type `file_type` (a FIFO, a socket or a device of number
    /// `major`, `minor`); `None` for any other type.
    pub fn of(file_type: FileType, major: u32, minor: u32) -> Option<Special> {
        match file_type {
            FileType::Fifo => Some(Special::Fifo),
            FileType::Socket => Some(Special::Socket),
            FileType::CharacterDevice => Some(Special::CharDevice { major, minor }),
            FileType::BlockDevice => Some(Special::BlockDevice { major, minor }),
            _ => None,
        }
    }

    /// Its type as the kernel names it.
    pub fn file_type(self) -> FileType {
        match self {
            Special::Fifo => FileType::Fifo,
            Special::Socket => FileType::Socket,
            Special::CharDevice { .. } => FileType::CharacterDevice,
            Special::BlockDevice { .. } => FileType::BlockDevice,
        }
    }

    /// Its device number (0 for a FIFO or a socket).
    pub fn dev(self) -> rustix::fs::Dev {
        match self {
            Special::Fifo | Special::Socket => 0,
            Special::CharDevice { major, minor } | Special::BlockDevice { major, minor } => {
                rustix::fs::makedev(major, minor)
            }
        }
    }

    /// A character or block device (which only root creates).
    pub fn is_device(self) -> bool {
        matches!(
            self,
            Special::CharDevice { .. } | Special::BlockDevice { .. }
        )
    }

    /// What it is, in words (`FIFO`, `socket`, `character device 1,3`).
    pub fn describe(self) -> String {
        match self {
            Special::Fifo => "FIFO".into(),
            Special::Socket => "socket".into(),
            Special::CharDevice { major, minor } => format!("character device {major},{minor}"),
            Special::BlockDevice { major, minor } => format!("block device {major},{minor}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_keeps_its_number_and_other_types_are_not_special() {
        let d = Special::of(FileType::BlockDevice, 259, 70000).unwrap();
        assert_eq!(rustix::fs::major(d.dev()), 259);
        assert_eq!(rustix::fs::minor(d.dev()), 70000);
        assert_eq!(d.describe(), "block device 259,70000");
        assert!(d.is_device() && !Special::Fifo.is_device());
        assert_eq!(Special::of(FileType::RegularFile, 0, 0), None);
        assert_eq!(Special::Socket.file_type(), FileType::Socket);
    }
}
