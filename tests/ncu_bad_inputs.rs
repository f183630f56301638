//! The bad-input corpus of the ncu readers: every broken file gives an error
//! naming the file (and the line where there is one) with a hint, never a
//! panic. Broken files are made here by cutting, corrupting or renaming real
//! files of the shared corpus; no row is invented. (tests/bad_inputs.rs does
//! the same for the command line.)
use std::path::{Path, PathBuf};

use llmperf::parse::ncu as ncu_csv;

/// The bytes of a corpus file (None when the corpus lacks it: the test is skipped).
fn bytes(path: Option<PathBuf>) -> Option<Vec<u8>> {
    Some(std::fs::read(path?).unwrap())
}

/// Read every launch; the first error, if any.
fn read(path: &Path) -> Result<usize, llmperf::error::Error> {
    let (_, launches) = ncu_csv::open_any(path)?;
    let mut n = 0;
    for l in launches {
        l?;
        n += 1;
    }
    Ok(n)
}

struct Corpus(tempfile::TempDir);

impl Corpus {
    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.0.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }
}

fn assert_error(path: &Path, wanted: &str) {
    let e = read(path).expect_err(&format!("{} must be an error", path.display()));
    let name = path.file_name().unwrap().to_str().unwrap();
    assert!(e.message.contains(name), "no file name in: {}", e.message);
    assert!(e.message.contains(wanted), "{wanted:?} not in: {}", e.message);
    assert!(e.hint.as_deref().is_some_and(|h| !h.is_empty()), "no hint for: {}", e.message);
}

const DETAILS: &str = "real/derived/nsight-training/manual_nvtx.ncu2022.3.details.csv";
const RAW: &str = "real/derived/nsight-training/manual_nvtx.ncu2022.3.raw.csv";

#[test]
fn empty_and_header_less_files() {
    let c = Corpus(tempfile::tempdir().unwrap());
    assert_error(&c.file("empty.csv", b""), "empty");
    let Some(errors) = bytes(corpus!("llm-perf-opt/outputs/2025-10-30/05-23-00/ncu/raw.csv")) else { return };
    assert_error(&c.file("errors.csv", &errors), "ncu wrote only");
    // Another tool's CSV: nsys stats output is not an ncu CSV.
    let Some(nsys) = bytes(corpus!("real/derived/memfusion/report1.nsys2022.4_gpukernsum.csv")) else { return };
    assert_error(&c.file("nsys.csv", &nsys), "no `\"ID\",...` header");
    // Binary garbage.
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    assert_error(&c.file("garbage.bin", &garbage), "header");
}

#[test]
fn truncated_files_name_the_line() {
    let c = Corpus(tempfile::tempdir().unwrap());
    for (name, src) in [("cut.details.csv", DETAILS), ("cut.raw.csv", RAW)] {
        let Some(text) = bytes(corpus!(src)) else { return };
        for at in [text.len() * 2 / 3 + 5, text.len() - 1] {
            let p = c.file(name, &text[..at]);
            assert_error(&p, "ends in the middle of a row");
            let e = read(&p).unwrap_err();
            assert!(e.message.contains(&format!("{name}:")), "a line number: {}", e.message);
        }
    }
}

#[test]
fn missing_columns_and_wrong_layouts() {
    let c = Corpus(tempfile::tempdir().unwrap());
    let Some(details) = bytes(corpus!(DETAILS)) else { return };
    let Some(raw) = bytes(corpus!(RAW)) else { return };
    let text = String::from_utf8(details).unwrap();
    let no_value = text.replacen("\"Metric Value\"", "\"Value\"", 1);
    assert_error(&c.file("no_value.csv", no_value.as_bytes()), "no column Metric Value");
    let raw = String::from_utf8(raw).unwrap();
    let no_kernel = raw.replacen("\"Kernel Name\"", "\"Name\"", 1);
    assert_error(&c.file("no_kernel.csv", no_kernel.as_bytes()), "no column Kernel Name");
    // A raw page without its units row (the row cut out).
    let mut lines: Vec<&str> = raw.split_inclusive('\n').collect();
    lines.remove(1);
    assert_error(&c.file("no_units.csv", lines.concat().as_bytes()), "expected the units row");
}

#[test]
fn non_utf8_bytes_name_the_line() {
    let c = Corpus(tempfile::tempdir().unwrap());
    let Some(mut text) = bytes(corpus!(DETAILS)) else { return };
    let at = text.windows(11).position(|w| w == &b"daxpy_kernel"[..11]).unwrap();
    text[at] = 0xff;
    let p = c.file("latin1.csv", &text);
    let e = read(&p).unwrap_err();
    assert!(e.message.contains("latin1.csv:") && e.message.contains("UTF-8"), "{}", e.message);
}

#[test]
fn huge_kernel_names_are_kept_whole() {
    let c = Corpus(tempfile::tempdir().unwrap());
    let Some(details) = bytes(corpus!(DETAILS)) else { return };
    let text = String::from_utf8(details).unwrap();
    let huge = format!("daxpy_kernel<{}>", "float, ".repeat(150_000));
    let p = c.file("huge.csv", text.replace("daxpy_kernel", &huge).as_bytes());
    let (_, launches) = ncu_csv::open_any(&p).unwrap();
    let names: Vec<String> = launches.map(|l| l.unwrap().kernel_name).collect();
    assert!(names[1].len() > 1_000_000 && names[1].starts_with("daxpy_kernel<float, "), "{}", names[1].len());
    let dirs = llmperf::run_dir::sanitize_names([huge.as_str()]);
    assert!(dirs[0].len() <= 80);
}
