//! parse: a bare SQLite statement for the hot loops of nsys ingestion.
//!
//! rusqlite checks every value's type before reading it (`value_ref`,
//! `sqlite3_column_type`, then the read): 12% of the CPU of ingesting a
//! 1M-range export (issue 18). These loops read integer columns that nsys
//! never leaves NULL, and one text column, so they step the statement and
//! read the columns directly.
//!
//! A NULL, or a value of another type (text, a blob, a fraction: an export
//! edited by hand or written by another tool), in an integer column reads as
//! 0 through `sqlite3_column_int64`, which would make a kernel that started at
//! "0" run for its whole end timestamp (one NULL start among 4,010 launches
//! gave 113 times the GPU time). Every 0 [`Rows::int`] reads is therefore
//! checked for its type (a rare path: these columns hold timestamps and ids),
//! and the next `step` fails naming the table, column, row and value. A
//! column nsys's schema lets be NULL is read with [`Rows::opt_int`].
//!
//! A [`Scan`] (columns of one table as stored, in stored order) is read from
//! the table's pages where [`super::pages`] can ([`Rows::scan`]), with
//! SQLite's read lock held; at the first row it cannot read as SQLite would,
//! SQLite reads the rest of the table from that row on.
use rusqlite::{ffi, Connection};
use std::cell::RefCell;
use std::ffi::{c_int, CString};
use std::path::Path;

use super::pages::{PageScan, Source, Value};

/// A column of a [`Scan`]: a stored column, read as an integer or as text, or a constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Column {
    Int(&'static str),
    Text(&'static str),
    Null,
    Zero,
}

impl Column {
    fn sql(self) -> &'static str {
        match self {
            Column::Int(name) | Column::Text(name) => name,
            Column::Null => "NULL",
            Column::Zero => "0",
        }
    }
}

/// Columns of one table as stored, every row in stored order: a query with
/// no expression, filter or join, which the page reader can answer.
#[derive(Debug, Clone)]
pub(crate) struct Scan {
    pub(crate) table: &'static str,
    pub(crate) columns: Vec<Column>,
}

impl Scan {
    /// The query, with `tail` (a `WHERE` and `ORDER BY`, or the hand-over's `WHERE`) after its table.
    pub(crate) fn sql(&self, tail: &str) -> String {
        let columns: Vec<&str> = self.columns.iter().map(|c| c.sql()).collect();
        format!("SELECT {} FROM {} {tail}", columns.join(", "), self.table)
    }
}

/// A scan read from the table's pages, and the statement that holds
/// SQLite's read lock on the file meanwhile.
struct Pages {
    scan: PageScan,
    lock: *mut ffi::sqlite3_stmt,
    query: Scan,
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: finalized once, here; the connection outlives the `Rows` that holds this.
        unsafe { ffi::sqlite3_finalize(self.lock) };
    }
}

impl Pages {
    /// The page reader for `query` on the database `conn` has open at
    /// `path`; None where it does not read this table (then SQLite does).
    fn open(conn: &Connection, path: &Path, query: &Scan) -> Option<Pages> {
        let table = query.table;
        // The table's root page, read by a statement left on its row: its read
        // lock keeps any writer out until the scan is done.
        let sql = format!("SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = '{table}'");
        let mut lock = Rows::query(conn, &sql).ok()?;
        if !lock.step().ok()? {
            return None;
        }
        let root = u32::try_from(lock.integer(0)?).ok()?;
        let schema = lock.text(1)?.to_ascii_uppercase();
        // A table keyed by something else than a rowid is laid out otherwise.
        if schema.contains("WITHOUT ROWID") {
            return None;
        }
        let sources = sources(conn, table, &query.columns)?;
        let scan = PageScan::open(path, root, sources)?;
        let lock = std::mem::replace(&mut lock.stmt, std::ptr::null_mut());
        Some(Pages { scan, lock, query: query.clone() })
    }

    /// Whether the current row holds only what the columns are read as
    /// (an integer or NULL, text or NULL): the rows read from the pages.
    #[inline]
    fn fits(&self) -> bool {
        self.query.columns.iter().enumerate().all(|(i, c)| {
            matches!(
                (c, self.scan.value(i)),
                (_, Value::Null) | (Column::Int(_) | Column::Zero, Value::Int(_)) | (Column::Text(_), Value::Text(..))
            )
        })
    }
}

