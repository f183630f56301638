//! parse::json_frames: a JSON document read in chunks and cut into whole
//! values, each handed out as a slice of the buffer for
//! `serde_json::from_slice` (which borrows its strings and reads a slice
//! several times faster than `from_reader` reads a stream a byte at a time).
//! Only the structure is tracked here (strings with their escapes, nesting);
//! the values themselves are parsed, and checked, by serde_json. Memory: the
//! largest single value, plus the chunk being read.
use std::io::Read;
use std::ops::Range;

/// Bytes read from the input at a time.
const CHUNK: usize = 1 << 20;

/// Why the document could not be cut.
#[derive(Debug)]
pub(crate) enum FrameError {
    Io(std::io::Error),
    /// What was wrong, and where (byte offset in the document).
    Syntax(String, u64),
}

pub(crate) struct Frames<R> {
    input: R,
    buf: Vec<u8>,
    /// The next byte not taken.
    pos: usize,
    eof: bool,
    /// Bytes dropped from the front of `buf` so far, and the newlines among them.
    dropped: u64,
    dropped_lines: u64,
    /// Offset just past the last newline dropped.
    dropped_line_start: u64,
}

impl<R: Read> Frames<R> {
    pub(crate) fn new(input: R) -> Self {
        Frames {
            input,
            buf: Vec::with_capacity(CHUNK),
            pos: 0,
            eof: false,
            dropped: 0,
            dropped_lines: 0,
            dropped_line_start: 0,
        }
    }

    /// Read another chunk; false at the end of the input.
    fn fill(&mut self) -> Result<bool, FrameError> {
        if self.eof {
            return Ok(false);
        }
        let len = self.buf.len();
        self.buf.resize(len + CHUNK, 0);
        let n = loop {
            match self.input.read(&mut self.buf[len..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.buf.truncate(len);
                    return Err(FrameError::Io(e));
                }
            }
        };
        self.buf.truncate(len + n);
        self.eof = n == 0;
        Ok(n > 0)
    }

    /// Drop what was taken, once it is most of the buffer.
    fn compact(&mut self) {
        if self.pos < CHUNK / 2 {
            return;
        }
        let gone = &self.buf[..self.pos];
        if let Some(last) = memchr::memrchr(b'\n', gone) {
            self.dropped_lines += memchr::memchr_iter(b'\n', gone).count() as u64;
            self.dropped_line_start = self.dropped + last as u64 + 1;
        }
        self.dropped += self.pos as u64;
        self.buf.drain(..self.pos);
        self.pos = 0;
    }

    /// The offset in the document of the next byte.
    pub(crate) fn offset(&self) -> u64 {
        self.dropped + self.pos as u64
    }

    /// Line and column (from 1) of a document offset not yet dropped.
    pub(crate) fn line_column(&self, offset: u64) -> (u64, u64) {
        let upto = &self.buf[..(offset.saturating_sub(self.dropped) as usize).min(self.buf.len())];
        let lines = memchr::memchr_iter(b'\n', upto).count() as u64;
        let line_start = memchr::memrchr(b'\n', upto).map_or(self.dropped_line_start, |i| self.dropped + i as u64 + 1);
        (self.dropped_lines + lines + 1, offset - line_start + 1)
    }

    fn syntax(&self, what: &str) -> FrameError {
        FrameError::Syntax(what.to_string(), self.offset())
    }

