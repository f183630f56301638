//! report: `report.html`, one self-contained page (inline CSS and SVG, no script, no
//! network) with the run's charts and tables. Every drawn value carries a
//! `data-*` attribute with the number it stands for, so a test can check the
//! pictures against the JSON.
use std::collections::BTreeMap;
use std::fmt::Write;

use super::model::{Derived, Inputs, KernelsReport, OperatorsReport, StageUse};
use super::peaks::Peak;
use crate::regions::RangeStyle;

const WIDTH: f64 = 900.0;

pub(crate) fn render(inputs: &Inputs, d: &Derived) -> String {
    let id = inputs.manifest.as_ref().map_or("", |m| m.run_id.as_str());
    let mut h = page_head(&format!("llmperf run {id}"));
    fix_first(&mut h, &d.findings, inputs.nsys_breakdown.as_ref());
    timeline(&mut h, inputs);
    regions_chart(&mut h, inputs);
    module_groups_table(&mut h, inputs);
    if let Some(r) = &d.ranks {
        ranks_heatmap(&mut h, r);
    }
    stages_chart(&mut h, inputs);
    kernels_chart(&mut h, &d.kernels);
    roofline(&mut h, inputs, &d.uses, d.peak.as_ref());
    tables(&mut h, inputs, &d.kernels, &d.operators);
    h.push_str("</body></html>\n");
    h
}

/// The page's stylesheet. Tables keep every column readable: at least 12
/// characters wide (the first, which names the row, 24), long names and
/// prose broken where they must be, never a column squeezed to a few letters.
pub(crate) const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:960px;color:#222}\
h2{margin-top:2em;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 6px;text-align:right;\
min-width:12ch;overflow-wrap:anywhere;vertical-align:top}\
td:first-child,th:first-child{text-align:left;min-width:24ch;max-width:640px}code{font-size:12px}\
pre{white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px;background:#f6f6f6;padding:6px}\
svg text{font-size:11px;font-family:sans-serif}.note{color:#666}";

pub(crate) fn esc(s: &str) -> String {
    crate::markdown::html(s)
}

/// Colors of the breakdown's parts, in `findings::tables::bar_parts` order.
const PART_COLORS: [&str; 6] = ["#4e79a7", "#e15759", "#f28e2b", "#edc948", "#b07aa1", "#bab0ac"];

/// "What to fix first": the findings' tables (as the summary has them), a
/// stacked bar of each region's breakdown per device, and the category mix.
fn fix_first(
    h: &mut String,
    f: &super::findings::FindingsReport,
    b: Option<&crate::aggregate::nsys::breakdown::BreakdownReport>,
) {
    use super::findings::tables;
    h.push_str("<h2>What to fix first</h2>\n");
    if !f.findings.is_empty() {
        h.push_str(&format!(
            "<p class=\"note\">{}; findings.json has how each bound was computed.</p>\n",
            esc(tables::intro(f))
        ));
        h.push_str(&tables::findings(f).html());
        h.push_str("<p class=\"note\">Where each lies, and what to try.</p>\n");
        h.push_str(&tables::where_and_what(f).html());
        for (i, line) in tables::ncu_commands(f) {
            h.push_str(&format!("<p class=\"note\">ncu on the top kernel of #{i}:</p><pre>{}</pre>\n", esc(&line)));
        }
    }
    for n in &f.notes {
        h.push_str(&format!("<p class=\"note\">{}</p>\n", esc(n)));
    }
    if !f.tensor_cores.is_empty() {
        h.push_str("<p class=\"note\">FLOPs on tensor cores per region (ncu's sm__ops_path_tensor_* counters).</p>\n");
        h.push_str(&tables::tensor_cores(f).html());
    }
    if !f.ncu_advice.is_empty() {
        h.push_str("<p class=\"note\">ncu's own advice on the kernels with the most GPU time (ncu/rules.json): per kernel, its headline reading first, then the rules by their Estimated Speedup.</p>\n");
        h.push_str(&tables::ncu_advice(f).html());
    }
    let Some(b) = b.filter(|b| !b.devices.is_empty()) else { return };
    breakdown_bars(h, b);
    h.push_str(&tables::categories(b).html());
}

/// One bar per (device, region): each part's share of the region's wall
/// time, with its milliseconds written beside the bar and an axis in %.
fn breakdown_bars(h: &mut String, b: &crate::aggregate::nsys::breakdown::BreakdownReport) {
    use super::findings::tables::{bar_parts, stretches};
    let rows = stretches(b);
    let (label_w, bar_w, ms_w, row_h, top) = (300.0, 480.0, 110.0, 18.0, 18.0);
    let height = top + row_h * rows.len() as f64 + 30.0;
    h.push_str(&format!("<svg width=\"{}\" height=\"{height}\">\n", label_w + bar_w + ms_w + 10.0));
    for pct in [0, 25, 50, 75, 100] {
        let x = label_w + bar_w * f64::from(pct) / 100.0;
        h.push_str(&format!(
            "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#ccc\"/><text x=\"{x:.1}\" y=\"12\" text-anchor=\"middle\">{pct}%</text>",
            top - 4.0,
            top + row_h * rows.len() as f64
        ));
    }
    for (i, (dev, name, p)) in rows.iter().enumerate() {
        let y = top + i as f64 * row_h;
        let label: String = format!("{dev}: {name}").chars().take(48).collect();
        h.push_str(&format!(
            "<text x=\"0\" y=\"{}\"><title>{}</title>{}</text>",
            y + 12.0,
            esc(&format!("{dev}: {name}")),
            esc(&label)
        ));
        let mut x = label_w;
        for (k, (part, ns)) in bar_parts(p).iter().enumerate() {
            let w = if p.wall_ns > 0 { bar_w * *ns as f64 / p.wall_ns as f64 } else { 0.0 };
            if w > 0.0 {
                h.push_str(&format!(
                    "<rect x=\"{x:.1}\" y=\"{y}\" width=\"{w:.1}\" height=\"{}\" fill=\"{}\" data-part=\"{}\" data-ms=\"{}\"><title>{}: {:.3} ms</title></rect>",
                    row_h - 3.0,
                    PART_COLORS[k],
                    esc(part),
                    *ns as f64 / 1e6,
                    esc(part),
                    *ns as f64 / 1e6
                ));
            }
            x += w;
        }
        h.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" data-wall-ms=\"{}\">{:.3} ms</text>\n",
            label_w + bar_w + 6.0,
            y + 12.0,
            p.wall_ns as f64 / 1e6,
            p.wall_ns as f64 / 1e6
        ));
    }
    let mut x = label_w;
    let y = top + row_h * rows.len() as f64 + 8.0;
    for (k, (name, _)) in bar_parts(&Default::default()).iter().enumerate() {
        h.push_str(&format!(
            "<rect x=\"{x}\" y=\"{y}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            PART_COLORS[k],
            x + 13.0,
            y + 9.0,
            esc(name)
        ));
        x += 20.0 + 6.5 * name.len() as f64;
    }
    h.push_str("</svg>\n");
}

