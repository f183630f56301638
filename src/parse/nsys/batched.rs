//! parse: rows handed from a reader thread to their consumer in batches over
//! a bounded channel, so that the two threads meet once per 4,096 rows, not
//! once per row, and a reader runs at most [`IN_FLIGHT`] batches ahead.

/// Rows per batch,
pub(crate) const BATCH: usize = 4096;
/// and batches in flight per channel: room for a reader to run ahead while
/// its consumer waits on another. 4 is as fast as 16 (1M ranges + 1M
/// kernels: 0.440 against 0.430 s, `RUNS=5 bench/nsys_ingest_ab.sh`; 10M:
/// 4.20 against 4.32 s, one run each) and holds 12 fewer batches per
/// channel: the time breakdown holds the kernels read ahead of the range
/// sweep, so the shorter lead is its memory too (docs/internals.md).
pub(crate) const IN_FLIGHT: usize = 4;

/// A channel's two ends: rows go into the [`Batcher`] on the reader's thread
/// and come out of the [`Stream`] in the same order.
pub(crate) fn channel<T>() -> (Batcher<T>, Stream<T>) {
    let (tx, rx) = std::sync::mpsc::sync_channel(IN_FLIGHT);
    (Batcher { tx, buf: Vec::with_capacity(BATCH) }, Stream { rx, batch: Vec::new().into_iter() })
}

/// A stream of rows already in hand (a reader that reads its whole input
/// before the sweep, as the torch trace's does).
pub(crate) fn of<T>(rows: Vec<T>) -> Stream<T> {
    let (_, rx) = std::sync::mpsc::sync_channel(0);
    Stream { rx, batch: rows.into_iter() }
}

/// Sends rows in batches; false once the stream is gone (its consumer stopped).
/// Dropping it ends the stream after the batches sent: [`Batcher::flush`] the
/// last one first.
pub(crate) struct Batcher<T> {
    tx: std::sync::mpsc::SyncSender<Vec<T>>,
    buf: Vec<T>,
}

impl<T> Batcher<T> {
    #[inline] // per row, in the reader's loop
    pub(crate) fn push(&mut self, row: T) -> bool {
        self.buf.push(row);
        self.buf.len() < BATCH || self.flush()
    }

    /// Sends the rows not sent yet.
    pub(crate) fn flush(&mut self) -> bool {
        let full = std::mem::replace(&mut self.buf, Vec::with_capacity(BATCH));
        full.is_empty() || self.tx.send(full).is_ok()
    }
}

/// The rows of a channel, one at a time.
pub struct Stream<T> {
    rx: std::sync::mpsc::Receiver<Vec<T>>,
    batch: std::vec::IntoIter<T>,
}

impl<T> Iterator for Stream<T> {
    type Item = T;

    #[inline] // per row, in the consumer's loop
    fn next(&mut self) -> Option<T> {
        loop {
            if let Some(row) = self.batch.next() {
                return Some(row);
            }
            self.batch = self.rx.recv().ok()?.into_iter();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows come out in order across batches, the last partial batch only
    /// once flushed, and a push fails once the stream is dropped.
    #[test]
    fn rows_come_out_in_order_and_a_gone_stream_stops_the_reader() {
        let n = BATCH * 3 + 7;
        let (mut out, rows) = channel();
        let reader = std::thread::spawn(move || {
            for i in 0..n {
                assert!(out.push(i));
            }
            assert!(out.flush());
        });
        assert_eq!(rows.collect::<Vec<_>>(), (0..n).collect::<Vec<_>>());
        reader.join().unwrap();

        let (mut out, rows) = channel();
        drop(rows);
        assert!((0..BATCH).map(|i| out.push(i)).any(|sent| !sent), "a push fails once the stream is gone");
    }
}
