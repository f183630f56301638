//! report: `regions.md`, the NVTX regions of an nsys capture as a table a
//! reader answers "which region is slowest, and what runs in it" from: every
//! top-level region and the regions inside it, [`LEVELS`] deep, per rank where
//! a capture holds several processes, with GPU time, wall time, calls and the
//! kernels launched inside. Pure: the model in, Markdown out.
use std::collections::BTreeMap;
use std::fmt::Write;

use super::model::KernelsReport;
use super::ncu_regions::short;
use crate::aggregate::nsys::{Region, RegionsReport};
use crate::markdown::code;

/// Nesting levels shown: the top-level regions and the ones directly inside.
pub(crate) const LEVELS: usize = 2;
/// Top-level regions per process, and children per region, at most.
const TOP_ROWS: usize = 30;
const CHILD_ROWS: usize = 8;
/// Kernels named per region.
const KERNELS: usize = 3;

/// One region of one process, over its threads and instances.
#[derive(Default)]
struct Row {
    gpu_ns: i64,
    wall_ns: i64,
    calls: usize,
    kernel_count: usize,
    kernels: BTreeMap<String, i64>,
}

/// regions.md of a capture with NVTX regions; None without any. `labels`:
/// each process's rank as the other reports name it (`model::process_labels`).
pub(crate) fn regions_md(
    timeline: crate::run_dir::Timeline,
    regions: &RegionsReport,
    kernels: &KernelsReport,
    labels: &BTreeMap<i64, String>,
) -> Option<String> {
    let shown: Vec<&Region> = regions.regions.iter().filter(|r| r.depth < LEVELS).collect();
    if shown.is_empty() {
        return None;
    }
    let gpu = shown.iter().any(|r| r.kernel_count > 0);
    let kernel_labels: BTreeMap<&str, &str> =
        kernels.kernels.iter().map(|k| (k.kernel_name.as_str(), k.label.as_str())).collect();
    let mut by_process: BTreeMap<i64, BTreeMap<Vec<String>, Row>> = BTreeMap::new();
    for r in &shown {
        let row = by_process.entry(r.process_id).or_default().entry(r.names()).or_default();
        row.gpu_ns += r.gpu_time_ns;
        row.wall_ns += r.inclusive_ns;
        row.calls += r.instances;
        row.kernel_count += r.kernel_count;
        for k in &r.kernels {
            *row.kernels.entry(k.name.clone()).or_default() += k.gpu_time_ns;
        }
    }
    let (file, range) = (timeline.regions_file(), timeline.range());
    let mut md = String::from("# Regions\n\n");
    let _ = writeln!(
        md,
        "Source: {file}. Every top-level {range} and the ranges directly inside it, {}; at most {TOP_ROWS} top-level rows and {CHILD_ROWS} inside each (the whole tree is in {file}). Time of several threads of one process is added; of several processes, never.\n",
        if gpu {
            "largest GPU time first (the kernels launched inside; wall time is the host's, beside it)"
        } else {
            "longest wall time first (no kernel was launched inside any range)"
        }
    );
    let key = |r: &Row| if gpu { r.gpu_ns } else { r.wall_ns };
    let several = by_process.len() > 1;
    for (pid, rows) in &by_process {
        if several {
            let rank = labels.get(pid).filter(|l| l.starts_with("rank ")).map(|l| format!("{l}, ")).unwrap_or_default();
            let _ = writeln!(md, "## {rank}process {pid}\n");
        }
        md.push_str("| region | GPU ms | wall ms | calls | kernels inside (GPU ms) |\n|---|---:|---:|---:|---|\n");
        let ordered = |depth: usize, parent: Option<&[String]>| {
            let mut v: Vec<(&Vec<String>, &Row)> = rows
                .iter()
                .filter(|(names, _)| names.len() == depth + 1 && parent.is_none_or(|p| names.starts_with(p)))
                .collect();
            v.sort_by(|a, b| key(b.1).cmp(&key(a.1)).then_with(|| a.0.cmp(b.0)));
            v
        };
        for (names, row) in ordered(0, None).into_iter().take(TOP_ROWS) {
            line(&mut md, names, row, &kernel_labels, "");
            for (child, c) in ordered(1, Some(names)).into_iter().take(CHILD_ROWS) {
                line(&mut md, child, c, &kernel_labels, "↳ ");
            }
        }
        md.push('\n');
    }
    if let Some(groups) = &regions.module_groups {
        module_groups_md(&mut md, groups, labels, file);
    }
    Some(md)
}

/// Rows of repeated modules shown, at most (regions.md and report.html).
pub(crate) const GROUP_ROWS: usize = 30;