/// Colors of the timeline's regions: none of them a part's.
const LANE_COLORS: [&str; 8] = ["#8cd17d", "#86bcb6", "#ff9d9a", "#d4a6c8", "#9d7660", "#499894", "#fabfd2", "#b6992d"];

/// Devices drawn on the timeline, at most.
const TIMELINE_DEVICES: usize = 16;

/// The breakdown along time: per device, a column per timeline bin with
/// each part's share of the bin stacked (the breakdown bars' parts and
/// colors), and above it a band naming the top-level region that covered
/// most of each bin; one time axis for all devices. Then how to open the
/// whole capture in Perfetto.
fn timeline(h: &mut String, inputs: &Inputs) {
    use super::findings::tables::device_label;
    let Some(b) = inputs.nsys_breakdown.as_ref() else { return };
    let drawn: Vec<_> = b.devices.iter().filter_map(|d| Some((d, d.timeline.as_ref()?))).collect();
    if drawn.is_empty() {
        return;
    }
    let shown = &drawn[..drawn.len().min(TIMELINE_DEVICES)];
    let origin = shown.iter().map(|(_, t)| t.start_ns).min().unwrap_or(0);
    let total = (shown.iter().map(|(_, t)| t.end_ns()).max().unwrap_or(origin) - origin).max(1);
    let axis = Axis { origin, total, left: 60.0, width: WIDTH - 80.0 };
    let (lane_h, bars_h, gap) = (12.0, 54.0, 26.0);
    h.push_str("<h2 id=\"timeline\">Timeline</h2>\n<p class=\"note\">Each device from its first GPU operation to its last, on one time axis (ms from the earliest). A column is one bin of the device's span (breakdown.json's <code>timeline</code>): its height split into the parts of the breakdown above, as shares of the bin's time. The band above each device names the top-level range that was open on the host for most of the bin. It says when the host was in that range, not who issued the bin's GPU work: a kernel drawn under it may have been launched earlier, by another range (regions.json counts GPU time by the range that launched it; the Perfetto trace draws an arrow from each launch to its kernel).</p>\n");
    let block = gap + lane_h + bars_h + 6.0;
    let height = block * shown.len() as f64 + 40.0;
    h.push_str(&format!("<svg width=\"{}\" height=\"{height}\" shape-rendering=\"crispEdges\">\n", WIDTH));
    for (k, (d, t)) in shown.iter().enumerate() {
        let dev = device_label(d.rank, d.process_id, d.device);
        let top = block * k as f64;
        h.push_str(&format!("<text x=\"0\" y=\"{}\">{}</text>", top + 14.0, esc(&dev)));
        let (lane_y, bars_y) = (top + gap - 6.0, top + gap + lane_h - 4.0);
        h.push_str(&format!(
            "<text x=\"0\" y=\"{}\">range</text><text x=\"0\" y=\"{}\">parts</text>",
            lane_y + 10.0,
            bars_y + bars_h / 2.0 + 4.0
        ));
        timeline_band(h, &dev, t, &axis, (lane_y, lane_h - 2.0));
        timeline_columns(h, &dev, t, &axis, (bars_y, bars_h));
        h.push('\n');
    }
    timeline_axis(h, &axis, block * shown.len() as f64 + 4.0);
    h.push_str("</svg>\n");
    if drawn.len() > shown.len() {
        h.push_str(&format!(
            "<p class=\"note\">{} more devices are left out of the picture; breakdown.json has the timeline of each.</p>\n",
            drawn.len() - shown.len()
        ));
    }
    perfetto_note(h, &inputs.perfetto_traces);
}

