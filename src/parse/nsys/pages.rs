//! parse::nsys::pages: one table of the export read from its B-tree pages,
//! in stored (rowid) order, for the scans of the hot loops
//! ([`super::sqlite_rows::Rows::scan`]).
//!
//! SQLite's per-row work (stepping its virtual machine, decoding each column
//! twice: once into its registers, once out of them) was 38% of the
//! instructions of an import of 1M ranges and 1M kernels (callgrind). This
//! reader decodes the records of the leaf pages itself, as the file format
//! lays them out (sqlite.org/fileformat2.html: §1.3 the header, §1.6 B-tree
//! pages, §2.1 records, §1.7 overflow pages).
//!
//! It reads only what it can read exactly as SQLite would, and says so
//! before reading: a rollback-journal database (a WAL may hold newer pages),
//! UTF-8 text, a rowid table with no generated column. Whatever it meets
//! after that which is not what the format says (a page of the wrong kind, a
//! cell past its page, a reserved serial type, a rowid out of order) ends
//! the scan with [`Broken`], and the caller hands the rest of the table to
//! SQLite, which reads it (or says what is wrong with it) itself.
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Where a column of the result comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The record's column at this index.
    Stored(usize),
    /// A constant: NULL.
    Null,
    /// A constant: the integer 0.
    Zero,
}

/// A value of the current row, as the record stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value {
    Null,
    Int(i64),
    /// UTF-8 bytes at this offset and length in the row's payload.
    Text(u32, u32),
    /// A real number or a blob: read by SQLite, not here.
    Other,
}

/// The scan cannot go on from the pages (a page or cell that is not what
/// the format says); what it met, for the debug log.
#[derive(Debug)]
pub(crate) struct Broken(pub(crate) String);

fn broken<T>(what: impl Into<String>) -> Result<T, Broken> {
    Err(Broken(what.into()))
}

/// SQLite's own limit on a B-tree's depth (`BTCURSOR_MAX_DEPTH`).
const MAX_DEPTH: usize = 20;

/// The file's layout, from its first page.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    page_size: usize,
    /// Bytes of each page the B-tree uses (the page less its reserved tail).
    usable: usize,
    /// Pages in the file.
    pages: u64,
}

impl Layout {
    /// The layout of `file`'s database; None where this reader does not
    /// read it (a WAL database, text not in UTF-8, a header it does not know).
    pub(crate) fn read(file: &File) -> Option<Layout> {
        let mut h = [0u8; 100];
        file.read_exact_at(&mut h, 0).ok()?;
        if &h[..16] != b"SQLite format 3\0" {
            return None;
        }
        let page_size = match u16::from_be_bytes([h[16], h[17]]) {
            1 => 65_536,
            n if n >= 512 && n.is_power_of_two() => usize::from(n),
            _ => return None,
        };
        // 1 and 1: rollback journal. 2 is WAL, whose log may hold pages newer than the file's.
        if (h[18], h[19]) != (1, 1) {
            return None;
        }
        let usable = page_size - usize::from(h[20]);
        // UTF-8 text only; schema formats 1 to 4.
        let encoding = u32::from_be_bytes([h[56], h[57], h[58], h[59]]);
        let format = u32::from_be_bytes([h[44], h[45], h[46], h[47]]);
        if usable < 480 || encoding != 1 || !(1..=4).contains(&format) {
            return None;
        }
        let pages = file.metadata().ok()?.len() / page_size as u64;
        Some(Layout { page_size, usable, pages })
    }
}

/// A page read into memory, and where its cells are.
struct Page {
    bytes: Vec<u8>,
    /// Offset of the B-tree page header (100 on page 1).
    header: usize,
    cells: usize,
    /// The next cell (on an interior page, cell `cells` is the right-most child).
    next: usize,
}

impl Page {
    fn kind(&self) -> u8 {
        self.bytes[self.header]
    }

    /// Offset of cell `i`'s content, checked to lie in the page.
    fn cell(&self, i: usize, usable: usize) -> Result<usize, Broken> {
        let pointers = self.header + if self.kind() == LEAF { 8 } else { 12 };
        let at = pointers + 2 * i;
        let Some(p) = self.bytes.get(at..at + 2) else { return broken("cell pointer past the page") };
        let off = usize::from(u16::from_be_bytes([p[0], p[1]]));
        if off < pointers || off >= usable {
            return broken(format!("cell {i} at offset {off}, outside the page"));
        }
        Ok(off)
    }

