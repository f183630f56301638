//! Nsight Compute `--page details` CSV: one row per metric, read as a stream of
//! kernel launches (rows grouped by `ID`), columns found by header name.
//!
//! Headers seen (REFERENCE §5), for example ncu 2025:
//! `"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type","Rule Description","Estimated Speedup Type","Estimated Speedup"`
//! and the 2022.3 exporter with `--nvtx`, which inserts
//! `"thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"` and the start/end
//! column after Host Name, and `"Kernel Time"` after Kernel Name.
//! Metric rows stop after Metric Value (shorter than the header); rule rows
//! have an empty Metric Name. A live `--csv` run may print `==PROF==`,
//! `==WARNING==`, `==ERROR==` and program output before the header.
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind};
use crate::units::{self, Base, Locale, Value};

/// One metric of one launch.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub section: String,
    pub name: String,
    /// The unit as printed.
    pub unit: String,
    pub value: Value,
}

impl Metric {
    /// The value in its base unit (ns, byte, byte/second, hz, %), if numeric.
    pub fn base(&self) -> Option<(f64, Base)> {
        units::in_base(&self.value, &self.unit)
    }
}

/// One NVTX push/pop range open when a kernel launched.
#[derive(Debug, Clone, PartialEq)]
pub struct NvtxFrame {
    /// `<default domain>` for the default domain, as ncu prints it.
    pub domain: String,
    pub name: String,
}

/// One profiled kernel launch (or range, in range replay) with its metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub id: String,
    pub process_id: String,
    pub process_name: String,
    pub kernel_name: String,
    pub device: Option<String>,
    pub block_size: Option<String>,
    pub grid_size: Option<String>,
    /// Push/pop ranges open on the launching thread, outermost first (with `--nvtx`).
    pub nvtx: Vec<NvtxFrame>,
    pub metrics: Vec<Metric>,
    /// Rule rows (empty Metric Name): (rule name, section).
    pub rules: Vec<(String, String)>,
    /// 1-based line of the launch's first row, for messages.
    pub line: u64,
}

impl Launch {
    pub fn metric(&self, name: &str) -> Option<&Metric> {
        self.metrics.iter().find(|m| m.name == name)
    }

    /// GPU time of the launch: `gpu__time_duration.sum`, else the `Duration` of
    /// a `GPU Speed Of Light` section (labels instead of metric names before 2022.4).
    pub fn duration_ns(&self) -> Option<f64> {
        let i = duration_row(self.metrics.iter().map(|m| (m.section.as_str(), m.name.as_str())))?;
        self.metrics[i].base().filter(|(_, b)| *b == Base::Nanoseconds).map(|(v, _)| v)
    }
}

/// Which of a result's (section, metric name) rows holds its GPU time:
/// `gpu__time_duration.sum`, else the `Duration` of a `GPU Speed Of Light`
/// section (labels instead of metric names before 2022.4).
pub fn duration_row<'a>(rows: impl Iterator<Item = (&'a str, &'a str)>) -> Option<usize> {
    let mut speed_of_light = None;
    for (i, (section, name)) in rows.enumerate() {
        if name == "gpu__time_duration.sum" {
            return Some(i);
        }
        if speed_of_light.is_none() && name == "Duration" && section.starts_with("GPU Speed Of Light") {
            speed_of_light = Some(i);
        }
    }
    speed_of_light
}

/// Column indexes, by header name.
struct Columns {
    id: usize,
    process_id: Option<usize>,
    process_name: Option<usize>,
    kernel: usize,
    device: Option<usize>,
    block: Option<usize>,
    grid: Option<usize>,
    nvtx: Option<usize>,
    section: usize,
    metric: usize,
    unit: usize,
    value: usize,
    rule: Option<usize>,
}

const REQUIRED: [&str; 6] = ["ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value"];

impl Columns {
    fn from_header(header: &csv::StringRecord, path: &Path) -> Result<Columns, Error> {
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
            section: req("Section Name"),
            metric: req("Metric Name"),
            unit: req("Metric Unit"),
            value: req("Metric Value"),
            rule: find("Rule Name"),
        })
    }
}