/// The timeline's time axis: `total` ns from `origin` across `width` px from `left`.
struct Axis {
    origin: i64,
    total: i64,
    left: f64,
    width: f64,
}

impl Axis {
    fn x(&self, t: i64) -> f64 {
        self.left + self.width * (t - self.origin) as f64 / self.total as f64
    }

    fn ms(&self, t: i64) -> f64 {
        (t - self.origin) as f64 / 1e6
    }
}

/// A device's band: each run of bins with one region as one rectangle, at
/// (y, height).
fn timeline_band(
    h: &mut String,
    dev: &str,
    t: &crate::aggregate::nsys::breakdown::Timeline,
    axis: &Axis,
    (y, height): (f64, f64),
) {
    let mut i = 0;
    while i < t.lane.len() {
        let Some((r, _)) = t.lane[i] else {
            i += 1;
            continue;
        };
        let run = t.lane[i..].iter().take_while(|c| c.is_some_and(|c| c.0 == r)).count();
        let name = t.regions.get(r as usize).map_or("", |r| r.name.as_str());
        let (x0, x1) = (axis.x(t.edge_ns(i)), axis.x(t.edge_ns(i + run)));
        h.push_str(&format!(
            "<rect x=\"{x0:.2}\" y=\"{y}\" width=\"{:.2}\" height=\"{height}\" fill=\"{}\" data-device=\"{}\" data-range=\"{}\" data-bins=\"{i}-{}\"><title>{}: {:.3}–{:.3} ms</title></rect>",
            (x1 - x0).max(0.5),
            LANE_COLORS[r as usize % LANE_COLORS.len()],
            esc(dev),
            esc(name),
            i + run - 1,
            esc(name),
            axis.ms(t.edge_ns(i)),
            axis.ms(t.edge_ns(i + run))
        ));
        i += run;
    }
}

/// A device's columns at (y, height): per bin the breakdown bars' parts,
/// bottom up, as shares of the bin.
fn timeline_columns(
    h: &mut String,
    dev: &str,
    t: &crate::aggregate::nsys::breakdown::Timeline,
    axis: &Axis,
    (top, height): (f64, f64),
) {
    for i in 0..t.bins.len() {
        let p = t.bin_parts(i);
        let len = p.wall_ns;
        if len == 0 {
            continue;
        }
        let (x0, x1) = (axis.x(t.edge_ns(i)), axis.x(t.edge_ns(i + 1)));
        let parts = super::findings::tables::bar_parts(&p);
        let busy = 100.0 * p.busy_ns as f64 / len as f64;
        h.push_str(&format!(
            "<g><title>{:.3}–{:.3} ms: {busy:.0}% busy</title>",
            axis.ms(t.edge_ns(i)),
            axis.ms(t.edge_ns(i + 1))
        ));
        let mut y = top + height;
        for (c, (part, ns)) in parts.iter().enumerate() {
            if *ns == 0 {
                continue;
            }
            let hgt = height * *ns as f64 / len as f64;
            y -= hgt;
            h.push_str(&format!(
                "<rect x=\"{x0:.2}\" y=\"{y:.2}\" width=\"{:.2}\" height=\"{hgt:.2}\" fill=\"{}\" data-device=\"{}\" data-bin=\"{i}\" data-part=\"{part}\" data-ns=\"{ns}\"/>",
                (x1 - x0).max(0.5),
                PART_COLORS[c],
                esc(dev)
            ));
        }
        h.push_str("</g>");
    }
}

/// The time axis at `y` (ms from the origin), and the parts' legend below it.
fn timeline_axis(h: &mut String, axis: &Axis, y: f64) {
    h.push_str(&format!(
        "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#999\"/>",
        axis.left,
        axis.left + axis.width
    ));
    for q in 0..=4 {
        let t = axis.origin + axis.total * q / 4;
        let anchor = ["start", "middle", "middle", "middle", "end"][q as usize];
        h.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"{anchor}\">{:.3} ms</text>",
            axis.x(t),
            y + 14.0,
            axis.ms(t)
        ));
    }
    let mut lx = axis.left;
    for (k, (name, _)) in super::findings::tables::bar_parts(&Default::default()).iter().enumerate() {
        h.push_str(&format!(
            "<rect x=\"{lx}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            y + 22.0,
            PART_COLORS[k],
            lx + 13.0,
            y + 31.0,
            esc(name)
        ));
        lx += 20.0 + 6.5 * name.len() as f64;
    }
}

