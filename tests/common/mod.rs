//! Helpers shared by the integration tests.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::sync::Mutex;

// Where test data lives and how a skip is recorded: one implementation, the
// unit tests' own.
#[path = "../../src/testdata.rs"]
mod testdata;
#[allow(unused_imports)]
pub use testdata::{corpus_dir, corpus_file, own, skipped};

/// Two nsys sessions at once hang on these machines (REFERENCE §1): every test
/// that starts nsys holds this lock. Every integration test is in one binary
/// (tests/tests.rs), so this one lock serializes them all.
pub static NSYS: Mutex<()> = Mutex::new(());

/// nsys 2022.4 here sometimes hangs converting its capture (REFERENCE §1):
/// tests that capture bound the wait and capture again, five times at most
/// (`make test` on 2026-11-27 saw three hangs in a row on one loaded capture
/// of scripts/findings_demo.py that then passed 3 of 3 on its own; on
/// 2026-11-29 the README's hf example hung four times in a row in `make
/// test`, and three times in a row by hand while cargo built on both cores,
/// then 0 of 3 once it was done: the hang follows the CPU load). Any
/// other hang ends at llmperf's own nsys timeout, well before the tests'
/// (900 s), so that llmperf, not a SIGKILL, stops nsys and its agent.
pub const NSYS_HANG: [&str; 3] =
    ["pipeline.nsys.postprocess_timeout_s=60", "pipeline.nsys.hang_retries=5", "pipeline.nsys.timeout_s=300"];

/// The nsys lock, held by a test while it runs nsys. When the test ends, no
/// nsys process (`nsys profile`, its launcher, its agent `nsys --start-agent`)
/// may be left running: llmperf stops every one it started before it exits.
/// Whatever is left is killed either way, so that one failed test (say, a
/// llmperf killed by the test's own timeout) does not hang every later nsys
/// test behind a stray session (REFERENCE §1).
pub fn nsys_lock() -> NsysGuard {
    NsysGuard(NSYS.lock().unwrap_or_else(|e| e.into_inner()))
}

pub struct NsysGuard(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

impl Drop for NsysGuard {
    fn drop(&mut self) {
        let left = nsys_processes();
        for (pid, _) in &left {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        if !std::thread::panicking() {
            let left: Vec<&String> = left.iter().map(|(_, c)| c).collect();
            assert!(left.is_empty(), "nsys processes left running after the test (now killed): {left:?}");
        }
    }
}

/// Command lines of the `nsys --start-agent` processes on this machine.
pub fn nsys_agents() -> Vec<String> {
    nsys_processes().into_iter().map(|(_, c)| c).filter(|c| c.contains("--start-agent")).collect()
}

/// Pids and command lines of nsys's own processes on this machine: `nsys
/// profile`, `nsys-launcher`, `nsys-tee` and agents.
fn nsys_processes() -> Vec<(i32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<i32>().ok()?, e.path())))
        .filter_map(|(pid, path)| Some((pid, std::fs::read(path.join("cmdline")).ok()?)))
        .map(|(pid, c)| (pid, String::from_utf8_lossy(&c).replace('\0', " ")))
        .filter(|(_, c)| {
            let program = c.split(' ').next().unwrap_or_default();
            let name = program.rsplit('/').next().unwrap_or_default();
            (name == "nsys" && (c.contains(" profile ") || c.contains("--start-agent")))
                || name.starts_with("nsys-launcher")
                || name == "nsys-tee"
        })
        .collect()
}

/// Whether this host has a usable NVIDIA GPU (`nvidia-smi -L` succeeds):
/// tests whose oracle is "ncu matched but profiled nothing" or "no kernels"
/// hold only without one, and take the host into account.
pub fn gpu_host() -> bool {
    std::process::Command::new("nvidia-smi").arg("-L").output().is_ok_and(|o| o.status.success())
}

