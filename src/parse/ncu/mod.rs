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

pub use details::{open, DetailsReader};
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

/// Launches of a details or raw CSV, whichever the file holds.
pub fn open_any(path: &Path) -> Result<(Layout, Launches), Error> {
    read_any(open_file(path)?, path)
}

/// Launches of either layout, one at a time.
pub type Launches = Box<dyn Iterator<Item = Result<Launch, Error>>>;

/// Like [`open_any`], from any reader; `path` names it in messages.
pub fn read_any<R: Read + 'static>(input: R, path: &Path) -> Result<(Layout, Launches), Error> {
    let mut rows = skip_to_header(input, path)?;
    let head = rows.headers().map_err(|e| csv_error(path, &e))?.clone();
    if head.iter().any(|h| h == "Metric Name") {
        let cols = details::Columns::from_header(&head, path)?;
        Ok((Layout::Details, Box::new(details::DetailsReader::from_rows(rows, cols, path))))
    } else {
        Ok((Layout::Raw, Box::new(raw::RawReader::new(rows, &head, path)?)))
    }
}