/// How to see every kernel, call and range: the run's Perfetto traces,
/// linked, or the command that writes them.
fn perfetto_note(h: &mut String, traces: &[String]) {
    h.push_str("<p class=\"note\">Every kernel, copy, CUDA call and range along time: ");
    if traces.is_empty() {
        h.push_str("<code>llmperf export perfetto RUN_DIR</code> (or <code>report.perfetto=true</code> when profiling) writes one trace per process under <code>perfetto/</code>");
    } else {
        let links: Vec<String> =
            traces.iter().map(|t| format!("<a href=\"{}\" data-trace=\"{}\">{}</a>", esc(t), esc(t), esc(t))).collect();
        h.push_str(&format!("this run's traces, one per process: {}", links.join(", ")));
    }
    h.push_str(". Open ui.perfetto.dev in a browser and drop a trace onto the page (Perfetto reads it in the browser: the file is not uploaded); chrome://tracing and Holistic Trace Analysis read the same files.</p>\n");
}

/// regions.json's `module_groups`: repeated modules as one row each, as regions.md has them.
fn module_groups_table(h: &mut String, inputs: &Inputs) {
    use super::regions_md::{coverage_sentence, group_figures, short_path, GROUP_ROWS};
    let Some(g) = inputs.regions.as_ref().and_then(|r| r.module_groups.as_ref()) else { return };
    if g.groups.is_empty() {
        return;
    }
    h.push_str("<h2>Repeated modules</h2>\n<p class=\"note\">Regions whose paths differ only in an index, as one row; per member (one index tuple), its total: GPU time where the group launched kernels, else wall time.");
    if let Some(c) = &g.coverage {
        h.push(' ');
        h.push_str(&esc(&coverage_sentence(c)));
    }
    h.push_str("</p>\n");
    h.push_str("<table><tr><th>group</th><th>members</th><th>calls</th><th>GPU ms</th><th>wall ms</th><th>per member min / median / max ms</th><th>largest member</th></tr>\n");
    for r in g.groups.iter().take(GROUP_ROWS) {
        let cells: String = group_figures(r).iter().map(|f| format!("<td>{}</td>", esc(f))).collect();
        h.push_str(&format!(
            "<tr><td><code title=\"{}\">{}</code></td>{cells}<td><code title=\"{}\">{}</code></td></tr>\n",
            esc(&r.path),
            esc(&short_path(&r.path)),
            esc(&r.slowest),
            esc(&short_path(&r.slowest))
        ));
    }
    h.push_str("</table>\n");
}

const COLORS: [&str; 6] = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1"];

/// A region's box: depth, parent's names, milliseconds.
type Box = (usize, Option<Vec<String>>, f64);

