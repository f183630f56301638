//! parse: fixed-size records sorted in bounded memory, for a reader whose
//! input is not in the order its consumer needs (a PyTorch profiler trace's
//! ranges, written as each ends). Records collect in a buffer of at most
//! `cap_bytes`; a full buffer is sorted and written to an anonymous
//! temporary file (a run), and [`Spill::sorted`] merges the runs with what
//! is still held. Memory: the buffer, plus 64 KiB per run while merging.
//! An input that fits in the buffer never touches the disk.
//!
//! `aggregate::runs` is the same idea for the (key, duration) pairs of the
//! region and kernel tables, packed for speed; this one takes any record
//! that can write itself in `BYTES` bytes.
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};

use crate::error::{Error, ErrorKind};

/// A record of a run file: its order is the sort's, its bytes fixed in size.
pub(crate) trait Record: Ord + Sized {
    const BYTES: usize;
    fn put(&self, out: &mut [u8]);
    fn get(bytes: &[u8]) -> Self;
}

pub(crate) struct Spill<T> {
    held: Vec<T>,
    cap: usize,
    files: Vec<File>,
    len: u64,
}

pub(crate) fn io_error(e: std::io::Error) -> Error {
    Error::new(ErrorKind::Internal, format!("a temporary file of records being sorted: {e}"))
        .with_hint("free space in the temporary directory (TMPDIR), or point TMPDIR elsewhere")
}

impl<T: Record> Spill<T> {
    /// A sorter that holds at most `cap_bytes` of records in memory.
    pub(crate) fn new(cap_bytes: usize) -> Spill<T> {
        Spill { held: Vec::new(), cap: (cap_bytes / std::mem::size_of::<T>().max(1)).max(2), files: Vec::new(), len: 0 }
    }

    pub(crate) fn push(&mut self, record: T) -> Result<(), Error> {
        if self.held.len() == self.held.capacity() && self.held.len() < self.cap {
            // Doubling would briefly hold the old buffer and one twice its
            // size; past a quarter of the cap, grow straight to it.
            let want = (self.held.len() * 2).max(1024);
            let want = if want > self.cap / 4 { self.cap } else { want };
            self.held.reserve_exact(want - self.held.len());
        }
        self.held.push(record);
        self.len += 1;
        if self.held.len() >= self.cap {
            self.spill()?;
        }
        Ok(())
    }

    /// Records pushed.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Runs written to disk so far.
    #[cfg(test)]
    pub(crate) fn spilled(&self) -> usize {
        self.files.len()
    }

    fn spill(&mut self) -> Result<(), Error> {
        self.held.sort_unstable();
        let mut w = BufWriter::with_capacity(1 << 16, tempfile::tempfile().map_err(io_error)?);
        let mut bytes = vec![0u8; T::BYTES];
        for r in self.held.drain(..) {
            r.put(&mut bytes);
            w.write_all(&bytes).map_err(io_error)?;
        }
        let mut f = w.into_inner().map_err(|e| io_error(e.into_error()))?;
        f.seek(SeekFrom::Start(0)).map_err(io_error)?;
        self.files.push(f);
        Ok(())
    }

    /// Write what is held as a run of its own where runs are on disk
    /// already, and free the buffer: the merge then holds 64 KiB per run,
    /// not the buffer beside them.
    pub(crate) fn release(&mut self) -> Result<(), Error> {
        if !self.files.is_empty() && !self.held.is_empty() {
            self.spill()?;
        }
        if !self.files.is_empty() {
            self.held = Vec::new();
        }
        Ok(())
    }

    /// Every record, in order.
    pub(crate) fn sorted(mut self) -> Result<Sorted<T>, Error> {
        self.held.sort_unstable();
        let mut sources: Vec<Source<T>> =
            self.files.into_iter().map(|f| Source::File(BufReader::with_capacity(1 << 16, f))).collect();
        sources.push(Source::Memory(std::mem::take(&mut self.held).into_iter()));
        let mut heap = BinaryHeap::with_capacity(sources.len());
        for (i, s) in sources.iter_mut().enumerate() {
            if let Some(r) = s.next().map_err(io_error)? {
                heap.push(Reverse((r, i)));
            }
        }
        Ok(Sorted { sources, heap })
    }
}

enum Source<T> {
    File(BufReader<File>),
    Memory(std::vec::IntoIter<T>),
}

impl<T: Record> Source<T> {
    fn next(&mut self) -> std::io::Result<Option<T>> {
        match self {
            Source::Memory(it) => Ok(it.next()),
            Source::File(r) => {
                let mut b = [0u8; 64];
                let b = &mut b[..T::BYTES];
                match r.read_exact(b) {
                    Ok(()) => Ok(Some(T::get(b))),
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
                    Err(e) => Err(e),
                }
            }
        }
    }
}

/// The merge of the runs: records in order.
pub(crate) struct Sorted<T> {
    sources: Vec<Source<T>>,
    heap: BinaryHeap<Reverse<(T, usize)>>,
}

impl<T: Record> Sorted<T> {
    pub(crate) fn pop(&mut self) -> Result<Option<T>, Error> {
        let Some(Reverse((_, i))) = self.heap.peek() else { return Ok(None) };
        let i = *i;
        let next = self.sources[i].next().map_err(io_error)?;
        // The smallest is replaced by its source's next in place: one sift
        // down, where a pop and a push would take two.
        let mut top = self.heap.peek_mut().expect("peeked above");
        let Reverse((record, _)) = match next {
            Some(r) => std::mem::replace(&mut *top, Reverse((r, i))),
            None => std::collections::binary_heap::PeekMut::pop(top),
        };
        Ok(Some(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    struct Pair(i64, u32);

    impl Record for Pair {
        const BYTES: usize = 12;
        fn put(&self, out: &mut [u8]) {
            out[..8].copy_from_slice(&self.0.to_le_bytes());
            out[8..12].copy_from_slice(&self.1.to_le_bytes());
        }
        fn get(b: &[u8]) -> Self {
            Pair(i64::from_le_bytes(b[..8].try_into().unwrap()), u32::from_le_bytes(b[8..12].try_into().unwrap()))
        }
    }

    /// Spilled runs merge into the order of one sort in memory, with
    /// repeated keys, negative values, an empty input and a cap that never
    /// fills.
    #[test]
    fn records_come_out_as_one_sort_in_memory_would_give_them() {
        for (n, cap_records) in [(0, 4), (1, 4), (300, 7), (300, 64), (300, 1000), (5000, 256)] {
            let mut spill = Spill::new(cap_records * std::mem::size_of::<Pair>());
            let mut want = Vec::new();
            let mut x: u64 = 7;
            for i in 0..n {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let p = Pair((x >> 54) as i64 - 512, i as u32 % 13);
                spill.push(p).unwrap();
                want.push(p);
            }
            assert_eq!(spill.len(), n as u64);
            assert_eq!(spill.spilled() > 0, n >= cap_records, "n {n} cap {cap_records}");
            want.sort();
            let mut sorted = spill.sorted().unwrap();
            let mut got = Vec::new();
            while let Some(p) = sorted.pop().unwrap() {
                got.push(p);
            }
            assert_eq!(got, want, "n {n} cap {cap_records}");
        }
    }
}
