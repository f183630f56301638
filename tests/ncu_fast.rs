//! The parallel details reader (parse::ncu's `ingest`) gives the region
//! reports of the streaming reader, on every real details file of the corpus,
//! with blocks small enough that launches straddle reads; and it fails the
//! same way on broken files.
use std::path::Path;

use llmperf::aggregate::ncu::{Builder, Options, ScopeReport, Stamp};
use llmperf::aggregate::roofline::Roofline;
use llmperf::parse::ncu as reader;
use llmperf::regions::Attribution;

const DETAILS: [&str; 4] = [
    "llm-perf-opt/reports/20251107-dsocr/ncu-v2/kernel_0013_178ff748c21ea29399b8568af3cd1f02/ncu.details.csv",
    NVTX_DETAILS,
    "real/derived/gpu-ray-tracer/report.ncu2022.3.details.csv",
    "real/derived/parallel_programming_ex3/profile.ncu2024.1.details.csv",
];
const NVTX_DETAILS: &str = "real/derived/nsight-training/manual_nvtx.ncu2022.3.details.csv";

fn options() -> Options {
    Options { aggregate: true, ..Options::default() }
}

/// The region scopes and the roofline the builder gathered alongside.
fn streamed(path: &Path, how: Attribution, regions: &[String]) -> (Vec<ScopeReport>, Roofline) {
    let mut b = Builder::new(options());
    for l in reader::open(path).unwrap() {
        b.add_launch(&l.unwrap(), how, regions);
    }
    let roofline = b.take_roofline().finish();
    (b.finish(&Stamp::default()), roofline)
}

fn fast(
    path: &Path,
    how: Attribution,
    regions: &[String],
    block: usize,
) -> Result<(Vec<ScopeReport>, Roofline), llmperf::error::Error> {
    let mut b = Builder::new(options());
    assert!(reader::ingest_blocks(path, &mut b, how, regions, block)?, "the fast path takes {}", path.display());
    let roofline = b.take_roofline().finish();
    Ok((b.finish(&Stamp::default()), roofline))
}

