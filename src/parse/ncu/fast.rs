//! parse: the fast path for big details CSVs: the same rows as [`super::details`],
//! read on every core with far less work per row.
//!
//! Why it is fast: in the details layout every row of a launch repeats the
//! launch's identity columns (ID, process, the kernel's full name, which may
//! be thousands of characters, ...) before `"Section Name"`. The first row of a
//! launch is parsed whole; each further row only has to start with the same
//! bytes (one memcmp) and its few metric columns are parsed, and of a row that
//! starts like the same row of the launch before (its [`Template`]) only the
//! value. The file is mapped ([`Mapped`]) and cut into blocks at launch
//! boundaries; each block goes to a worker with its own sink
//! ([`LaunchSink::split`]), and the parts are merged in file order, so the
//! result does not depend on scheduling. Memory stays flat: a few blocks are
//! in flight, and a worker drops the pages of a block it is done with.
//!
//! A launch boundary is found without parsing from the start: a record starts
//! at `\n"` followed by anything but `"` (inside a quoted field every `"` is
//! doubled), and a launch starts where the ID changes.
use std::borrow::Cow;
use std::io::{Read, Seek};
use std::path::Path;

use super::rows::LaunchSink;
use super::rows::{io_error, open_file, parse_nvtx_stack, parse_start_end, LaunchView, MetricRef, NvtxFrame};
use crate::error::{Error, ErrorKind};
use crate::parse::mapped::Mapped;
use crate::regions::Attribution;
use crate::units::{self, Locale, Value};

const BLOCK: usize = 8 << 20;
/// How far ahead of the row being read its worker asks for the file's bytes
/// (a few rows): the rows are skimmed, not read through, so the hardware
/// prefetcher alone left a cache miss on most of them (12% of the run).
const PREFETCH_AHEAD: usize = 2048;
const WORKERS: usize = 2;

/// Column positions; every identity column comes before Section Name, and
/// Metric Name, Unit and Value follow it in that order.
#[derive(Debug, Clone, Copy)]
struct Cols {
    id: usize,
    process_id: Option<usize>,
    kernel: usize,
    device: Option<usize>,
    nvtx: Option<usize>,
    start_end: Option<usize>,
    section: usize,
}

/// Read a details CSV file into `sink`. `Ok(false)`: the file's layout is
/// not one this path handles, or it cannot be mapped (the caller uses the
/// streaming reader).
pub fn ingest<S: LaunchSink>(path: &Path, sink: &mut S, how: Attribution, regions: &[String]) -> Result<bool, Error> {
    ingest_blocks(path, sink, how, regions, BLOCK)
}

/// [`ingest`] with blocks of about `block` bytes (tests use tiny ones so that
/// launches straddle blocks).
pub fn ingest_blocks<S: LaunchSink>(
    path: &Path,
    sink: &mut S,
    how: Attribution,
    regions: &[String],
    block: usize,
) -> Result<bool, Error> {
    let mut file = open_file(path)?;
    // Past a byte-order mark, where open_file left the file.
    let skip = file.stream_position().map_err(|e| io_error(path, &e))? as usize;
    let Some(map) = Mapped::open(&file, path) else { return Ok(false) };
    let bytes = map.bytes();
    let data = &bytes[skip.min(bytes.len())..];
    let Some((cols, data_start)) = header(&data[..data.len().min(1 << 16)]) else { return Ok(false) };
    let (to_workers, from_reader) = std::sync::mpsc::sync_channel::<(usize, std::ops::Range<usize>)>(WORKERS);
    let from_reader = std::sync::Mutex::new(from_reader);
    let map = &map;
    std::thread::scope(|scope| -> Result<(), Error> {
        // Owned here, so that any early return hangs up on the workers.
        let to_workers = to_workers;
        let (to_main, results) = std::sync::mpsc::channel::<(usize, Result<Part<S>, (usize, Bad)>)>();
        for _ in 0..WORKERS {
            let (from_reader, to_main) = (&from_reader, to_main.clone());
            let template = sink.split();
            scope.spawn(move || loop {
                let job = from_reader.lock().map(|r| r.recv());
                let Ok(Ok((seq, range))) = job else { return };
                let mut b = template.split();
                let r = parse_block(&data[range.clone()], cols, &mut b, how, regions).map(|ids| (b, ids));
                // Done with those pages: the resident size stays at the blocks in flight.
                map.release(skip + range.start..skip + range.end);
                if to_main.send((seq, r)).is_err() {
                    return;
                }
            });
        }
        drop(to_main);
        let mut merge = InOrder::default();
        let mut start = data_start;
        while start < data.len() {
            // Cut at the last launch that begins in the block; a launch longer
            // than a block makes the block longer.
            let mut end = start;
            let cut = loop {
                end = (end + block).min(data.len());
                if end == data.len() {
                    break end;
                }
                if let Some(c) = last_launch_start(&data[start..end], cols.id).filter(|&c| c > 0) {
                    break start + c;
                }
            };
            merge.starts.push(start as u64);
            if to_workers.send((merge.starts.len() - 1, start..cut)).is_err() {
                break;
            }
            start = cut;
            // Fold in what is done, in file order: partial results do not pile up.
            while let Ok((i, r)) = results.try_recv() {
                merge.take(i, r, sink, path)?;
            }
        }
        drop(to_workers);
        for (i, r) in results {
            merge.take(i, r, sink, path)?;
        }
        Ok(())
    })?;
    Ok(true)
}

