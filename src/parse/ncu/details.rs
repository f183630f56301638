//! parse: Nsight Compute `--page details` CSV: one row per metric, read as a stream of
//! kernel launches (rows grouped by `ID`), columns found by header name.
//!
//! Headers seen in real exports, for example ncu 2025:
//! `"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type","Rule Description","Estimated Speedup Type","Estimated Speedup"`
//! and the 2022.3 exporter with `--nvtx`, which inserts
//! `"thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"` and the start/end
//! column after Host Name, and `"Kernel Time"` after Kernel Name.
//! Metric rows stop after Metric Value (shorter than the header); rule rows
//! have an empty Metric Name. A live `--csv` run may print `==PROF==`,
//! `==WARNING==`, `==ERROR==` and program output before the header.
use std::io::Read;
use std::path::{Path, PathBuf};

use super::rows::{
    csv_error, is_log_line, parse_nvtx_stack, parse_start_end, repeated_header, short_row, truncated, Launch, Metric,
    Records, Rows,
};
use crate::error::{Error, ErrorKind};
use crate::units::{self, Locale};

/// Column indexes, by header name.
pub(super) struct Columns {
    id: usize,
    process_id: Option<usize>,
    process_name: Option<usize>,
    kernel: usize,
    device: Option<usize>,
    block: Option<usize>,
    grid: Option<usize>,
    nvtx: Option<usize>,
    start_end: Option<usize>,
    section: usize,
    metric: usize,
    unit: usize,
    value: usize,
    rule: Option<usize>,
}

const REQUIRED: [&str; 6] = ["ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value"];

impl Columns {
    pub(super) fn from_header(header: &csv::StringRecord, path: &Path) -> Result<Columns, Error> {
        let find = |name: &str| header.iter().position(|h| h == name);
        let missing: Vec<&str> = REQUIRED.iter().copied().filter(|c| find(c).is_none()).collect();
        if !missing.is_empty() {
            let raw = find("ID").is_some() && find("Metric Name").is_none();
            return Err(Error::new(ErrorKind::Unparseable, format!("{}:1: not an ncu details CSV: no column {}", path.display(), missing.join(", ")))
                .with_hint(if raw {
                    "this looks like the raw layout (`--page raw`); render the details page: ncu --import R.ncu-rep --csv --page details"
                } else {
                    "render it with: ncu --import R.ncu-rep --csv --page details"
                }));
        }
        let req = |name| find(name).expect("checked above");
        Ok(Columns {
            id: req("ID"),
            process_id: find("Process ID"),
            process_name: find("Process Name"),
            kernel: req("Kernel Name"),
            device: find("Device"),
            block: find("Block Size"),
            grid: find("Grid Size"),
            nvtx: header.iter().position(|h| h.starts_with("thread Domain:Push/Pop_Range")),
            start_end: header.iter().position(|h| h.starts_with("Id:Domain:Start/Stop_Range")),
            section: req("Section Name"),
            metric: req("Metric Name"),
            unit: req("Metric Unit"),
            value: req("Metric Value"),
            rule: find("Rule Name"),
        })
    }
}

/// Launches of a details CSV, one at a time.
pub(crate) struct DetailsReader<R: Read> {
    path: PathBuf,
    rows: Records<R>,
    done: bool,
    cols: Columns,
    locale: Option<Locale>,
    pending: Option<Launch>,
}

impl<R: Read> DetailsReader<R> {
    pub(super) fn from_rows(rdr: Rows<R>, cols: Columns, path: &Path) -> Self {
        DetailsReader {
            path: path.to_path_buf(),
            rows: rdr.into_records(),
            done: false,
            cols,
            locale: None,
            pending: None,
        }
    }

    fn launch_of(&self, row: &csv::StringRecord, line: u64) -> Launch {
        let get = |i: Option<usize>| i.and_then(|i| row.get(i)).map(str::to_string);
        Launch {
            id: row.get(self.cols.id).unwrap_or_default().to_string(),
            process_id: get(self.cols.process_id).unwrap_or_default(),
            process_name: get(self.cols.process_name).unwrap_or_default(),
            kernel_name: row.get(self.cols.kernel).unwrap_or_default().to_string(),
            device: get(self.cols.device),
            block_size: get(self.cols.block),
            grid_size: get(self.cols.grid),
            nvtx: get(self.cols.nvtx).map(|c| parse_nvtx_stack(&c)).unwrap_or_default(),
            start_end: get(self.cols.start_end).map(|c| parse_start_end(&c)).unwrap_or_default(),
            metrics: Vec::new(),
            rules: Vec::new(),
            line,
        }
    }

    fn add_row(&mut self, launch: &mut Launch, row: &csv::StringRecord) {
        let cell = |i: usize| row.get(i).unwrap_or_default();
        let section = cell(self.cols.section).to_string();
        let name = cell(self.cols.metric);
        if name.is_empty() {
            let rule = self.cols.rule.map(cell).unwrap_or_default();
            launch.rules.push((rule.to_string(), section));
            return;
        }
        let raw = cell(self.cols.value);
        if self.locale.is_none() {
            self.locale = units::locale_hint(raw);
        }
        let value = units::parse_value(raw, self.locale.unwrap_or_default());
        launch.metrics.push(Metric { section, name: name.to_string(), unit: cell(self.cols.unit).to_string(), value });
    }
}

impl<R: Read> Iterator for DetailsReader<R> {
    type Item = Result<Launch, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.done {
                return None;
            }
            let row = match self.rows.next() {
                None => {
                    self.done = true;
                    return match truncated(&self.rows, &self.path) {
                        Some(e) => Some(Err(e)),
                        None => self.pending.take().map(Ok),
                    };
                }
                Some(Err(e)) => return Some(Err(csv_error(&self.path, &e))),
                Some(Ok(row)) if is_log_line(&row) => continue,
                Some(Ok(row)) => row,
            };
            let line = row.position().map_or(0, |p| p.line());
            if row.len() <= self.cols.value {
                self.done = true;
                // The last row of a file cut short is short too: say it was cut.
                let cut = match self.rows.next() {
                    None => truncated(&self.rows, &self.path),
                    Some(_) => None,
                };
                let short = || short_row(&self.path, line, row.len(), self.cols.value + 1, "Metric Value");
                return Some(Err(cut.unwrap_or_else(short)));
            }
            let id = row.get(self.cols.id).unwrap_or_default();
            if id == "ID" {
                self.done = true;
                return Some(Err(repeated_header(&self.path, line)));
            }
            let done = match &self.pending {
                Some(p) if p.id != id => self.pending.take(),
                _ => None,
            };
            let mut current = self.pending.take().unwrap_or_else(|| self.launch_of(&row, line));
            self.add_row(&mut current, &row);
            self.pending = Some(current);
            if let Some(finished) = done {
                return Some(Ok(finished));
            }
        }
    }
}