/// Time per NVTX region as an icicle: each row a nesting level, each box as
/// wide as the region's inclusive time, children inside their parent.
/// Regions are keyed by their nested names (a name may hold `::` itself,
/// as PyTorch's do), and labelled as the reports show them.
fn regions_chart(h: &mut String, inputs: &Inputs) {
    h.push_str("<h2>Time per region</h2>\n");
    let mut boxes: BTreeMap<Vec<String>, Box> = BTreeMap::new();
    let source = match &inputs.regions {
        Some(r) if !r.regions.is_empty() => {
            // GPU time first wherever the capture has kernels in its ranges: on an
            // asynchronous GPU run the wall time of a range is the host's, not the device's.
            let gpu = r.regions.iter().any(|x| x.style == RangeStyle::PushPop && x.kernel_count > 0);
            for x in r.regions.iter().filter(|x| x.style == RangeStyle::PushPop) {
                let names = x.names();
                let parent = (names.len() > 1).then(|| names[..names.len() - 1].to_vec());
                let e = boxes.entry(names).or_insert((x.depth, parent, 0.0));
                e.2 += if gpu { x.gpu_time_ns } else { x.inclusive_ns } as f64 / 1e6;
            }
            let (source, range) = (inputs.timeline.name(), inputs.timeline.range());
            match gpu {
                true => format!("{source} (GPU time of the kernels launched inside each {range}, summed over processes and threads; largest first)"),
                false => format!("{source} (wall time of the {range}s, summed over threads; largest first)"),
            }
        }
        _ => match &inputs.timings {
            Some(t) => {
                for (k, s) in t.stages.iter().chain(&t.operators) {
                    let names: Vec<String> = k.split(crate::regions::SEP).map(String::from).collect();
                    let parent = (names.len() > 1).then(|| names[..names.len() - 1].to_vec());
                    boxes.insert(names.clone(), (names.len() - 1, parent, s.total_ms));
                }
                "the workload's own clock (timings.json)".to_string()
            }
            None => {
                h.push_str("<p class=\"note\">No NVTX regions in this run.</p>\n");
                return;
            }
        },
    };
    let max_depth = boxes.values().map(|b| b.0).max().unwrap_or(0);
    let total: f64 = boxes.values().filter(|b| b.0 == 0).map(|b| b.2).sum();
    let row = 24.0;
    let _ = writeln!(
        h,
        "<svg id=\"regions\" width=\"{WIDTH}\" height=\"{}\" role=\"img\" aria-label=\"time per region\">",
        (max_depth + 1) as f64 * row
    );
    let mut order: Vec<(&Vec<String>, &Box)> = boxes.iter().collect();
    // By level, then largest first: siblings sit in their parent from the left in that order.
    order.sort_by(|a, b| a.1 .0.cmp(&b.1 .0).then_with(|| b.1 .2.total_cmp(&a.1 .2)).then_with(|| a.0.cmp(b.0)));
    let mut placed: BTreeMap<&[String], (f64, f64)> = BTreeMap::new();
    let mut next_child: BTreeMap<&[String], f64> = BTreeMap::new();
    let mut top_x = 0.0;
    for (names, (d, parent, v)) in order {
        let (x, w) = match parent.as_deref() {
            None => {
                let w = if total > 0.0 { WIDTH * v / total } else { 0.0 };
                top_x += w;
                (top_x - w, w)
            }
            Some(parent) => {
                let Some(&(px, pw)) = placed.get(parent) else { continue };
                let pv = boxes.get(parent).map_or(*v, |b| b.2).max(f64::MIN_POSITIVE);
                let w = pw * (v / pv).min(1.0);
                let x = *next_child.get(parent).unwrap_or(&px);
                next_child.insert(parent, x + w);
                (x, w)
            }
        };
        placed.insert(names, (x, w));
        let path = crate::regions::display(names);
        let name = names.last().map_or("", String::as_str);
        let _ = write!(
            h,
            "<g><rect data-region=\"{}\" data-ms=\"{v:.6}\" x=\"{x:.2}\" y=\"{:.1}\" width=\"{w:.2}\" height=\"{:.1}\" fill=\"{}\" stroke=\"#fff\"><title>{}: {v:.3} ms</title></rect>",
            esc(&path),
            *d as f64 * row,
            row - 2.0,
            COLORS[d % COLORS.len()],
            esc(&path)
        );
        if w > 7.0 * name.len() as f64 {
            let _ = write!(
                h,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#fff\">{}</text>",
                x + 3.0,
                *d as f64 * row + 15.0,
                esc(name)
            );
        }
        h.push_str("</g>\n");
    }
    let _ = writeln!(h, "</svg>\n<p class=\"note\">Source: {source}. Hover a box for its name and time.</p>");
}

/// Regions and ranks drawn in the heat map; ranks.json has them all.
const HEAT_REGIONS: usize = 20;
const HEAT_RANKS: usize = 64;

/// A page's start, up to its title heading.
fn page_head(title: &str) -> String {
    let t = esc(title);
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\n<style>{STYLE}</style></head><body>\n<h1>{t}</h1>\n"
    )
}

/// `ranks.html` of a merged job: the ranks × regions heat map alone, the
/// same cells report.html shows for a one-capture job.
pub(crate) fn ranks_page(job: &str, r: &crate::aggregate::ranks::RanksReport) -> String {
    let mut h = page_head(&format!("llmperf job {job}"));
    ranks_heatmap(&mut h, r);
    h.push_str("</body></html>\n");
    h
}

