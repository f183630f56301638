//! aggregate: (key, value) pairs sorted in bounded memory. Pairs collect in a
//! buffer of at most 8 MiB; a full buffer is sorted and written to an
//! anonymous temporary file (a run), and [`Runs::sorted`] merges the runs.
//! Memory: the buffer, plus 64 KiB per run while merging; a 10-million-pair
//! input with the default cap is 10 runs.
//!
//! A pair whose key is below 2^24 and whose value is in [0, 2^40) (a
//! duration under 18 minutes) is held packed in one `u64`, key above value,
//! so that packed pairs sort as plain integers instead of `(u32, i64)`
//! tuples (an nsys import at 1M: 0.94× the CPU, builds
//! alternated against the tuples), in half the memory (8 bytes, not 16). Any other pair is held as
//! a tuple, counting double.
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::iter::Peekable;

use crate::error::{Error, ErrorKind};

/// Pairs held in memory before a run is written: 8 MiB of packed pairs.
pub(crate) const DEFAULT_CAP: usize = 1 << 20;

const PAIR: usize = 12;
const VALUE_BITS: u32 = 40;
const KEY_LIMIT: u32 = 1 << (64 - VALUE_BITS);
const VALUE_LIMIT: i64 = 1 << VALUE_BITS;

fn pack(key: u32, value: i64) -> Option<u64> {
    (key < KEY_LIMIT && (0..VALUE_LIMIT).contains(&value)).then(|| (u64::from(key) << VALUE_BITS) | value as u64)
}

fn unpack(p: u64) -> (u32, i64) {
    ((p >> VALUE_BITS) as u32, (p & (VALUE_LIMIT as u64 - 1)) as i64)
}

pub(crate) struct Runs {
    /// Pairs that pack into a u64.
    packed: Vec<u64>,
    /// The others.
    wide: Vec<(u32, i64)>,
    /// In packed pairs: a wide pair counts as two.
    cap: usize,
    files: Vec<File>,
}

fn io_error(e: std::io::Error) -> Error {
    Error::new(ErrorKind::Internal, format!("a temporary file of sorted durations: {e}"))
        .with_hint("free space in the temporary directory (TMPDIR), or point TMPDIR elsewhere")
}

impl Runs {
    pub(crate) fn new(cap: usize) -> Runs {
        Runs { packed: Vec::new(), wide: Vec::new(), cap: cap.max(2), files: Vec::new() }
    }

    pub(crate) fn push(&mut self, key: u32, value: i64) -> Result<(), Error> {
        match pack(key, value) {
            Some(p) => {
                if self.packed.len() == self.packed.capacity() && self.packed.len() < self.cap {
                    // Grow straight to the cap: doubling would briefly hold the old
                    // buffer and one twice its size. Untouched pages cost nothing.
                    self.packed.reserve_exact(self.cap - self.packed.len());
                }
                self.packed.push(p);
            }
            None => self.wide.push((key, value)),
        }
        if self.packed.len() + 2 * self.wide.len() >= self.cap {
            self.spill()?;
        }
        Ok(())
    }

    fn spill(&mut self) -> Result<(), Error> {
        let mut w = BufWriter::with_capacity(1 << 16, tempfile::tempfile().map_err(io_error)?);
        for (k, v) in self.in_memory() {
            w.write_all(&k.to_le_bytes()).and_then(|_| w.write_all(&v.to_le_bytes())).map_err(io_error)?;
        }
        let mut f = w.into_inner().map_err(|e| io_error(e.into_error()))?;
        f.seek(SeekFrom::Start(0)).map_err(io_error)?;
        self.files.push(f);
        Ok(())
    }

    /// The pairs held, sorted and taken out (the buffers keep their
    /// allocations: the next run fills the same pages).
    fn in_memory(&mut self) -> Merged<std::vec::Drain<'_, u64>, std::vec::Drain<'_, (u32, i64)>> {
        self.packed.sort_unstable();
        self.wide.sort_unstable();
        Merged::new(self.packed.drain(..), self.wide.drain(..))
    }

    /// Runs written to disk so far.
    #[cfg(test)]
    pub(crate) fn spilled(&self) -> usize {
        self.files.len()
    }

    /// Every pair, by key then value.
    pub(crate) fn sorted(mut self) -> Result<Sorted, Error> {
        self.packed.sort_unstable();
        self.wide.sort_unstable();
        if self.files.is_empty() && self.wide.is_empty() {
            // Nothing to merge: the buffer, read in order.
            return Ok(Sorted(Order::Packed(std::mem::take(&mut self.packed).into_iter())));
        }
        let memory =
            Merged::new(std::mem::take(&mut self.packed).into_iter(), std::mem::take(&mut self.wide).into_iter());
        let mut sources: Vec<Source> =
            self.files.into_iter().map(|f| Source::File(BufReader::with_capacity(1 << 16, f))).collect();
        sources.push(Source::Memory(memory));
        let mut heap = BinaryHeap::new();
        for (i, s) in sources.iter_mut().enumerate() {
            if let Some(p) = s.next().map_err(io_error)? {
                heap.push(Reverse((p, i)));
            }
        }
        Ok(Sorted(Order::Merge { sources, heap }))
    }
}

