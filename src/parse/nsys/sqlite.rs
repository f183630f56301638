//! parse: the SQLite export of an Nsight Systems report (`nsys export --type sqlite`).
//!
//! Tables and columns differ between nsys versions and are absent when nothing
//! of their kind was traced, so every query first checks what exists:
//! - `NVTX_EVENTS` (start, end, eventType, text, textId → StringIds, domainId,
//!   globalTid): eventType 59 push/pop range, 60 start/end range, 75 domain
//!   create (its text names the domain); read from ENUM_NSYS_EVENT_TYPE when present.
//! - `CUPTI_ACTIVITY_KIND_KERNEL` (start, end, deviceId, streamId,
//!   correlationId, globalPid, demangledName → StringIds)
//! - `CUPTI_ACTIVITY_KIND_RUNTIME` (correlationId, globalTid, start): the launch call.
//! - metadata: `EXPORT_META_DATA` or, from 2025.3, `META_DATA_EXPORT`; columns checked (name or key, value).
use rusqlite::{Connection, OpenFlags};
use rustc_hash::FxHashMap;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::batched;
use super::calls;
use super::launch_join;
use super::sqlite_rows::{Column, Rows, Scan};
use crate::error::{Error, ErrorKind};
use crate::provenance::capture::{CaptureGpu, CaptureHost};
use crate::regions::RangeStyle;

const PUSH_POP: i64 = 59;
const START_END: i64 = 60;
const DOMAIN_CREATE: i64 = 75;

pub struct NsysDb {
    conn: Connection,
    path: PathBuf,
    tables: HashSet<String>,
    /// Set up for scans in stored order ([`NsysDb::for_stored_scans`]).
    stored_scans: bool,
    /// Whether a [`Scan`] in stored order is read from the table's pages
    /// ([`super::pages`]); set with `stored_scans`.
    pages: bool,
}

/// Range, domain and kernel names, interned: a capture repeats a few names
/// millions of times. Id 0 is the empty name (the default domain).
#[derive(Debug, Clone)]
pub struct Names {
    names: Vec<String>,
    ids: FxHashMap<String, u32>,
}

impl Default for Names {
    fn default() -> Self {
        let mut ids = FxHashMap::default();
        ids.insert(String::new(), 0);
        Names { names: vec![String::new()], ids }
    }
}

impl Names {
    pub(crate) fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }

    pub(crate) fn get(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    /// Every name, by id.
    pub(crate) fn all(&self) -> &[String] {
        &self.names
    }
}

/// One NVTX range instance.
#[derive(Debug, Clone, Copy)]
pub struct NvtxRange {
    pub(crate) start: i64,
    /// `start` where the range never ended (`ended` false).
    pub(crate) end: i64,
    pub(crate) name: u32,
    /// 0 (empty) for the default domain.
    pub(crate) domain: u32,
    pub(crate) style: RangeStyle,
    /// False for a range whose end nsys left NULL: still open when the capture stopped.
    pub(crate) ended: bool,
    pub(crate) global_tid: i64,
}

/// One kernel execution joined to the runtime call that launched it.
#[derive(Debug, Clone, Copy)]
pub struct Launched {
    /// The launching thread, and when the launch call began.
    pub(crate) global_tid: i64,
    pub(crate) launch: i64,
    /// The kernel on the GPU.
    pub(crate) start: i64,
    pub(crate) end: i64,
    /// Its name (the kernel table's, interned) and whether a CUDA graph ran it.
    pub(crate) name: u32,
    pub(crate) graph: bool,
}

/// One kernel execution, as the kernel table has it.
#[derive(Debug, Clone, Copy)]
pub struct Kernel {
    pub(crate) start: i64,
    pub(crate) end: i64,
    /// The demangled name (else the short one).
    pub(crate) name: u32,
    /// The export's short name (`shortName`, the function without its
    /// namespace, template arguments and parameters) as its `StringIds` id,
    /// None when it has none: most rows repeat a name whose short name is
    /// known, so it is looked up (`strings`) only where needed.
    pub(crate) short_id: Option<i64>,
    /// A node of a CUDA graph (`graphNodeId` set: nsys traced the graph's
    /// nodes, `--cuda-graph-trace=node`); its launch call is the graph's.
    pub(crate) graph: bool,
    /// Its process (0 when the export does not say) and CUDA device (None
    /// when not asked for: one process, or the export does not say).
    pub(crate) pid: i64,
    pub(crate) device: Option<i64>,
    /// Its CUDA device, always read (0 when the export does not say): the
    /// time breakdown's key, beside the process.
    pub(crate) gpu: i64,
}

/// Whether `start..end` is a possible time span: an end before the start, or
/// a duration past i64, is not (a corrupt or hand-edited export can hold either).
pub(crate) fn plausible(start: i64, end: i64) -> bool {
    end.checked_sub(start).is_some_and(|d| d >= 0)
}

/// The note for rows left out because their times are impossible.
pub(crate) fn odd_note(count: usize, what: &str) -> String {
    format!("{count} {what} end before they start (or last longer than i64 nanoseconds): left out")
}