/// Launches of a details CSV, one at a time.
pub struct DetailsReader<R: Read> {
    path: PathBuf,
    rows: Records<R>,
    done: bool,
    cols: Columns,
    locale: Option<Locale>,
    pending: Option<Launch>,
    /// `==WARNING==`/`==ERROR==`/`==PROF==` lines before the header.
    pub log_lines: Vec<String>,
}

pub fn open(path: &Path) -> Result<DetailsReader<std::fs::File>, Error> {
    DetailsReader::new(open_file(path)?, path)
}

/// The input from its `"ID",...` header line on, as a CSV reader, and the
/// `==PROF==`/`==WARNING==`/`==ERROR==` lines before it.
pub(crate) type Rows<R> = csv::Reader<std::io::Chain<std::io::Cursor<Vec<u8>>, BufReader<Tail<R>>>>;
pub(crate) type Records<R> = csv::StringRecordsIntoIter<std::io::Chain<std::io::Cursor<Vec<u8>>, BufReader<Tail<R>>>>;

/// A reader that remembers the last byte it read: ncu ends every CSV with a
/// newline, so a file that does not was cut short (a killed export, a full disk).
pub(crate) struct Tail<R> {
    inner: R,
    last: Option<u8>,
}

impl<R: Read> Read for Tail<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            self.last = Some(buf[n - 1]);
        }
        Ok(n)
    }
}

/// After the last record: did the input stop in the middle of a row?
pub(crate) fn truncated<R: Read>(rows: &Records<R>, path: &Path) -> Option<Error> {
    let (_, buffered) = rows.reader().get_ref().get_ref();
    let last = buffered.get_ref().last;
    let line = rows.reader().position().line();
    (last.is_some_and(|b| b != b'\n')).then(|| {
        Error::new(ErrorKind::Unparseable, format!("{}:{line}: the file ends in the middle of a row (truncated?)", path.display()))
            .with_hint("ncu ends every CSV with a newline: render it again with ncu --import R.ncu-rep --csv (the .ncu-rep is kept in the run directory)")
    })
}

pub(crate) fn skip_to_header<R: Read>(input: R, path: &Path) -> Result<(Rows<R>, Vec<String>), Error> {
    let mut reader = BufReader::with_capacity(1 << 20, Tail { inner: input, last: None });
    let mut log_lines = Vec::new();
    let mut line = Vec::new();
    let header = loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(|e| io_error(path, &e))?;
        if n == 0 {
            return Err(no_header(path, &log_lines));
        }
        let text = String::from_utf8_lossy(&line);
        if text.starts_with("\"ID\"") {
            break line.clone();
        }
        if text.starts_with("==") {
            log_lines.push(text.trim_end().to_string());
        }
    };
    let rows = csv::ReaderBuilder::new()
        .flexible(true)
        .has_headers(true)
        .from_reader(std::io::Cursor::new(header).chain(reader));
    Ok((rows, log_lines))
}

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
    let (mut rows, log_lines) = skip_to_header(input, path)?;
    let head = rows.headers().map_err(|e| csv_error(path, &e))?.clone();
    if head.iter().any(|h| h == "Metric Name") {
        let cols = Columns::from_header(&head, path)?;
        Ok((Layout::Details, Box::new(DetailsReader::from_rows(rows, cols, log_lines, path))))
    } else {
        Ok((Layout::Raw, Box::new(super::ncu_raw::RawReader::new(rows, &head, log_lines, path)?)))
    }
}

/// The file after its byte-order mark, if any; a directory, FIFO, UTF-16 or
/// CR-only file is refused by name (parse::input).
pub(crate) fn open_file(path: &Path) -> Result<std::fs::File, Error> {
    super::input::open_text(path)
}

impl<R: Read> DetailsReader<R> {
    pub fn new(input: R, path: &Path) -> Result<Self, Error> {
        let (mut rdr, log_lines) = skip_to_header(input, path)?;
        let head = rdr.headers().map_err(|e| csv_error(path, &e))?.clone();
        let cols = Columns::from_header(&head, path)?;
        Ok(Self::from_rows(rdr, cols, log_lines, path))
    }

