//! parse: Nsight Compute CSV exports (`ncu --import R.ncu-rep --csv --page details|raw`):
//! readers of both layouts, and the sink they feed. A reader never names what
//! consumes its rows: the aggregators implement [`LaunchSink`].
mod details;
mod fast;
mod raw;
mod rows;
pub mod rules;

use std::io::Read;
use std::path::Path;

pub use fast::{ingest, ingest_blocks};
pub(crate) use rows::compute_capability;
pub use rows::{with_view, Launch, LaunchSink, LaunchView, Metric, MetricRef, NvtxFrame};

use crate::error::Error;
use rows::{csv_error, open_file, skip_to_header};

/// Which page of `ncu --csv` a file holds, told by its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `--page details`: one row per metric.
    Details,
    /// `--page raw`: one row per result, one column per metric, units on row 2.
    Raw,
}

/// Launches of a details CSV (a raw one is refused), checked as [`open_any`]'s are.
pub fn open(path: &Path) -> Result<Launches, Error> {
    let mut rows = skip_to_header(open_file(path)?, path)?;
    let head = rows.headers().map_err(|e| csv_error(path, &e))?.clone();
    let cols = details::Columns::from_header(&head, path)?;
    Ok(checked(Box::new(details::DetailsReader::from_rows(rows, cols, path)), path))
}

/// Launches of a details or raw CSV, whichever the file holds.
pub fn open_any(path: &Path) -> Result<(Layout, Launches), Error> {
    read_any(open_file(path)?, path)
}

/// Launches of either layout, one at a time.
pub(crate) type Launches = Box<dyn Iterator<Item = Result<Launch, Error>>>;

/// Like [`open_any`], from any reader; `path` names it in messages.
pub fn read_any<R: Read + 'static>(input: R, path: &Path) -> Result<(Layout, Launches), Error> {
    let mut rows = skip_to_header(input, path)?;
    let head = rows.headers().map_err(|e| csv_error(path, &e))?.clone();
    let (layout, launches): (Layout, Launches) = if head.iter().any(|h| h == "Metric Name") {
        let cols = details::Columns::from_header(&head, path)?;
        (Layout::Details, Box::new(details::DetailsReader::from_rows(rows, cols, path)))
    } else {
        (Layout::Raw, Box::new(raw::RawReader::new(rows, &head, path)?))
    };
    Ok((layout, checked(launches, path)))
}

fn checked(inner: Launches, path: &Path) -> Launches {
    Box::new(Checked { inner, path: path.to_path_buf(), seen: Default::default(), done: false })
}

/// Results of either reader that pass [`rows::check_result`]: the first that
/// does not ends the stream with its error.
struct Checked {
    inner: Launches,
    path: std::path::PathBuf,
    seen: rustc_hash::FxHashSet<Box<[u8]>>,
    done: bool,
}

impl Iterator for Checked {
    type Item = Result<Launch, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let next = self.inner.next();
        let checked = match next {
            Some(Ok(l)) => {
                match rows::check_result(&self.path, &mut self.seen, l.id.as_bytes(), l.line, l.duration_ns()) {
                    Ok(()) => Some(Ok(l)),
                    Err(e) => Some(Err(e)),
                }
            }
            other => other,
        };
        self.done = !matches!(checked, Some(Ok(_)));
        checked
    }
}
