//! Sparse writing: runs of zeros in the data written become holes, so a copy of a sparse file
//! takes no more blocks than its source.
//!
//! Only whole [`HOLE_BLOCK`]s aligned to the file's offsets count as zero runs (a file
//! system allocates in blocks); everything else is written as it is. A fresh file simply
//! skips its zero runs (and is given its size at the end); a file that may hold other bytes
//! there (a large file's preallocated or resumed partial file) has them punched out
//! (`FALLOC_FL_PUNCH_HOLE`), or written as zeros where the file system cannot punch.

use rustix::fs::{fallocate, ftruncate, FallocateFlags};
use rustix::io::Errno;
use std::os::fd::AsFd;

/// The unit of a hole: a run of zeros this long, at an offset that is a multiple of it.
pub const HOLE_BLOCK: usize = 4096;

/// A block of zeros to compare with.
static ZEROS: [u8; HOLE_BLOCK] = [0; HOLE_BLOCK];

/// Whether `block` (at most [`HOLE_BLOCK`] bytes) holds only zeros: one `memcmp`, which stops
/// at the first byte that is not zero.
fn all_zero(block: &[u8]) -> bool {
    block == &ZEROS[..block.len()]
}

/// Splits `data`, to be written at file offset `offset`, into runs: `(start, end, zero)`
/// with `start..end` indices into `data`; `zero` runs are whole aligned blocks of zeros.
pub fn runs(data: &[u8], offset: u64) -> Vec<(usize, usize, bool)> {
    let mut out: Vec<(usize, usize, bool)> = Vec::new();
    let mut push = |start: usize, end: usize, zero: bool| match out.last_mut() {
        Some(last) if last.2 == zero && last.1 == start => last.1 = end,
        _ => out.push((start, end, zero)),
    };
    let misalign = (offset % HOLE_BLOCK as u64) as usize;
    let mut pos = if misalign == 0 {
        0
    } else {
        (HOLE_BLOCK - misalign).min(data.len())
    };
    if pos > 0 {
        push(0, pos, false);
    }
    while pos < data.len() {
        let end = (pos + HOLE_BLOCK).min(data.len());
        let zero = end - pos == HOLE_BLOCK && all_zero(&data[pos..end]);
        push(pos, end, zero);
        pos = end;
    }
    out
}

/// Writes `data` at `offset` of `fd`, leaving holes for its zero runs. `fresh`: the file
/// holds nothing in that range yet (its zero runs are skipped, and the file is extended to
/// `offset + data.len()` when it ends in one); otherwise they are punched out.
pub fn write_at(
    fd: impl AsFd,
    data: &[u8],
    offset: u64,
    fresh: bool,
    write: impl Fn(&[u8], u64) -> Result<(), Errno>,
) -> Result<(), Errno> {
    let runs = runs(data, offset);
    let mut punch_works = true;
    for &(start, end, zero) in &runs {
        let at = offset + start as u64;
        if !zero {
            write(&data[start..end], at)?;
        } else if !fresh {
            let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
            let punched = punch_works
                && match fallocate(&fd, flags, at, (end - start) as u64) {
                    Ok(()) => true,
                    Err(Errno::OPNOTSUPP | Errno::NOSYS | Errno::INVAL) => false,
                    Err(e) => return Err(e),
                };
            if !punched {
                punch_works = false;
                write(&data[start..end], at)?;
            }
        }
    }
    if fresh && runs.last().is_some_and(|r| r.2) {
        ftruncate(&fd, offset + data.len() as u64)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_aligned_zero_blocks_are_runs_of_zeros() {
        let mut data = vec![0u8; 4 * HOLE_BLOCK];
        data[HOLE_BLOCK + 5] = 1;
        assert_eq!(
            runs(&data, 0),
            vec![
                (0, HOLE_BLOCK, true),
                (HOLE_BLOCK, 2 * HOLE_BLOCK, false),
                (2 * HOLE_BLOCK, 4 * HOLE_BLOCK, true)
            ]
        );
        // Misaligned by 100 bytes: the head up to the next block boundary is data, and so
        // is the partial tail.
        assert_eq!(
            runs(&data[..3 * HOLE_BLOCK], 100),
            vec![
                (0, 2 * HOLE_BLOCK - 100, false),
                (2 * HOLE_BLOCK - 100, 3 * HOLE_BLOCK - 100, true),
                (3 * HOLE_BLOCK - 100, 3 * HOLE_BLOCK, false),
            ]
        );
        assert_eq!(runs(&[], 0), vec![]);
        assert_eq!(runs(&[0; 10], 0), vec![(0, 10, false)]);
    }

    #[test]
    fn a_fresh_file_gets_holes_and_its_whole_size() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = std::fs::File::create(&path).unwrap();
        let mut data = vec![0u8; 1 << 20];
        data[..10].copy_from_slice(b"0123456789");
        write_at(&file, &data, 0, true, |d, at| {
            rustix::io::pwrite(&file, d, at).map(|_| ())
        })
        .unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), 1 << 20);
        assert!(meta.blocks() * 512 < 64 << 10, "{} blocks", meta.blocks());
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }
}