/// The ID and block offset of each result a block held, in order (IDs are
/// checked across blocks in the merge).
type LaunchIds = Vec<(Box<[u8]>, usize)>;

/// What a worker made of one block: its sink and its results' IDs.
type Part<S> = (S, LaunchIds);

/// Partial results folded into the sink in block order (so sums do not
/// depend on scheduling, and the first broken row is the one reported).
struct InOrder<S> {
    next: usize,
    pending: std::collections::BTreeMap<usize, Result<Part<S>, (usize, Bad)>>,
    /// Byte offset of each block in the file, for error lines.
    starts: Vec<u64>,
    /// IDs of the results folded in so far: one seen again is an error.
    seen: rustc_hash::FxHashSet<Box<[u8]>>,
}

impl<S> Default for InOrder<S> {
    fn default() -> Self {
        InOrder { next: 0, pending: Default::default(), starts: Vec::new(), seen: Default::default() }
    }
}

impl<S: LaunchSink> InOrder<S> {
    fn take(&mut self, i: usize, r: Result<Part<S>, (usize, Bad)>, into: &mut S, path: &Path) -> Result<(), Error> {
        self.pending.insert(i, r);
        while let Some(r) = self.pending.remove(&self.next) {
            let start = self.starts[self.next];
            match r {
                Ok((b, ids)) => {
                    for (id, at) in ids {
                        if self.seen.contains(&id) {
                            let line = line_at(path, start + at as u64).unwrap_or(0);
                            return Err(super::rows::id_again(path, line, &String::from_utf8_lossy(&id)));
                        }
                        self.seen.insert(id);
                    }
                    into.absorb(b);
                    crate::memory::check(path)?;
                }
                Err((at, e)) => return Err(locate(e, path, start + at as u64)),
            }
            self.next += 1;
        }
        Ok(())
    }
}

/// The header's columns and where the data starts; None when the file has
/// `==PROF==` lines first, or columns in an order this path does not handle.
fn header(buf: &[u8]) -> Option<(Cols, usize)> {
    if !buf.starts_with(b"\"ID\",") {
        return None;
    }
    let (fields, end) = record(buf, 0).ok()?;
    let names: Vec<String> = fields.iter().map(|f| f.text(buf).ok().map(|c| c.into_owned())).collect::<Option<_>>()?;
    let find = |n: &str| names.iter().position(|h| h == n);
    let section = find("Section Name")?;
    let ok = find("Metric Name") == Some(section + 1)
        && find("Metric Unit") == Some(section + 2)
        && find("Metric Value") == Some(section + 3);
    let kernel = find("Kernel Name")?;
    let cols = Cols {
        id: find("ID")?,
        process_id: find("Process ID"),
        kernel,
        device: find("Device"),
        nvtx: names.iter().position(|h| h.starts_with("thread Domain:Push/Pop_Range")),
        start_end: names.iter().position(|h| h.starts_with("Id:Domain:Start/Stop_Range")),
        section,
    };
    let before = [Some(cols.id), cols.process_id, Some(kernel), cols.device, cols.nvtx, cols.start_end];
    (ok && before.iter().flatten().all(|&i| i < section)).then_some((cols, end))
}

