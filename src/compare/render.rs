//! Markdown and HTML of a diff, and Markdown of a check (stdout, the run
//! directory, and GitHub's step summary).
use std::fmt::Write;

use super::check::{CheckReport, Outcome};
use super::diff::{tally, Diff, MetricRow, Row, Source};
use super::verdict::{Side, Verdict};
use crate::markdown::{code, text};
use crate::report::html::{esc, STYLE};

const SECTIONS: [(Source, &str); 7] = [
    (Source::Workload, "Regions: the workload's own timings (workload/timings.json)"),
    (
        Source::Nsys,
        "Regions: range instances in the timeline (NVTX in nsys/samples.json, torch.profiler's in torch/samples.json)",
    ),
    (Source::Gpu, "Regions: GPU time of the kernels launched inside each range instance (the timeline's samples.json)"),
    (Source::Kernel, "Kernels: GPU time per launch (the timeline's samples.json)"),
    (Source::Request, "Requests: TTFT, TPOT and end-to-end per request, ITL per token gap (serve/requests.json)"),
    (Source::Step, "Engine steps by kind: wall time per step (serve/steps.json)"),
    (Source::StepGpu, "Engine steps by kind: GPU time per step (serve/steps.json)"),
];

/// `12.345` ms, with as many decimals as small numbers need.
fn ms(v: f64) -> String {
    match v.abs() {
        x if x >= 100.0 => format!("{v:.1}"),
        x if x >= 1.0 => format!("{v:.3}"),
        _ => format!("{v:.4}"),
    }
}

fn side(s: &Option<Side>) -> String {
    s.as_ref().map_or("—".into(), |s| format!("{} ({})", ms(s.median_ms), s.samples))
}

fn change(r: &Row) -> (String, String) {
    let Some(c) = &r.change else { return ("—".into(), "—".into()) };
    let ci = match (c.ci_low_pct, c.ci_high_pct) {
        (Some(lo), Some(hi)) => format!("[{lo:+.1}%, {hi:+.1}%]"),
        _ => "—".into(),
    };
    let sign = if c.delta_ms >= 0.0 { "+" } else { "" };
    (format!("{:+.1}% ({sign}{} ms)", c.change_pct, ms(c.delta_ms)), ci)
}

fn summary_line(rows: &[Row]) -> String {
    let t = tally(rows);
    let parts: Vec<String> = t.iter().map(|(k, v)| format!("{v} {k}")).collect();
    format!("{} rows: {}", rows.len(), if parts.is_empty() { "none".into() } else { parts.join(", ") })
}

pub(crate) fn diff_markdown(d: &Diff) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "# llmperf diff\n");
    let _ = writeln!(
        m,
        "- A: {} ({})\n- B: {} ({})",
        code(&d.a.path),
        text(&d.a.run_id),
        code(&d.b.path),
        text(&d.b.run_id)
    );
    let t = &d.thresholds;
    let _ = writeln!(
        m,
        "- thresholds: {}% and {} ms, at least {} samples per run\n- method: {}\n\n{}\n",
        t.relative_pct,
        t.absolute_ms,
        t.min_samples,
        d.method,
        summary_line(&d.rows)
    );
    for s in &d.shifts {
        let _ = writeln!(
            m,
            "The median {} row moved {:+.1}% ({} rows){}.\n",
            s.source.as_str(),
            s.median_change_pct,
            s.rows,
            if s.median_change_pct.abs() > d.thresholds.relative_pct { ": the whole run shifted" } else { "" }
        );
    }
    for (source, title) in SECTIONS {
        let rows: Vec<&Row> = d.rows.iter().filter(|r| r.source == source).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(m, "## {title}\n");
        let _ = writeln!(
            m,
            "| {} | A median ms (n) | B median ms (n) | change | 95% interval | verdict | why |",
            if source == Source::Kernel { "kernel" } else { "region" }
        );
        let _ = writeln!(m, "|---|---:|---:|---:|---:|---|---|");
        for r in rows {
            let (c, ci) = change(r);
            let _ = writeln!(
                m,
                "| {} | {} | {} | {c} | {ci} | **{}** | {} |",
                code(&r.name),
                side(&r.a),
                side(&r.b),
                r.verdict.as_str(),
                text(&r.reason)
            );
        }
        m.push('\n');
    }
    if !d.ncu.is_empty() {
        let _ = writeln!(m, "## ncu metrics of regions both runs profiled\n");
        let _ = writeln!(m, "| region | section | metric | unit | A | B | change |\n|---|---|---|---|---:|---:|---:|");
        for r in &d.ncu {
            let _ = writeln!(
                m,
                "| {} | {} | {} | {} | {} | {} | {} |",
                code(&r.region),
                text(&r.section),
                text(&r.metric),
                text(&r.unit),
                r.a,
                r.b,
                metric_change(r)
            );
        }
        m.push('\n');
    }
    if !d.breakdown.is_empty() {
        let _ = writeln!(
            m,
            "## How the time breakdown moved

Share of each top-level region's wall time (nsys/breakdown.json; one value per run: no verdict).
"
        );
        let _ = writeln!(m, "| device | region | part | A | B | change | A ms/instance | B ms/instance |\n|---|---|---|---:|---:|---:|---:|---:|");
        for r in &d.breakdown {
            let pct = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.1}%"));
            let ms = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.3}"));
            let _ = writeln!(
                m,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                text(&r.device),
                code(&r.region),
                text(&r.part),
                pct(r.a_pct),
                pct(r.b_pct),
                r.change_pp.map_or("—".into(), |c| format!("{c:+.1} pp")),
                ms(r.a_ms_per_instance),
                ms(r.b_ms_per_instance)
            );
        }
        m.push('\n');
    }
    notes(&mut m, &d.notes);
    m
}