/// Ranks × regions: each cell a region's time on a rank, shaded by how far it
/// runs past the region's median over the ranks (white at or below it, red
/// at 1.5× and beyond), so a straggler is a red column.
fn ranks_heatmap(h: &mut String, r: &crate::aggregate::ranks::RanksReport) {
    let mut rows: Vec<_> = r.regions.iter().filter(|x| x.per_rank.len() > 1).collect();
    if rows.is_empty() {
        return;
    }
    rows.sort_by_key(|x| std::cmp::Reverse(x.max_ns));
    rows.truncate(HEAT_REGIONS);
    let ranks: Vec<u32> = r.ranks.iter().map(|k| k.rank).take(HEAT_RANKS).collect();
    h.push_str("<h2>Ranks × regions</h2>\n");
    let (label_w, cell, row) = (260.0, ((WIDTH - 260.0) / ranks.len() as f64).min(40.0), 18.0);
    let _ = writeln!(
        h,
        "<svg id=\"ranks\" width=\"{WIDTH}\" height=\"{:.0}\" role=\"img\" aria-label=\"time per rank and region\">",
        (rows.len() + 1) as f64 * row + 4.0
    );
    for (j, rank) in ranks.iter().enumerate() {
        let _ = write!(h, "<text x=\"{:.1}\" y=\"12\">{rank}</text>", label_w + j as f64 * cell + 2.0);
    }
    for (i, x) in rows.iter().enumerate() {
        let y = (i + 1) as f64 * row;
        let name = crate::regions::display(&x.path_names);
        let _ = write!(h, "<text x=\"0\" y=\"{:.1}\">{}</text>", y + 13.0, esc(&short_label(&name, 40)));
        for (j, rank) in ranks.iter().enumerate() {
            let Some(&ns) = x.per_rank.get(rank) else { continue };
            let over = if x.median_ns > 0 { (ns as f64 / x.median_ns as f64 - 1.0) / 0.5 } else { 0.0 };
            let shade = (255.0 * (1.0 - over.clamp(0.0, 1.0))).round() as u8;
            let _ = write!(
                h,
                "<rect data-region=\"{}\" data-rank=\"{rank}\" data-ns=\"{ns}\" x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"rgb(255,{shade},{shade})\" stroke=\"#ccc\"><title>{} on rank {rank}: {:.3} ms</title></rect>",
                esc(&name),
                label_w + j as f64 * cell,
                cell,
                row - 2.0,
                esc(&name),
                ns as f64 / 1e6
            );
        }
    }
    let more = if r.ranks.len() > HEAT_RANKS {
        format!(", the first {HEAT_RANKS} of {} ranks", r.ranks.len())
    } else {
        String::new()
    };
    let _ = writeln!(
        h,
        "</svg>\n<p class=\"note\">The {} regions with the most time on their slowest rank{more}; white at or below the region's median over the ranks, red at 1.5× it. All of them in ranks.json.</p>",
        rows.len()
    );
}

/// `text` cut to `n` characters with an ellipsis.
fn short_label(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        return text.to_string();
    }
    let mut s: String = text.chars().take(n - 1).collect();
    s.push('…');
    s
}

/// A horizontal bar chart: (label, value, data attribute name).
fn bars(h: &mut String, id: &str, rows: &[(String, f64)], unit: &str, attr: &str) {
    let max = rows.iter().map(|r| r.1).fold(0.0, f64::max);
    let row = 20.0;
    let label_w = 360.0;
    let _ =
        writeln!(h, "<svg id=\"{id}\" width=\"{WIDTH}\" height=\"{:.0}\" role=\"img\">", rows.len() as f64 * row + 4.0);
    for (i, (label, v)) in rows.iter().enumerate() {
        let w = if max > 0.0 { (WIDTH - label_w - 90.0) * v / max } else { 0.0 };
        let y = i as f64 * row;
        let short = super::ncu_regions::short(label, 55);
        let _ = writeln!(
            h,
            "<g><text x=\"0\" y=\"{:.1}\">{}</text><rect data-{attr}=\"{}\" data-value=\"{v:.6}\" x=\"{label_w}\" y=\"{:.1}\" width=\"{w:.2}\" height=\"{:.1}\" fill=\"{}\"><title>{}: {v:.4} {unit}</title></rect><text x=\"{:.1}\" y=\"{:.1}\">{v:.3} {unit}</text></g>",
            y + 14.0,
            esc(&short),
            esc(label),
            y + 2.0,
            row - 4.0,
            COLORS[0],
            esc(label),
            label_w + w + 4.0,
            y + 14.0
        );
    }
    h.push_str("</svg>\n");
}

fn stages_chart(h: &mut String, inputs: &Inputs) {
    h.push_str("<h2>Per-stage timings (mean per call)</h2>\n");
    match &inputs.timings {
        Some(t) if !t.stages.is_empty() => {
            let rows: Vec<(String, f64)> = t.stages.iter().map(|(k, s)| (k.clone(), s.mean_ms)).collect();
            bars(h, "stages", &rows, "ms", "stage");
            repeats_table(h, t);
        }
        _ => h.push_str("<p class=\"note\">No workload timings (a user command).</p>\n"),
    }
}

/// With `runner.run.repeat` > 1: each stage's per-repeat medians and their spread.
fn repeats_table(h: &mut String, t: &crate::timings::Timings) {
    let rows = crate::report::model::repeat_rows(t);
    if rows.is_empty() {
        return;
    }
    let _ =
        writeln!(h, "<table><tr><th>stage</th><th>median ms of each of {} repeats</th><th>spread</th></tr>", t.repeat);
    for (name, each, spread) in rows {
        let _ = writeln!(h, "<tr><td><code>{}</code></td><td>{each}</td><td>{spread}</td></tr>", esc(&name));
    }
    h.push_str("</table>\n");
}

fn kernels_chart(h: &mut String, k: &KernelsReport) {
    h.push_str("<h2>Top kernels by total GPU time</h2>\n");
    if k.kernels.is_empty() {
        let _ = writeln!(h, "<p class=\"note\">{}</p>", esc(k.note.as_deref().unwrap_or("No kernels.")));
        return;
    }
    let rows: Vec<(String, f64)> = k.kernels.iter().take(15).map(|r| (r.label.clone(), r.total_ms)).collect();
    bars(h, "kernels", &rows, "ms", "kernel");
    let _ = writeln!(h, "<p class=\"note\">Source: {}.</p>", esc(&k.source));
}

