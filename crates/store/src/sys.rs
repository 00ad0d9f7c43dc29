//! The few storage system interfaces that need `unsafe`: where a file's data lies on the device
//! (the FIEMAP ioctl) and many reads in flight at once through one io_uring.
//!
//! Everything else in the storage layer goes through rustix's safe wrappers. Callers see safe
//! functions: buffers handed to the kernel are owned here until every operation on them has
//! completed.
#![allow(unsafe_code)]

use io_uring::{opcode, types, IoUring};
use rustix::io::Errno;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

/// `FS_IOC_FIEMAP`: `_IOWR('f', 11, struct fiemap)`, with `struct fiemap` of 32 bytes.
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
/// Extent flags meaning "no usable physical address".
const FIEMAP_EXTENT_UNKNOWN: u32 = 0x2;
const FIEMAP_EXTENT_DELALLOC: u32 = 0x4;

/// `struct fiemap` with room for one extent (`struct fiemap_extent`, 56 bytes).
#[repr(C)]
#[derive(Default)]
struct FiemapOne {
    fm_start: u64,
    fm_length: u64,
    fm_flags: u32,
    fm_mapped_extents: u32,
    fm_extent_count: u32,
    fm_reserved: u32,
    fe_logical: u64,
    fe_physical: u64,
    fe_length: u64,
    fe_reserved64: [u64; 2],
    fe_flags: u32,
    fe_reserved: [u32; 3],
}

/// The physical byte address where the data of `fd` at `offset` starts (its first extent at
/// or after `offset`), or `None` when the file has no mapped data or the address is not known
/// yet (delayed allocation). `EOPNOTSUPP`/`ENOTTY` mean the file system has no FIEMAP.
pub fn physical_address(fd: BorrowedFd<'_>, offset: u64) -> Result<Option<u64>, Errno> {
    let mut map = FiemapOne {
        fm_start: offset,
        fm_length: u64::MAX - offset,
        fm_extent_count: 1,
        ..FiemapOne::default()
    };
    // SAFETY: `map` is a properly laid out `struct fiemap` followed by room for exactly
    // `fm_extent_count` (1) extents, and it outlives the call; the kernel writes only within it.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), FS_IOC_FIEMAP, &mut map as *mut FiemapOne) };
    if ret < 0 {
        return Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ));
    }
    let unknown = map.fe_flags & (FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC) != 0;
    if map.fm_mapped_extents == 0 || unknown {
        return Ok(None);
    }
    Ok(Some(
        map.fe_physical + offset.saturating_sub(map.fe_logical),
    ))
}

/// One read of a batch: up to `len` bytes of `fd` from `file_offset`, into the batch buffer at
/// `buf_offset`. The caller keeps `fd` open until the read has completed.
#[derive(Debug, Clone)]
pub struct ReadRequest {
    pub fd: RawFd,
    pub file_offset: u64,
    pub buf_offset: usize,
    pub len: usize,
    /// Bytes read so far (less than `len` after the end of the file).
    pub done: usize,
    pub error: Option<Errno>,
}

/// An io_uring that reads whole batches with many reads in flight.
pub struct UringReader {
    ring: IoUring,
    depth: usize,
}

impl UringReader {
    /// A ring with `depth` entries; an error when the kernel has no io_uring or forbids it.
    pub fn new(depth: u32) -> Result<UringReader, Errno> {
        let ring = IoUring::new(depth)
            .map_err(|e| Errno::from_raw_os_error(e.raw_os_error().unwrap_or(libc::ENOSYS)))?;
        Ok(UringReader {
            ring,
            depth: depth as usize,
        })
    }

    /// Performs every request into `buf` (each read resubmitted until `len` bytes arrived, the
    /// file ended, or it failed) and returns the buffer. On a failure of the ring itself the
    /// buffer cannot be returned (reads may still land in it) and is deliberately leaked.
    pub fn read_all(
        &mut self,
        requests: &mut [ReadRequest],
        mut buf: Vec<u8>,
    ) -> Result<Vec<u8>, Errno> {
        for r in requests.iter() {
            if r.buf_offset.saturating_add(r.len) > buf.len() || r.len > u32::MAX as usize {
                return Err(Errno::INVAL);
            }
        }
        let mut next = 0;
        let mut in_flight = 0usize;
        // Requests to (re)submit, by index: first all, then the ones a short read left open.
        let mut pending: Vec<usize> = Vec::new();
        loop {
            {
                let mut sq = self.ring.submission();
                while in_flight < self.depth {
                    let i = match pending.pop() {
                        Some(i) => i,
                        None if next < requests.len() => {
                            next += 1;
                            next - 1
                        }
                        None => break,
                    };
                    let r = &requests[i];
                    let remaining = r.len - r.done;
                    if remaining == 0 {
                        continue;
                    }
                    // SAFETY: `buf_offset + len <= buf.len()` was checked above, so the target
                    // range lies inside `buf`, which is neither moved, resized nor dropped
                    // until every read in flight has completed (the loop below waits for all
                    // of them; on a ring failure `buf` is leaked instead of freed).
                    let target = unsafe { buf.as_mut_ptr().add(r.buf_offset + r.done) };
                    let entry = opcode::Read::new(types::Fd(r.fd), target, remaining as u32)
                        .offset(r.file_offset + r.done as u64)
                        .build()
                        .user_data(i as u64);
                    // SAFETY: the entry's buffer stays valid until completion (see above) and
                    // `r.fd` is kept open by the caller for the duration of this call.
                    if unsafe { sq.push(&entry) }.is_err() {
                        pending.push(i);
                        break;
                    }
                    in_flight += 1;
                }
            }
            if in_flight == 0 {
                return Ok(buf);
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) => {}
                Err(e) => {
                    std::mem::forget(buf);
                    return Err(Errno::from_raw_os_error(
                        e.raw_os_error().unwrap_or(libc::EIO),
                    ));
                }
            }
            for cqe in self.ring.completion() {
                in_flight -= 1;
                let Some(r) = requests.get_mut(cqe.user_data() as usize) else {
                    continue;
                };
                let res = cqe.result();
                if res == -libc::EINTR || res == -libc::EAGAIN {
                    pending.push(cqe.user_data() as usize);
                } else if res < 0 {
                    r.error = Some(Errno::from_raw_os_error(-res));
                } else if res == 0 {
                    // End of file: the file is shorter than planned.
                    r.len = r.done;
                } else {
                    r.done += res as usize;
                    if r.done < r.len {
                        pending.push(cqe.user_data() as usize);
                    }
                }
            }
        }
    }
}