fn metric_change(r: &MetricRow) -> String {
    r.change_pct.map_or("—".into(), |c| format!("{c:+.1}%"))
}

fn notes(m: &mut String, notes: &[String]) {
    if !notes.is_empty() {
        let _ = writeln!(m, "## Notes\n");
        for n in notes {
            let _ = writeln!(m, "- {}", text(n));
        }
        m.push('\n');
    }
}

fn verdict_color(v: Verdict) -> &'static str {
    match v {
        Verdict::Slower | Verdict::Missing => "#e15759",
        Verdict::Faster => "#59a14f",
        Verdict::Inconclusive => "#f28e2b",
        Verdict::Unchanged | Verdict::New => "#666",
    }
}

/// One page in the style of report.html: the same tables, each change drawn
/// as a bar with its interval (no script, no network).
pub(crate) fn diff_html(d: &Diff) -> String {
    let mut h = String::new();
    let title = format!("llmperf diff {} → {}", d.a.run_id, d.b.run_id);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\n<style>{STYLE}</style></head><body>\n<h1>{t}</h1>\n<p>A: <code>{}</code><br>B: <code>{}</code></p>\n<p class=\"note\">{} — {}</p>\n",
        esc(&d.a.path),
        esc(&d.b.path),
        esc(&summary_line(&d.rows)),
        esc(&d.method),
        t = esc(&title)
    );
    for (source, title) in SECTIONS {
        let rows: Vec<&Row> = d.rows.iter().filter(|r| r.source == source).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = write!(h, "<h2>{}</h2>\n<table><tr><th>name</th><th>A median ms (n)</th><th>B median ms (n)</th><th>change</th><th>95% interval</th><th>verdict</th><th>change, interval</th></tr>\n", esc(title));
        for r in rows {
            let (c, ci) = change(r);
            let _ = writeln!(
                h,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td style=\"color:{}\" title=\"{}\"><b>{}</b></td><td>{}</td></tr>",
                esc(&r.name),
                esc(&side(&r.a)),
                esc(&side(&r.b)),
                esc(&c),
                esc(&ci),
                verdict_color(r.verdict),
                esc(&r.reason),
                r.verdict.as_str(),
                bar(r)
            );
        }
        h.push_str("</table>\n");
    }
    if !d.ncu.is_empty() {
        h.push_str("<h2>ncu metrics of regions both runs profiled</h2>\n<table><tr><th>region</th><th>section</th><th>metric</th><th>unit</th><th>A</th><th>B</th><th>change</th></tr>\n");
        for r in &d.ncu {
            let _ = writeln!(
                h,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&r.region),
                esc(&r.section),
                esc(&r.metric),
                esc(&r.unit),
                r.a,
                r.b,
                esc(&metric_change(r))
            );
        }
        h.push_str("</table>\n");
    }
    if !d.notes.is_empty() {
        h.push_str("<h2>Notes</h2><ul>");
        for n in &d.notes {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul>\n");
    }
    h.push_str("</body></html>\n");
    h
}

/// The bar's width, and the dot's radius: the axis keeps the dot whole at ±100%.
const BAR_PX: f64 = 160.0;
const DOT_R: f64 = 3.0;

/// Where `pct` sits on a [`BAR_PX`] axis from −100% to +100% (clamped), with
/// a dot's radius of room at each end (the dots of ±100% were cut in half).
fn axis_x(pct: f64) -> f64 {
    let half = BAR_PX / 2.0 - DOT_R - 1.0;
    BAR_PX / 2.0 + pct.clamp(-100.0, 100.0) / 100.0 * half
}