/// Arithmetic intensity vs achieved FLOP/s on log axes, under the roofs of
/// the peak FLOP/s and bandwidth. Points: the stages with analytic FLOPs and bytes.
/// A point of the roofline chart: a workload stage (analytic FLOPs and bytes)
/// or a kernel (ncu counters).
struct RoofPoint {
    attr: &'static str,
    label: String,
    intensity: f64,
    flops: f64,
    color: &'static str,
}

fn roofline(h: &mut String, inputs: &Inputs, uses: &[StageUse], peak: Option<&Peak>) {
    h.push_str("<h2>Roofline</h2>\n");
    let mut points: Vec<RoofPoint> = uses
        .iter()
        .filter_map(|u| {
            let b = u.bytes_per_call.filter(|b| *b > 0.0)?;
            Some(RoofPoint {
                attr: "stage",
                label: u.stage.clone(),
                intensity: u.flops_per_call / b,
                flops: u.achieved_flops,
                color: COLORS[3],
            })
        })
        .collect();
    let ncu = inputs.roofline.as_ref().map(|r| r.points.as_slice()).unwrap_or_default();
    points.extend(ncu.iter().filter_map(|p| {
        let (intensity, flops) = (p.arithmetic_intensity?, p.achieved_flop_per_s?);
        (intensity > 0.0 && flops > 0.0).then(|| RoofPoint {
            attr: "kernel",
            label: p.kernel_name.clone(),
            intensity,
            flops,
            color: COLORS[0],
        })
    }));
    let ceiling = peak.and_then(|p| Some((p.flops?, p.bytes_per_s?)));
    if points.is_empty() {
        h.push_str("<p class=\"note\">No roofline: no ncu FLOP and DRAM counters, and no stage with both an analytic FLOP count and a bytes model (the decoder's decode step has both).</p>\n");
        return;
    }
    let (w, ht, m) = (WIDTH, 360.0, 50.0);
    let lo = points.iter().map(|p| p.intensity.log10().floor()).fold(f64::INFINITY, f64::min);
    let hi = points.iter().map(|p| p.intensity.log10().ceil()).fold(f64::NEG_INFINITY, f64::max);
    let (x0, x1) = (lo.min(-2.0), hi.max(4.0)); // log10 FLOP/byte
    let top = points.iter().map(|p| p.flops).fold(0.0, f64::max).max(ceiling.map_or(0.0, |c| c.0));
    let y1 = top.max(1.0).log10().ceil();
    let y0 = y1 - 7.0;
    let sx = |ai: f64| m + (ai.log10().clamp(x0, x1) - x0) / (x1 - x0) * (w - 2.0 * m);
    let sy = |f: f64| ht - m - (f.max(1.0).log10().clamp(y0, y1) - y0) / (y1 - y0) * (ht - 2.0 * m);
    let _ = writeln!(h, "<svg id=\"roofline\" width=\"{w}\" height=\"{ht}\" role=\"img\">");
    if let Some((pf, pb)) = ceiling {
        let ridge = pf / pb;
        let _ = writeln!(
            h,
            "<polyline data-peak-flops=\"{pf:.6e}\" data-peak-bytes=\"{pb:.6e}\" fill=\"none\" stroke=\"#333\" points=\"{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\"/>",
            sx(10f64.powf(x0)),
            sy(pb * 10f64.powf(x0)),
            sx(ridge),
            sy(pf),
            sx(10f64.powf(x1)),
            sy(pf)
        );
    }
    for p in &points {
        let (x, y) = (sx(p.intensity), sy(p.flops));
        let _ = write!(
            h,
            "<g><circle data-{}=\"{}\" data-intensity=\"{:.6e}\" data-flops=\"{:.6e}\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"5\" fill=\"{}\"><title>{}: {:.3} FLOP/byte, {:.3e} FLOP/s</title></circle>",
            p.attr,
            esc(&p.label),
            p.intensity,
            p.flops,
            p.color,
            esc(&p.label),
            p.intensity,
            p.flops
        );
        if p.attr == "stage" {
            let _ = write!(h, "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>", x + 8.0, y + 4.0, esc(&p.label));
        }
        h.push_str("</g>\n");
    }
    let _ = writeln!(
        h,
        "<text x=\"{m}\" y=\"{:.0}\">arithmetic intensity (FLOP/byte, log, 10^{x0} … 10^{x1})</text><text x=\"4\" y=\"14\">FLOP/s (log, 10^{y0} … 10^{y1})</text></svg>",
        ht - 10.0
    );
    let mut notes = Vec::new();
    if points.iter().any(|p| p.attr == "stage") {
        notes.push("red: the workload's stages, analytic FLOPs and bytes over their measured time".to_string());
    }
    if let Some(r) = inputs.roofline.as_ref() {
        notes.push(format!(
            "blue: kernels, from the ncu counters in roofline.json ({} of {} launches had FLOP and DRAM counters; FLOPs are {}; replayed with locked clocks)",
            r.launches_with_counters,
            r.launches,
            r.flop_metrics.join(" + ")
        ));
    }
    let drawn = points.iter().filter(|p| p.attr == "kernel").count();
    if ncu.len() > drawn {
        notes.push(format!(
            "{drawn} of {} kernels drawn: the others have no FLOP count or no DRAM bytes in ncu's counters (their SM and DRAM throughputs are in the Kernels table)",
            ncu.len()
        ));
    }
    if ceiling.is_none() {
        let cc = inputs.roofline.as_ref().and_then(|r| r.compute_capability.as_deref());
        notes.push(match cc {
            Some(cc) => format!("no ceilings: the GPU is not named and its compute capability ({cc}, in ncu's CSV) is shared by several GPUs with other peaks; hardware.gpu=NAME names it"),
            None => "no ceilings: no peak FLOP/s and bandwidth for this device (see the MFU section of stakeholder_summary.md)".into(),
        });
    }
    let _ = writeln!(h, "<p class=\"note\">{}.</p>", esc(&notes.join("; ")));
}