/// A field's bytes (quotes stripped) and whether it holds doubled quotes.
#[derive(Debug, Clone, Copy)]
struct Field {
    /// Where the field begins in the record (its opening quote, if quoted).
    raw: usize,
    start: usize,
    end: usize,
    escaped: bool,
}

impl Field {
    /// The field's text. Only the fields used are checked for UTF-8: checking
    /// whole blocks cost more than the rest of the parse, since most bytes are
    /// the identity columns repeated on every row of a launch.
    fn text<'a>(&self, buf: &'a [u8]) -> Result<std::borrow::Cow<'a, str>, usize> {
        let s = std::str::from_utf8(&buf[self.start..self.end]).map_err(|e| self.start + e.valid_up_to())?;
        Ok(if self.escaped { s.replace("\"\"", "\"").into() } else { s.into() })
    }
}

/// One record from `pos`: its fields and the position after its newline.
/// Err(position) on a quote out of place or the end of input inside quotes.
fn record(buf: &[u8], mut pos: usize) -> Result<(Vec<Field>, usize), usize> {
    let mut fields = Vec::with_capacity(24);
    loop {
        let (field, next) = field(buf, pos)?;
        fields.push(field);
        match buf.get(next) {
            Some(b',') => pos = next + 1,
            Some(b'\r') if buf.get(next + 1) == Some(&b'\n') => return Ok((fields, next + 2)),
            Some(b'\n') => return Ok((fields, next + 1)),
            None => return Err(next),
            Some(_) => return Err(next),
        }
    }
}

/// A field from `pos`: quoted (`"..."` with `""` escapes) or bare.
fn field(buf: &[u8], pos: usize) -> Result<(Field, usize), usize> {
    if buf.get(pos) != Some(&b'"') {
        let end = memchr::memchr3(b',', b'\n', b'\r', &buf[pos..]).map_or(buf.len(), |i| pos + i);
        return Ok((Field { raw: pos, start: pos, end, escaped: false }, end));
    }
    let start = pos + 1;
    let mut at = start;
    let mut escaped = false;
    loop {
        let q = memchr::memchr(b'"', &buf[at..]).map(|i| at + i).ok_or(buf.len())?;
        if buf.get(q + 1) == Some(&b'"') {
            escaped = true;
            at = q + 2;
            continue;
        }
        return Ok((Field { raw: pos, start, end: q, escaped }, q + 1));
    }
}

/// The start of the last launch that begins in `buf` (after offset 0), i.e.
/// a record start whose ID differs from the record before it.
fn last_launch_start(buf: &[u8], id_col: usize) -> Option<usize> {
    let mut after = record_start_before(buf, buf.len())?;
    let id = id_at(buf, after, id_col)?;
    let mut at = after;
    while let Some(prev) = record_start_before(buf, at) {
        if id_at(buf, prev, id_col)? != id {
            return Some(after);
        }
        after = prev;
        at = prev;
    }
    None
}

/// The last position p < `before` where a record starts: `\n"` + a byte other than `"`.
fn record_start_before(buf: &[u8], before: usize) -> Option<usize> {
    let mut end = before;
    loop {
        let nl = memchr::memrchr(b'\n', &buf[..end])?;
        let p = nl + 1;
        if p + 1 < before && buf[p] == b'"' && buf[p + 1] != b'"' {
            return Some(p);
        }
        end = nl;
    }
}

fn id_at(buf: &[u8], start: usize, id_col: usize) -> Option<&[u8]> {
    let mut pos = start;
    for i in 0.. {
        let (f, next) = field(buf, pos).ok()?;
        if i == id_col {
            return Some(&buf[f.start..f.end]);
        }
        pos = next + 1;
    }
    None
}

/// One launch being gathered: identity from its first row, metric rows borrowed.
struct Gather<'a> {
    /// Where its first row starts in the block.
    start: usize,
    prefix: &'a [u8],
    /// Bytes of the ID field and its comma at the start of every row.
    id_field_len: usize,
    id: &'a [u8],
    process_id: std::borrow::Cow<'a, str>,
    kernel: std::borrow::Cow<'a, str>,
    device: Option<std::borrow::Cow<'a, str>>,
    nvtx: Vec<NvtxFrame>,
    start_end: Vec<NvtxFrame>,
    metrics: Vec<MetricRef<'a>>,
    /// Rows of the launch so far (metric and rule rows): the index into [`Templates`].
    rows: usize,
}