/// Row order of the streams: as stored (fast; the caller checks that it is
/// time order) or sorted by SQLite (`ORDER BY`, in bounded memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    Stored,
    Sorted,
}

/// How the launch join learns how far the kernel table strays from
/// correlation-id order ([`super::launch_join`]): assumed and checked on the
/// way (no pass of its own), or measured by a pass over the ids first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KernelOrder {
    Assumed,
    Measured,
}

/// nsys packs the process id into globalTid/globalPid: pid = (gid >> 24) & 0xFFFFFF.
pub(crate) fn pid_of(global_id: i64) -> i64 {
    (global_id >> 24) & 0xFF_FFFF
}

/// The thread id is the low 24 bits of globalTid.
pub(crate) fn tid_of(global_tid: i64) -> i64 {
    global_tid & 0xFF_FFFF
}

/// How the kernel table is read, chosen from one look at its columns (and,
/// for the graph column, at the export's strings): each field is the column
/// read for that value, or `NULL`; the optional ones None where not read.
struct KernelTable {
    /// Whether the process is known (`globalPid`): correlation ids count the
    /// calls of one process, so two processes reuse them.
    by_process: bool,
    id: &'static str,
    /// The demangled name, else the short one; the short one apart only when both exist.
    name: &'static str,
    short: Option<&'static str>,
    graph: Option<&'static str>,
    /// None: device 0.
    device: Option<&'static str>,
}

impl KernelTable {
    /// (globalPid or 0, correlation id, start, end, name id, short name id or
    /// NULL, graph node or NULL, device or 0): the columns as stored, each
    /// read in Rust ([`Self::kernel`]), as SQLite would spend an expression on
    /// every row. The time breakdown keys kernels by device, so it is always
    /// read; [`Kernel::device`] has it only where several processes ran
    /// kernels, whose ranks it tells apart.
    fn rows(&self) -> Scan {
        let int_or = |c: Option<&'static str>, or| c.map_or(or, Column::Int);
        let pid = if self.by_process { Column::Int("globalPid") } else { Column::Zero };
        let columns = vec![
            pid,
            if self.id == "NULL" { Column::Null } else { Column::Int(self.id) },
            Column::Int("start"),
            Column::Int("end"),
            Column::Int(self.name),
            int_or(self.short, Column::Null),
            int_or(self.graph, Column::Null),
            int_or(self.device, Column::Zero),
        ];
        Scan { table: "CUPTI_ACTIVITY_KIND_KERNEL", columns }
    }

    /// (process, correlation id) of the rows with an id.
    fn ids(&self) -> String {
        let pid = if self.by_process { "globalPid >> 24" } else { "0" };
        format!("SELECT {pid}, {id} FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE {id} IS NOT NULL", id = self.id)
    }

    /// `column` of the table aliased `k` in a join, or `NULL`.
    fn in_join(column: Option<&str>) -> String {
        column.map_or_else(|| "NULL".to_string(), |c| format!("k.{c}"))
    }

    /// The process of a `rows` row as the join keys it: `globalPid >> 24`,
    /// with the bits above the process id (0 where the table has no
    /// `globalPid`; a NULL in it is refused).
    #[inline]
    fn process(&self, r: &Rows) -> i64 {
        if self.by_process {
            r.int(0) >> 24
        } else {
            0
        }
    }

    /// The kernel of a `rows` row, and its process as the join keys it
    /// ([`Self::process`]); the short name's id stays raw (interned only
    /// where needed).
    #[inline]
    fn kernel(&self, r: &Rows, strings: &FxHashMap<i64, u32>, with_device: bool) -> (i64, Kernel) {
        let process = self.process(r);
        let gpu = if self.device.is_some() { r.int(7) } else { 0 };
        let kernel = Kernel {
            start: r.int(2),
            end: r.int(3),
            name: r.opt_int(4).and_then(|id| strings.get(&id).copied()).unwrap_or(0),
            short_id: self.short.and_then(|_| r.opt_int(5)).filter(|&id| id >= 0),
            graph: self.graph.is_some() && r.opt_int(6).is_some_and(|node| node != 0),
            pid: process & 0xFF_FFFF,
            device: with_device.then_some(gpu),
            gpu,
        };
        (process, kernel)
    }
}

/// Before the first connection: no memory statistics. With them, every
/// allocation of every connection takes one global mutex, and the three
/// readers of an ingestion (aggregate::nsys) spent their time waiting on it
/// for each page they read.
fn configure_sqlite() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: called before any connection is opened in this process (all
        // go through NsysDb::open); a late call only returns SQLITE_MISUSE.
        unsafe { rusqlite::ffi::sqlite3_config(rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS, 0 as std::ffi::c_int) };
    });
}

