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
    for id in ["id=\"regions\"", "id=\"kernels\"", "id=\"timeline\""] {
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

/// The pixels of a PNG as Chromium writes screenshots (8-bit RGB or RGBA,
/// not interlaced): (width, height, RGB by row).
fn png_pixels(path: &std::path::Path) -> (usize, usize, Vec<[u8; 3]>) {
    use std::io::Read;
    let png = std::fs::read(path).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{}: not a PNG", path.display());
    let (mut at, mut idat, mut head) = (8, Vec::new(), None);
    while at + 8 <= png.len() {
        let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
        let (kind, data) = (&png[at + 4..at + 8], &png[at + 8..at + 8 + len]);
        match kind {
            b"IHDR" => {
                let n = |i: usize| u32::from_be_bytes(data[i..i + 4].try_into().unwrap()) as usize;
                head = Some((n(0), n(4), data[8], data[9], data[12]));
            }
            b"IDAT" => idat.extend_from_slice(data),
            _ => {}
        }
        at += 12 + len;
    }
    let (w, h, depth, color, interlace) = head.expect("an IHDR chunk");
    assert_eq!((depth, interlace), (8, 0), "8-bit, not interlaced");
    let bpp = match color {
        2 => 3,
        6 => 4,
        c => panic!("color type {c}"),
    };
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..]).read_to_end(&mut raw).unwrap();
    let stride = w * bpp;
    let (mut prev, mut out) = (vec![0u8; stride], Vec::with_capacity(w * h));
    for row in raw.chunks(stride + 1).take(h) {
        let (filter, line) = (row[0], &row[1..]);
        let mut cur = vec![0u8; stride];
        for i in 0..stride {
            let (a, b) = (if i >= bpp { cur[i - bpp] } else { 0 }, prev[i]);
            let c = if i >= bpp { prev[i - bpp] } else { 0 };
            let predicted = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((u16::from(a) + u16::from(b)) / 2) as u8,
                4 => {
                    let p = i16::from(a) + i16::from(b) - i16::from(c);
                    let (pa, pb, pc) = ((p - i16::from(a)).abs(), (p - i16::from(b)).abs(), (p - i16::from(c)).abs());
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                f => panic!("filter {f}"),
            };
            cur[i] = line[i].wrapping_add(predicted);
        }
        out.extend(cur.chunks(bpp).map(|p| [p[0], p[1], p[2]]));
        prev = cur;
    }
    (w, h, out)
}