/// The metric columns of the previous launches' rows, by row index within a
/// launch: launches of a kernel repeat the same sections, names and units in
/// the same order, so a row whose bytes start with the template's `"Section",
/// "Name","Unit",` needs only its value parsed. The strings are borrowed from
/// the row that made the template (checked for UTF-8 once, there).
struct Template<'a> {
    /// `"Section","Name","Unit",`: the row's bytes from Section Name up to the value.
    key: &'a [u8],
    section: &'a str,
    name: &'a str,
    unit: &'a str,
}

type Templates<'a> = Vec<Option<Template<'a>>>;

/// Parse whole launches in `buf` into `b`: the ID and offset of each, in
/// order. Err((position, error)) names the place.
fn parse_block<S: LaunchSink>(
    buf: &[u8],
    cols: Cols,
    b: &mut S,
    how: Attribution,
    regions: &[String],
) -> Result<LaunchIds, (usize, Bad)> {
    let mut ids = Vec::new();
    let mut locale: Option<Locale> = None;
    let mut pos = 0;
    let mut current: Option<Gather> = None;
    let mut templates: Templates = Vec::new();
    while pos < buf.len() {
        if current.as_ref().is_some_and(|g| same_launch(buf, pos, g)) {
            let g = current.as_mut().expect("checked");
            let at = pos + g.prefix.len();
            prefetch(buf, pos + PREFETCH_AHEAD);
            pos = match known_row(buf, at, templates.get(g.rows).and_then(Option::as_ref), &mut locale) {
                Some((metric, next)) => {
                    g.metrics.push(metric);
                    next
                }
                None => tail(buf, at, g, &mut locale, &mut templates).map_err(|(p, bad)| match bad {
                    Bad::Short { fields, .. } => {
                        (pos, Bad::Short { fields: fields + cols.section, needed: cols.section + 4 })
                    }
                    _ => (p, bad),
                })?,
            };
            g.rows += 1;
            continue;
        }
        // A line of ncu's log between rows (`==WARNING== Failed to detect compute capability`).
        if buf[pos..].starts_with(b"==") {
            pos = memchr::memchr(b'\n', &buf[pos..]).map_or(buf.len(), |n| pos + n + 1);
            continue;
        }
        let (fields, end) = record(buf, pos).map_err(|p| (p, Bad::Row))?;
        // Section Name, Metric Name, Unit and Value: every metric and rule row reaches the value.
        if fields.len() < cols.section + 4 {
            return Err((pos, Bad::Short { fields: fields.len(), needed: cols.section + 4 }));
        }
        let field_text = |i: usize| fields.get(i).map(|f| f.text(buf)).transpose().map_err(|p| (p, Bad::Utf8));
        let id = fields.get(cols.id).map(|f| &buf[f.start..f.end]).unwrap_or_default();
        if id == b"ID" {
            return Err((pos, Bad::Header));
        }
        if current.as_ref().is_some_and(|g| g.id != id) {
            flush(current.take(), b, how, regions)?;
        }
        if current.is_none() {
            ids.push((Box::from(id), pos));
            let nvtx = field_text(cols.nvtx.unwrap_or(usize::MAX))?.map(|c| parse_nvtx_stack(&c)).unwrap_or_default();
            let start_end =
                field_text(cols.start_end.unwrap_or(usize::MAX))?.map(|c| parse_start_end(&c)).unwrap_or_default();
            current = Some(Gather {
                start: pos,
                prefix: &buf[pos..fields.get(cols.section).map_or(end, |f| f.raw)],
                id_field_len: fields.get(cols.id + 1).map_or(0, |f| f.raw - pos),
                id,
                process_id: field_text(cols.process_id.unwrap_or(usize::MAX))?.unwrap_or_default(),
                kernel: field_text(cols.kernel)?.unwrap_or_default(),
                device: field_text(cols.device.unwrap_or(usize::MAX))?,
                nvtx,
                start_end,
                metrics: Vec::with_capacity(64),
                rows: 0,
            });
        }
        let g = current.as_mut().expect("set above");
        let f = &fields[cols.section.min(fields.len())..];
        add_metric(buf, f, g, &mut locale, &mut templates).map_err(|p| (p, Bad::Utf8))?;
        g.rows += 1;
        pos = end;
    }
    flush(current, b, how, regions)?;
    Ok(ids)
}

