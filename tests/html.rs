//! report.html: its charts carry the numbers of the JSON reports, and it opens
//! in headless Chromium (Debian's, installed by setup.sh) without errors.
use crate::common::*;

/// Every `<tag ... data-NAME="..." ... data-VALUE="...">` as (name, value).
fn points(html: &str, name: &str, value: &str) -> Vec<(String, f64)> {
    let re = regex::Regex::new(&format!(r#"data-{name}="([^"]*)" data-{value}="([^"]*)""#)).unwrap();
    re.captures_iter(html)
        .map(|c| {
            (
                c[1].replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&"),
                c[2].parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn chart_data_points_equal_the_json_reports() {
    let root = tempfile::tempdir().unwrap();
    let Some(dir) = import_memfusion(&this_test!(), root.path()) else { return };
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    // Top kernels: one bar per kernel of kernels.json (first 15), same totals,
    // labelled as every table labels it (kernels.json `label`: the short name
    // where the export has one, made unique).
    let kernels = json(&dir.join("kernels.json"));
    let bars = points(&html, "kernel", "value");
    let want: Vec<(String, f64)> = kernels["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .take(15)
        .map(|k| {
            let label = k["label"].as_str().unwrap();
            let shown = k["short_name"].as_str().or(k["kernel_name"].as_str()).unwrap();
            assert!(label.starts_with(&shown.chars().take(59).collect::<String>()), "{label} for {shown}");
            (label.to_string(), k["total_ms"].as_f64().unwrap())
        })
        .collect();
    let shorts = kernels["kernels"].as_array().unwrap().iter().filter(|k| k["short_name"].is_string()).count();
    assert!(shorts > 0, "memfusion's export has short names that differ from the demangled ones");
    assert_eq!(bars.len(), want.len());
    for ((name, v), (wname, w)) in bars.iter().zip(&want) {
        assert_eq!(name, wname);
        assert!((v - w).abs() <= 1e-6 * w.max(1.0), "{name}: {v} vs {w}");
    }
    // Regions: one box per NVTX path, as wide in GPU ms as nsys/regions.json says,
    // named by its nested names: ` › ` between them where a name holds `::`
    // (TensorRT's layer names here do).
    let regions = json(&dir.join("nsys/regions.json"));
    let mut want: std::collections::BTreeMap<String, f64> = Default::default();
    let mut apart = 0;
    for r in regions["regions"].as_array().unwrap().iter().filter(|r| r["style"] == "PushPop") {
        let names: Vec<&str> = r["path_names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
        let shown = if names.iter().any(|n| n.contains("::")) {
            apart += 1;
            names.join(" › ")
        } else {
            names.join("::")
        };
        // GPU time: memfusion's ranges launch kernels (wall time only where none does).
        *want.entry(shown).or_default() += r["gpu_time_ns"].as_f64().unwrap() / 1e6;
    }
    assert!(apart > 0, "memfusion's names hold `::`");
    let boxes = points(&html, "region", "ms");
    assert_eq!(boxes.len(), want.len(), "{boxes:?}");
    for (path, v) in boxes {
        assert!((v - want[&path]).abs() <= 1e-5 * want[&path].max(1.0), "{path}: {v} vs {}", want[&path]);
    }
    assert!(!html.contains("<script"), "self-contained, no script");
    assert!(!html.contains("http://") && !html.contains("https://"), "no network");
}

/// The roofline of the DeepSeek-OCR ncu files: one circle per kernel of
/// roofline.json with counted FLOPs, at its intensity and FLOP/s.
#[test]
fn roofline_points_equal_roofline_json() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("run");
    let Some(ncu) = dsocr_ncu(&this_test!(), root.path()) else { return };
    llmperf().args(["import", "ncu"]).args(&ncu).arg("-o").arg(&dir).assert().success();
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    let roofline = json(&dir.join("roofline.json"));
    let want: Vec<(String, f64, f64)> = roofline["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["flops"].as_f64().is_some_and(|f| f > 0.0))
        .map(|p| {
            let f = |k: &str| p[k].as_f64().unwrap();
            (p["kernel_name"].as_str().unwrap().to_string(), f("arithmetic_intensity"), f("achieved_flop_per_s"))
        })
        .collect();
    assert_eq!(want.len(), 5, "the five kernels with tensor-core work");
    let ai = points(&html, "kernel", "intensity");
    let re = regex::Regex::new(r#"<circle data-kernel="[^"]*" data-intensity="[^"]*" data-flops="([^"]*)""#).unwrap();
    let flops: Vec<f64> = re.captures_iter(&html).map(|c| c[1].parse().unwrap()).collect();
    assert_eq!((ai.len(), flops.len()), (want.len(), want.len()));
    for (((name, x), y), (wname, wx, wy)) in ai.iter().zip(&flops).zip(&want) {
        assert_eq!(name, wname);
        assert!((x - wx).abs() <= 1e-6 * wx && (y - wy).abs() <= 1e-6 * wy, "{name}: {x} {y} vs {wx} {wy}");
    }
}

/// Headless Chromium with nothing reaching the network, and a tall window.
const HEADLESS: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1000,2400",
];

#[test]
fn report_html_opens_in_headless_chromium() {
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| std::process::Command::new(c).arg("--version").output().is_ok());
    let chromium = chromium.expect("chromium is installed by scripts/setup.sh");
    let root = tempfile::tempdir().unwrap();
    let Some(dir) = import_memfusion(&this_test!(), root.path()) else { return };
    let page = format!("file://{}", dir.join("report.html").display());
    let shot = root.path().join("report.png");
    let profile = root.path().join("chromium-profile");
    let out = std::process::Command::new(chromium)
        .args(HEADLESS)
        .arg("--enable-logging=stderr")
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&page)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for bad in ["Uncaught", "CONSOLE(", "Failed to load"] {
        assert!(!stderr.contains(bad), "{bad} in chromium's log: {stderr}");
    }
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "a real screenshot: {} bytes", png.len());
    // The DOM chromium built holds the charts.
    let dom = std::process::Command::new(chromium)
        .args(HEADLESS)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(&page)
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    for id in ["id=\"regions\"", "id=\"kernels\""] {
        assert!(dom.contains(id), "{id} not in the rendered DOM");
    }
}

/// What a page looks like in headless Chromium: a screenshot, and each
/// table's columns with their rendered widths (px) beside the width of 12
/// characters of the tables' font, measured by a script added to a copy of
/// the page (report.html itself runs none).
fn rendered_columns(page: &std::path::Path, dir: &std::path::Path) -> (f64, Vec<(usize, usize, f64, String)>) {
    const MEASURE: &str = "<script>(function(){const p=document.createElement('span');\
p.style.cssText='font-size:13px;font-family:sans-serif;position:absolute;visibility:hidden;white-space:pre';\
p.textContent='000000000000';document.body.appendChild(p);const ch12=p.getBoundingClientRect().width;const cols=[];\
document.querySelectorAll('table').forEach((t,ti)=>{const r=t.rows[0];if(!r)return;\
Array.from(r.cells).forEach((c,ci)=>cols.push([ti,ci,c.getBoundingClientRect().width,c.textContent]));});\
const pre=document.createElement('pre');pre.id='widths';pre.textContent=JSON.stringify({ch12:ch12,cols:cols});\
document.body.appendChild(pre);})();</script>";
    let html = std::fs::read_to_string(page).unwrap();
    let measured = dir.join("measure.html");
    std::fs::write(&measured, html.replace("</body></html>", &format!("{MEASURE}</body></html>"))).unwrap();
    let profile = format!("--user-data-dir={}", dir.join("chromium-profile").display());
    let shot = dir.join("page.png");
    let out = std::process::Command::new("chromium")
        .args(HEADLESS)
        .arg(&profile)
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium is installed by scripts/setup.sh");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "a real screenshot: {} bytes", png.len());
    let dom = std::process::Command::new("chromium")
        .args(HEADLESS)
        .arg(&profile)
        .arg("--dump-dom")
        .arg(format!("file://{}", measured.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    let at = dom.find("<pre id=\"widths\">").expect("the measuring script ran") + "<pre id=\"widths\">".len();
    let text = &dom[at..at + dom[at..].find("</pre>").unwrap()];
    let text = text.replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cols = v["cols"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let u = |i: usize| c[i].as_u64().unwrap() as usize;
            (u(0), u(1), c[2].as_f64().unwrap(), c[3].as_str().unwrap().to_string())
        })
        .collect();
    (v["ch12"].as_f64().unwrap(), cols)
}

/// report.html of the two-process FSDP capture and of an ncu import (the
/// DeepSeek-OCR CSVs, with ncu's advice table of long sentences) in
/// Chromium: no table column narrower than 12 characters (the long cells
/// used to squeeze the name column to 3–8); the breakdown's bars carry their
/// milliseconds and a % axis; the ncu import's kernels show SM and DRAM %.
#[test]
fn report_html_keeps_every_table_column_readable_in_chromium() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus_copy(&test, "real/nsys-ai/mfu_2gpu_before.sqlite", root.path()) else { return };
    let fsdp = root.path().join("fsdp");
    import_nsys(&db, &fsdp, &[]);
    let Some(csvs) = dsocr_ncu(&test, root.path()) else { return };
    let ncu = root.path().join("ncu");
    llmperf().args(["-q", "import", "ncu"]).args(&csvs).arg("-o").arg(&ncu).assert().success();
    for run in [&fsdp, &ncu] {
        let (ch12, cols) = rendered_columns(&run.join("report.html"), run);
        assert!(cols.len() > 15, "{}: {} columns", run.display(), cols.len());
        let narrow: Vec<_> = cols.iter().filter(|c| c.2 < ch12).collect();
        assert!(narrow.is_empty(), "{}: columns narrower than 12 characters ({ch12:.1} px): {narrow:?}", run.display());
    }
    let html = std::fs::read_to_string(fsdp.join("report.html")).unwrap();
    let labels = regex::Regex::new(r#"data-wall-ms="([0-9.]+)">([0-9.]+) ms</text>"#).unwrap();
    let breakdown = json(&fsdp.join("nsys/breakdown.json"));
    let span0 = breakdown["devices"][0]["span"]["wall_ns"].as_f64().unwrap() / 1e6;
    let first: Vec<f64> = labels.captures_iter(&html).map(|c| c[1].parse().unwrap()).collect();
    assert!((first[0] - span0).abs() < 1e-6, "{first:?} vs {span0}");
    for axis in [">0%</text>", ">50%</text>", ">100%</text>"] {
        assert!(html.contains(axis), "{axis}");
    }
    let page = std::fs::read_to_string(ncu.join("report.html")).unwrap();
    assert!(page.contains("<th>SM % (ncu)</th><th>DRAM % (ncu)</th>"), "the ncu import's kernels");
    assert!(page.contains("compute capability (12.0, in ncu's CSV)"), "why the roofline has no ceilings");
}