/// Where each of `columns` lies in `table`'s records; None where a column
/// is not plainly stored there (generated, a rowid alias, missing, or with a
/// default that rows written before it was added would read).
fn sources(conn: &Connection, table: &str, columns: &[Column]) -> Option<Vec<Source>> {
    let mut stmt = conn.prepare(&format!("PRAGMA table_xinfo({table})")).ok()?;
    // (name, default, primary key, hidden), in the records' order.
    let info: Vec<(String, Option<String>, i64, i64)> = stmt
        .query_map([], |r| Ok((r.get(1)?, r.get(4)?, r.get(5)?, r.get(6)?)))
        .ok()?
        .collect::<Result<_, _>>()
        .ok()?;
    // A hidden column is generated, or not stored in the record's order;
    // a column named like the rowid would make the hand-over's `WHERE` mean it.
    let rowid = |n: &str| ["rowid", "_rowid_", "oid"].iter().any(|r| n.eq_ignore_ascii_case(r));
    if info.iter().any(|(name, _, _, hidden)| *hidden != 0 || rowid(name)) {
        return None;
    }
    columns
        .iter()
        .map(|c| match c {
            Column::Null => Some(Source::Null),
            Column::Zero => Some(Source::Zero),
            Column::Int(name) | Column::Text(name) => {
                let i = info.iter().position(|(n, ..)| n == name)?;
                let (_, default, pk, _) = &info[i];
                (default.is_none() && *pk == 0).then_some(Source::Stored(i))
            }
        })
        .collect()
}

/// One prepared statement, stepped row by row; finalized when dropped.
pub(crate) struct Rows<'c> {
    stmt: *mut ffi::sqlite3_stmt,
    conn: &'c Connection,
    /// Stepped past the last row: SQLite would start the query again.
    done: bool,
    /// The table the query reads (its first `FROM`), for messages.
    table: String,
    /// Rows stepped so far.
    row: u64,
    /// The first value of the current row that was not an integer where one was read.
    wrong_type: RefCell<Option<rusqlite::Error>>,
    /// The table's pages, while they are read in place of `stmt` (null meanwhile).
    pages: Option<Box<Pages>>,
}

impl<'c> Rows<'c> {
    /// Prepares `sql` (no parameters) on `conn`.
    pub(crate) fn query(conn: &'c Connection, sql: &str) -> Result<Self, rusqlite::Error> {
        let c_sql = CString::new(sql).map_err(|_| rusqlite::Error::InvalidQuery)?;
        let mut stmt = std::ptr::null_mut();
        // SAFETY: a live connection handle, a NUL-terminated query, and out-pointers
        // SQLite fills; the handle is only used while `conn` is borrowed.
        let rc = unsafe { ffi::sqlite3_prepare_v2(conn.handle(), c_sql.as_ptr(), -1, &mut stmt, std::ptr::null_mut()) };
        if rc != ffi::SQLITE_OK || stmt.is_null() {
            return Err(failure(conn, rc));
        }
        let table = sql.split_once(" FROM ").map_or("", |(_, rest)| rest).split_whitespace().next().unwrap_or("");
        Ok(Rows {
            stmt,
            conn,
            done: false,
            table: table.to_string(),
            row: 0,
            wrong_type: RefCell::new(None),
            pages: None,
        })
    }

    /// `query` on `conn`, the database at `path`: every row in stored
    /// order, or (`tail`: a `WHERE` and `ORDER BY`) as `tail` says. Read from
    /// the table's pages where `pages` allows it, the order is the stored
    /// one, and [`super::pages`] reads the table.
    pub(crate) fn scan(
        conn: &'c Connection,
        path: &Path,
        query: &Scan,
        tail: &str,
        pages: bool,
    ) -> Result<Self, rusqlite::Error> {
        let from_pages = (pages && tail.is_empty()).then(|| Pages::open(conn, path, query)).flatten();
        let Some(from_pages) = from_pages else {
            if pages && tail.is_empty() {
                tracing::debug!("{}: SQLite reads it (the pages reader does not read this table)", query.table);
            }
            return Rows::query(conn, &query.sql(tail));
        };
        tracing::debug!("{}: read from its pages", query.table);
        let table = query.table.to_string();
        let stmt = std::ptr::null_mut();
        let wrong_type = RefCell::new(None);
        Ok(Rows { stmt, conn, done: false, table, row: 0, wrong_type, pages: Some(Box::new(from_pages)) })
    }