fn ms(ns: i64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

/// What share of the capture's GPU time the module ranges hold, as a sentence.
pub(crate) fn coverage_sentence(c: &crate::aggregate::nsys::Coverage) -> String {
    if c.total_gpu_time_ns > 0 {
        format!(
            "The --annotate module ranges hold {} of the capture's {} GPU ms ({:.1}%).",
            ms(c.module_gpu_time_ns),
            ms(c.total_gpu_time_ns),
            100.0 * c.module_gpu_time_ns as f64 / c.total_gpu_time_ns as f64
        )
    } else {
        "The capture has no kernel: the module ranges' share of GPU time cannot be told.".into()
    }
}

/// A group row's figures: members, calls, GPU ms (– without kernels), wall
/// ms, and the members' min / median / max with what they are of.
pub(crate) fn group_figures(r: &crate::aggregate::nsys::ModuleGroup) -> [String; 5] {
    [
        r.members.to_string(),
        r.instances.to_string(),
        if r.gpu_time_ns > 0 { ms(r.gpu_time_ns) } else { "–".into() },
        ms(r.inclusive_ns),
        format!("{} / {} / {} ({})", ms(r.member_min_ns), ms(r.member_median_ns), ms(r.member_max_ns), r.member_time),
    ]
}

/// The longest group path a table shows whole.
const SHORT_PATH: usize = 60;

/// A group's (or region's) path for a table: whole up to 60 characters, else
/// its first name (the phase) and as much of its end as fits, `…` between:
/// `prefill::…::model.layers.[0-31].mlp`. The whole path is in regions.json
/// (and report.html's tooltip).
pub(crate) fn short_path(path: &str) -> String {
    let tail = |s: &str, n: usize| -> String {
        let chars: Vec<char> = s.chars().collect();
        chars[chars.len().saturating_sub(n)..].iter().collect()
    };
    if path.chars().count() <= SHORT_PATH {
        return path.to_string();
    }
    let names: Vec<&str> = path.split(crate::regions::SEP).collect();
    let (first, last) = (names[0], names[names.len() - 1]);
    let head = match names.len() {
        1 => String::new(),
        _ if first.chars().count() < SHORT_PATH / 3 => format!("{first}::…::"),
        _ => "…::".to_string(),
    };
    let room = SHORT_PATH - head.chars().count();
    if last.chars().count() <= room {
        format!("{head}{last}")
    } else {
        format!("{head}…{}", tail(last, room - 1))
    }
}

/// `## Repeated modules`: regions.json's module_groups, and the coverage.
fn module_groups_md(
    md: &mut String,
    g: &crate::aggregate::nsys::ModuleGroups,
    labels: &BTreeMap<i64, String>,
    file: &str,
) {
    md.push_str("## Repeated modules\n\n");
    if let Some(c) = &g.coverage {
        let _ = writeln!(md, "{}\n", coverage_sentence(c));
    }
    if g.groups.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "Regions whose paths differ only in an index (`layers.0`, `layers.1`, …) as one row, `[0-31]` the indices seen; per member (one index tuple), its total time: GPU where the group launched kernels, else wall. Largest first, at most {GROUP_ROWS}; paths past 60 characters cut in the middle (whole in {file}, `module_groups`).\n"
    );
    md.push_str("| group | process | members | calls | GPU ms | wall ms | per member min / median / max ms | largest member |\n|---|---|---:|---:|---:|---:|---|---|\n");
    for r in g.groups.iter().take(GROUP_ROWS) {
        let process = labels.get(&r.process_id).cloned().unwrap_or_else(|| r.process_id.to_string());
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            code(&short_path(&r.path)),
            crate::markdown::text(&process),
            group_figures(r).join(" | "),
            code(&short_path(&r.slowest))
        );
    }
    md.push('\n');
}

fn line(md: &mut String, names: &[String], r: &Row, labels: &BTreeMap<&str, &str>, indent: &str) {
    let gpu = if r.kernel_count > 0 { format!("{:.3}", r.gpu_ns as f64 / 1e6) } else { "–".into() };
    let mut top: Vec<(&String, &i64)> = r.kernels.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let mut kernels: Vec<String> = top
        .iter()
        .take(KERNELS)
        .map(|(name, ns)| {
            let label = labels.get(name.as_str()).map_or_else(|| short(name, 60), |l| l.to_string());
            format!("{} {:.3}", code(&label), **ns as f64 / 1e6)
        })
        .collect();
    if top.len() > KERNELS {
        kernels.push(format!("and {} more", top.len() - KERNELS));
    }
    let name = names.last().map_or("", String::as_str);
    let _ = writeln!(
        md,
        "| {indent}{} | {gpu} | {:.3} | {} | {} |",
        code(name),
        r.wall_ns as f64 / 1e6,
        r.calls,
        if kernels.is_empty() { "–".to_string() } else { kernels.join(", ") }
    );
}

#[cfg(test)]
mod tests {
    use super::short_path;

    #[test]
    fn a_long_group_path_keeps_its_phase_and_its_end() {
        assert_eq!(short_path("prefill::M::model.layers.[0-1]"), "prefill::M::model.layers.[0-1]");
        let long = "decode_all::decode_step::LlamaForCausalLM::model::model.layers.[0-31]::model.layers.[0-31].self_attn::model.layers.[0-31].self_attn.q_proj";
        let s = short_path(long);
        assert_eq!(s, "decode_all::…::model.layers.[0-31].self_attn.q_proj");
        assert!(s.chars().count() <= 60);
        let one = "x".repeat(100);
        assert_eq!(short_path(&one).chars().count(), 60);
    }
}