/// ncu 2022.3 on this host without a GPU sometimes deadlocks in range replay
/// at the CUDA call that ends a range it matched (docs/internals.md, "The ncu
/// range-replay deadlock"), more often the busier both cores are. CI lost
/// `ncu_live::the_replay_ladder_steps_down_and_records_why` to it on
/// 2026-11-29: a pass of 2 ranges that needs a second waited out the test's
/// 600 s. Every test that runs the real ncu in range replay over ranges it
/// matches gives a pass this deadline (a pass needs 1 to 10 s here) and runs
/// through [`past_ncu_hangs`].
pub const NCU_PASS_DEADLINE: &str = "pipeline.ncu.timeout_s=40";

/// The runs [`past_ncu_hangs`] makes at most.
pub const NCU_ATTEMPTS: usize = 5;

/// `attempt` with a fresh output root, made again while an ncu pass of what
/// it wrote timed out (at [`NCU_PASS_DEADLINE`]: the deadlock above), at most
/// [`NCU_ATTEMPTS`] times. Returns the root and the last output; any other
/// outcome, a failure included, is the test's to judge.
pub fn past_ncu_hangs(
    what: &str,
    mut attempt: impl FnMut(&Path) -> std::process::Output,
) -> (tempfile::TempDir, std::process::Output) {
    for _ in 0..NCU_ATTEMPTS {
        let root = tempfile::tempdir().unwrap();
        let out = attempt(root.path());
        if !ncu_pass_timed_out(root.path()) {
            return (root, out);
        }
    }
    panic!("ncu hung in {NCU_ATTEMPTS} runs of {what}");
}

/// Whether a manifest under `root` (a run directory, or a job's ranks) has
/// an ncu pass that timed out.
fn ncu_pass_timed_out(root: &Path) -> bool {
    let mut manifests = Vec::new();
    let mut dirs = vec![(root.to_path_buf(), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = e.path();
            if path.is_dir() && depth < 3 {
                dirs.push((path, depth + 1));
            } else if e.file_name() == "manifest.json" {
                manifests.push(path);
            }
        }
    }
    manifests.iter().any(|m| {
        json(m)["stages"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s["name"].as_str().is_some_and(|n| n.starts_with("ncu:")) && s["exit"]["timed_out"] == true)
    })
}

pub fn llmperf() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("llmperf").unwrap();
    cmd.env_remove("LLMPERF_LOG");
    cmd
}

/// The run directory printed on stdout.
pub fn run_dir(stdout: &[u8]) -> PathBuf {
    let text = String::from_utf8_lossy(stdout);
    PathBuf::from(text.lines().last().expect("a run directory on stdout").trim())
}

pub fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

pub fn stage<'a>(manifest: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    manifest["stages"].as_array().unwrap().iter().find(|s| s["name"] == name).unwrap()
}