    /// The next row from the pages: true with a row SQLite would read the
    /// same, false at the end; where there is neither, SQLite is handed the
    /// rest of the table (and `stmt` is set) and the step is its to take.
    #[inline]
    fn step_pages(&mut self) -> Result<Option<bool>, rusqlite::Error> {
        let Some(pages) = self.pages.as_mut() else { return Ok(None) };
        let from = match pages.scan.next() {
            Ok(true) if pages.fits() => return Ok(Some(true)),
            Ok(false) => {
                self.pages = None;
                self.done = true;
                return Ok(Some(false));
            }
            // A value read otherwise than as stored: SQLite reads it, from this row on.
            Ok(true) => {
                let rowid = pages.scan.rowid().unwrap_or(i64::MIN);
                tracing::debug!("{}: SQLite reads on from rowid {rowid}: a value the pages do not read", self.table);
                format!("WHERE _rowid_ >= {rowid}")
            }
            // Past the last row read (from the first, where none was).
            Err(broken) => {
                tracing::debug!("{}: SQLite reads on from its pages: {}", self.table, broken.0);
                pages.scan.rowid().map_or_else(String::new, |r| format!("WHERE _rowid_ > {r}"))
            }
        };
        let mut rest = Rows::query(self.conn, &pages.query.sql(&from))?;
        self.stmt = std::mem::replace(&mut rest.stmt, std::ptr::null_mut());
        self.pages = None;
        Ok(None)
    }

    /// Moves to the next row: false at the end, and on every call after it
    /// (a statement stepped past its end would run again from the first row).
    #[inline]
    pub(crate) fn step(&mut self) -> Result<bool, rusqlite::Error> {
        if let Some(e) = self.wrong_type.take() {
            return Err(e);
        }
        if self.done {
            return Ok(false);
        }
        self.row += 1;
        // The memory budget, every 4,096 rows (an atomic load: nothing per row).
        if self.row & 0xFFF == 0 && crate::memory::over_budget() {
            return Err(rusqlite::Error::ToSqlConversionFailure(Box::new(crate::memory::OverBudget)));
        }
        if let Some(row) = self.step_pages()? {
            return Ok(row);
        }
        // SAFETY: `stmt` is a prepared statement of a connection that outlives it.
        match unsafe { ffi::sqlite3_step(self.stmt) } {
            ffi::SQLITE_ROW => Ok(true),
            ffi::SQLITE_DONE => {
                self.done = true;
                Ok(false)
            }
            rc => Err(failure(self.conn, rc)),
        }
    }

    /// An integer column of the current row that must hold one (NULL or a
    /// value of another type fails the next `step`).
    #[inline] // per column of every row: keep it in the readers' loops wherever they land
    pub(crate) fn int(&self, col: c_int) -> i64 {
        let v = self.raw(col);
        if v == 0 {
            self.zero(col);
        }
        v
    }

    /// The type of a column of the current row, as SQLite numbers them.
    fn kind(&self, col: c_int) -> c_int {
        match self.pages.as_deref().map(|p| p.scan.value(col as usize)) {
            Some(Value::Null) => ffi::SQLITE_NULL,
            Some(Value::Int(_)) => ffi::SQLITE_INTEGER,
            Some(Value::Text(..)) => ffi::SQLITE_TEXT,
            // Not read from the pages ([`Pages::fits`]).
            Some(Value::Other) => ffi::SQLITE_BLOB,
            // SAFETY: called only after `step` returned a row; an out-of-range column reads 0.
            None => unsafe { ffi::sqlite3_column_type(self.stmt, col) },
        }
    }

