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
use rusqlite::{ffi, Connection};
use std::cell::RefCell;
use std::ffi::{c_int, CString};

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
        Ok(Rows { stmt, conn, done: false, table: table.to_string(), row: 0, wrong_type: RefCell::new(None) })
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
        // SAFETY: called only after `step` returned a row; an out-of-range column reads 0.
        let v = unsafe { ffi::sqlite3_column_int64(self.stmt, col) };
        if v == 0 {
            self.zero(col);
        }
        v
    }

    /// A 0 read from `col`: an integer 0 or a NULL, or a value of another type.
    #[cold]
    fn zero(&self, col: c_int) {
        // SAFETY: as for `int`.
        let kind = unsafe { ffi::sqlite3_column_type(self.stmt, col) };
        if kind == ffi::SQLITE_INTEGER || self.wrong_type.borrow().is_some() {
            return;
        }
        let (type_name, ty) = match kind {
            ffi::SQLITE_NULL => ("NULL", rusqlite::types::Type::Null),
            ffi::SQLITE_TEXT => ("text", rusqlite::types::Type::Text),
            ffi::SQLITE_FLOAT => ("a real number", rusqlite::types::Type::Real),
            _ => ("a blob", rusqlite::types::Type::Blob),
        };
        // SAFETY: as for `int`; SQLite owns the NUL-terminated column name.
        let name = unsafe {
            let p = ffi::sqlite3_column_name(self.stmt, col);
            if p.is_null() {
                String::new()
            } else {
                std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
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
        // SAFETY: as for `int`.
        let v = unsafe { ffi::sqlite3_column_int64(self.stmt, col) };
        if v != 0 {
            return Some(v);
        }
        // SAFETY: as for `int`.
        if unsafe { ffi::sqlite3_column_type(self.stmt, col) } == ffi::SQLITE_NULL {
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
        // SAFETY: as for `int`.
        let integer = unsafe { ffi::sqlite3_column_type(self.stmt, col) } == ffi::SQLITE_INTEGER;
        integer.then(|| self.raw(col))
    }

    /// A column of the current row as SQLite converts it to an integer
    /// (NULL and text that is no number read as 0), unchecked: for a value
    /// only looked up, whose hits are read again with [`Rows::integer`].
    #[inline]
    pub(crate) fn raw(&self, col: c_int) -> i64 {
        // SAFETY: as for `int`.
        unsafe { ffi::sqlite3_column_int64(self.stmt, col) }
    }

    /// A text column of the current row, None when NULL; invalid UTF-8 is
    /// replaced. Valid until the next `step`.
    pub(crate) fn text(&self, col: c_int) -> Option<std::borrow::Cow<'_, str>> {
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