fn tables(h: &mut String, inputs: &Inputs, k: &KernelsReport, ops: &OperatorsReport) {
    if let Some(t) = &inputs.timings {
        h.push_str("<h2>Stages</h2>\n<table><tr><th>stage</th><th>calls</th><th>mean ms</th><th>median ms</th><th>p90 ms</th><th>total ms</th></tr>\n");
        for (name, s) in &t.stages {
            let _ = writeln!(
                h,
                "<tr><td><code>{}</code></td><td>{}</td><td>{:.4}</td><td>{:.4}</td><td>{:.4}</td><td>{:.3}</td></tr>",
                esc(name),
                s.count,
                s.mean_ms,
                s.median_ms,
                s.p90_ms,
                s.total_ms
            );
        }
        h.push_str("</table>\n");
    }
    if !k.kernels.is_empty() {
        // ncu's throughputs beside each kernel where roofline.json has its counters (as the summary's Top Kernels).
        let point = |name: &str| super::join::point_of(inputs.roofline.as_ref(), None, name);
        let counters = k.kernels.iter().take(30).any(|r| point(&r.kernel_name).is_some());
        h.push_str(
            "<h2>Kernels</h2>\n<table><tr><th>kernel</th><th>total ms</th><th>calls</th><th>mean ms</th><th>share</th>",
        );
        if counters {
            h.push_str("<th>SM % (ncu)</th><th>DRAM % (ncu)</th><th>FLOP/byte (ncu)</th>");
        }
        h.push_str("</tr>\n");
        for r in k.kernels.iter().take(30) {
            let (total, mean, share) = r.time_cells();
            let _ = write!(
                h,
                "<tr><td><code title=\"{}\">{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
                esc(&r.kernel_name),
                esc(&r.label),
                esc(&total),
                r.calls,
                esc(&mean),
                esc(&share)
            );
            if counters {
                let p = point(&r.kernel_name);
                let cell = |v: Option<f64>, d: usize| v.map_or("–".to_string(), |v| format!("{v:.d$}"));
                let _ = write!(
                    h,
                    "<td>{}</td><td>{}</td><td>{}</td>",
                    cell(p.and_then(|p| p.sm_throughput_pct), 1),
                    cell(p.and_then(|p| p.dram_throughput_pct), 1),
                    cell(p.and_then(|p| p.arithmetic_intensity), 2)
                );
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</table>\n");
    }
    if !ops.operators.is_empty() {
        let ranks = ops.operators.iter().any(|r| r.rank.is_some());
        h.push_str("<h2>Operators</h2>\n<table><tr>");
        if ranks {
            h.push_str("<th>rank</th>");
        }
        h.push_str("<th>operator</th><th>GPU ms</th><th>wall ms</th><th>calls</th><th>mean ms</th></tr>\n");
        for r in ops.operators.iter().take(30) {
            h.push_str("<tr>");
            if ranks {
                let _ = write!(h, "<td>{}</td>", esc(r.rank.as_deref().unwrap_or("–")));
            }
            let gpu = r.gpu_ms.map_or("–".to_string(), |g| format!("{g:.3}"));
            let _ = writeln!(
                h,
                "<td><code>{}</code></td><td>{gpu}</td><td>{:.3}</td><td>{}</td><td>{:.4}</td></tr>",
                esc(&r.name),
                r.total_ms,
                r.calls,
                r.mean_ms
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("<p class=\"note\">All numbers: stakeholder_summary.md, kernels.json, operators.json, nsys/ and ncu/ in this run directory.</p>\n");
}