    /// A column's name, as the query names it.
    fn name(&self, col: c_int) -> String {
        if let Some(pages) = self.pages.as_deref() {
            return pages.query.columns.get(col as usize).map_or("", |c| c.sql()).to_string();
        }
        // SAFETY: as for `kind`; SQLite owns the NUL-terminated column name.
        unsafe {
            let p = ffi::sqlite3_column_name(self.stmt, col);
            if p.is_null() {
                String::new()
            } else {
                std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        }
    }

    /// A 0 read from `col`: an integer 0 or a NULL, or a value of another type.
    #[cold]
    fn zero(&self, col: c_int) {
        let kind = self.kind(col);
        if kind == ffi::SQLITE_INTEGER || self.wrong_type.borrow().is_some() {
            return;
        }
        let (type_name, ty) = match kind {
            ffi::SQLITE_NULL => ("NULL", rusqlite::types::Type::Null),
            ffi::SQLITE_TEXT => ("text", rusqlite::types::Type::Text),
            ffi::SQLITE_FLOAT => ("a real number", rusqlite::types::Type::Real),
            _ => ("a blob", rusqlite::types::Type::Blob),
        };
        let name = self.name(col);
        let value = match kind {
            ffi::SQLITE_NULL => String::new(),
            _ => format!(" {:?}", self.text(col).unwrap_or_default().chars().take(40).collect::<String>()),
        };
        let message = format!(
            "table {}, column {name}, row {} (in the query's order): {type_name}{value} where an integer belongs",
            self.table, self.row
        );
        *self.wrong_type.borrow_mut() =
            Some(rusqlite::Error::FromSqlConversionFailure(col as usize, ty, message.into()));
    }

    /// An integer column of the current row, None when NULL (another type
    /// fails the next `step`, as for `int`). The type is asked only of a 0,
    /// as `int` asks it.
    #[inline]
    pub(crate) fn opt_int(&self, col: c_int) -> Option<i64> {
        let v = self.raw(col);
        if v != 0 {
            return Some(v);
        }
        if self.kind(col) == ffi::SQLITE_NULL {
            return None;
        }
        self.zero(col);
        Some(0)
    }

    /// An integer column of the current row, None when it holds anything
    /// else (NULL, text, …), without failing the next `step`: for a value
    /// only a side reader wants, which reads it again itself where it is not
    /// an integer.
    #[inline]
    pub(crate) fn integer(&self, col: c_int) -> Option<i64> {
        (self.kind(col) == ffi::SQLITE_INTEGER).then(|| self.raw(col))
    }

    /// A column of the current row as SQLite converts it to an integer
    /// (NULL and text that is no number read as 0), unchecked: for a value
    /// only looked up, whose hits are read again with [`Rows::integer`].
    #[inline]
    pub(crate) fn raw(&self, col: c_int) -> i64 {
        match self.pages.as_deref() {
            // NULL reads 0, as SQLite converts it; the pages hold no other type where an integer is read.
            Some(pages) => match pages.scan.value(col as usize) {
                Value::Int(v) => v,
                _ => 0,
            },
            // SAFETY: called only after `step` returned a row; an out-of-range column reads 0.
            None => unsafe { ffi::sqlite3_column_int64(self.stmt, col) },
        }
    }

    /// A text column of the current row, None when NULL; invalid UTF-8 is
    /// replaced. Valid until the next `step`.
    pub(crate) fn text(&self, col: c_int) -> Option<std::borrow::Cow<'_, str>> {
        if let Some(pages) = self.pages.as_deref() {
            return match pages.scan.value(col as usize) {
                Value::Text(at, len) => Some(String::from_utf8_lossy(pages.scan.text(at, len))),
                Value::Int(v) => Some(v.to_string().into()),
                _ => None,
            };
        }
        // SAFETY: as for `int`; the pointer and length SQLite returns describe the
        // value's bytes until the statement steps again, which needs `&mut self`.
        unsafe {
            let ptr = ffi::sqlite3_column_text(self.stmt, col);
            if ptr.is_null() {
                return None;
            }
            let len = ffi::sqlite3_column_bytes(self.stmt, col) as usize;
            Some(String::from_utf8_lossy(std::slice::from_raw_parts(ptr, len)))
        }
    }
}

