//! parse: files the user hands us, before any reader sees them: a regular file that
//! can be read (a directory, a FIFO that would block the read, or a device is
//! named as such), and, for text, an encoding the readers handle: UTF-8 with or
//! without a byte-order mark. UTF-16 and CR-only line ends are named with the
//! command that converts them, instead of failing later as "no header".
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use crate::error::{Error, ErrorKind};

const BOM: &[u8] = b"\xEF\xBB\xBF";
/// How much of a text file is looked at for its encoding.
const SNIFF: u64 = 64 << 10;

/// `path` is a regular file this process can open for reading.
pub(crate) fn check(path: &Path) -> Result<(), Error> {
    open(path).map(|_| ())
}

/// Open a file the user passed, refusing what is not a readable regular file.
pub(crate) fn open(path: &Path) -> Result<File, Error> {
    let meta = std::fs::metadata(path).map_err(|e| unreadable(path, &e))?;
    let kind = meta.file_type();
    let what = if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a named pipe (FIFO)")
    } else if kind.is_char_device() || kind.is_block_device() {
        Some("a device")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        None
    };
    if let Some(what) = what {
        return Err(Error::usage(format!("{} is {what}, not a file", path.display()))
            .with_hint("pass a saved report file (.nsys-rep, .qdrep, .sqlite, .ncu-rep or .csv)"));
    }
    File::open(path).map_err(|e| unreadable(path, &e))
}

/// What a file is by its first bytes: enough to tell a user who passed the
/// wrong kind of file what they passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Magic {
    /// Compressed: its name and the command that decompresses it.
    Compressed(&'static str, &'static str),
    Sqlite,
    /// `NVR\0`: an Nsight Compute report.
    NcuReport,
    /// `NVIDIA Tegra Pro…`: an Nsight Systems report (.nsys-rep, .qdrep).
    NsysReport,
    Other,
}

/// The [`Magic`] of `path` (Other when it cannot be read).
pub(crate) fn magic(path: &Path) -> Magic {
    let mut head = [0u8; 16];
    let n = File::open(path).and_then(|f| f.take(16).read(&mut head)).unwrap_or(0);
    let head = &head[..n];
    let table: [(&[u8], Magic); 8] = [
        (b"\x1f\x8b", Magic::Compressed("gzip", "gunzip -k")),
        (b"\x28\xb5\x2f\xfd", Magic::Compressed("zstd", "zstd -d")),
        (b"\xfd7zXZ\0", Magic::Compressed("xz", "xz -dk")),
        (b"BZh", Magic::Compressed("bzip2", "bunzip2 -k")),
        (b"PK\x03\x04", Magic::Compressed("zip", "unzip")),
        (b"SQLite format 3\0", Magic::Sqlite),
        (b"NVR\0", Magic::NcuReport),
        (b"NVIDIA Tegra Pro", Magic::NsysReport),
    ];
    table.into_iter().find(|(m, _)| head.starts_with(m)).map_or(Magic::Other, |(_, kind)| kind)
}

/// `path` is a regular file that `llmperf import <importer>` can read, as far
/// as its first bytes tell.
pub(crate) fn check_kind(path: &Path, importer: &str) -> Result<(), Error> {
    check(path)?;
    wrong_kind(path, magic(path), importer).map_or(Ok(()), Err)
}

/// An error for a file `import KIND` cannot read because of what it is, or
/// None when `magic` is something that importer reads.
fn wrong_kind(path: &Path, magic: Magic, importer: &str) -> Option<Error> {
    let shown = path.display();
    let (what, hint) = match (magic, importer) {
        // A torch trace is read through gzip as it comes.
        (Magic::Compressed("gzip", _), "torch") => return None,
        (Magic::Compressed(name, cmd), _) => (
            format!("a {name}-compressed file"),
            format!("decompress it first (`{cmd} {shown}`), then import what it holds"),
        ),
        (Magic::Sqlite, "ncu") => {
            ("a SQLite database (an nsys export?)".into(), format!("import it with `llmperf import nsys {shown}`"))
        }
        (Magic::NsysReport, "ncu") => {
            ("an Nsight Systems report".into(), format!("import it with `llmperf import nsys {shown}`"))
        }
        (Magic::NcuReport, "nsys" | "torch") => {
            ("an Nsight Compute report".into(), format!("import it with `llmperf import ncu {shown}`"))
        }
        (Magic::Sqlite, "torch") => {
            ("a SQLite database (an nsys export?)".into(), format!("import it with `llmperf import nsys {shown}`"))
        }
        (Magic::NsysReport, "torch") => {
            ("an Nsight Systems report".into(), format!("import it with `llmperf import nsys {shown}`"))
        }
        _ => return None,
    };
    Some(
        Error::new(
            ErrorKind::Unparseable,
            format!("{shown} is {what}, which `llmperf import {importer}` does not read"),
        )
        .with_hint(hint),
    )
}