/// Ask for the cache lines of about one row from `from` on (a hint: nothing is
/// read, and no address faults).
#[inline]
fn prefetch(buf: &[u8], from: usize) {
    #[cfg(target_arch = "x86_64")]
    for at in (from..(from + 448).min(buf.len())).step_by(64) {
        // SAFETY: `at` is inside `buf`; a prefetch reads nothing and cannot fault.
        unsafe { std::arch::x86_64::_mm_prefetch(buf.as_ptr().add(at).cast(), std::arch::x86_64::_MM_HINT_T0) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (buf, from);
}

/// The fields after the shared prefix of a row (Section Name onwards).
/// A further row of the launch `g`: it starts with the launch's ID field, is
/// long enough, has a field boundary where Section Name starts, and ends its
/// identity part with the same bytes. (Comparing all of it, kernel name
/// included, cost a tenth of the run; identity columns are per launch.)
fn same_launch(buf: &[u8], pos: usize, g: &Gather) -> bool {
    let n = g.prefix.len();
    let id_len = g.id_field_len;
    buf.len() > pos + n
        && buf[pos..pos + id_len] == g.prefix[..id_len]
        && buf[pos + n - 1] == b','
        && buf[pos + n] == b'"'
        && same_end(&buf[pos..pos + n], g.prefix)
}

/// Whether two prefixes of one length end in the same 64 bytes (compared as
/// arrays: inline, no call per row).
fn same_end(a: &[u8], b: &[u8]) -> bool {
    match (a.last_chunk::<64>(), b.last_chunk::<64>()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn tail<'a>(
    buf: &'a [u8],
    pos: usize,
    g: &mut Gather<'a>,
    locale: &mut Option<Locale>,
    templates: &mut Templates<'a>,
) -> Result<usize, (usize, Bad)> {
    let bad_row = |p| (p, Bad::Row);
    let mut fields = [Field { raw: 0, start: 0, end: 0, escaped: false }; 4];
    let mut at = pos;
    let mut n = 0;
    loop {
        let (f, next) = field(buf, at).map_err(bad_row)?;
        if n < 4 {
            fields[n] = f;
        }
        n += 1;
        let after = match (buf.get(next), buf.get(next + 1)) {
            (Some(b','), _) => {
                at = next + 1;
                continue;
            }
            (Some(b'\n'), _) => next + 1,
            (Some(b'\r'), Some(b'\n')) => next + 2,
            _ => return Err(bad_row(next)),
        };
        if n < 4 {
            return Err((pos, Bad::Short { fields: n, needed: 4 }));
        }
        add_metric(buf, &fields[..4], g, locale, templates).map_err(|p| (p, Bad::Utf8))?;
        return Ok(after);
    }
}

/// A metric row that matches its template: the metric and the position after
/// the row. None sends the row to the full parse: no template, other bytes, a
/// value that is not a plain quoted field, or a quoted field after it.
fn known_row<'a>(
    buf: &'a [u8],
    at: usize,
    t: Option<&Template<'a>>,
    locale: &mut Option<Locale>,
) -> Option<(MetricRef<'a>, usize)> {
    let t = t?;
    let rest = buf.get(at..)?;
    if !rest.starts_with(t.key) || rest.get(t.key.len()) != Some(&b'"') {
        return None;
    }
    let start = at + t.key.len() + 1;
    let close = start + memchr::memchr(b'"', &buf[start..])?;
    let nl = close + 1 + memchr::memchr(b'\n', &buf[close + 1..])?;
    // What follows the value up to the line's end (`\n` or `\r\n`): empty fields only.
    let after = &buf[close + 1..nl];
    if !after.strip_suffix(b"\r").unwrap_or(after).iter().all(|&c| c == b',') {
        return None;
    }
    let value = value_of(std::str::from_utf8(&buf[start..close]).ok()?, locale);
    let metric = MetricRef { section: t.section.into(), name: t.name.into(), unit: t.unit.into(), value };
    Some((metric, nl + 1))
}

/// Section, Metric Name, Unit, Value: a metric row (rule rows have no name).
/// It becomes the template for row `g.rows` of the next launches, unless a
/// field before the value held `""` escapes.
fn add_metric<'a>(
    buf: &'a [u8],
    f: &[Field],
    g: &mut Gather<'a>,
    locale: &mut Option<Locale>,
    templates: &mut Templates<'a>,
) -> Result<(), usize> {
    if f.len() < 4 || f[1].start == f[1].end {
        return Ok(());
    }
    let (section, name, unit) = (f[0].text(buf)?, f[1].text(buf)?, f[2].text(buf)?);
    if let (Cow::Borrowed(section), Cow::Borrowed(name), Cow::Borrowed(unit)) = (&section, &name, &unit) {
        if templates.len() <= g.rows {
            templates.resize_with(g.rows + 1, || None);
        }
        templates[g.rows] = Some(Template { key: &buf[f[0].raw..f[3].raw], section, name, unit });
    }
    let value = value_of(&f[3].text(buf)?, locale);
    g.metrics.push(MetricRef { section, name, unit, value });
    Ok(())
}

/// A metric's value; the first value that tells the file's number locale sets it.
fn value_of(raw: &str, locale: &mut Option<Locale>) -> Value {
    if locale.is_none() {
        *locale = units::locale_hint(raw);
    }
    units::parse_value(raw, locale.unwrap_or_default())
}

/// Hand a gathered launch to the sink; a negative GPU time is an error at its first row.
fn flush<S: LaunchSink>(
    g: Option<Gather>,
    b: &mut S,
    how: Attribution,
    regions: &[String],
) -> Result<(), (usize, Bad)> {
    let Some(g) = g else { return Ok(()) };
    let view = LaunchView {
        process_id: &g.process_id,
        kernel_name: &g.kernel,
        device: g.device.as_deref(),
        nvtx: &g.nvtx,
        start_end: &g.start_end,
        metrics: &g.metrics,
    };
    if let Some(ns) = view.duration_ns().filter(|ns| *ns < 0.0) {
        return Err((g.start, Bad::NegativeDuration { ns, id: String::from_utf8_lossy(g.id).into() }));
    }
    b.add(&view, how, regions);
    Ok(())
}

/// What is wrong at a place in a block; [`locate`] names the file and line.
#[derive(Debug, Clone)]
enum Bad {
    /// A quote out of place, or the end of input inside a row.
    Row,
    Utf8,
    /// The header line again, mid-file.
    Header,
    /// A row of `fields` fields that stops before Metric Value (field `needed`).
    Short {
        fields: usize,
        needed: usize,
    },
    /// A result whose GPU time is below zero (at its first row).
    NegativeDuration {
        ns: f64,
        id: Box<str>,
    },
}

/// The error of a block-relative problem, with the file and line in front.
fn locate(bad: Bad, path: &Path, offset: u64) -> Error {
    let line = line_at(path, offset).unwrap_or(0);
    let what = match bad {
        Bad::Header => return super::rows::repeated_header(path, line),
        Bad::Short { fields, needed } => return super::rows::short_row(path, line, fields, needed, "Metric Value"),
        Bad::NegativeDuration { ns, id } => return super::rows::negative_duration(path, line, &id, ns),
        Bad::Row => "malformed CSV row (a quote out of place, or the file ends inside a row)",
        Bad::Utf8 => "invalid UTF-8",
    };
    Error::new(ErrorKind::Unparseable, format!("{}:{line}: {what}", path.display())).with_hint(
        "the file may be truncated or not an ncu CSV export; render it again with ncu --import R.ncu-rep --csv --page details",
    )
}

/// 1-based line of a byte offset (only on the error path: reads the file again).
fn line_at(path: &Path, offset: u64) -> Option<u64> {
    let f = std::fs::File::open(path).ok()?;
    let mut r = std::io::BufReader::new(f).take(offset);
    let mut buf = vec![0u8; 1 << 20];
    let mut lines = 1;
    loop {
        let n = r.read(&mut buf).ok()?;
        if n == 0 {
            return Some(lines);
        }
        lines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
    }
}