impl Drop for Rows<'_> {
    fn drop(&mut self) {
        // SAFETY: finalized once, here.
        unsafe { ffi::sqlite3_finalize(self.stmt) };
    }
}

fn failure(conn: &Connection, rc: c_int) -> rusqlite::Error {
    // SAFETY: the connection is live; SQLite returns a NUL-terminated message it owns.
    let message =
        unsafe { std::ffi::CStr::from_ptr(ffi::sqlite3_errmsg(conn.handle())) }.to_string_lossy().into_owned();
    rusqlite::Error::SqliteFailure(ffi::Error::new(rc), Some(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row as a test reads it: each `Int` column by `opt_int` and
    /// `integer`, each `Text` column by `text`.
    type Read = Vec<(Option<i64>, Option<i64>, Option<String>)>;

    /// Every row of `query` on the database at `path`, read from the pages
    /// or not; the error that ended it, if any; and how many rows the pages gave.
    fn read_all(path: &Path, query: &Scan, pages: bool) -> (Vec<Read>, Option<String>, usize) {
        let conn = Connection::open(path).unwrap();
        let mut rows = Rows::scan(&conn, path, query, "", pages).unwrap();
        let (mut got, mut paged) = (Vec::new(), 0);
        loop {
            match rows.step() {
                Ok(true) => {}
                Ok(false) => return (got, None, paged),
                Err(e) => return (got, Some(e.to_string()), paged),
            }
            paged += usize::from(rows.pages.is_some());
            let row = (0..query.columns.len() as c_int)
                .map(|c| match query.columns[c as usize] {
                    Column::Text(_) => (None, None, rows.text(c).map(|t| t.into_owned())),
                    _ => (rows.opt_int(c), rows.integer(c), None),
                })
                .collect();
            got.push(row);
        }
    }

    /// The pages give what SQLite gives, row for row; returns the rows and how many the pages gave.
    fn same(path: &Path, query: &Scan) -> (usize, usize) {
        let (want, want_err, none) = read_all(path, query, false);
        let (got, got_err, paged) = read_all(path, query, true);
        assert_eq!(none, 0);
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "row {}", i + 1);
        }
        assert_eq!(got_err, want_err);
        (got.len(), paged)
    }

    const ALL: [Column; 7] = [
        Column::Int("a"),
        Column::Int("b"),
        Column::Text("t"),
        Column::Int("c"),
        Column::Int("d"),
        Column::Null,
        Column::Zero,
    ];

    fn query(columns: &[Column]) -> Scan {
        Scan { table: "x", columns: columns.to_vec() }
    }

    /// A table of 20,000 rows (some deleted, some of them long enough to
    /// spill into overflow pages, NULLs, integers of every stored width),
    /// then grown by a column and 2,000 rows more; `reserve` bytes at the
    /// end of each page.
    fn table(dir: &Path, page_size: u32, reserve: i32) -> std::path::PathBuf {
        let path = dir.join(format!("t{page_size}_{reserve}.sqlite"));
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA page_size = {page_size}; CREATE TABLE x (a INTEGER, b INTEGER, t TEXT, c INTEGER);"
        ))
        .unwrap();
        let tx = conn.unchecked_transaction().unwrap();
        {
            let mut insert = conn.prepare("INSERT INTO x VALUES (?1, ?2, ?3, ?4)").unwrap();
            for i in 0..20_000i64 {
                let a = match i % 9 {
                    0 => 0,
                    1 => 1,
                    2 => -i,
                    3 => i * 1_000_003,
                    4 => i << 40,
                    5 => i64::MAX - i,
                    6 => i64::MIN + i,
                    7 => -(i << 20),
                    _ => i,
                };
                let b = (i % 7 != 0).then_some(i % 300 - 150);
                let t = match i % 1000 {
                    0 => Some("é".repeat(3000 + i as usize % 5000)),
                    1 => None,
                    _ => Some(format!("range {i} ✓")),
                };
                insert.execute(rusqlite::params![a, b, t, i * 7]).unwrap();
            }
        }
        tx.commit().unwrap();
        conn.execute_batch("DELETE FROM x WHERE rowid % 13 = 0; ALTER TABLE x ADD COLUMN d INTEGER;").unwrap();
        conn.execute_batch("INSERT INTO x SELECT a, b, t, c, rowid FROM x WHERE rowid <= 2000").unwrap();
        if reserve > 0 {
            let mut n: c_int = reserve;
            let main = CString::new("main").unwrap();
            // SAFETY: a live connection; 38 is SQLITE_FCNTL_RESERVE_BYTES, which reads an int.
            unsafe { ffi::sqlite3_file_control(conn.handle(), main.as_ptr(), 38, (&mut n as *mut c_int).cast()) };
            conn.execute_batch("VACUUM").unwrap();
        }
        path
    }

    #[test]
    fn the_pages_read_what_sqlite_reads_at_every_page_size() {
        let dir = tempfile::tempdir().unwrap();
        for (page_size, reserve) in [(512, 0), (4096, 0), (4096, 32), (65_536, 0)] {
            let path = table(dir.path(), page_size, reserve);
            let head = std::fs::read(&path).unwrap();
            assert_eq!(head[20] as i32, reserve, "reserved bytes");
            let (rows, paged) = same(&path, &query(&ALL));
            assert_eq!((rows, paged), (20_309, 20_309), "page size {page_size}");
            // Columns in another order, one twice.
            let (rows, paged) =
                same(&path, &query(&[Column::Int("c"), Column::Text("t"), Column::Int("a"), Column::Int("c")]));
            assert_eq!((rows, paged), (20_309, 20_309));
        }
    }

    /// A value the pages do not read as SQLite would (text or a fraction
    /// where an integer is read): SQLite reads on from that row, and the
    /// rows are SQLite's throughout; a NULL read by `int` fails the same way.
    #[test]
    fn sqlite_reads_on_from_the_first_row_the_pages_do_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = table(dir.path(), 4096, 0);
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("UPDATE x SET c = 2.5 WHERE rowid = 15000; UPDATE x SET a = '12' WHERE rowid = 17000;")
            .unwrap();
        drop(conn);
        let (rows, paged) = same(&path, &query(&ALL));
        // Rows 1 to 14,999, less every 13th, came from the pages.
        assert_eq!((rows, paged), (20_309, 14_999 - 14_999 / 13));

        let null_in_int = |pages: bool| {
            let conn = Connection::open(&path).unwrap();
            let mut rows = Rows::scan(&conn, &path, &query(&[Column::Int("b")]), "", pages).unwrap();
            loop {
                match rows.step() {
                    Ok(true) => drop(rows.int(0)),
                    Ok(false) => return String::new(),
                    Err(e) => return e.to_string(),
                }
            }
        };
        let (with, without) = (null_in_int(true), null_in_int(false));
        assert!(
            with.contains("table x, column b, row 1 (in the query's order): NULL where an integer belongs"),
            "{with}"
        );
        assert_eq!(with, without);
    }

    /// A page that is not what the format says: SQLite reads on past the
    /// last row the pages gave, and fails as it fails alone.
    #[test]
    fn a_broken_page_hands_the_rest_to_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let path = table(dir.path(), 4096, 0);
        let mut bytes = std::fs::read(&path).unwrap();
        // The last page that is a table leaf: made of an unknown kind.
        let leaf = (1..bytes.len() / 4096).rev().find(|&p| bytes[p * 4096] == LEAF_KIND).unwrap();
        bytes[leaf * 4096] = 0x01;
        std::fs::write(&path, &bytes).unwrap();
        let (want, want_err, _) = read_all(&path, &query(&ALL), false);
        let (got, got_err, paged) = read_all(&path, &query(&ALL), true);
        assert!(want_err.as_deref().is_some_and(|e| e.contains("malformed")), "{want_err:?}");
        assert_eq!((got, got_err), (want, want_err));
        assert!(paged > 0);
    }

    const LEAF_KIND: u8 = 0x0D;

    /// A record whose header says it is longer than its row, in the middle
    /// of a leaf: SQLite takes over at that row, not after it (the pages
    /// gave every row before it and none of it).
    #[test]
    fn a_broken_record_is_read_by_sqlite_from_its_own_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = table(dir.path(), 4096, 0);
        let mut bytes = std::fs::read(&path).unwrap();
        let leaf = (1..bytes.len() / 4096).rev().find(|&p| bytes[p * 4096] == LEAF_KIND).unwrap() * 4096;
        // The leaf's second cell: a one-byte payload size (short rows), its rowid, then the record header's size.
        let cell = leaf + usize::from(u16::from_be_bytes([bytes[leaf + 10], bytes[leaf + 11]]));
        assert!(bytes[cell] < 0x80, "a short row");
        let rowid_len = bytes[cell + 1..].iter().position(|b| b & 0x80 == 0).unwrap() + 1;
        bytes[cell + 1 + rowid_len] = 0x7F;
        std::fs::write(&path, &bytes).unwrap();
        let (want, want_err, _) = read_all(&path, &query(&ALL), false);
        let (got, got_err, paged) = read_all(&path, &query(&ALL), true);
        assert!(paged > 0);
        assert_eq!(got.len(), want.len());
        assert_eq!((got, got_err), (want, want_err));
    }

    /// What the pages reader does not read, SQLite reads from the start:
    /// a WAL database, a table without rowid, a column added with a default.
    #[test]
    fn sqlite_reads_what_the_pages_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = table(dir.path(), 4096, 0);
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "ALTER TABLE x ADD COLUMN e INTEGER DEFAULT 5; \
             CREATE TABLE w (a INTEGER PRIMARY KEY, b INTEGER) WITHOUT ROWID; INSERT INTO w VALUES (1, 2), (3, 4);",
        )
        .unwrap();
        drop(conn);
        assert_eq!(same(&path, &query(&[Column::Int("a"), Column::Int("e")])), (20_309, 0));
        assert_eq!(same(&path, &Scan { table: "w", columns: vec![Column::Int("b")] }), (2, 0));
        let conn = Connection::open(&path).unwrap();
        let _: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).unwrap();
        drop(conn);
        assert_eq!(same(&path, &query(&ALL)), (20_309, 0));
    }

    #[test]
    fn reads_integers_nulls_and_text_and_reports_errors() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE t (a INTEGER, b INTEGER, c TEXT); INSERT INTO t VALUES (7, NULL, 'x'), (-1, 2, NULL);",
        )
        .unwrap();
        let mut rows = Rows::query(&conn, "SELECT a, b, c FROM t ORDER BY rowid").unwrap();
        let mut got = Vec::new();
        while rows.step().unwrap() {
            got.push((rows.int(0), rows.opt_int(1), rows.text(2).map(|t| t.into_owned())));
        }
        assert_eq!(got, vec![(7, None, Some("x".to_string())), (-1, Some(2), None)]);
        // Past the end it stays there; SQLite itself would start again at (7, ...).
        assert!(!rows.step().unwrap());
        assert!(!rows.step().unwrap());
        let err = Rows::query(&conn, "SELECT nope FROM t").err().unwrap();
        assert!(err.to_string().contains("no such column: nope"), "{err}");
    }

    /// Text, a fraction, a blob or NULL where an integer belongs: the next
    /// step fails naming table, column, row and value, never a silent 0.
    #[test]
    fn a_value_of_another_type_is_an_error_not_a_zero() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE k (start INTEGER, end INTEGER)").unwrap();
        for (bad, says) in
            [("'soon'", "text \"soon\""), ("0.5", "a real number \"0.5\""), ("x'00'", "a blob"), ("NULL", "NULL")]
        {
            conn.execute_batch(&format!("DELETE FROM k; INSERT INTO k VALUES (1, 2), ({bad}, 3);")).unwrap();
            let mut rows = Rows::query(&conn, "SELECT start, end FROM k ORDER BY rowid").unwrap();
            assert!(rows.step().unwrap());
            assert_eq!(rows.int(0), 1);
            assert!(rows.step().unwrap());
            assert_eq!(rows.int(0), 0);
            let err = rows.step().expect_err("the wrong type fails").to_string();
            assert!(err.contains(&format!("table k, column start, row 2 (in the query's order): {says}")), "{err}");
        }
    }
}