impl NsysDb {
    pub fn open(path: &Path) -> Result<NsysDb, Error> {
        configure_sqlite();
        let bad = |what: String| {
            Error::new(ErrorKind::Unparseable, format!("{}: {what}", path.display()))
                .with_hint("pass the SQLite file of `nsys export --type sqlite` (or the .nsys-rep/.qdrep it came from)")
        };
        if !path.is_file() {
            return Err(Error::new(ErrorKind::Unparseable, format!("{}: no such file", path.display()))
                .with_hint("nsys wrote no report: see nsys/stderr.log in the run directory"));
        }
        // One thread reads the connection: no need for SQLite's per-call mutexes.
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| bad(format!("cannot open as SQLite: {e}")))?;
        // No memory map: the pages of a mapped export count in the resident
        // set, and ingestion keeps that flat (docs/internals.md, "Memory").
        let tables: HashSet<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .map_err(|e| bad(format!("not a readable SQLite database ({e})")))?;
        let is_nsys = tables.contains("StringIds")
            && ["EXPORT_META_DATA", "META_DATA_EXPORT", "TARGET_INFO_GPU", "ENUM_NSYS_EVENT_TYPE"]
                .iter()
                .any(|t| tables.contains(*t));
        if !is_nsys {
            return Err(bad(
                "a SQLite database, but not an Nsight Systems export (no StringIds/metadata tables)".into()
            ));
        }
        Ok(NsysDb { conn, path: path.to_path_buf(), tables, stored_scans: false, pages: false })
    }

    /// The connection, for the readers of sibling modules ([`super::activity`]).
    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// A connection that only scans tables in stored order (no `ORDER BY`, no
    /// join by SQLite) reads each page once: a page cache of 256 KiB holds
    /// the B-trees' inner pages it comes back to. SQLite's default, 2 MB,
    /// filled up with leaves read once: 41.4 against 36.2 MiB of peak memory
    /// for an ingestion at 1M, in the same time (builds alternated, paired).
    /// SQLite's sorter sizes its runs by this cache, so sorted reads keep
    /// the default.
    ///
    /// Its [`Scan`]s are read from the tables' pages where [`super::pages`]
    /// can read them, unless `LLMPERF_NSYS_PAGES=0` (SQLite reads all).
    pub(crate) fn for_stored_scans(mut self) -> Result<NsysDb, Error> {
        self.conn.pragma_update(None, "cache_size", -256).map_err(|e| self.sql_error("PRAGMA cache_size", e))?;
        self.stored_scans = true;
        self.pages = std::env::var_os("LLMPERF_NSYS_PAGES").is_none_or(|v| v != "0");
        Ok(self)
    }

    /// The rows of `query`: every row in stored order, or (`tail`: a
    /// `WHERE` and `ORDER BY` after the table) as `tail` says.
    fn scan(&self, query: &Scan, tail: &str) -> Result<Rows<'_>, rusqlite::Error> {
        Rows::scan(&self.conn, &self.path, query, tail, self.pages)
    }

    /// Another connection to the same export, set up as this one, for a
    /// reader on another thread.
    fn reopen(&self) -> Result<NsysDb, Error> {
        let db = NsysDb::open(&self.path)?;
        if self.stored_scans {
            db.for_stored_scans()
        } else {
            Ok(db)
        }
    }

    pub(crate) fn has_table(&self, t: &str) -> bool {
        self.tables.contains(t)
    }

    pub(crate) fn columns(&self, table: &str) -> HashSet<String> {
        self.conn
            .prepare(&format!("PRAGMA table_info({table})"))
            .and_then(|mut s| s.query_map([], |r| r.get::<_, String>(1))?.collect())
            .unwrap_or_default()
    }

    pub(crate) fn sql_error(&self, what: &str, e: rusqlite::Error) -> Error {
        // The export is opened read-only: "full" is SQLite's temporary files
        // (an ORDER BY of a table stored out of time order), not the file.
        if let rusqlite::Error::ToSqlConversionFailure(inner) = &e {
            if inner.is::<crate::memory::OverBudget>() {
                return crate::memory::exceeded(&self.path);
            }
        }
        if let rusqlite::Error::SqliteFailure(f, _) = &e {
            if f.code == rusqlite::ErrorCode::DiskFull {
                let dir = sqlite_temp_dir();
                return Error::new(
                    ErrorKind::Internal,
                    format!(
                        "{}: reading {what}: SQLite's temporary files (it sorts tables nsys stored out of time order) filled {}: {e}",
                        self.path.display(),
                        dir.display()
                    ),
                )
                .with_hint(format!("free space in {}, or point SQLITE_TMPDIR at a disk with room (about the size of the export); the export itself is fine", dir.display()));
            }
        }
        let hint = if let rusqlite::Error::FromSqlConversionFailure(..) = e {
            "a value of the wrong type: the export was edited, or written by another tool; export the report again with `nsys export --type sqlite`"
        } else {
            "the file may be truncated (nsys killed during export) or from an nsys version with a different schema"
        };
        Error::new(ErrorKind::Unparseable, format!("{}: reading {what}: {e}", self.path.display())).with_hint(hint)
    }

    /// The exporter's version, from the metadata table of either name.
    pub fn export_version(&self) -> Option<String> {
        let table = ["EXPORT_META_DATA", "META_DATA_EXPORT"].into_iter().find(|t| self.has_table(t))?;
        // The 2025.3.2 file here has (name, value); other exports are said to use (key, value).
        let cols = self.columns(table);
        let key = ["name", "key"].into_iter().find(|c| cols.contains(*c))?;
        let sql = format!("SELECT value FROM {table} WHERE {key} = 'EXPORT_PRODUCT_VERSION'");
        self.conn.query_row(&sql, [], |r| r.get::<_, String>(0)).ok()
    }

    /// The machine of the capture, as the export records it: `TARGET_INFO_GPU`
    /// (one row per GPU) and `TARGET_INFO_SYSTEM_ENV` (name/value rows). Absent
    /// tables and columns leave fields empty.
    pub(crate) fn capture_host(&self) -> CaptureHost {
        let env = |name: &str| -> Option<String> {
            if !self.has_table("TARGET_INFO_SYSTEM_ENV") {
                return None;
            }
            self.conn
                .query_row("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = ?1", [name], |r| {
                    r.get::<_, String>(0)
                })
                .ok()
                .filter(|v| !v.is_empty())
        };
        let mut gpus = Vec::new();
        if self.has_table("TARGET_INFO_GPU") {
            let cols = self.columns("TARGET_INFO_GPU");
            let pick = |c: &str| if cols.contains(c) { c.to_string() } else { "NULL".to_string() };
            let sql = format!(
                "SELECT {}, {}, {}, {}, {}, {}, {} FROM TARGET_INFO_GPU ORDER BY 1",
                pick("id"),
                pick("name"),
                pick("chipName"),
                pick("smCount"),
                pick("totalMemory"),
                pick("memoryBandwidth"),
                pick("busLocation")
            );
            let rows = self.conn.prepare(&sql).and_then(|mut st| {
                st.query_map([], |r| {
                    let text = |i: usize| r.get::<_, Option<String>>(i).ok().flatten().filter(|v| !v.is_empty());
                    let int = |i: usize| r.get::<_, Option<i64>>(i).ok().flatten();
                    Ok(CaptureGpu {
                        id: int(0),
                        name: text(1),
                        chip: text(2),
                        sm_count: int(3),
                        memory_bytes: int(4),
                        memory_bandwidth_bytes_per_s: int(5),
                        bus: text(6),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            });
            gpus = rows.unwrap_or_default();
        }
        CaptureHost {
            exported_by: self.export_version(),
            hostname: env("Hostname"),
            os: env("OsDescription"),
            cpu: env("CpuDescription"),
            cpu_cores: env("CpuCores").and_then(|v| v.parse().ok()),
            driver_version: env("NvDriverVersion"),
            nsys_target_dir: env("TargetInstallDir"),
            gpus,
            command: self.captured_command(),
        }
    }

    /// The command nsys launched: `PROCESS_0:COMMAND` and its
    /// `PROCESS_0:ARGUMENT_n` in n's order (META_DATA_CAPTURE, nsys 2023 and
    /// later); empty without them.
    fn captured_command(&self) -> Vec<String> {
        if !self.has_table("META_DATA_CAPTURE") {
            return Vec::new();
        }
        let rows = self
            .conn
            .prepare("SELECT name, value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_0:%'")
            .and_then(|mut st| {
                st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?.unwrap_or_default())))?
                    .collect::<Result<Vec<_>, _>>()
            });
        let rows = rows.unwrap_or_default();
        let Some((_, command)) = rows.iter().find(|(n, _)| n == "PROCESS_0:COMMAND") else { return Vec::new() };
        let mut args: Vec<(u32, &String)> =
            rows.iter().filter_map(|(n, v)| Some((n.strip_prefix("PROCESS_0:ARGUMENT_")?.parse().ok()?, v))).collect();
        args.sort_by_key(|a| a.0);
        std::iter::once(command.clone()).chain(args.into_iter().map(|(_, v)| v.clone())).collect()
    }

    /// Event type numbers from the export's own enum table, falling back to the 2022.4 values.
    fn event_type(&self, name: &str, fallback: i64) -> i64 {
        if !self.has_table("ENUM_NSYS_EVENT_TYPE") {
            return fallback;
        }
        self.conn
            .query_row("SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name = ?1", [name], |r| r.get(0))
            .unwrap_or(fallback)
    }

    /// StringIds id → interned name id.
    pub(crate) fn string_ids(&self, names: &mut Names) -> Result<FxHashMap<i64, u32>, Error> {
        let mut stmt =
            self.conn.prepare("SELECT id, value FROM StringIds").map_err(|e| self.sql_error("StringIds", e))?;
        let mut rows = stmt.query([]).map_err(|e| self.sql_error("StringIds", e))?;
        let mut map = FxHashMap::default();
        while let Some(r) = rows.next().map_err(|e| self.sql_error("StringIds", e))? {
            let id: i64 = r.get(0).map_err(|e| self.sql_error("StringIds", e))?;
            let value: Option<String> = r.get(1).map_err(|e| self.sql_error("StringIds", e))?;
            map.insert(id, names.intern(value.as_deref().unwrap_or_default()));
        }
        Ok(map)
    }

    /// NVTX push/pop and start/end ranges that have ended, each passed to
    /// `each` (with the names, to intern more) until it returns false; in
    /// time order (outer range first when two start together) with
    /// [`Order::Sorted`].
    ///
    /// Domain names come from the domains' create events, which the same
    /// scan reads: a domain is created before its first range, so its event
    /// comes first in time order, and first as stored in every export we have.
    /// A range whose domain was not created before it has all the domains
    /// read by a query of their own (once): a scan of the table, saved
    /// where the order holds.
    pub(crate) fn each_range(
        &self,
        names: &mut Names,
        strings: &FxHashMap<i64, u32>,
        order: Order,
        mut each: impl FnMut(NvtxRange, &mut Names) -> bool,
    ) -> Result<(), Error> {
        if !self.has_table("NVTX_EVENTS") {
            return Ok(());
        }
        let push_pop = self.event_type("NvtxPushPopRange", PUSH_POP);
        let start_end = self.event_type("NvtxStartEndRange", START_END);
        let create = self.event_type("NvtxDomainCreate", DOMAIN_CREATE);
        let cols = self.columns("NVTX_EVENTS");
        let has = |c: &'static str| if cols.contains(c) { Column::Int(c) } else { Column::Null };
        // In stored order every event, its kind tested below: a plain scan, which the pages answer.
        let sorted = format!("WHERE eventType IN ({push_pop}, {start_end}, {create}) ORDER BY start, end DESC");
        let tail = if order == Order::Sorted { &sorted[..] } else { "" };
        let columns = vec![
            Column::Int("start"),
            Column::Int("end"),
            Column::Int("eventType"),
            Column::Text("text"),
            has("textId"),
            has("domainId"),
            Column::Int("globalTid"),
        ];
        let query = Scan { table: "NVTX_EVENTS", columns };
        let what = "NVTX_EVENTS";
        let mut domains: FxHashMap<i64, u32> = FxHashMap::default();
        let mut all_domains = false;
        let mut rows = self.scan(&query, tail).map_err(|e| self.sql_error(what, e))?;
        while rows.step().map_err(|e| self.sql_error(what, e))? {
            let kind = rows.int(2);
            if kind != push_pop && kind != start_end && kind != create {
                continue;
            }
            // No domain id is the default domain.
            let domain_id = rows.opt_int(5).unwrap_or(0);
            if kind == create {
                domains.insert(domain_id, names.intern(&rows.text(3).unwrap_or_default()));
                continue;
            }
            // Unregistered strings are inline in `text`; registered ones are StringIds via textId.
            let name = match rows.text(3) {
                Some(text) => names.intern(&text),
                None => rows.opt_int(4).and_then(|id| strings.get(&id).copied()).unwrap_or(0),
            };
            let domain = match (domain_id, domains.get(&domain_id)) {
                (_, Some(&domain)) => domain,
                // The default domain is never created.
                (0, None) => 0,
                (id, None) if !all_domains => {
                    all_domains = true;
                    for (id, name) in self.domains()? {
                        domains.insert(id, names.intern(&name));
                    }
                    domains.get(&id).copied().unwrap_or(0)
                }
                (_, None) => 0,
            };
            // nsys leaves `end` NULL for a range still open when the capture
            // stopped (its schema allows it); any other NULL is refused.
            let start = rows.int(0);
            let end = rows.opt_int(1);
            let range = NvtxRange {
                start,
                end: end.unwrap_or(start),
                style: if kind == push_pop { RangeStyle::PushPop } else { RangeStyle::StartEnd },
                ended: end.is_some(),
                name,
                domain,
                global_tid: rows.int(6),
            };
            if !each(range, names) {
                break;
            }
        }
        Ok(())
    }

    fn domains(&self) -> Result<HashMap<i64, String>, Error> {
        let create = self.event_type("NvtxDomainCreate", DOMAIN_CREATE);
        let mut stmt = self
            .conn
            .prepare("SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = ?1")
            .map_err(|e| self.sql_error("NVTX domains", e))?;
        let rows = stmt
            .query_map([create], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?.unwrap_or_default())))
            .map_err(|e| self.sql_error("NVTX domains", e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sql_error("NVTX domains", e))
    }

    /// How the kernel table is read, from one look at its columns.
    fn kernel_table(&self) -> KernelTable {
        let cols = self.columns("CUPTI_ACTIVITY_KIND_KERNEL");
        let has = |c: &'static str| if cols.contains(c) { c } else { "NULL" };
        let name = if cols.contains("demangledName") { "demangledName" } else { "shortName" };
        KernelTable {
            by_process: cols.contains("globalPid"),
            id: has("correlationId"),
            name,
            short: (name == "demangledName" && cols.contains("shortName")).then_some("shortName"),
            // Graph nodes carry the correlation id of a graph launch call: without
            // one among the export's strings there are none, and the column (late
            // in a wide row) is not read: 4% of an ingestion.
            graph: (cols.contains("graphNodeId") && self.has_graph_launches()).then_some("graphNodeId"),
            // A missing column reads as device 0; a NULL in it is refused.
            device: cols.contains("deviceId").then_some("deviceId"),
        }
    }

    /// Why no kernel could be joined to its launch call, where the export
    /// says so by its columns: a kernel table without `correlationId`.
    pub(crate) fn join_note(&self) -> Option<String> {
        let kernels = "CUPTI_ACTIVITY_KIND_KERNEL";
        (self.has_table(kernels) && !self.columns(kernels).contains("correlationId")).then(|| {
            format!("{kernels} has no correlationId column: no kernel can be joined to the call that launched it, so every kernel is unattributed (export the capture with an nsys that records it)")
        })
    }

    /// Whether the export names a CUDA graph launch call (runtime or driver API).
    fn has_graph_launches(&self) -> bool {
        self.has_table("StringIds")
            && self
                .conn
                .query_row(
                    "SELECT 1 FROM StringIds WHERE value LIKE 'cudaGraphLaunch%' OR value LIKE 'cuGraphLaunch%' LIMIT 1",
                    [],
                    |_| Ok(()),
                )
                .is_ok()
    }

    /// CUDA kernels in the table's order, names interned through `strings`
    /// (StringIds id → name id), each passed to `each` until it returns false.
    /// Absent table (no CUDA traced, nothing ran on a GPU) means none.
    fn each_kernel(
        &self,
        table: &KernelTable,
        strings: &FxHashMap<i64, u32>,
        with_device: bool,
        mut each: impl FnMut(Kernel) -> bool,
    ) -> Result<(), Error> {
        let what = "CUPTI_ACTIVITY_KIND_KERNEL";
        let mut rows = self.scan(&table.rows(), "").map_err(|e| self.sql_error(what, e))?;
        while rows.step().map_err(|e| self.sql_error(what, e))? {
            if !each(table.kernel(&rows, strings, with_device).1) {
                break;
            }
        }
        Ok(())
    }

    /// Kernels joined to their launch calls (the runtime row of the same
    /// process with the kernel's correlation id), each passed to `each` until
    /// it returns false; by launch time with [`Order::Sorted`], else in the
    /// runtime table's order. Kernels without a traced launch call are left out.
    /// On the way, every kernel of the table goes to `every_kernel` (names
    /// interned through `strings`), so that the table is read once for both
    /// (unless `each` stopped the pass).
    ///
    /// Joined in one streaming pass ([`super::launch_join`]). With
    /// [`KernelOrder::Assumed`] it returns false where the assumption did not
    /// hold: what went to `each` and `every_kernel` is then incomplete, and the
    /// caller starts again with [`KernelOrder::Measured`], whose first pass
    /// over the kernels' ids measures how far their stored order strays from
    /// id order. An export that strays further than
    /// [`launch_join::MAX_DISORDER`] is joined by SQLite (slower: it indexes
    /// the kernels for every query).
    ///
    /// `call_tap`: where the blocking calls of the runtime rows go, where
    /// they are read whole ([`calls::CallTap`]; it is told whether they come).
    pub(crate) fn each_launched(
        &self,
        order: Order,
        kernel_order: KernelOrder,
        strings: &FxHashMap<i64, u32>,
        mut call_tap: Option<&mut dyn calls::CallTap>,
        mut every_kernel: impl FnMut(Kernel) + Send,
        each: impl FnMut(Launched) -> bool,
    ) -> Result<bool, Error> {
        // The blocking calls come from the join's reading of the runtime table, where it has one.
        let no_calls = |tap: &mut Option<&mut dyn calls::CallTap>| {
            if let Some(tap) = tap.take() {
                tap.tell(calls::FedCalls::Coming(false));
            }
        };
        if !self.has_table("CUPTI_ACTIVITY_KIND_KERNEL") {
            no_calls(&mut call_tap);
            return Ok(true);
        }
        let table = self.kernel_table();
        if !self.has_table("CUPTI_ACTIVITY_KIND_RUNTIME") {
            no_calls(&mut call_tap);
            // No launch calls to join: a rare export, whose devices are read.
            self.each_kernel(&table, strings, true, |k| {
                every_kernel(k);
                true
            })?;
            return Ok(true);
        }
        let r_pid = if table.by_process { "globalTid >> 24" } else { "0" };
        let order_by = if order == Order::Sorted { "ORDER BY start" } else { "" };
        // (process, correlation id): the launch calls' order, where the join asks for it.
        let call_ids = format!(
            "SELECT {r_pid}, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IS NOT NULL {order_by}"
        );
        let what = "CUPTI_ACTIVITY_KIND_RUNTIME and CUPTI_ACTIVITY_KIND_KERNEL";
        let sql = |e| self.sql_error(what, e);
        let ids = |query: &str| -> Result<_, Error> {
            let mut rows = Rows::query(&self.conn, query).map_err(sql)?;
            let rows =
                std::iter::from_fn(|| rows.step().map(|more| more.then(|| (rows.int(0), rows.int(1)))).transpose());
            launch_join::disorder(rows).map_err(sql)
        };
        let measured;
        let bound = match kernel_order {
            KernelOrder::Assumed => launch_join::Bound::Assumed(launch_join::ASSUMED_DISORDER),
            KernelOrder::Measured => {
                measured = ids(&table.ids())?;
                let worst = launch_join::worst(&measured);
                if worst > launch_join::MAX_DISORDER {
                    tracing::debug!(
                        "{}: correlation ids {worst} out of order: SQLite joins the kernels",
                        self.path.display()
                    );
                    no_calls(&mut call_tap);
                    self.each_kernel(&table, strings, measured.len() > 1, |k| {
                        every_kernel(k);
                        true
                    })?;
                    self.each_launched_by_sqlite(order, &table, strings, each)?;
                    return Ok(true);
                }
                launch_join::Bound::Measured(&measured)
            }
        };
        // Devices tell the processes' kernels apart; one process needs none
        // (an assumed bound holds only for one).
        let with_device = matches!(bound, launch_join::Bound::Measured(order) if order.len() > 1);
        // With a tap, the blocking calls too (those without a correlation id
        // are no launch: the join does not see them).
        let cols = self.columns("CUPTI_ACTIVITY_KIND_RUNTIME");
        let blocking = match call_tap {
            Some(_) if cols.contains("nameId") && cols.contains("end") && self.has_table("StringIds") => {
                calls::blocking_ids(&self.conn).map_err(|e| self.sql_error("StringIds", e))?
            }
            _ => Vec::new(),
        };
        if blocking.is_empty() {
            no_calls(&mut call_tap);
        }
        let (tapped, tail) = launch_rows(call_tap.is_some().then_some(&blocking[..]), order_by);
        let mut batches = call_tap.map(|tap| calls::CallBatches::new(tap, blocking));
        let by_process = table.by_process;
        let mut c_rows = self.scan(&tapped, &tail).map_err(sql)?;
        let c_rows = std::iter::from_fn(|| loop {
            match c_rows.step() {
                Err(e) => return Some(Err(sql(e))),
                Ok(false) => {
                    if let Some(b) = batches.take() {
                        b.all_read();
                    }
                    return None;
                }
                Ok(true) => {}
            }
            let r = &c_rows;
            // Each column read once: 11M rows at 10M kernels.
            // A blocking call without a correlation id (the tap's rows) is no launch;
            // any other row without one is read by neither.
            let id = r.opt_int(0);
            if id.is_none() && !batches.as_ref().is_some_and(|b| b.wants(r.integer(3))) {
                continue;
            }
            let start = r.int(2);
            if let Some(b) = batches.as_mut() {
                b.row(start, r.raw(3), || Some(((r.integer(1)? >> 24) & 16_777_215, r.integer(2)?, r.integer(4)?)));
            }
            let Some(id) = id else { continue };
            let global_tid = r.int(1);
            // As the kernels' process: `globalTid >> 24`, the bits above the process id kept.
            let pid = if by_process { global_tid >> 24 } else { 0 };
            return Some(Ok(launch_join::Call { pid, id, row: (global_tid, start) }));
        });
        // The launch calls' disorder is measured only if the join asks.
        let call_order = || ids(&call_ids);
        let joined =
            self.join_kernels((&table, strings, with_device), bound, c_rows, call_order, every_kernel, each)?;
        Ok(joined.is_some())
    }

    /// The kernel table read on a thread of its own, on a connection of its
    /// own, which gives every kernel to `every_kernel` and sends those with
    /// an id to the join with the launch calls `calls` here
    /// ([`launch_join::join`]: None where `bound` did not hold). `strings`:
    /// the export's strings, interned; `with_device`: whether the kernels'
    /// devices are read.
    fn join_kernels(
        &self,
        (table, strings, with_device): (&KernelTable, &FxHashMap<i64, u32>, bool),
        bound: launch_join::Bound<'_>,
        calls: impl Iterator<Item = Result<launch_join::Call<(i64, i64)>, Error>>,
        call_order: impl FnOnce() -> Result<FxHashMap<i64, launch_join::Disorder>, Error>,
        mut every_kernel: impl FnMut(Kernel) + Send,
        mut each: impl FnMut(Launched) -> bool,
    ) -> Result<Option<usize>, Error> {
        let what = "CUPTI_ACTIVITY_KIND_RUNTIME and CUPTI_ACTIVITY_KIND_KERNEL";
        let kernel_rows = table.rows();
        let db = self.reopen()?;
        let joined = std::thread::scope(|s| {
            let (mut out, k_rows) = batched::channel();
            let reader = s.spawn(move || -> Result<(), Error> {
                let sql = |e| db.sql_error(what, e);
                let mut rows = db.scan(&kernel_rows, "").map_err(sql)?;
                while rows.step().map_err(sql)? {
                    let (pid, kernel) = table.kernel(&rows, strings, with_device);
                    every_kernel(kernel);
                    if let Some(id) = rows.opt_int(1) {
                        if !out.push(launch_join::Executed { pid, id, span: kernel }) {
                            return Ok(()); // the join stopped
                        }
                    }
                }
                out.flush();
                Ok(())
            });
            let k_rows = k_rows.map(Ok);
            let joined = launch_join::join(calls, k_rows, bound, call_order, |&(global_tid, launch), k: Kernel| {
                let (start, end, name, graph) = (k.start, k.end, k.name, k.graph);
                each(Launched { global_tid, launch, start, end, name, graph })
            });
            let read = reader.join().expect("the kernel reader does not panic");
            read.and(joined)
        })?;
        let bounded = match bound {
            launch_join::Bound::Assumed(d) => format!("ids assumed out of order by at most {d}"),
            launch_join::Bound::Measured(order) => format!("ids out of order by at most {}", launch_join::worst(order)),
        };
        match joined {
            Some(held) => tracing::debug!("launch join: {bounded}; at most {held} kernels held"),
            None => tracing::debug!("launch join: {bounded}, which the kernels break: joining again after measuring"),
        }
        Ok(joined)
    }

    /// [`Self::each_launched`] by SQLite's join, for exports whose ids stray too far.
    fn each_launched_by_sqlite(
        &self,
        order: Order,
        table: &KernelTable,
        strings: &FxHashMap<i64, u32>,
        mut each: impl FnMut(Launched) -> bool,
    ) -> Result<(), Error> {
        let same_process = if table.by_process { "AND (k.globalPid >> 24) = (r.globalTid >> 24)" } else { "" };
        let order_by = if order == Order::Sorted { "ORDER BY r.start" } else { "" };
        let (name, graph) = (KernelTable::in_join(Some(table.name)), KernelTable::in_join(table.graph));
        // CROSS JOIN keeps the runtime table outside: its rows come in stored
        // order, and SQLite indexes the kernels' correlation ids for the lookup.
        let sql = format!(
            "SELECT r.globalTid, r.start, k.start, k.end, {name}, COALESCE({graph}, 0) FROM CUPTI_ACTIVITY_KIND_RUNTIME r \
             CROSS JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId {same_process} {order_by}"
        );
        let what = "CUPTI_ACTIVITY_KIND_RUNTIME and CUPTI_ACTIVITY_KIND_KERNEL";
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.sql_error(what, e))?;
        let mut rows = stmt.query([]).map_err(|e| self.sql_error(what, e))?;
        while let Some(r) = rows.next().map_err(|e| self.sql_error(what, e))? {
            let get = |e| self.sql_error(what, e);
            let row = Launched {
                global_tid: r.get::<_, Option<i64>>(0).map_err(get)?.unwrap_or(0),
                launch: r.get(1).map_err(get)?,
                start: r.get(2).map_err(get)?,
                end: r.get(3).map_err(get)?,
                name: r.get::<_, Option<i64>>(4).map_err(get)?.and_then(|id| strings.get(&id).copied()).unwrap_or(0),
                graph: r.get::<_, i64>(5).map_err(get)? != 0,
            };
            if !each(row) {
                break;
            }
        }
        Ok(())
    }
}