/// The timeline of the two-process FSDP capture: its columns carry
/// breakdown.json's bins (each part per device adds up to the device span's
/// part), its band the lane's runs, the page links the run's Perfetto
/// traces, and headless Chromium draws it: the compute color covers the
/// area the compute shares say, within 3% (measured: 0.3%).
#[test]
fn the_timeline_of_the_fsdp_capture_is_drawn_in_chromium() {
    let test = this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus_copy(&test, "real/nsys-ai/mfu_2gpu_before.sqlite", root.path()) else { return };
    let dir = root.path().join("run");
    import_nsys(&db, &dir, &["report.perfetto=true"]);
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    let b = json(&dir.join("nsys/breakdown.json"));
    let devices = b["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    let re =
        regex::Regex::new(r#"data-device="([^"]*)" data-bin="(\d+)" data-part="([^"]*)" data-ns="(\d+)""#).unwrap();
    let mut drawn: std::collections::BTreeMap<(String, String), i64> = Default::default();
    let mut bins: std::collections::BTreeMap<(String, usize), i64> = Default::default();
    for c in re.captures_iter(&html) {
        *drawn.entry((c[1].to_string(), c[3].to_string())).or_default() += c[4].parse::<i64>().unwrap();
        *bins.entry((c[1].to_string(), c[2].parse().unwrap())).or_default() += c[4].parse::<i64>().unwrap();
    }
    let lanes = regex::Regex::new(r#"data-device="([^"]*)" data-range="([^"]*)" data-bins="(\d+)-(\d+)""#).unwrap();
    let (mut want_area, mut plot) = (0.0, (f64::MAX, f64::MIN));
    for d in devices {
        let dev = format!("pid {}, GPU {}", d["process_id"], d["device"]);
        let span = &d["span"];
        let n = |k: &str| span[k].as_i64().unwrap();
        for (part, ns) in [
            ("compute", n("compute_ns")),
            ("exposed communication", n("communication_exposed_ns")),
            ("copy+memset", n("copy_ns") + n("memset_ns")),
            ("idle: launch gaps", n("idle_launch_ns")),
            ("idle: sync stalls", n("idle_sync_ns")),
            ("idle: nothing queued", n("idle_nothing_queued_ns")),
        ] {
            assert_eq!(drawn.get(&(dev.clone(), part.to_string())).copied().unwrap_or(0), ns, "{dev}: {part}");
        }
        let t = &d["timeline"];
        let tbins = t["bins"].as_array().unwrap();
        for (i, bin) in tbins.iter().enumerate() {
            let len: i64 = bin.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).sum();
            assert_eq!(bins[&(dev.clone(), i)], len, "{dev} bin {i}: the column is the whole bin");
        }
        // The band: runs of one region, exactly the lane's.
        let mut runs = Vec::new();
        let lane = t["lane"].as_array().unwrap();
        let mut i = 0;
        while i < lane.len() {
            if lane[i].is_null() {
                i += 1;
                continue;
            }
            let j = (i..lane.len()).take_while(|&j| lane[j][0] == lane[i][0]).last().unwrap();
            runs.push((
                t["regions"][lane[i][0].as_u64().unwrap() as usize]["name"].as_str().unwrap().to_string(),
                i,
                j,
            ));
            i = j + 1;
        }
        let shown: Vec<(String, usize, usize)> = lanes
            .captures_iter(&html)
            .filter(|c| c[1] == dev)
            .map(|c| (c[2].to_string(), c[3].parse().unwrap(), c[4].parse().unwrap()))
            .collect();
        assert!(runs.len() > 10);
        assert_eq!(shown, runs, "{dev}");
        want_area += n("compute_ns") as f64;
        let start = t["start_ns"].as_f64().unwrap();
        plot = (plot.0.min(start), plot.1.max(start + n("wall_ns") as f64));
    }
    for trace in ["perfetto/pid144.pt.trace.json.gz", "perfetto/pid145.pt.trace.json.gz"] {
        assert!(html.contains(&format!("<a href=\"{trace}\" data-trace=\"{trace}\">")), "{trace}");
        assert!(dir.join(trace).is_file());
    }
    // The timeline alone, in Chromium at one pixel per unit: columns 54 px
    // tall across an 820 px axis, so compute covers 54 × 820 × (compute /
    // axis time) pixels, and the legend's 10 × 10 square.
    let at = html.find("<h2 id=\"timeline\">").unwrap();
    let end = at + 4 + html[at + 4..].find("<h2").unwrap();
    let page = root.path().join("timeline.html");
    std::fs::write(&page, format!("{}{}</body></html>", &html[..html.find("<h2").unwrap()], &html[at..end])).unwrap();
    let shot = root.path().join("timeline.png");
    let out = std::process::Command::new("chromium")
        .args(HEADLESS)
        .arg("--force-device-scale-factor=1")
        .arg(format!("--user-data-dir={}", root.path().join("chromium-profile").display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium is installed by scripts/setup.sh");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (w, h, pixels) = png_pixels(&shot);
    assert_eq!((w, h), (1000, 2400));
    let compute = pixels.iter().filter(|p| **p == [0x4e, 0x79, 0xa7]).count() as f64;
    let want = 54.0 * 820.0 * want_area / (plot.1 - plot.0) + 100.0;
    // Printed so that `-- --nocapture` shows what Chromium drew.
    println!("timeline: {compute} compute pixels drawn, {want:.0} expected");
    assert!((compute - want).abs() <= 0.03 * want, "{compute} compute pixels, {want:.0} expected");
}