/// Write an executable script (a fake profiler for orchestration tests).
pub fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// The file with its `generated_at` values blanked.
pub fn without_timestamps(p: &Path) -> String {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    let re = regex::Regex::new(r#""generated_at": "[^"]*""#).unwrap();
    re.replace_all(&text, r#""generated_at": """#).into_owned()
}

/// The regions of the first scope (the aggregate) of a run's ncu region report.
pub fn ncu_scope_regions(dir: &Path) -> Vec<serde_json::Value> {
    json(&dir.join("ncu/regions/report.json"))["scopes"][0]["regions"].as_array().unwrap().clone()
}

/// The reports every run directory gets (roofline.json only with ncu counters).
pub const REPORTS: [&str; 7] = [
    "kernels.json",
    "kernels.md",
    "operators.json",
    "operators.md",
    "stakeholder_summary.md",
    "report.md",
    "report.html",
];

/// `llmperf report` on a copy of `dir`, without its reports, writes every file
/// again with the same bytes (timestamps aside).
pub fn assert_report_reproduces(dir: &Path) {
    let copy = tempfile::tempdir().unwrap();
    let copy = copy.path().join("copy");
    copy_dir(dir, &copy);
    // Delete the reports: `report` must write them all again.
    for f in REPORTS {
        std::fs::remove_file(copy.join(f)).unwrap();
    }
    let _ = std::fs::remove_file(copy.join("regions.md"));
    let _ = std::fs::remove_file(copy.join("roofline.json"));
    let _ = std::fs::remove_dir_all(copy.join("ncu/regions"));
    llmperf().arg("report").arg(&copy).assert().success();
    let files = |d: &Path| llmperf::run_dir::RunDir::open(d).unwrap().files();
    let original = files(dir);
    assert_eq!(original, files(&copy));
    for r in &original {
        assert_eq!(without_timestamps(&dir.join(r)), without_timestamps(&copy.join(r)), "{r} differs");
    }
}

/// `llmperf import nsys` of the real memfusion capture (TensorRT ResNet,
/// kernels under NVTX ranges; the shared corpus) into `root/run`; the run
/// directory, or None when the corpus lacks it (`test` is then skipped).
pub fn import_memfusion(test: &str, root: &Path) -> Option<PathBuf> {
    let out = root.join("run");
    let db = corpus_copy(test, "real/memfusion/report1.sqlite", root)?;
    import_nsys(&db, &out, &[]);
    Some(out)
}

/// `llmperf import nsys DB -o OUT OVERRIDES...` without nsys (a SQLite needs none); it must succeed.
pub fn import_nsys(db: &Path, out: &Path, overrides: &[&str]) {
    llmperf()
        .args(["import", "nsys"])
        .arg(db)
        .arg("-o")
        .arg(out)
        .arg("pipeline.nsys.executable=/nonexistent")
        .args(overrides)
        .assert()
        .success();
}

/// A copy of a corpus file in `dir`: what llmperf is handed, so that no
/// version of it (an old one a test is checked against) can write to the
/// shared corpus. None as [`corpus_file`].
pub fn corpus_copy(test: &str, rel: &str, dir: &Path) -> Option<PathBuf> {
    let src = corpus_file(test, rel)?;
    let to = dir.join(src.file_name().expect("a file name"));
    std::fs::copy(&src, &to).unwrap();
    Some(to)
}

/// The DeepSeek-OCR ncu details of its top 20 kernels (RTX 5090, ncu 2025.1;
/// corpus `llm-perf-opt/reports/20251107-dsocr/ncu-v2/kernel_NNNN_<hash>/`),
/// copied into `dir` as `kernel_NNNN.details.csv`, in kernel order.
pub fn dsocr_ncu(test: &str, dir: &Path) -> Option<Vec<PathBuf>> {
    let Some(root) = corpus_dir().map(|d| d.join("llm-perf-opt/reports/20251107-dsocr/ncu-v2")).filter(|d| d.is_dir())
    else {
        skipped(test, "corpus directory llm-perf-opt/reports/20251107-dsocr/ncu-v2 not found");
        return None;
    };
    let mut kernels: Vec<(String, PathBuf)> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            let n = name.strip_prefix("kernel_")?.split('_').next()?.to_string();
            Some((n, root.join(&name).join("ncu.details.csv")))
        })
        .collect();
    kernels.sort();
    assert_eq!(kernels.len(), 20, "the 20 kernels of the DeepSeek-OCR bundle");
    let out = dir.join("dsocr-ncu-inputs");
    std::fs::create_dir_all(&out).unwrap();
    Some(
        kernels
            .into_iter()
            .map(|(n, src)| {
                let to = out.join(format!("kernel_{n}.details.csv"));
                std::fs::copy(src, &to).unwrap();
                to
            })
            .collect(),
    )
}

/// The name of the test function this expands in, for skip records.
#[macro_export]
macro_rules! test_name {
    () => {{
        fn f() {}
        let name = std::any::type_name_of_val(&f);
        let name = name.strip_suffix("::f").unwrap_or(name);
        name.rsplit("::").next().unwrap_or(name).to_string()
    }};
}

/// `binary::test_function` of the test this expands in.
#[macro_export]
macro_rules! this_test {
    () => {
        format!("{}::{}", module_path!(), $crate::test_name!())
    };
}

/// `let Some(p) = corpus!("real/...") else { return };`: the corpus file for
/// this test, or None with the skip recorded under the test's name.
#[macro_export]
macro_rules! corpus {
    ($rel:expr) => {
        $crate::common::corpus_file(&$crate::this_test!(), $rel)
    };
}