    /// The child page of an interior page's cell `i` (`cells`: the right-most).
    fn child(&self, i: usize, usable: usize) -> Result<u32, Broken> {
        let at = if i == self.cells { self.header + 8 } else { self.cell(i, usable)? };
        let Some(p) = self.bytes.get(at..at + 4) else { return broken("child pointer past the page") };
        Ok(u32::from_be_bytes([p[0], p[1], p[2], p[3]]))
    }
}

const INTERIOR: u8 = 0x05;
const LEAF: u8 = 0x0D;

/// A table's rows in stored order, each with the values of the columns asked for.
pub(crate) struct PageScan {
    file: File,
    layout: Layout,
    /// The interior pages from the root down to the current leaf.
    path: Vec<Page>,
    leaf: Page,
    /// Pages no longer on the path, kept for their buffers.
    spare: Vec<Vec<u8>>,
    /// The stored columns asked for: (index in the record, result column), by index.
    stored: Vec<(usize, usize)>,
    /// Per result column, the value of the current row.
    values: Vec<Value>,
    /// The payload of a row that spills into overflow pages, gathered.
    spilled: Vec<u8>,
    /// Where the current row's payload is: in the leaf at this offset, or (None) in `spilled`.
    payload: Option<usize>,
    rowid: Option<i64>,
}

impl PageScan {
    /// The table whose B-tree starts at page `root` of the database at
    /// `path`, its result columns read from `columns`. None where this reader
    /// does not read the file ([`Layout::read`]).
    pub(crate) fn open(path: &Path, root: u32, columns: Vec<Source>) -> Option<PageScan> {
        let file = File::open(path).ok()?;
        let layout = Layout::read(&file)?;
        let mut stored: Vec<(usize, usize)> = columns
            .iter()
            .enumerate()
            .filter_map(|(out, s)| match s {
                Source::Stored(i) => Some((*i, out)),
                _ => None,
            })
            .collect();
        stored.sort_unstable();
        let values = columns.iter().map(|s| if *s == Source::Zero { Value::Int(0) } else { Value::Null }).collect();
        let empty = || Page { bytes: Vec::new(), header: 0, cells: 0, next: 0 };
        let mut scan = PageScan {
            file,
            layout,
            path: Vec::new(),
            leaf: empty(),
            spare: Vec::new(),
            stored,
            values,
            spilled: Vec::new(),
            payload: None,
            rowid: None,
        };
        scan.descend(root).ok()?;
        Some(scan)
    }

    /// The rowid of the current row; None before the first.
    pub(crate) fn rowid(&self) -> Option<i64> {
        self.rowid
    }

    /// The value of result column `col` in the current row.
    #[inline]
    pub(crate) fn value(&self, col: usize) -> Value {
        self.values.get(col).copied().unwrap_or(Value::Null)
    }

    /// The bytes of a text value of the current row.
    pub(crate) fn text(&self, offset: u32, len: u32) -> &[u8] {
        let payload = match self.payload {
            Some(at) => &self.leaf.bytes[at..],
            None => &self.spilled[..],
        };
        &payload[offset as usize..(offset + len) as usize]
    }

    fn read_page(&mut self, number: u32) -> Result<Page, Broken> {
        let Layout { page_size, usable, pages } = self.layout;
        if number == 0 || u64::from(number) > pages {
            return broken(format!("page {number} of {pages}"));
        }
        let mut bytes = self.spare.pop().unwrap_or_default();
        bytes.resize(page_size, 0);
        if let Err(e) = self.file.read_exact_at(&mut bytes, (u64::from(number) - 1) * page_size as u64) {
            return broken(format!("page {number}: {e}"));
        }
        let header = if number == 1 { 100 } else { 0 };
        let kind = bytes[header];
        if kind != LEAF && kind != INTERIOR {
            return broken(format!("page {number} is of kind {kind}, not a table's"));
        }
        let cells = usize::from(u16::from_be_bytes([bytes[header + 3], bytes[header + 4]]));
        let pointers = header + if kind == LEAF { 8 } else { 12 };
        if pointers + 2 * cells > usable {
            return broken(format!("page {number}: {cells} cells do not fit"));
        }
        Ok(Page { bytes, header, cells, next: 0 })
    }

    /// Down from page `number` to the first leaf under it, along first children.
    fn descend(&mut self, mut number: u32) -> Result<(), Broken> {
        loop {
            if self.path.len() >= MAX_DEPTH {
                return broken("a B-tree deeper than SQLite allows");
            }
            let page = self.read_page(number)?;
            if page.kind() == LEAF {
                let old = std::mem::replace(&mut self.leaf, page);
                self.spare.push(old.bytes);
                return Ok(());
            }
            number = page.child(0, self.layout.usable)?;
            self.path.push(Page { next: 1, ..page });
        }
    }