/// Equal, with floating-point sums compared to 1e-12 (blocks add in another order).
fn assert_same(a: &serde_json::Value, b: &serde_json::Value, at: &str) {
    match (a, b) {
        (serde_json::Value::Number(x), serde_json::Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!((x - y).abs() <= 1e-12 * x.abs().max(1.0), "{at}: {x} vs {y}");
        }
        (serde_json::Value::Array(x), serde_json::Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                assert_same(x, y, &format!("{at}/{i}"));
            }
        }
        (serde_json::Value::Object(x), serde_json::Value::Object(y)) => {
            assert_eq!(x.keys().collect::<Vec<_>>(), y.keys().collect::<Vec<_>>(), "{at}");
            for (k, v) in x {
                assert_same(v, &y[k], &format!("{at}/{k}"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

/// Region reports and roofline alike (kernel_0013 carries FLOP and DRAM counters).
#[test]
fn fast_and_streaming_readers_agree_on_every_real_details_file() {
    for name in DETAILS {
        let Some(path) = corpus!(name) else { return };
        for (how, regions) in [(Attribution::NvtxStack, vec![]), (Attribution::Range, vec!["A".to_string()])] {
            let want = serde_json::to_value(streamed(&path, how, &regions)).unwrap();
            for block in [1 << 20, 4096, 1000] {
                let got = serde_json::to_value(fast(&path, how, &regions, block).unwrap()).unwrap();
                assert_same(&want, &got, &format!("{name} block {block}"));
            }
        }
    }
}

#[test]
fn broken_files_fail_with_file_and_line() {
    let Some(source) = corpus!(NVTX_DETAILS) else { return };
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read(source).unwrap();
    let cut = dir.path().join("cut.csv");
    std::fs::write(&cut, &text[..text.len() * 2 / 3 + 3]).unwrap();
    for block in [1 << 20, 4096] {
        let e = fast(&cut, Attribution::NvtxStack, &[], block).unwrap_err();
        assert!(e.message.starts_with(&format!("{}:", cut.display())), "{}", e.message);
        assert!(e.message.contains("ends inside a row"), "{}", e.message);
        assert!(e.hint.is_some());
    }
    let mut bad = text.clone();
    let at = bad.windows(5).position(|w| w == b"daxpy").unwrap();
    bad[at] = 0xff;
    let latin1 = dir.path().join("latin1.csv");
    std::fs::write(&latin1, &bad).unwrap();
    let line = 1 + text[..at].iter().filter(|&&b| b == b'\n').count();
    let e = fast(&latin1, Attribution::NvtxStack, &[], 1 << 20).unwrap_err();
    assert!(e.message.contains(&format!("latin1.csv:{line}: invalid UTF-8")), "{} (want line {line})", e.message);
}

/// Copies of a real details file, each edited the way a damaged or
/// hand-edited export would be: a negative GPU time, a result whose rows
/// resume after another's, a metric row cut before its value. Both readers
/// (the streaming one and the parallel one, whatever its blocks) refuse each
/// with the file, the line and what is wrong; none is summed or counted.
#[test]
fn edited_results_are_refused_by_both_readers_at_their_line() {
    let Some(source) = corpus!(NVTX_DETAILS) else { return };
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(source).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let id = |l: &str| l.split(',').next().unwrap().trim_matches('"').to_string();
    // 1-based line numbers of each result's rows.
    let of = |want: &str| -> Vec<usize> { (1..lines.len()).filter(|&i| id(lines[i]) == want).map(|i| i + 1).collect() };
    let (zero, one) = (of("0"), of("1"));
    assert_eq!((zero.len(), one.len()), (34, 34), "the corpus file's results");
    let write = |name: &str, rows: Vec<String>| {
        let path = dir.path().join(name);
        std::fs::write(&path, rows.join("\n") + "\n").unwrap();
        path
    };
    let owned = |v: &[&str]| v.iter().map(|l| l.to_string()).collect::<Vec<_>>();

    // Result 1's Duration (84.48 us) made negative: its line is the result's first.
    let mut negative = owned(&lines);
    let at = one.iter().map(|l| l - 1).find(|&i| lines[i].contains(r#""Duration","usecond","#)).unwrap();
    negative[at] = lines[at].replace(r#""Duration","usecond",""#, r#""Duration","usecond","-"#);
    let negative = (write("negative.csv", negative), one[0], "result ID 1 has a negative GPU time (-");

    // The second half of result 0's rows moved after result 1's.
    let half = zero.len() / 2;
    let mut order: Vec<&str> = vec![lines[0]];
    order.extend(zero[..half].iter().map(|l| lines[l - 1]));
    order.extend(one.iter().map(|l| lines[l - 1]));
    order.extend(zero[half..].iter().map(|l| lines[l - 1]));
    order.extend(lines[one[one.len() - 1]..].iter().copied());
    let resumed_at = 1 + half + one.len() + 1;
    let resumed = (write("resumed.csv", owned(&order)), resumed_at, "result ID 0 again, after other results");

    // A metric row of result 1 cut after its Metric Name (its unit and value gone).
    let mut short = owned(&lines);
    let row = one[3] - 1;
    // A metric row ends `,"Metric Unit","Metric Value",` (an empty Rule Name last).
    short[row] = lines[row].rsplitn(4, ',').last().unwrap().to_string();
    let short = (
        write("short.csv", short),
        one[3],
        "a row of 12 field(s) that stops before the Metric Value column (field 14)",
    );

    for (path, line, what) in [negative, resumed, short] {
        let want = format!("{}:{line}: {what}", path.display());
        let streamed = reader::open_any(&path).unwrap().1.collect::<Result<Vec<_>, _>>().unwrap_err();
        assert!(streamed.message.starts_with(&want), "streaming: {}\nwant {want}", streamed.message);
        assert!(streamed.hint.is_some());
        for block in [1 << 20, 4096, 64] {
            let e = fast(&path, Attribution::NvtxStack, &[], block).unwrap_err();
            assert!(e.message.starts_with(&want), "block {block}: {}\nwant {want}", e.message);
            assert!(e.hint.is_some());
        }
        // The command exits 6 (unparseable input) and writes no report of the file.
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_llmperf"))
            .args(["-q", "import", "ncu"])
            .arg(&path)
            .arg("-o")
            .arg(dir.path().join(format!("run-{line}")))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(6), "{stderr}");
        assert!(stderr.contains(&want), "{stderr}");
    }
}

#[test]
fn files_it_does_not_handle_are_left_to_the_streaming_reader() {
    // A raw page, and a details file behind `==PROF==` lines.
    let Some(raw) = corpus!("real/derived/nsight-training/manual_nvtx.ncu2022.3.raw.csv") else { return };
    let Some(details) = corpus!(NVTX_DETAILS) else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut b = Builder::new(options());
    assert!(!reader::ingest(&raw, &mut b, Attribution::NvtxStack, &[]).unwrap());
    let prof = dir.path().join("prof.csv");
    let mut text = b"==PROF== Connected to process 1\n".to_vec();
    text.extend(std::fs::read(details).unwrap());
    std::fs::write(&prof, text).unwrap();
    assert!(!reader::ingest(&prof, &mut b, Attribution::NvtxStack, &[]).unwrap());
    assert_eq!(b.results(), 0);
}

/// Launches of a kernel repeat their metric rows, and the fast reader parses
/// only the value of a row that starts like the same row of the launch before
/// (its template). A real file's launches repeated with new IDs, every 7th
/// with its rows in reverse order and every 5th with a value of another form
/// (`n/a`, grouped digits): templates that match, miss, and are learned again
/// give the streaming reader's reports, whatever the blocks.
#[test]
fn row_templates_give_the_streaming_readers_reports() {
    let Some(source) = corpus!(NVTX_DETAILS) else { return };
    let text = std::fs::read_to_string(source).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let mut launches: Vec<Vec<&str>> = Vec::new();
    for line in lines {
        let id = line.split(',').next().unwrap();
        match launches.last_mut() {
            Some(l) if l[0].split(',').next().unwrap() == id => l.push(line),
            _ => launches.push(vec![line]),
        }
    }
    assert_eq!(launches.len(), 3, "the corpus file's launches");
    let mut out = format!("{header}\n");
    for n in 0..120 {
        let mut rows = launches[n % 3].clone();
        if n % 7 == 6 {
            rows.reverse();
        }
        for (i, row) in rows.iter().enumerate() {
            let (_, rest) = row.split_once(',').unwrap();
            let mut row = format!("\"{n}\",{rest}");
            if n % 5 == 4 && i == 3 {
                let (head, _) = row.rsplit_once(",\"").unwrap();
                row = format!("{head},\"{}\"", if n % 2 == 0 { "n/a" } else { "1,234" });
            }
            out.push_str(&row);
            out.push('\n');
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("repeated.csv");
    std::fs::write(&path, out).unwrap();
    let want = serde_json::to_value(streamed(&path, Attribution::NvtxStack, &[])).unwrap();
    assert_eq!(
        want[0][0]["totals"]["calls"].as_u64().unwrap() + want[0][0]["totals"]["untimed_calls"].as_u64().unwrap(),
        120
    );
    for block in [1 << 20, 4096, 1000] {
        let got = serde_json::to_value(fast(&path, Attribution::NvtxStack, &[], block).unwrap()).unwrap();
        assert_same(&want, &got, &format!("block {block}"));
    }
}
