//! report::findings::tables: the tables of "What to fix first", built once;
//! stakeholder_summary.md writes them as Markdown, report.html as HTML.
use super::model::{ms, pct, Attribution, Finding, FindingsReport, RegionShare, ShareOf, SHOWN};
use crate::aggregate::categories::Category;
use crate::aggregate::nsys::breakdown::{BreakdownReport, Parts};
use crate::report::table::{Cell, Table};

/// Findings the tables show.
pub(crate) const SHOWN_FINDINGS: usize = SHOWN;

/// Regions per device in the breakdown table.
const BREAKDOWN_ROWS: usize = 8;

/// The sentence above the findings: what they are ranked by, and how placed.
pub(crate) fn intro(f: &FindingsReport) -> &'static str {
    match f.source {
        super::model::Source::NsysBreakdown => "Ranked by their share of the device's time (first operation to last); GPU work is charged to the region that issued it, host-side causes to the region whose wall time holds them",
        super::model::Source::NsysRanges => "Ranked by their share of the region's wall time (a capture without GPU work: host time of the operator ranges)",
        _ => "Ranked by their share of the GPU time of the kernels ncu profiled (no nsys timeline: no device time, no region)",
    }
}

/// The top findings: what, where, how much, how sure, the numbers.
pub(crate) fn findings(f: &FindingsReport) -> Table {
    let mut t =
        Table::new(&[">#", "finding", "device", "region", ">recoverable ms", ">share", "confidence", "evidence"]);
    for (i, x) in f.findings.iter().take(SHOWN).enumerate() {
        let evidence: Vec<String> = x.evidence.iter().map(|e| e.text()).collect();
        t.row(vec![
            Cell::num((i + 1).to_string()),
            Cell::text(x.kind.title()),
            Cell::text(x.where_text()),
            region_cell(x),
            Cell::num(format!("{:.3}", ms(x.recoverable_ns))),
            Cell::num(format!("{:.1}% {}", 100.0 * x.share, share_of(x.share_of))),
            Cell::text(x.confidence.text()),
            Cell::text(evidence.join("; ")),
        ]);
    }
    t
}

fn share_of(s: ShareOf) -> &'static str {
    match s {
        ShareOf::DeviceSpan => "of device",
        ShareOf::ProfiledGpuTime => "of ncu time",
        ShareOf::RegionWall => "of region",
    }
}

/// The region a finding names, and how it was chosen.
fn region_cell(x: &Finding) -> Cell {
    let how = match x.attribution {
        Attribution::Issued => "issued in ",
        Attribution::WallWindow => "in ",
        Attribution::None => "",
    };
    Cell::code_titled(format!("{how}{}", short(&x.region, 48)), x.region.clone())
}

/// Where each top finding lies, and what to try: the regions that issued its
/// kernels, the regions whose wall time holds it, its kernels or calls.
pub(crate) fn where_and_what(f: &FindingsReport) -> Table {
    let mut t = Table::new(&[">#", "issued in (launches)", "ran in (wall time)", "details", "try"]);
    for (i, x) in f.findings.iter().take(SHOWN).enumerate() {
        let mut details = Vec::new();
        if !x.calls.is_empty() {
            details.push(format!("blocking calls: {}", named(&x.calls)));
        }
        if !x.waited_for.is_empty() {
            details.push(format!("waited for: {}", named(&x.waited_for)));
        }
        if !x.kernels.is_empty() {
            let k: Vec<String> = x.kernels.iter().take(3).map(|k| short(k, 60)).collect();
            details.push(format!("kernels: {}", k.join(", ")));
        }
        if !x.ncu_command.is_empty() {
            details.push(format!("ncu command below (#{})", i + 1));
        }
        if let Some(n) = &x.needs {
            details.push(format!("needs {n}"));
        }
        t.row(vec![
            Cell::num((i + 1).to_string()),
            Cell::text(shares(&x.issued_in)),
            Cell::text(shares(&x.ran_in)),
            Cell::text(details.join("; ")),
            Cell::text(x.fix.clone()),
        ]);
    }
    t
}

/// The ncu command lines of the shown findings, quoted for a POSIX shell: (#, line).
pub(crate) fn ncu_commands(f: &FindingsReport) -> Vec<(usize, String)> {
    f.findings
        .iter()
        .take(SHOWN)
        .enumerate()
        .filter(|(_, x)| !x.ncu_command.is_empty())
        .map(|(i, x)| {
            (i + 1, x.ncu_command.iter().map(|a| crate::process::shell_quote(a)).collect::<Vec<_>>().join(" "))
        })
        .collect()
}