    /// Moves to the next row: false past the last.
    #[inline]
    pub(crate) fn next(&mut self) -> Result<bool, Broken> {
        while self.leaf.next >= self.leaf.cells {
            // The leaf is done: up to the first page with a child left, and down its next child.
            loop {
                let Some(top) = self.path.last_mut() else { return Ok(false) };
                if top.next <= top.cells {
                    let i = top.next;
                    top.next += 1;
                    let child = top.child(i, self.layout.usable)?;
                    self.descend(child)?;
                    break;
                }
                let done = self.path.pop().expect("a page on the path");
                self.spare.push(done.bytes);
            }
        }
        let i = self.leaf.next;
        self.leaf.next += 1;
        self.row(i)
    }

    /// Reads leaf cell `i` into the current row.
    fn row(&mut self, i: usize) -> Result<bool, Broken> {
        let usable = self.layout.usable;
        let at = self.leaf.cell(i, usable)?;
        let cell = &self.leaf.bytes[..usable];
        let (size, n) = varint(cell, at).ok_or_else(|| Broken("a cell's size past the page".into()))?;
        let (rowid, m) = varint(cell, at + n).ok_or_else(|| Broken("a cell's rowid past the page".into()))?;
        let rowid = rowid as i64;
        if self.rowid.is_some_and(|last| rowid <= last) {
            return broken(format!("rowid {rowid} after {}", self.rowid.unwrap_or_default()));
        }
        let start = at + n + m;
        // SQLite's hard limit on a value (and so a row) is 2^31 - 1 bytes; and it fits the file.
        let fits = |s: &usize| *s <= i32::MAX as usize && *s as u64 <= self.layout.pages * usable as u64;
        let size = usize::try_from(size).ok().filter(fits);
        let size = size.ok_or_else(|| Broken(format!("row {rowid}: a payload larger than SQLite writes")))?;
        let local = local_size(size, usable);
        // A payload that spills ends on the leaf with its first overflow page's number.
        if start + local + if local < size { 4 } else { 0 } > usable {
            return broken("a payload past its page");
        }
        if local == size {
            self.payload = Some(start);
        } else {
            self.spill(start, local, size)?;
            self.payload = None;
        }
        self.decode(size, rowid)?;
        // The row is read: SQLite, should it take over, starts past it, not before.
        self.rowid = Some(rowid);
        Ok(true)
    }

    /// Gathers a payload of `size` bytes whose first `local` lie at `start`
    /// of the leaf and the rest in its chain of overflow pages.
    fn spill(&mut self, start: usize, local: usize, size: usize) -> Result<(), Broken> {
        let Layout { page_size, usable, pages } = self.layout;
        let mut spilled = std::mem::take(&mut self.spilled);
        spilled.clear();
        spilled.extend_from_slice(&self.leaf.bytes[start..start + local]);
        let p = &self.leaf.bytes[start + local..start + local + 4];
        let mut next = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
        let mut page = vec![0u8; page_size];
        while spilled.len() < size {
            if next == 0 || u64::from(next) > pages {
                self.spilled = spilled;
                return broken(format!("overflow page {next} of {pages}"));
            }
            if let Err(e) = self.file.read_exact_at(&mut page, (u64::from(next) - 1) * page_size as u64) {
                self.spilled = spilled;
                return broken(format!("overflow page {next}: {e}"));
            }
            let take = (size - spilled.len()).min(usable - 4);
            spilled.extend_from_slice(&page[4..4 + take]);
            next = u32::from_be_bytes([page[0], page[1], page[2], page[3]]);
        }
        self.spilled = spilled;
        Ok(())
    }

    /// The asked columns' values of the current row's record (`size` bytes).
    #[inline]
    fn decode(&mut self, size: usize, rowid: i64) -> Result<(), Broken> {
        let payload = match self.payload {
            Some(at) => &self.leaf.bytes[at..at + size],
            None => &self.spilled[..size],
        };
        let bad = |what: &str| Broken(format!("row {rowid}: {what}"));
        let (header, mut h) = serial_at(payload, 0).ok_or_else(|| bad("a record header past the payload"))?;
        let header = usize::try_from(header)
            .ok()
            .filter(|&n| n <= size)
            .ok_or_else(|| bad("a record header past the payload"))?;
        let types = &payload[..header];
        let (mut body, mut column) = (header, 0);
        // The stored column read last, and its value (one may be asked for twice).
        let mut last: Option<(usize, Value)> = None;
        for &(index, out) in &self.stored {
            if let Some((i, v)) = last.filter(|(i, _)| *i == index) {
                self.values[out] = v;
                last = Some((i, v));
                continue;
            }
            // Past the columns before it, by their lengths only.
            let v = loop {
                if h >= header {
                    // A row written before its table grew (ALTER TABLE ADD COLUMN):
                    // the column's default, which the caller checked is NULL.
                    break Value::Null;
                }
                let (serial, n) = serial_at(types, h).ok_or_else(|| bad("a serial type past the header"))?;
                h += n;
                let len = serial_len(serial).filter(|&l| l <= size).ok_or_else(|| bad("a serial type of no value"))?;
                let at = body;
                body += len;
                column += 1;
                if column - 1 == index {
                    if body > size {
                        return Err(bad("a value past the payload"));
                    }
                    break value(serial, &payload[at..body], at);
                }
            };
            self.values[out] = v;
            last = Some((index, v));
        }
        Ok(())
    }
}

