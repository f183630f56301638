//! parse: Nsight Compute `--page raw` CSV: one row per result, one column per metric,
//! the units on the second row. Seen from ncu 2022.3 (with `--nvtx`):
//! `"ID","Process ID","Process Name","Host Name","thread Domain:Push/Pop_Range:...","Id:Domain:Start/Stop_Range:...","Kernel Name","Kernel Time","Context","Stream","derived__avg_thread_executed",...`
//! `"","","","","","","","","","","thread",...`
//! and from 2024.1, `"Block Size","Grid Size","Device","CC"` after Stream and no
//! Kernel Time. Every column that is not one of these identity columns is a
//! metric, named by its metric name (the raw page never prints labels).
use std::io::Read;
use std::path::{Path, PathBuf};

use super::rows::{
    csv_error, is_log_line, parse_nvtx_stack, parse_start_end, repeated_header, short_row, truncated, Launch, Metric,
    Records, Rows,
};
use crate::error::{Error, ErrorKind};
use crate::units::{self, Locale};

const IDENTITY: &[&str] = &[
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Kernel Time",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
];

/// Results of a raw CSV, one at a time.
pub(crate) struct RawReader<R: Read> {
    path: PathBuf,
    rows: Records<R>,
    done: bool,
    header: Vec<String>,
    /// (column, metric name) of every metric column.
    metrics: Vec<(usize, String)>,
    units: Vec<String>,
    locale: Option<Locale>,
}

impl<R: Read> RawReader<R> {
    pub(crate) fn new(rows: Rows<R>, head: &csv::StringRecord, path: &Path) -> Result<Self, Error> {
        let header: Vec<String> = head.iter().map(str::to_string).collect();
        for required in ["ID", "Kernel Name"] {
            if !header.iter().any(|h| h == required) {
                return Err(Error::new(
                    ErrorKind::Unparseable,
                    format!("{}:1: not an ncu CSV: no column {required}", path.display()),
                )
                .with_hint("render it with: ncu --import R.ncu-rep --csv --page details (or --page raw)"));
            }
        }
        let metrics = header
            .iter()
            .enumerate()
            .filter(|(_, h)| !IDENTITY.contains(&h.as_str()) && !is_nvtx_column(h))
            .map(|(i, h)| (i, h.clone()))
            .collect();
        let mut reader = RawReader {
            path: path.to_path_buf(),
            rows: rows.into_records(),
            done: false,
            header,
            metrics,
            units: Vec::new(),
            locale: None,
        };
        reader.units = reader.read_units()?;
        Ok(reader)
    }

    /// Row 2: an empty ID and the unit of each metric column.
    fn read_units(&mut self) -> Result<Vec<String>, Error> {
        let mut next = self.rows.next();
        while matches!(&next, Some(Ok(row)) if is_log_line(row)) {
            next = self.rows.next();
        }
        match next {
            Some(Ok(row)) if row.get(0) == Some("") => Ok(row.iter().map(str::to_string).collect()),
            Some(Ok(row)) => Err(Error::new(
                ErrorKind::Unparseable,
                format!("{}:{}: expected the units row of a raw ncu CSV", self.path.display(), line_of(&row)),
            )
            .with_hint("render it with: ncu --import R.ncu-rep --csv --page raw --print-units base")),
            Some(Err(e)) => Err(csv_error(&self.path, &e)),
            None => Ok(Vec::new()),
        }
    }

    fn column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    fn launch_of(&mut self, row: &csv::StringRecord) -> Launch {
        let get = |i: Option<usize>| i.and_then(|i| row.get(i)).map(str::to_string);
        let nvtx = self.header.iter().position(|h| h.starts_with("thread Domain:Push/Pop_Range"));
        let start_end = self.header.iter().position(|h| h.starts_with("Id:Domain:Start/Stop_Range"));
        let mut launch = Launch {
            id: get(self.column("ID")).unwrap_or_default(),
            process_id: get(self.column("Process ID")).unwrap_or_default(),
            process_name: get(self.column("Process Name")).unwrap_or_default(),
            kernel_name: get(self.column("Kernel Name")).unwrap_or_default(),
            device: get(self.column("Device")),
            block_size: get(self.column("Block Size")),
            grid_size: get(self.column("Grid Size")),
            nvtx: get(nvtx).map(|c| parse_nvtx_stack(&c)).unwrap_or_default(),
            start_end: get(start_end).map(|c| parse_start_end(&c)).unwrap_or_default(),
            metrics: Vec::with_capacity(self.metrics.len()),
            rules: Vec::new(),
            line: line_of(row),
        };
        for (i, name) in &self.metrics {
            let raw = row.get(*i).unwrap_or_default();
            if raw.is_empty() {
                continue;
            }
            if self.locale.is_none() {
                self.locale = units::locale_hint(raw);
            }
            launch.metrics.push(Metric {
                section: String::new(),
                name: name.clone(),
                unit: self.units.get(*i).cloned().unwrap_or_default(),
                value: units::parse_value(raw, self.locale.unwrap_or_default()),
            });
        }
        launch
    }
}

fn is_nvtx_column(h: &str) -> bool {
    h.starts_with("thread Domain:") || h.starts_with("Id:Domain:")
}

fn line_of(row: &csv::StringRecord) -> u64 {
    row.position().map_or(0, |p| p.line())
}

impl<R: Read> Iterator for RawReader<R> {
    type Item = Result<Launch, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut next = self.rows.next();
        while matches!(&next, Some(Ok(row)) if is_log_line(row)) {
            next = self.rows.next();
        }
        match next {
            None => {
                self.done = true;
                truncated(&self.rows, &self.path).map(Err)
            }
            Some(Err(e)) => Some(Err(csv_error(&self.path, &e))),
            Some(Ok(row)) if row.get(0) == Some("ID") => {
                self.done = true;
                Some(Err(repeated_header(&self.path, row.position().map_or(0, |p| p.line()))))
            }
            Some(Ok(row)) if row.len() < self.header.len() => {
                self.done = true;
                // The last row of a file cut short is short too: say it was cut.
                let cut = match self.rows.next() {
                    None => truncated(&self.rows, &self.path),
                    Some(_) => None,
                };
                let last = self.header.last().cloned().unwrap_or_default();
                Some(Err(
                    cut.unwrap_or_else(|| short_row(&self.path, line_of(&row), row.len(), self.header.len(), &last))
                ))
            }
            Some(Ok(row)) => Some(Ok(self.launch_of(&row))),
        }
    }
}
