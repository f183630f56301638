//! report: the Nsight Compute region report rendered: `ncu/regions/report.md`,
//! each region's `sections.txt`, and the `region.json` view of one region in
//! every scope, from the report model alone (deterministic: fixed decimals,
//! model order).
use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

use crate::aggregate::ncu::{MetricValue, RegionEntry, RegionReportFile, Rollup, ScopeReport};
use crate::markdown::{code, text, visible};
use crate::regions::Attribution;

/// `ncu/regions/<dir>/region.json`: one region's entry in every scope it appears in.
#[derive(Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RegionFile<'a> {
    pub(crate) name: &'a str,
    pub(crate) domain: &'a str,
    pub(crate) dir: &'a str,
    pub(crate) scopes: Vec<ScopedEntry<'a>>,
}

#[derive(Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScopedEntry<'a> {
    pub(crate) scope: &'a str,
    pub(crate) region: &'a RegionEntry,
}

/// Each region's directory with its `region.json` model and `sections.txt` text.
pub(crate) fn per_region(report: &RegionReportFile) -> Vec<(&str, RegionFile<'_>, String)> {
    let mut by_dir: BTreeMap<&str, Vec<(&str, &RegionEntry)>> = BTreeMap::new();
    for scope in &report.scopes {
        for region in &scope.regions {
            by_dir.entry(region.dir.as_str()).or_default().push((scope.scope.as_str(), region));
        }
    }
    by_dir
        .into_iter()
        .map(|(dir, entries)| {
            let (_, first) = entries[0];
            let text: Vec<String> = entries.iter().map(|(scope, region)| sections_text(region, scope)).collect();
            let file = RegionFile {
                name: &first.name,
                domain: &first.domain,
                dir,
                scopes: entries.iter().map(|(scope, region)| ScopedEntry { scope, region }).collect(),
            };
            (dir, file, text.join("\n"))
        })
        .collect()
}

pub(crate) fn markdown(report: &RegionReportFile) -> String {
    let mut md = String::from("# Nsight Compute: per-region report\n\n");
    let src = &report.source;
    let _ = writeln!(md, "- source: {} ({} layout, {} results)", src.files.join(", "), src.layout, src.results);
    let _ = writeln!(md, "- attribution: {}", attribution_text(src.attribution));
    let _ = writeln!(md, "- sections: {}", list_or(&report.sections, "all present"));
    let _ = writeln!(md, "- metrics: {}", list_or(&report.metrics, "all present"));
    if let Some(sel) = report.scopes.first().and_then(|s| s.regions.first()).map(|r| &r.selection) {
        let _ = writeln!(
            md,
            "- kernel selection: include {}; exclude {}",
            list_or(&sel.include_patterns, "all"),
            list_or(&sel.exclude_patterns, "none")
        );
    }
    let _ = writeln!(md, "- config fingerprint: `{}`", report.config_fingerprint);
    md.push('\n');
    if let Some(note) = &report.note {
        let _ = writeln!(md, "> {note}\n");
    }
    for scope in &report.scopes {
        scope_table(&mut md, scope);
    }
    md
}

/// A region's GPU time as the table shows it: unknown ("–") when none of its
/// results had a finite duration (an `inf`/`nan` counter, a missing metric),
/// never 0.000; with the untimed results counted beside it when some had none.
fn gpu_ms(t: &crate::aggregate::ncu::Totals) -> String {
    match t.untimed_calls {
        0 => format!("{:.3}", t.gpu_time_ms),
        n if n >= t.calls => format!("– ({n} untimed)"),
        n => format!("{:.3} (+{n} untimed)", t.gpu_time_ms),
    }
}

/// The scope line's word on results without a finite GPU time.
fn untimed_note(untimed: u64) -> String {
    if untimed == 0 {
        String::new()
    } else {
        format!(
            " ({untimed} results without a finite GPU time (no duration, or inf/nan): counted in results, not in time)"
        )
    }
}