/// A text file opened after its UTF-8 byte-order mark, if it has one.
/// UTF-16 and CR-only files are refused with the command that converts them.
pub(crate) fn open_text(path: &Path) -> Result<File, Error> {
    let mut file = open(path)?;
    let mut head = Vec::new();
    (&mut file).take(SNIFF).read_to_end(&mut head).map_err(|e| unreadable(path, &e))?;
    if let Some(e) = encoding_error(&head, path) {
        return Err(e);
    }
    let skip = if head.starts_with(BOM) { BOM.len() as u64 } else { 0 };
    file.seek(SeekFrom::Start(skip)).map_err(|e| unreadable(path, &e))?;
    Ok(file)
}

fn encoding_error(head: &[u8], path: &Path) -> Option<Error> {
    let utf16 = head.starts_with(b"\xFF\xFE") || head.starts_with(b"\xFE\xFF") || bare_utf16(head);
    if utf16 {
        return Some(
            Error::new(ErrorKind::Unparseable, format!("{} is UTF-16 text; ncu and nsys write UTF-8", path.display()))
                .with_hint(format!("convert it: iconv -f UTF-16 -t UTF-8 {0} > {0}.utf8.csv", path.display())),
        );
    }
    let cr_only = head.contains(&b'\r') && !head.contains(&b'\n');
    cr_only.then(|| {
        Error::new(
            ErrorKind::Unparseable,
            format!("{} ends its lines with CR only (no newline); ncu and nsys end lines with \\n", path.display()),
        )
        .with_hint(format!("convert it: tr '\\r' '\\n' < {0} > {0}.unix.csv", path.display()))
    })
}

/// ASCII text in UTF-16 without a byte-order mark: every other byte is zero.
fn bare_utf16(head: &[u8]) -> bool {
    let pairs: Vec<&[u8]> = head.chunks_exact(2).take(32).collect();
    let all = |f: fn(&[u8]) -> bool| pairs.len() >= 4 && pairs.iter().all(|p| f(p));
    all(|p| p[0] != 0 && p[1] == 0) || all(|p| p[0] == 0 && p[1] != 0)
}

fn unreadable(path: &Path, e: &std::io::Error) -> Error {
    let hint = match e.kind() {
        std::io::ErrorKind::NotFound => "check the path of the report (.nsys-rep, .qdrep, .sqlite, .ncu-rep or .csv)",
        std::io::ErrorKind::PermissionDenied => "check the file's permissions (ls -l); llmperf only reads it",
        _ => "check that the file can be read (cat it to a pipe)",
    };
    let what = match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_string(),
        _ => format!("cannot read it: {e}"),
    };
    Error::usage(format!("{}: {what}", path.display())).with_hint(hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(bytes: &[u8]) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), bytes).unwrap();
        f
    }

    #[test]
    fn a_bom_is_skipped_and_plain_utf8_is_untouched() {
        let f = file(b"\xEF\xBB\xBF\"ID\",\"x\"\n");
        let mut text = String::new();
        open_text(f.path()).unwrap().read_to_string(&mut text).unwrap();
        assert_eq!(text, "\"ID\",\"x\"\n");
        let f = file(b"\"ID\"\n");
        text.clear();
        open_text(f.path()).unwrap().read_to_string(&mut text).unwrap();
        assert_eq!(text, "\"ID\"\n");
    }

    #[test]
    fn utf16_and_cr_only_are_named() {
        let utf16: Vec<u8> = "\"ID\",\"Kernel Name\"\r\n".encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
        let e = open_text(file(&utf16).path()).unwrap_err();
        assert!(e.message.contains("UTF-16") && e.hint.unwrap().contains("iconv"), "{}", e.message);
        let e = open_text(file(b"a,b\rc,d\r").path()).unwrap_err();
        assert!(e.message.contains("CR only") && e.hint.unwrap().starts_with("convert it: tr"), "{}", e.message);
        // CRLF is fine.
        assert!(open_text(file(b"a,b\r\nc,d\r\n").path()).is_ok());
    }

    #[test]
    fn directories_fifos_and_devices_are_not_files() {
        let dir = tempfile::tempdir().unwrap();
        let e = open(dir.path()).unwrap_err();
        assert!(e.message.ends_with("is a directory, not a file"), "{}", e.message);
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let e = open(&fifo).unwrap_err();
        assert!(e.message.contains("named pipe"), "{}", e.message);
        let e = open(Path::new("/dev/null")).unwrap_err();
        assert!(e.message.contains("a device"), "{}", e.message);
        let e = open(&dir.path().join("missing")).unwrap_err();
        assert!(e.message.ends_with(": no such file") && e.kind == ErrorKind::Usage, "{}", e.message);
    }
}