/// A 160 px axis from −100% to +100% (clamped): the interval as a line, the
/// change as a dot, its value (unclamped) on hover.
fn bar(r: &Row) -> String {
    let Some(c) = &r.change else { return String::new() };
    let x = axis_x;
    let mut s =
        String::from("<svg width=\"160\" height=\"14\"><line x1=\"80\" y1=\"0\" x2=\"80\" y2=\"14\" stroke=\"#bbb\"/>");
    if let (Some(lo), Some(hi)) = (c.ci_low_pct, c.ci_high_pct) {
        let _ = write!(s, "<line x1=\"{:.1}\" y1=\"7\" x2=\"{:.1}\" y2=\"7\" stroke=\"#333\"/>", x(lo), x(hi));
    }
    let _ = write!(
        s,
        "<circle cx=\"{:.1}\" cy=\"7\" r=\"{DOT_R}\" fill=\"{}\"><title>{:+.1}%</title></circle></svg>",
        x(c.change_pct),
        verdict_color(r.verdict),
        c.change_pct
    );
    s
}

pub(crate) fn check_markdown(c: &CheckReport) -> String {
    let mut m = String::new();
    let failing = c.checks.iter().filter(|x| x.fails).count();
    let _ = writeln!(
        m,
        "# llmperf check: {}\n\n- run: {} ({})\n- baseline: {} ({})\n- budgets: {}{}\n",
        if c.exit_code == 0 { "pass".to_string() } else { format!("FAIL (exit {})", c.exit_code) },
        code(&c.run.path),
        text(&c.run.run_id),
        code(&c.baseline.path),
        text(&c.baseline.run_id),
        c.budgets.as_deref().map_or("defaults".into(), code),
        if c.strict { " (--strict: inconclusive fails)" } else { "" }
    );
    let count = |o: Outcome| c.checks.iter().filter(|x| x.outcome == o).count();
    let _ = writeln!(
        m,
        "{} checked: {} pass, {} regression, {} inconclusive, {} missing; {failing} failing.\n",
        c.checks.len(),
        count(Outcome::Pass),
        count(Outcome::Regression),
        count(Outcome::Inconclusive),
        count(Outcome::Missing)
    );
    // Which kind moved: wall time, GPU time, kernels, the workload's own timings.
    let mut by_kind: Vec<String> = Vec::new();
    for (source, _) in SECTIONS {
        let n = c.checks.iter().filter(|x| x.fails && x.row.source == source).count();
        if n > 0 {
            by_kind.push(format!("{n} {}", source.as_str()));
        }
    }
    if !by_kind.is_empty() {
        let _ = writeln!(m, "Failing rows by kind: {}.\n", by_kind.join(", "));
    }
    if !c.checks.is_empty() {
        let _ = writeln!(m, "| | source | name | baseline ms (n) | run ms (n) | change | 95% interval | budget | why |\n|---|---|---|---:|---:|---:|---:|---|---|");
        for x in &c.checks {
            let (ch, ci) = change(&x.row);
            let mark = if x.fails {
                "❌"
            } else if x.outcome == Outcome::Pass {
                "✅"
            } else {
                "⚠️"
            };
            let _ = writeln!(
                m,
                "| {mark} {} | {} | {} | {} | {} | {ch} | {ci} | {}% & {} ms, n≥{} | {} |",
                x.outcome.as_str(),
                x.row.source.as_str(),
                code(&x.row.name),
                side(&x.row.a),
                side(&x.row.b),
                x.thresholds.relative_pct,
                x.thresholds.absolute_ms,
                x.thresholds.min_samples,
                text(&x.row.reason)
            );
        }
        m.push('\n');
    }
    for sh in &c.shifts {
        let _ = writeln!(
            m,
            "{} The whole run moved {:+.1}% ({:.2}×): the median change of {} {} rows{}.\n",
            if sh.fails { "❌" } else { "-" },
            sh.median_change_pct,
            sh.factor,
            sh.rows,
            sh.source.as_str(),
            if sh.fails {
                ", past the budget: a finding, not noise (--discount-shift for a known change of machine or clock)"
            } else {
                ""
            }
        );
    }
    if !c.new.is_empty() {
        // "source name": the source is ours, the name the program's.
        let new: Vec<String> = c
            .new
            .iter()
            .map(|n| n.split_once(' ').map_or_else(|| code(n), |(source, name)| format!("{source} {}", code(name))))
            .collect();
        let _ = writeln!(m, "New in the run (not checked): {}\n", new.join(", "));
    }
    notes(&mut m, &c.notes);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dot_at_either_end_of_the_axis_is_drawn_whole() {
        for pct in [-1e9, -100.0, 0.0, 100.0, 250.0] {
            let x = axis_x(pct);
            assert!(x - DOT_R >= 0.0 && x + DOT_R <= BAR_PX, "{pct}: {x}");
        }
        assert_eq!(axis_x(0.0), BAR_PX / 2.0);
        assert!(axis_x(50.0) > axis_x(10.0));
    }
}
