//! parse: the rows both ncu CSV layouts are read into, and the plumbing they share:
//! a launch (or range result) with its metrics and NVTX stack, owned
//! ([`Launch`]) or borrowed ([`LaunchView`], the parallel reader's rows); the
//! CSV reader that starts at the `"ID",...` header; truncation and error text.
use std::borrow::Cow;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::error::{Error, ErrorKind};
use crate::units::{self, Base, Value};

/// One metric of one launch.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub section: String,
    pub(crate) name: String,
    /// The unit as printed.
    pub unit: String,
    pub value: Value,
}

impl Metric {
    /// The value in its base unit (ns, byte, byte/second, hz, %), if numeric;
    /// an empty unit is taken from the name where it says it for certain.
    pub fn base(&self) -> Option<(f64, Base)> {
        units::in_base_named(&self.name, &self.value, &self.unit)
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
    pub(crate) id: String,
    pub(crate) process_id: String,
    pub(crate) process_name: String,
    pub kernel_name: String,
    pub device: Option<String>,
    pub block_size: Option<String>,
    pub grid_size: Option<String>,
    /// Push/pop ranges open on the launching thread, outermost first (with `--nvtx`).
    pub nvtx: Vec<NvtxFrame>,
    /// Start/end ranges open at the launch (or the range result's own range).
    pub(crate) start_end: Vec<NvtxFrame>,
    pub metrics: Vec<Metric>,
    /// Rule rows (empty Metric Name): (rule name, section).
    pub rules: Vec<(String, String)>,
    /// 1-based line of the launch's first row, for messages.
    pub(crate) line: u64,
}

impl Launch {
    pub fn metric(&self, name: &str) -> Option<&Metric> {
        self.metrics.iter().find(|m| m.name == name)
    }

    /// GPU time of the launch: `gpu__time_duration.sum` (else `.avg`), else the `Duration` of
    /// a `GPU Speed Of Light` section (labels instead of metric names before 2022.4).
    pub fn duration_ns(&self) -> Option<f64> {
        let i = duration_row(self.metrics.iter().map(|m| (m.section.as_str(), m.name.as_str())))?;
        self.metrics[i].base().filter(|(_, b)| *b == Base::Nanoseconds).map(|(v, _)| v)
    }
}

/// Which of a result's (section, metric name) rows holds its GPU time:
/// `gpu__time_duration.sum`, else `.avg`, else the `Duration` of a `GPU Speed
/// Of Light` section (labels instead of metric names before 2022.4).
pub(crate) fn duration_row<'a>(rows: impl Iterator<Item = (&'a str, &'a str)>) -> Option<usize> {
    let (mut avg, mut speed_of_light) = (None, None);
    for (i, (section, name)) in rows.enumerate() {
        if name == "gpu__time_duration.sum" {
            return Some(i);
        }
        // A range result carries `.avg` when that is what was collected (a
        // range is one result: its average is its time).
        if avg.is_none() && name == "gpu__time_duration.avg" {
            avg = Some(i);
        }
        if speed_of_light.is_none() && name == "Duration" && section.starts_with("GPU Speed Of Light") {
            speed_of_light = Some(i);
        }
    }
    avg.or(speed_of_light)
}

/// The input from its `"ID",...` header line on, as a CSV reader. The
/// `==PROF==`/`==WARNING==`/`==ERROR==` lines before it name the cause when
/// there is no header.
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

pub(crate) fn skip_to_header<R: Read>(input: R, path: &Path) -> Result<Rows<R>, Error> {
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
    Ok(rows)
}

/// A line ncu's own log wrote into its CSV output (`==PROF==`, `==WARNING==
/// Failed to detect compute capability, assuming 50`, `==ERROR==`): before
/// the header, and, from an ncu that does not know the report's chip, between
/// rows. Never a result: the first field of a result is its quoted ID.
pub(crate) fn is_log_line(row: &csv::StringRecord) -> bool {
    row.get(0).is_some_and(|f| f.starts_with("=="))
}

/// The file after its byte-order mark, if any; a directory, FIFO, UTF-16 or
/// CR-only file is refused by name (parse::input).
pub(crate) fn open_file(path: &Path) -> Result<std::fs::File, Error> {
    crate::parse::input::open_text(path)
}