/// Sorted packed pairs and sorted wide pairs, merged.
struct Merged<P: Iterator<Item = u64>, W: Iterator<Item = (u32, i64)>> {
    packed: Peekable<P>,
    wide: Peekable<W>,
}

impl<P: Iterator<Item = u64>, W: Iterator<Item = (u32, i64)>> Merged<P, W> {
    fn new(packed: P, wide: W) -> Self {
        Merged { packed: packed.peekable(), wide: wide.peekable() }
    }
}

impl<P: Iterator<Item = u64>, W: Iterator<Item = (u32, i64)>> Iterator for Merged<P, W> {
    type Item = (u32, i64);

    fn next(&mut self) -> Option<(u32, i64)> {
        match (self.packed.peek().map(|&p| unpack(p)), self.wide.peek()) {
            (Some(p), Some(w)) if *w < p => self.wide.next(),
            (Some(_), _) => self.packed.next().map(unpack),
            (None, _) => self.wide.next(),
        }
    }
}

enum Source {
    File(BufReader<File>),
    Memory(Merged<std::vec::IntoIter<u64>, std::vec::IntoIter<(u32, i64)>>),
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

/// The pairs in (key, value) order.
pub(crate) struct Sorted(Order);

/// One sorted buffer of packed pairs (no run written, no wide pair: read in
/// order, nothing to merge), or the merge of the runs.
enum Order {
    Packed(std::vec::IntoIter<u64>),
    Merge { sources: Vec<Source>, heap: BinaryHeap<Reverse<((u32, i64), usize)>> },
}

impl Sorted {
    pub(crate) fn pop(&mut self) -> Result<Option<(u32, i64)>, Error> {
        let (sources, heap) = match &mut self.0 {
            Order::Packed(packed) => return Ok(packed.next().map(unpack)),
            Order::Merge { sources, heap } => (sources, heap),
        };
        // The smallest is replaced by its source's next in place: one sift
        // down, where a pop and a push would take two.
        let Some(mut top) = heap.peek_mut() else { return Ok(None) };
        let Reverse((pair, i)) = *top;
        match sources[i].next().map_err(io_error)? {
            Some(p) => *top = Reverse((p, i)),
            None => drop(std::collections::binary_heap::PeekMut::pop(top)),
        }
        Ok(Some(pair))
    }
}

/// Of `n` sorted values, the ranks [`crate::stats::bounded`] keeps at most
/// `max` of (every rank when `n <= max`), ascending: so a stream of sorted
/// values can be bounded without holding it.
pub(crate) fn bounded_ranks(n: usize, max: usize) -> impl Iterator<Item = usize> {
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

    /// Spilled runs merge into the same order as one sort in memory, packed
    /// and wide pairs alike: negative values, values of 2^40 and more, keys
    /// of 2^24 and more, and the largest that pack.
    #[test]
    fn runs_sort_like_a_sort_in_memory() {
        for cap in [7, 64, 1000] {
            let mut runs = Runs::new(cap);
            let mut want = Vec::new();
            let mut x: u64 = 1;
            for i in 0..300 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let key = if i % 11 == 0 { KEY_LIMIT + (x >> 62) as u32 } else { (x >> 60) as u32 };
                let value = match i % 7 {
                    0 => (x >> 20) as i64 % 1000 - 500,
                    1 => VALUE_LIMIT - 1 + (x >> 62) as i64,
                    _ => (x >> 20) as i64 % 1000,
                };
                runs.push(key, value).unwrap();
                want.push((key, value));
            }
            assert!(want.iter().any(|&(k, v)| pack(k, v).is_none()) && want.iter().any(|&(k, v)| pack(k, v).is_some()));
            assert_eq!(runs.spilled() > 0, cap < 300, "cap {cap}");
            want.sort_unstable();
            let mut got = Vec::new();
            let mut sorted = runs.sorted().unwrap();
            while let Some(p) = sorted.pop().unwrap() {
                got.push(p);
            }
            assert_eq!(got, want, "cap {cap}");
        }
    }

    /// Packed pairs alone, in one buffer: read in order, as a merge gives them.
    #[test]
    fn one_buffer_of_packed_pairs_reads_in_order() {
        let mut runs = Runs::new(1000);
        let mut want: Vec<(u32, i64)> =
            (0..300u32).map(|i| ((i * 7919) % 13, i64::from((i * 104_729) % 997))).collect();
        for &(k, v) in &want {
            runs.push(k, v).unwrap();
        }
        let mut sorted = runs.sorted().unwrap();
        assert!(matches!(sorted.0, Order::Packed(_)));
        let mut got = Vec::new();
        while let Some(p) = sorted.pop().unwrap() {
            got.push(p);
        }
        want.sort_unstable();
        assert_eq!(got, want);
    }

    #[test]
    fn pairs_pack_where_they_fit_and_unpack_to_themselves() {
        for (k, v) in [(0, 0), (KEY_LIMIT - 1, VALUE_LIMIT - 1), (5, 123_456_789)] {
            assert_eq!(pack(k, v).map(unpack), Some((k, v)));
        }
        assert_eq!(pack(KEY_LIMIT, 0), None);
        assert_eq!(pack(0, VALUE_LIMIT), None);
        assert_eq!(pack(0, -1), None);
        // Packed order is pair order.
        assert!(pack(1, 0).unwrap() > pack(0, VALUE_LIMIT - 1).unwrap());
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