    fn from_rows(rdr: Rows<R>, cols: Columns, log_lines: Vec<String>, path: &Path) -> Self {
        DetailsReader {
            path: path.to_path_buf(),
            rows: rdr.into_records(),
            done: false,
            cols,
            locale: None,
            pending: None,
            log_lines,
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
                Some(Ok(row)) => row,
            };
            let line = row.position().map_or(0, |p| p.line());
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

/// `129325  "<default domain>:run_test:none:none:RGB:0xff00ff00:ASCII:run_test"  "..." `:
/// a thread id, then one quoted `domain:name:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg`
/// tuple per open range, outermost first.
pub fn parse_nvtx_stack(cell: &str) -> Vec<NvtxFrame> {
    cell.split('"')
        .skip(1)
        .step_by(2)
        .filter(|t| !t.is_empty())
        .map(|tuple| {
            let (domain, rest) = tuple.split_once(':').unwrap_or(("", tuple));
            NvtxFrame { domain: domain.to_string(), name: range_name(rest) }
        })
        .collect()
}

/// `name:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg`, where the name (and the
/// message, usually the same text) may itself contain `:`: take the shortest
/// name followed by exactly five fields and the name again; else the first field.
fn range_name(rest: &str) -> String {
    for (i, _) in rest.match_indices(':') {
        let name = &rest[..i];
        if let Some(middle) = rest[i + 1..].strip_suffix(&format!(":{name}")) {
            if middle.split(':').count() == 5 {
                return name.to_string();
            }
        }
    }
    rest.split(':').next().unwrap_or_default().to_string()
}

pub(crate) fn no_header(path: &Path, log: &[String]) -> Error {
    let first = log.iter().find(|l| l.starts_with("==ERROR==")).or(log.first());
    let message = match first {
        Some(l) => format!("{}: no CSV header; ncu wrote only: {l}", path.display()),
        None if log.is_empty() => format!("{}: empty, or no `\"ID\",...` header line", path.display()),
        None => unreachable!(),
    };
    let hint = if log.iter().any(|l| l.contains("did not match any section")) {
        "a --section name is not known to this ncu: list them with `ncu --list-sections` and fix pipeline.ncu.ncu_cli.sections"
    } else {
        "ncu produced no results; see its log for why (nothing profiled, a wrong filter, no permission)"
    };
    Error::new(ErrorKind::Unparseable, message).with_hint(hint)
}

/// A row whose ID cell reads `ID`: the header again, as when two exports are
/// joined with `cat a.csv b.csv`. Its rows would otherwise count as a result.
pub(crate) fn repeated_header(path: &Path, line: u64) -> Error {
    Error::new(
        ErrorKind::Unparseable,
        format!("{}:{line}: the header line again (two CSV files joined into one?)", path.display()),
    )
    .with_hint("import each export as a file of its own: llmperf import ncu a.csv b.csv")
}

pub(crate) fn csv_error(path: &Path, e: &csv::Error) -> Error {
    let line = e.position().map(|p| format!(":{}", p.line())).unwrap_or_default();
    Error::new(ErrorKind::Unparseable, format!("{}{line}: malformed CSV: {e}", path.display()))
        .with_hint("the file may be truncated or not an ncu CSV export; render it again with ncu --import R.ncu-rep --csv --page details")
}

pub(crate) fn io_error(path: &Path, e: &std::io::Error) -> Error {
    Error::new(ErrorKind::Unparseable, format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvtx_stack_cell_verbatim_from_a_2022_3_export() {
        let cell = r#"129325  "<default domain>:run_test:none:none:RGB:0xff00ff00:ASCII:run_test"  "<default domain>:init_data:none:none:RGB:0xffffff00:ASCII:init_data" "#;
        let frames = parse_nvtx_stack(cell);
        let names: Vec<_> = frames.iter().map(|f| (f.domain.as_str(), f.name.as_str())).collect();
        assert_eq!(names, [("<default domain>", "run_test"), ("<default domain>", "init_data")]);
        assert!(parse_nvtx_stack("").is_empty());
    }

    #[test]
    fn range_names_with_colons_survive() {
        assert_eq!(range_name("layer_3::attn:none:none:RGB:0xff00ff00:ASCII:layer_3::attn"), "layer_3::attn");
        assert_eq!(range_name("odd"), "odd");
    }
}