/// The launch reader's query: (correlation id, globalTid, start) of the
/// runtime calls, and with a tap (`blocking`: its functions) also (nameId,
/// end). The columns as stored: the process is taken from globalTid in Rust
/// ([`KernelTable::process`]'s shift), not by an expression per row. In
/// stored order every row, which the launch reader filters as the `WHERE`
/// would ([`calls::CallBatches::wants`]); sorted, the `WHERE` of the tail.
fn launch_rows(blocking: Option<&[i64]>, order_by: &str) -> (Scan, String) {
    let mut columns = vec![Column::Int("correlationId"), Column::Int("globalTid"), Column::Int("start")];
    let tail = match blocking {
        Some(ids) => {
            columns.extend([Column::Int("nameId"), Column::Int("end")]);
            let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
            format!("WHERE correlationId IS NOT NULL OR nameId IN ({}) {order_by}", ids.join(", "))
        }
        None => format!("WHERE correlationId IS NOT NULL {order_by}"),
    };
    let tail = if order_by.is_empty() { String::new() } else { tail };
    (Scan { table: "CUPTI_ACTIVITY_KIND_RUNTIME", columns }, tail)
}

/// Where SQLite puts its temporary files on Unix: the first of
/// `SQLITE_TMPDIR`, `TMPDIR`, /var/tmp, /usr/tmp and /tmp that is a
/// writable directory (its `unixTempFileDir`), else the working directory.
fn sqlite_temp_dir() -> PathBuf {
    let env = ["SQLITE_TMPDIR", "TMPDIR"].into_iter().filter_map(std::env::var_os).map(PathBuf::from);
    let fixed = ["/var/tmp", "/usr/tmp", "/tmp"].into_iter().map(PathBuf::from);
    env.chain(fixed)
        .find(|d| d.is_dir() && !std::fs::metadata(d).is_ok_and(|m| m.permissions().readonly()))
        .unwrap_or_else(|| PathBuf::from("."))
}