    /// The next byte after whitespace, not taken; None at the end.
    pub(crate) fn peek(&mut self) -> Result<Option<u8>, FrameError> {
        loop {
            while let Some(&b) = self.buf.get(self.pos) {
                if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                    return Ok(Some(b));
                }
                self.pos += 1;
            }
            self.compact();
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    /// Take the next byte after whitespace, which must be `b`.
    pub(crate) fn expect(&mut self, b: u8, what: &str) -> Result<(), FrameError> {
        match self.peek()? {
            Some(got) if got == b => {
                self.pos += 1;
                Ok(())
            }
            Some(_) => Err(self.syntax(&format!("expected {what}"))),
            None => Err(self.syntax(&format!("EOF while parsing the document: expected {what}"))),
        }
    }

    /// The next whole value after whitespace, taken: its bytes' range in
    /// [`Frames::bytes`], good until the next call.
    pub(crate) fn value(&mut self) -> Result<Range<usize>, FrameError> {
        if self.peek()?.is_none() {
            return Err(self.syntax("EOF while parsing the document: expected a value"));
        }
        self.compact();
        let start = self.pos;
        let mut i = start;
        let mut depth = 0usize;
        let mut in_string = false;
        loop {
            let Some(&b) = self.buf.get(i) else {
                if !self.fill()? {
                    // A number or literal may end the document.
                    if !in_string && depth == 0 && i > start {
                        break;
                    }
                    return Err(self.syntax("EOF while parsing the document"));
                }
                continue;
            };
            if in_string {
                // Most of a trace's bytes are in its strings: jump to the next quote or escape.
                if !matches!(b, b'\\' | b'"') {
                    match memchr::memchr2(b'"', b'\\', &self.buf[i..]) {
                        Some(k) => i += k,
                        None => i = self.buf.len(),
                    }
                    continue;
                }
                match b {
                    b'\\' => {
                        // The escaped byte may be in the next chunk.
                        if i + 1 >= self.buf.len() && !self.fill()? {
                            return Err(self.syntax("EOF while parsing a string"));
                        }
                        i += 2;
                        continue;
                    }
                    b'"' => {
                        in_string = false;
                        if depth == 0 {
                            i += 1;
                            break;
                        }
                    }
                    _ => {}
                }
                i += 1;
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'{' | b'[' => depth += 1,
                b'}' | b']' if depth == 0 => break,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        i += 1;
                        break;
                    }
                }
                b',' | b' ' | b'\t' | b'\n' | b'\r' if depth == 0 => break,
                _ => {}
            }
            i += 1;
        }
        self.pos = i;
        Ok(start..i)
    }

    pub(crate) fn bytes(&self, r: Range<usize>) -> &[u8] {
        &self.buf[r]
    }

    /// Nothing but whitespace is left.
    pub(crate) fn end(&mut self) -> Result<(), FrameError> {
        match self.peek()? {
            None => Ok(()),
            Some(_) => Err(self.syntax("trailing characters after the document")),
        }
    }

    /// Take one byte (one [`Frames::peek`] saw).
    pub(crate) fn bump(&mut self) {
        self.pos += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values come out whole whatever the chunk boundaries: strings with
    /// escaped quotes and brackets, nested objects, numbers at the end.
    #[test]
    fn values_come_out_whole_across_chunks() {
        let event = r#"{"name": "a \"quoted\" [x] {y}", "args": {"k": [1, {"z": "\\"}]}, "ts": 1.5}"#;
        let doc = format!("[{}]", vec![event; 3000].join(", "));
        let mut f = Frames::new(std::io::Cursor::new(doc.into_bytes()));
        f.expect(b'[', "[").unwrap();
        let mut n = 0;
        loop {
            let r = f.value().unwrap();
            assert_eq!(f.bytes(r), event.as_bytes());
            n += 1;
            match f.peek().unwrap() {
                Some(b',') => f.bump(),
                Some(b']') => {
                    f.bump();
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(n, 3000);
        f.end().unwrap();
        let mut f = Frames::new(std::io::Cursor::new(b"  42".to_vec()));
        let r = f.value().unwrap();
        assert_eq!(f.bytes(r), b"42");
        let mut f = Frames::new(std::io::Cursor::new(b"[{\"a\": \"cut".to_vec()));
        f.expect(b'[', "[").unwrap();
        assert!(matches!(f.value(), Err(FrameError::Syntax(m, _)) if m.starts_with("EOF while parsing")));
    }
}