fn attribution_text(a: Attribution) -> &'static str {
    match a {
        Attribution::NvtxStack => {
            "each kernel to the NVTX push/pop ranges open at its launch (kernel replay); parents include their children"
        }
        Attribution::Range => {
            "each result is one NVTX range (range replay); values are the range's own, nothing is summed up the tree"
        }
        Attribution::None => "no NVTX data: every kernel is in (unattributed)",
    }
}

fn list_or(items: &[String], empty: &str) -> String {
    if items.is_empty() {
        empty.to_string()
    } else {
        items.iter().map(|i| code(i)).collect::<Vec<_>>().join(", ")
    }
}

fn scope_table(md: &mut String, scope: &ScopeReport) {
    let _ = writeln!(md, "## Scope {}\n", code(&scope.scope));
    let _ = writeln!(
        md,
        "{} results, {:.3} ms GPU time over the top-level regions{}.\n",
        scope.totals.calls,
        scope.totals.gpu_time_ms,
        untimed_note(scope.totals.untimed_calls)
    );
    md.push_str("| region | calls | GPU ms (incl.) | GPU ms (excl.) | share | top kernel |\n");
    md.push_str("|---|---:|---:|---:|---:|---|\n");
    // Kernel names cut alike are told apart as in kernels.md (`kernel_names::distinct_labels`).
    let mut names: Vec<&str> =
        scope.regions.iter().filter_map(|r| r.kernels.first()).map(|k| k.kernel_name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let cut: Vec<String> = names.iter().map(|n| short(n, 60)).collect();
    let pairs: Vec<(&str, &str)> = cut.iter().map(String::as_str).zip(names.iter().copied()).collect();
    let labels: std::collections::HashMap<&str, String> =
        names.iter().copied().zip(crate::kernel_names::distinct_labels(&pairs)).collect();
    for r in &scope.regions {
        let share = if scope.totals.gpu_time_ms > 0.0 {
            100.0 * r.inclusive.gpu_time_ms / scope.totals.gpu_time_ms
        } else {
            0.0
        };
        let excl = r.exclusive.as_ref().map_or("–".to_string(), gpu_ms);
        let top = r.kernels.first().map_or(String::new(), |k| code(&labels[k.kernel_name.as_str()]));
        let indent = "&nbsp;&nbsp;".repeat(r.depth);
        let (name, dir) = (text(&r.name), &r.dir);
        if r.no_result.is_some() {
            // Not measured: no count, time or share that could read as zero.
            let _ = writeln!(md, "| {indent}[{name}]({dir}/region.json) | – | – (no result) | – | – |  |");
            continue;
        }
        let _ = writeln!(
            md,
            "| {indent}[{name}]({dir}/region.json) | {} | {} | {} | {:.1}% | {} |",
            r.inclusive.calls,
            gpu_ms(&r.inclusive),
            excl,
            share,
            top
        );
    }
    md.push('\n');
    first_use_notes(md, scope);
}

/// Regions whose first range result carried one-time costs: their totals
/// hold them, and a user comparing runs should know.
fn first_use_notes(md: &mut String, scope: &ScopeReport) {
    let flagged: Vec<_> = scope.regions.iter().filter_map(|r| Some((r, r.first_use.as_ref()?))).collect();
    for &(r, f) in &flagged {
        let _ = writeln!(
            md,
            "- {}: its first result took {:.3} ms, {:.0}× the median of the {} after it ({:.3} ms): one-time costs of the first instance (context, module loading, autotuning) are in its totals; warm up before the profiled ranges to leave them out.",
            text(&r.name),
            f.first_ms,
            f.first_ms / f.others_median_ms,
            f.others,
            f.others_median_ms
        );
    }
    if !flagged.is_empty() {
        md.push('\n');
    }
}

/// The configured sections of one region in one scope, as text.
pub(crate) fn sections_text(region: &RegionEntry, scope: &str) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "Region: {}", visible(&region.name));
    let _ = writeln!(t, "Scope: {}", visible(scope));
    if region.unattributed {
        let _ = writeln!(t, "(kernels launched outside every NVTX range)");
    }
    if let Some(why) = &region.no_result {
        let _ = writeln!(t, "Not measured: {}", visible(why));
        return t;
    }
    let _ = writeln!(
        t,
        "Calls: {}  GPU time: {:.6} ms  Selection: include {:?} exclude {:?}",
        region.inclusive.calls,
        region.inclusive.gpu_time_ms,
        region.selection.include_patterns,
        region.selection.exclude_patterns
    );
    let mut section = None;
    for m in &region.metrics {
        if section != Some(&m.section) {
            let title = if m.section.is_empty() { "Metrics" } else { m.section.as_str() };
            let _ = writeln!(t, "\n[{title}]");
            section = Some(&m.section);
        }
        let _ = writeln!(
            t,
            "  {:<56} {:>22} {:<12} {:<14} {}",
            visible(&m.name),
            visible(&value_text(m)),
            visible(&m.unit),
            m.value.and_then(|v| scaled(v, &m.unit)).unwrap_or_default(),
            rollup_text(m)
        );
    }
    t
}