fn shares(rows: &[RegionShare]) -> String {
    if rows.is_empty() {
        return "–".to_string();
    }
    rows.iter()
        .map(|r| match r.kernels {
            Some(k) => format!("{} {:.3} ms ({k} kernels)", short(&r.region, 48), ms(r.ns)),
            None => format!("{} {:.3} ms", short(&r.region, 48), ms(r.ns)),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn named(rows: &[super::model::NamedNs]) -> String {
    rows.iter().map(|n| format!("{} {:.3} ms", short(&n.name, 60), ms(n.ns))).collect::<Vec<_>>().join(", ")
}

/// Tensor-core FLOPs per ncu region.
pub(crate) fn tensor_cores(f: &FindingsReport) -> Table {
    let mut t = Table::new(&["region", ">results", "tensor FLOPs by precision", ">share of the region's FLOPs"]);
    for x in &f.tensor_cores {
        t.row(vec![
            Cell::code(x.region.clone()),
            Cell::num(x.launches.to_string()),
            Cell::text(precisions(&x.ops_by_precision)),
            Cell::num(x.share_text()),
        ]);
    }
    t
}

/// ncu's own advice on the kernels with the most GPU time.
pub(crate) fn ncu_advice(f: &FindingsReport) -> Table {
    let mut t =
        Table::new(&["kernel", ">share of GPU time", "ncu rule", ">estimated speedup", ">weighted", "ncu says"]);
    for a in f.ncu_advice.iter().take(SHOWN) {
        let said: String = a.description.chars().take(240).collect();
        t.row(vec![
            Cell::code_titled(a.kernel.clone(), a.kernel_name.clone()),
            Cell::num(format!("{:.1}%", a.share_pct)),
            Cell::text(format!("{} ({})", a.rule, a.kind)),
            Cell::num(a.speedup_pct.map_or("– (none given)".to_string(), |s| format!("{s:.1}% {}", a.speedup_type))),
            Cell::num(a.weighted_pct.map_or("–".to_string(), |w| format!("{w:.1}%"))),
            Cell::text(said),
        ]);
    }
    t
}

/// Tensor FLOPs by precision: `bf16→fp32 70.24 GFLOP`, largest first.
pub(crate) fn precisions(by: &std::collections::BTreeMap<String, f64>) -> String {
    let mut v: Vec<(&String, &f64)> = by.iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(a.1));
    v.iter().map(|(p, f)| format!("{} {:.2} GFLOP", p.replace("->", "→"), *f / 1e9)).collect::<Vec<_>>().join(", ")
}

/// A name cut for a table: its first `n` characters.
pub(crate) fn short(k: &str, n: usize) -> String {
    let cut: String = k.chars().take(n).collect();
    if cut.len() < k.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// The six parts of a stretch as (label, ns): a partition of its wall time.
pub(crate) type BarParts = [(&'static str, i64); 6];

/// The parts of a stretch as (label, ns), in the order of the stacked bar.
pub(crate) fn bar_parts(p: &Parts) -> BarParts {
    [
        ("compute", p.compute_ns),
        ("exposed communication", p.communication_exposed_ns),
        ("copy+memset", p.copy_ns + p.memset_ns),
        ("idle: launch gaps", p.idle_launch_ns),
        ("idle: sync stalls", p.idle_sync_ns),
        ("idle: nothing queued", p.idle_nothing_queued_ns),
    ]
}

/// The device of a breakdown row, as tables name it.
pub(crate) fn device_label(rank: Option<u32>, pid: i64, device: i64) -> String {
    match rank {
        Some(r) => format!("rank {r}, pid {pid}, GPU {device}"),
        None => format!("pid {pid}, GPU {device}"),
    }
}

/// The stretches of the breakdown table and bars: per device its span, then
/// its largest regions by wall time.
pub(crate) fn stretches(b: &BreakdownReport) -> Vec<(String, String, &Parts)> {
    b.devices
        .iter()
        .flat_map(|d| {
            let dev = device_label(d.rank, d.process_id, d.device);
            std::iter::once((dev.clone(), "(device span)".to_string(), &d.span))
                .chain(d.regions.iter().take(BREAKDOWN_ROWS).map(move |r| (dev.clone(), r.name.clone(), &r.parts)))
        })
        .collect()
}

/// Per device, the largest regions' wall time by part, % of wall.
pub(crate) fn breakdown(b: &BreakdownReport) -> Table {
    let mut t = Table::new(&[
        "device",
        "region",
        ">wall ms",
        ">compute",
        ">exposed comm",
        ">copy+memset",
        ">idle: launch",
        ">idle: sync",
        ">idle: nothing queued",
    ]);
    for (dev, name, p) in stretches(b) {
        let w = p.wall_ns;
        let mut row = vec![
            Cell::text(dev),
            Cell::code_titled(short(&name, 60), name.clone()),
            Cell::num(format!("{:.3}", ms(w))),
        ];
        row.extend(bar_parts(p).iter().map(|(_, ns)| Cell::num(format!("{:.1}", pct(*ns, w)))));
        t.row(row);
    }
    t
}

/// Every device's kernels by category, summed: (category, kernels, ns, % of kernel time), largest first.
pub(crate) fn category_mix(b: &BreakdownReport) -> Vec<(Category, usize, i64, f64)> {
    let mut sums = [(0usize, 0i64); 9];
    for d in &b.devices {
        for c in &d.categories {
            let s = &mut sums[c.category.index()];
            (s.0, s.1) = (s.0 + c.kernels, s.1 + c.ns);
        }
    }
    let total: i64 = sums.iter().map(|s| s.1).sum();
    let mut rows: Vec<_> = Category::ALL
        .iter()
        .map(|&c| (c, sums[c.index()].0, sums[c.index()].1, pct(sums[c.index()].1, total)))
        .filter(|r| r.1 > 0)
        .collect();
    rows.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    rows
}

/// The category mix as a table.
pub(crate) fn categories(b: &BreakdownReport) -> Table {
    let mut t = Table::new(&["category", ">kernels", ">ms", ">share"]);
    for (c, kernels, ns, share) in category_mix(b) {
        t.row(vec![
            Cell::text(c.name()),
            Cell::num(kernels.to_string()),
            Cell::num(format!("{:.3}", ms(ns))),
            Cell::num(format!("{share:.1}%")),
        ]);
    }
    t
}