/// The length of a value of serial type `serial` (§2.1); None for the reserved types 10 and 11.
#[inline(always)]
fn serial_len(serial: u64) -> Option<usize> {
    const LEN: [u8; 12] = [0, 1, 2, 3, 4, 6, 8, 8, 0, 0, u8::MAX, u8::MAX];
    match LEN.get(serial as usize) {
        Some(&u8::MAX) => None,
        Some(&len) => Some(usize::from(len)),
        None => usize::try_from((serial - 12) / 2).ok(),
    }
}

/// The value of serial type `serial` whose bytes are `bytes`, at `at` in the payload.
#[inline(always)]
fn value(serial: u64, bytes: &[u8], at: usize) -> Value {
    match serial {
        0 => Value::Null,
        1..=6 => Value::Int(int(bytes)),
        8 => Value::Int(0),
        9 => Value::Int(1),
        s if s >= 13 && s % 2 == 1 => Value::Text(at as u32, bytes.len() as u32),
        _ => Value::Other,
    }
}

/// A varint of a record's header: nearly always one byte.
#[inline(always)]
fn serial_at(bytes: &[u8], at: usize) -> Option<(u64, usize)> {
    match *bytes.get(at)? {
        b if b < 0x80 => Some((u64::from(b), 1)),
        _ => varint(bytes, at),
    }
}

/// Bytes of a payload of `size` bytes kept on a table leaf page with
/// `usable` bytes (§1.6: the rest goes to overflow pages).
fn local_size(size: usize, usable: usize) -> usize {
    let max = usable - 35;
    if size <= max {
        return size;
    }
    let min = (usable - 12) * 32 / 255 - 23;
    let k = min + (size - min) % (usable - 4);
    if k <= max {
        k
    } else {
        min
    }
}

/// A big-endian two's-complement integer of 1 to 8 bytes.
#[inline]
fn int(bytes: &[u8]) -> i64 {
    let mut v: i64 = if bytes[0] & 0x80 != 0 { -1 } else { 0 };
    for &b in bytes {
        v = (v << 8) | i64::from(b);
    }
    v
}

/// SQLite's variable-length integer at `at` (1 to 9 bytes), and its length.
#[inline]
fn varint(bytes: &[u8], at: usize) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for i in 0..8 {
        let b = *bytes.get(at + i)?;
        v = (v << 7) | u64::from(b & 0x7F);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    let b = *bytes.get(at + 8)?;
    Some(((v << 8) | u64::from(b), 9))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_integers_as_the_format_writes_them() {
        assert_eq!(varint(&[0x05], 0), Some((5, 1)));
        assert_eq!(varint(&[0x81, 0x00], 0), Some((128, 2)));
        assert_eq!(varint(&[0xFF; 9], 0), Some((u64::MAX, 9)));
        assert_eq!(varint(&[0x81], 0), None);
        assert_eq!(int(&[0xFF]), -1);
        assert_eq!(int(&[0x00, 0x80]), 128);
        assert_eq!(int(&[0xFF, 0xFF, 0xFE]), -2);
        assert_eq!(int(&[0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]), i64::MAX);
    }

    #[test]
    fn local_payloads_follow_the_format() {
        // 4,096-byte pages: up to 4,061 bytes stay on the leaf.
        assert_eq!(local_size(4061, 4096), 4061);
        // Past it, at least 489 bytes; the rest in whole overflow pages of 4,092 where that leaves at most 4,061.
        assert_eq!(local_size(4062, 4096), 489);
        assert_eq!(local_size(100_000, 4096), 489 + (100_000 - 489) % 4092);
        assert_eq!(local_size(4092 + 4061, 4096), 4061);
        assert_eq!(local_size(4092 + 4062, 4096), 489);
    }
}