fn value_text(m: &MetricValue) -> String {
    match (&m.value, &m.text) {
        (Some(v), _) => format!("{v:.3}"),
        (None, Some(t)) => t.clone(),
        (None, None) => "n/a".to_string(),
    }
}

/// A base-unit value as a person reads it (`= 260.51 MB`, `= 1.99 GHz`,
/// `= 915.03 µs`), beside the exact value; None for other units.
fn scaled(v: f64, unit: &str) -> Option<String> {
    let steps: &[(f64, &str)] = match unit {
        "ns" => &[(1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns")],
        "byte" => &[(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB"), (1.0, "B")],
        "byte/second" => &[(1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "KB/s"), (1.0, "B/s")],
        "hz" => &[(1e9, "GHz"), (1e6, "MHz"), (1e3, "kHz"), (1.0, "Hz")],
        _ => return None,
    };
    if !v.is_finite() {
        return None;
    }
    let (div, name) = steps.iter().find(|(d, _)| v.abs() >= *d).unwrap_or(&steps[steps.len() - 1]);
    Some(format!("= {:.2} {name}", v / div))
}

fn rollup_text(m: &MetricValue) -> String {
    let how = match m.rollup {
        Rollup::Sum => "sum",
        Rollup::WeightedMean => "time-weighted mean",
        Rollup::Max => "max",
        Rollup::Min => "min",
        Rollup::Text => "text",
    };
    let na = if m.not_available > 0 { format!(", {} n/a", m.not_available) } else { String::new() };
    format!("({how} of {}{na})", m.samples)
}

/// A name cut to `max` characters (with …); the caller escapes it for where
/// it goes (`crate::markdown::code`, `html::esc`).
pub(crate) fn short(name: &str, max: usize) -> String {
    if name.chars().count() <= max {
        return name.to_string();
    }
    let cut: String = name.chars().take(max - 1).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// sections.txt keeps the exact base value and shows it scaled beside it.
    #[test]
    fn base_units_are_scaled_for_reading() {
        assert_eq!(scaled(260_505_410.0, "byte").as_deref(), Some("= 260.51 MB"));
        assert_eq!(scaled(915_030.0, "ns").as_deref(), Some("= 915.03 µs"));
        assert_eq!(scaled(13_775_081_363.453, "hz").as_deref(), Some("= 13.78 GHz"));
        assert_eq!(scaled(291_495_216_659.563, "byte/second").as_deref(), Some("= 291.50 GB/s"));
        assert_eq!(scaled(0.0, "byte").as_deref(), Some("= 0.00 B"));
        assert_eq!(scaled(16.5, "%"), None);
        assert_eq!(scaled(f64::NAN, "ns"), None);
    }
}