/// `let Some(p) = corpus_copy!("real/...", dir) else { return };`: a copy in `dir`.
#[macro_export]
macro_rules! corpus_copy {
    ($rel:expr, $dir:expr) => {
        $crate::common::corpus_copy(&$crate::this_test!(), $rel, $dir)
    };
}

/// A Markdown line without its code spans (CommonMark: a run of N backticks
/// opens one, the next run of exactly N closes it).
pub fn outside_code_spans(line: &str) -> String {
    let (mut out, mut rest) = (String::new(), line);
    while let Some(i) = rest.find('`') {
        out.push_str(&rest[..i]);
        let n = rest[i..].len() - rest[i..].trim_start_matches('`').len();
        let after = &rest[i + n..];
        let mut close = None;
        let mut from = 0;
        while let Some(j) = after[from..].find('`') {
            let at = from + j;
            let m = after[at..].len() - after[at..].trim_start_matches('`').len();
            if m == n {
                close = Some(at + m);
                break;
            }
            from = at + m;
        }
        match close {
            Some(end) => rest = &after[end..],
            None => {
                out.push_str(&rest[i..]);
                return out;
            }
        }
    }
    out + rest
}

/// No two kernel rows of a run's reports show the same name: kernels.json's
/// labels, kernels.md's and the summary's kernel columns, report.html's
/// kernel cells (PyTorch's many `elementwise_kernel`s read alike when cut).
pub fn assert_kernel_labels_unique(run: &Path) {
    let k = json(&run.join("kernels.json"));
    let labels: Vec<&str> = k["kernels"].as_array().unwrap().iter().map(|r| r["label"].as_str().unwrap()).collect();
    let mut seen = std::collections::HashSet::new();
    assert!(labels.iter().all(|l| !l.is_empty() && seen.insert(*l)), "{}: {labels:?}", run.display());
    let column = |md: &str, header: &str, col: usize| -> Vec<String> {
        let Some(table) = md.split(header).nth(1) else { return Vec::new() };
        table
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| l.split(" | ").nth(col).unwrap_or_default().to_string())
            .collect()
    };
    let md = std::fs::read_to_string(run.join("kernels.md")).unwrap();
    let summary = std::fs::read_to_string(run.join("stakeholder_summary.md")).unwrap();
    for (what, names) in [
        ("kernels.md", column(&md, "| # | kernel |", 1)),
        ("stakeholder_summary.md", column(&summary, "## Top Kernels\n\n", 0)),
    ] {
        let mut seen = std::collections::HashSet::new();
        let dup: Vec<&String> = names.iter().filter(|n| !seen.insert(n.as_str())).collect();
        assert!(dup.is_empty(), "{}: {what} shows {dup:?} twice", run.display());
        assert_eq!(names.len(), if what == "kernels.md" { labels.len() } else { labels.len().min(10) }, "{what}");
    }
}

/// Every GPU operation of an nsys export, as SQL selecting (pid, dev, s, e,
/// comm, kind): kind 0 a kernel (comm 1 when its demangled name is LIKE
/// `comm_like`), 1 a copy, 2 a memset (where the export has those tables).
pub fn gpu_activity_sql(conn: &rusqlite::Connection, comm_like: &str) -> String {
    let has = |t: &str| conn.query_row("SELECT 1 FROM sqlite_master WHERE name = ?1", [t], |_| Ok(())).is_ok();
    let mut parts = vec![format!(
        "SELECT (k.globalPid >> 24) & 16777215 AS pid, k.deviceId AS dev, k.start AS s, k.end AS e, \
         CASE WHEN n.value LIKE '{comm_like}' THEN 1 ELSE 0 END AS comm, 0 AS kind \
         FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds n ON n.id = k.demangledName"
    )];
    for (table, kind) in [("CUPTI_ACTIVITY_KIND_MEMCPY", 1), ("CUPTI_ACTIVITY_KIND_MEMSET", 2)] {
        if has(table) {
            parts.push(format!("SELECT (globalPid >> 24) & 16777215, deviceId, start, end, 0, {kind} FROM {table}"));
        }
    }
    parts.join(" UNION ALL ")
}