/// The `CC` (compute capability) cell of the first result of an ncu CSV
/// (2024.1 and later print the column; the raw page's second row holds
/// units, so the first result with a value counts), if the file has one.
/// Reads the first lines only.
pub(crate) fn compute_capability(path: &Path) -> Option<String> {
    use std::io::BufRead;
    let file = open_file(path).ok()?;
    let mut lines = std::io::BufReader::new(file).lines().map_while(Result::ok).take(64);
    let header = lines.find(|l| l.starts_with("\"ID\","))?;
    let cells = |line: &str| -> Vec<String> {
        let mut r = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(line.as_bytes());
        r.records().next().and_then(Result::ok).map(|r| r.iter().map(str::to_string).collect()).unwrap_or_default()
    };
    let at = cells(&header).iter().position(|h| h == "CC")?;
    lines
        .map(|l| cells(&l).get(at).cloned().unwrap_or_default())
        .find(|cc| !cc.is_empty() && cc.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// `129325  "<default domain>:run_test:none:none:RGB:0xff00ff00:ASCII:run_test"  "..." `:
/// a thread id, then one quoted `domain:name:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg`
/// tuple per open range, outermost first.
pub(crate) fn parse_nvtx_stack(cell: &str) -> Vec<NvtxFrame> {
    frames(cell, |tuple| tuple)
}

/// The start/end column: `"0:<default domain>:compute_kernel:profile:none:none:none:none:none:none"`,
/// one quoted `Id:Domain:name:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg`
/// tuple per open start/end range (a real ncu 2025.3.1 app-range cell).
pub(crate) fn parse_start_end(cell: &str) -> Vec<NvtxFrame> {
    frames(cell, |tuple| tuple.split_once(':').map_or(tuple, |(_, rest)| rest))
}

/// The quoted tuples of an NVTX cell, each `domain:name:...` once `after_id`
/// has taken what comes before its domain.
fn frames(cell: &str, after_id: impl Fn(&str) -> &str) -> Vec<NvtxFrame> {
    cell.split('"')
        .skip(1)
        .step_by(2)
        .filter(|t| !t.is_empty())
        .map(|tuple| {
            let tuple = after_id(tuple);
            let (domain, rest) = tuple.split_once(':').unwrap_or(("", tuple));
            NvtxFrame { domain: domain.to_string(), name: range_name(rest) }
        })
        .collect()
}

/// `name:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg`, where the name (and the
/// message, which repeats an ASCII name) may itself contain `:`: the shortest
/// name followed by exactly five fields and the name again; else all but the
/// six trailing fields (`compute_kernel:profile:none:none:none:none:none:none`
/// is `compute_kernel:profile`); else the whole text.
fn range_name(rest: &str) -> String {
    for (i, _) in rest.match_indices(':') {
        let name = &rest[..i];
        if let Some(middle) = rest[i + 1..].strip_suffix(&format!(":{name}")) {
            if middle.split(':').count() == 5 {
                return name.to_string();
            }
        }
    }
    let fields: Vec<&str> = rest.rsplitn(7, ':').collect();
    match fields.len() {
        7 => fields[6].to_string(),
        _ => rest.to_string(),
    }
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

/// A row that stops before the column a reader needs (`fields` of them,
/// `needed` wanted): ncu writes every metric row up to Metric Value, and every
/// raw row whole, so the row was cut or edited. Counting it as a result (or a
/// rule) would hide that.
pub(crate) fn short_row(path: &Path, line: u64, fields: usize, needed: usize, column: &str) -> Error {
    Error::new(
        ErrorKind::Unparseable,
        format!(
            "{}:{line}: a row of {fields} field(s) that stops before the {column} column (field {needed})",
            path.display()
        ),
    )
    .with_hint(RENDER_AGAIN)
}

/// A result whose rows resume after another result's: ncu writes the rows of
/// one ID together, so two exports were joined or the file was edited.
pub(crate) fn id_again(path: &Path, line: u64, id: &str) -> Error {
    Error::new(
        ErrorKind::Unparseable,
        format!("{}:{line}: result ID {id} again, after other results (ncu writes each result's rows together)", path.display()),
    )
    .with_hint("two exports joined into one, or an edited file? import each export as a file of its own, or render it again from the .ncu-rep: ncu --import R.ncu-rep --csv --page details --print-units base")
}

/// A result whose GPU time is below zero: no ncu writes one. Summing it
/// would shrink its kernel's and region's time.
pub(crate) fn negative_duration(path: &Path, line: u64, id: &str, ns: f64) -> Error {
    Error::new(
        ErrorKind::Unparseable,
        format!("{}:{line}: result ID {id} has a negative GPU time ({ns} ns); ncu never writes one", path.display()),
    )
    .with_hint(RENDER_AGAIN)
}

const RENDER_AGAIN: &str = "the file was cut or edited; render it again from the .ncu-rep: ncu --import R.ncu-rep --csv --page details --print-units base";

/// The checks every result passes whichever reader made it: its ID not seen
/// before (`seen`, the IDs of the results read so far) and a GPU time that
/// is not negative. `line` names the result's first row.
pub(crate) fn check_result(
    path: &Path,
    seen: &mut rustc_hash::FxHashSet<Box<[u8]>>,
    id: &[u8],
    line: u64,
    duration_ns: Option<f64>,
) -> Result<(), Error> {
    let text = || String::from_utf8_lossy(id).into_owned();
    if !seen.insert(id.into()) {
        return Err(id_again(path, line, &text()));
    }
    match duration_ns {
        Some(ns) if ns < 0.0 => Err(negative_duration(path, line, &text(), ns)),
        _ => Ok(()),
    }
}

pub(crate) fn csv_error(path: &Path, e: &csv::Error) -> Error {
    let line = e.position().map(|p| format!(":{}", p.line())).unwrap_or_default();
    Error::new(ErrorKind::Unparseable, format!("{}{line}: malformed CSV: {e}", path.display()))
        .with_hint("the file may be truncated or not an ncu CSV export; render it again with ncu --import R.ncu-rep --csv --page details")
}

pub(crate) fn io_error(path: &Path, e: &std::io::Error) -> Error {
    Error::new(ErrorKind::Unparseable, format!("{}: {e}", path.display()))
}

/// One metric row, borrowed from wherever it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricRef<'a> {
    pub(crate) section: Cow<'a, str>,
    pub(crate) name: Cow<'a, str>,
    pub(crate) unit: Cow<'a, str>,
    pub(crate) value: Value,
}

impl<'a> MetricRef<'a> {
    pub(crate) fn of(m: &'a Metric) -> MetricRef<'a> {
        MetricRef {
            section: Cow::Borrowed(&m.section),
            name: Cow::Borrowed(&m.name),
            unit: Cow::Borrowed(&m.unit),
            value: m.value.clone(),
        }
    }

    /// The value in its base unit, if numeric (an empty unit as [`Metric::base`]).
    pub(crate) fn base(&self) -> Option<(f64, Base)> {
        units::in_base_named(&self.name, &self.value, &self.unit)
    }
}

/// `f` on a view of a parsed launch.
pub fn with_view<R>(launch: &Launch, f: impl FnOnce(&LaunchView) -> R) -> R {
    let metrics: Vec<MetricRef> = launch.metrics.iter().map(MetricRef::of).collect();
    f(&LaunchView {
        process_id: &launch.process_id,
        kernel_name: &launch.kernel_name,
        device: launch.device.as_deref(),
        nvtx: &launch.nvtx,
        start_end: &launch.start_end,
        metrics: &metrics,
    })
}

/// One launch (or range result), borrowed.
pub struct LaunchView<'a> {
    pub(crate) process_id: &'a str,
    pub(crate) kernel_name: &'a str,
    /// The Device column (2024.1+), if the file has one.
    pub(crate) device: Option<&'a str>,
    pub(crate) nvtx: &'a [NvtxFrame],
    pub(crate) start_end: &'a [NvtxFrame],
    pub(crate) metrics: &'a [MetricRef<'a>],
}

impl LaunchView<'_> {
    /// `gpu__time_duration.sum`, else the `Duration` of a `GPU Speed Of Light`
    /// section (labels instead of metric names before 2022.4), in ns.
    pub(crate) fn duration_ns(&self) -> Option<f64> {
        let i = duration_row(self.metrics.iter().map(|m| (&*m.section, &*m.name)))?;
        self.metrics[i].base().filter(|(_, b)| *b == Base::Nanoseconds).map(|(v, _)| v)
    }

    /// The Device column, else the raw page's device index, else "unknown".
    pub(crate) fn device(&self) -> String {
        if let Some(d) = self.device.filter(|d| !d.is_empty()) {
            return d.to_string();
        }
        match self.metrics.iter().find(|m| m.name == "device__attribute_device_index").map(|m| &m.value) {
            Some(Value::Number(n)) => format!("{n}"),
            _ => "unknown".into(),
        }
    }
}

/// What the readers feed: results with borrowed rows, and how they find their
/// regions (`regions` are the pass's own, for range attribution). The parallel
/// reader gives each worker a [`LaunchSink::split`] and folds the parts back
/// with [`LaunchSink::absorb`] in file order.
pub trait LaunchSink: Send + Sized {
    fn add(&mut self, launch: &LaunchView, how: crate::regions::Attribution, regions: &[String]);
    /// A new, empty sink with the same options.
    fn split(&self) -> Self;
    /// Fold in a sink that read a later part of the input.
    fn absorb(&mut self, other: Self);
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
        assert_eq!(range_name("compute_kernel:profile:none:none:none:none:none:none"), "compute_kernel:profile");
        assert_eq!(range_name("odd"), "odd");
    }

    #[test]
    fn start_end_cell_verbatim_from_a_2025_3_app_range_export() {
        let cell = r#" "0:<default domain>:compute_kernel:profile:none:none:none:none:none:none" "#;
        let frames = parse_start_end(cell);
        let names: Vec<_> = frames.iter().map(|f| (f.domain.as_str(), f.name.as_str())).collect();
        assert_eq!(names, [("<default domain>", "compute_kernel:profile")]);
        assert!(parse_start_end("").is_empty());
    }
}
