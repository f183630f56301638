//! aggregate: (key, value) pairs sorted in bounded memory. Pairs collect in a
//! buffer of at most `cap`; a full buffer is sorted and written to an
//! anonymous temporary file (a run), and [`Runs::sorted`] merges the runs.
//! Memory: the buffer, plus 64 KiB per run while merging; a 10-million-pair
//! input with the default cap is 20 runs.
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};

use crate::error::{Error, ErrorKind};

/// Pairs held in memory before a run is written: 8 MiB as a vector of (u32, i64).
pub const DEFAULT_CAP: usize = 1 << 19;

const PAIR: usize = 12;

pub struct Runs {
    buf: Vec<(u32, i64)>,
    cap: usize,
    files: Vec<File>,
}

fn io_error(e: std::io::Error) -> Error {
    Error::new(ErrorKind::Internal, format!("a temporary file of sorted durations: {e}"))
        .with_hint("free space in the temporary directory (TMPDIR), or point TMPDIR elsewhere")
}

impl Runs {
    pub fn new(cap: usize) -> Runs {
        Runs { buf: Vec::new(), cap: cap.max(1), files: Vec::new() }
    }

    pub fn push(&mut self, key: u32, value: i64) -> Result<(), Error> {
        if self.buf.len() == self.buf.capacity() && self.buf.len() < self.cap {
            // Grow straight to the cap: doubling would briefly hold the old
            // buffer and one twice its size. Untouched pages cost nothing.
            self.buf.reserve_exact(self.cap - self.buf.len());
        }
        self.buf.push((key, value));
        if self.buf.len() >= self.cap {
            self.spill()?;
        }
        Ok(())
    }

    fn spill(&mut self) -> Result<(), Error> {
        self.buf.sort_unstable();
        let mut w = BufWriter::with_capacity(1 << 16, tempfile::tempfile().map_err(io_error)?);
        for (k, v) in self.buf.drain(..) {
            w.write_all(&k.to_le_bytes()).and_then(|_| w.write_all(&v.to_le_bytes())).map_err(io_error)?;
        }
        let mut f = w.into_inner().map_err(|e| io_error(e.into_error()))?;
        f.seek(SeekFrom::Start(0)).map_err(io_error)?;
        self.files.push(f);
        // `drain` kept the allocation: the next run fills the same pages.
        Ok(())
    }

    /// Runs written to disk so far.
    pub fn spilled(&self) -> usize {
        self.files.len()
    }

    /// Every pair, by key then value.
    pub fn sorted(mut self) -> Result<Sorted, Error> {
        self.buf.sort_unstable();
        let mut sources: Vec<Source> =
            self.files.into_iter().map(|f| Source::File(BufReader::with_capacity(1 << 16, f))).collect();
        sources.push(Source::Memory(std::mem::take(&mut self.buf).into_iter()));
        let mut heap = BinaryHeap::new();
        for (i, s) in sources.iter_mut().enumerate() {
            if let Some(p) = s.next().map_err(io_error)? {
                heap.push(Reverse((p, i)));
            }
        }
        Ok(Sorted { sources, heap })
    }
}

enum Source {
    File(BufReader<File>),
    Memory(std::vec::IntoIter<(u32, i64)>),
}

impl Source {
    fn next(&mut self) -> std::io::Result<Option<(u32, i64)>> {
        match self {
            Source::Memory(it) => Ok(it.next()),
            Source::File(r) => {
                let mut b = [0u8; PAIR];
                match r.read_exact(&mut b) {
                    Ok(()) => Ok(Some((
                        u32::from_le_bytes(b[..4].try_into().expect("4 bytes")),
                        i64::from_le_bytes(b[4..].try_into().expect("8 bytes")),
                    ))),
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
                    Err(e) => Err(e),
                }
            }
        }
    }
}

/// The merge of the runs: pairs in (key, value) order.
pub struct Sorted {
    sources: Vec<Source>,
    heap: BinaryHeap<Reverse<((u32, i64), usize)>>,
}

impl Sorted {
    pub fn pop(&mut self) -> Result<Option<(u32, i64)>, Error> {
        // The smallest is replaced by its source's next in place: one sift
        // down, where a pop and a push would take two.
        let Some(mut top) = self.heap.peek_mut() else { return Ok(None) };
        let Reverse((pair, i)) = *top;
        match self.sources[i].next().map_err(io_error)? {
            Some(p) => *top = Reverse((p, i)),
            None => drop(std::collections::binary_heap::PeekMut::pop(top)),
        }
        Ok(Some(pair))
    }
}

/// Of `n` sorted values, the ranks [`crate::stats::bounded`] keeps at most
/// `max` of (every rank when `n <= max`), ascending: so a stream of sorted
/// values can be bounded without holding it.
pub fn bounded_ranks(n: usize, max: usize) -> impl Iterator<Item = usize> {
    let (count, last) = if n <= max { (n, 0) } else { (max, n - 1) };
    (0..count).map(move |i| match () {
        _ if n <= max => i,
        _ if max < 2 => i,
        _ => i * last / (max - 1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spilled runs merge into the same order as one sort in memory.
    #[test]
    fn runs_sort_like_a_sort_in_memory() {
        let mut runs = Runs::new(7);
        let mut want = Vec::new();
        let mut x: u64 = 1;
        for _ in 0..100 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let pair = ((x >> 60) as u32, (x >> 20) as i64 % 1000 - 500);
            runs.push(pair.0, pair.1).unwrap();
            want.push(pair);
        }
        assert_eq!(runs.spilled(), 14);
        want.sort_unstable();
        let mut got = Vec::new();
        let mut sorted = runs.sorted().unwrap();
        while let Some(p) = sorted.pop().unwrap() {
            got.push(p);
        }
        assert_eq!(got, want);
    }

    #[test]
    fn bounded_ranks_pick_what_bounded_picks() {
        for (n, max) in [(0, 5), (3, 5), (5, 5), (6, 5), (1000, 7), (10_001, 10_000), (3, 1), (3, 0)] {
            let values: Vec<usize> = (0..n).collect();
            let want = crate::stats::bounded(&values, max);
            assert_eq!(bounded_ranks(n, max).collect::<Vec<_>>(), want, "n={n} max={max}");
        }
    }
}
