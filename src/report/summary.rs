//! report: the Markdown reports people act on, rendered from the model
//! (report/model.rs): `kernels.md`, `operators.md` and `stakeholder_summary.md`.
//! Deterministic: no clock, fixed decimals, sorted input.
use std::fmt::Write;

use super::model::{Derived, Inputs, KernelsReport, OperatorsReport, StageUse};
use super::peaks::Peak;
use crate::markdown::{code, text};
use crate::provenance::capture::CaptureHost;
use crate::provenance::Env;
use crate::regions::RangeStyle;

pub(crate) fn kernels_md(k: &KernelsReport) -> String {
    let mut md = format!("# Top kernels\n\nSource: {}.\n", k.source);
    if let Some(n) = &k.note {
        let _ = writeln!(md, "\n> {n}");
    }
    md.push_str("\n| # | kernel | device | total ms | calls | mean ms | share |\n|---:|---|---|---:|---:|---:|---:|\n");
    for (i, r) in k.kernels.iter().enumerate() {
        let (total, mean, share) = r.time_cells();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {total} | {} | {mean} | {share} |",
            i + 1,
            code(&r.label),
            crate::markdown::text(&r.device),
            r.calls,
        );
    }
    md.push_str(if k.full_names {
        "\nFull names are in kernels.json.\n"
    } else {
        "\nShort names where the export has them (`report.kernel_names=full` shows the demangled ones); full names are in kernels.json.\n"
    });
    md
}

pub(crate) fn operators_md(o: &OperatorsReport) -> String {
    let mut md = format!(
        "# Operators (NVTX ranges other than the workload's stages)\n\nSource: {}; {}.\n\n## By call path\n\n",
        o.source,
        ranked_by(o)
    );
    operator_table(&mut md, &o.operators, usize::MAX);
    if !o.by_leaf.is_empty() {
        md.push_str("\n## By operator, over every call path\n\nAn instance nested in one of its own name counts once, in the outer one.\n\n");
        operator_table(&mut md, &o.by_leaf, usize::MAX);
    }
    if !o.by_module_group.is_empty() {
        md.push_str("\n## By call path, repeated modules together\n\nCall paths that differ only in a module index (`layers.0`, `layers.1`) as one row, `[0-31]` the indices seen.\n\n");
        operator_table(&mut md, &o.by_module_group, usize::MAX);
    }
    md
}

/// "ranked by GPU time (…)" or "ranked by wall time".
fn ranked_by(o: &OperatorsReport) -> &'static str {
    match o.ranked_by.as_str() {
        "gpu_time" => "ranked by the GPU time of the kernels launched inside (wall time beside it)",
        _ => "ranked by wall time",
    }
}

/// Operator rows, the first `n`; a rank column where the capture has several processes.
fn operator_table(md: &mut String, rows: &[crate::report::model::OperatorRow], n: usize) {
    let ranks = rows.iter().any(|r| r.rank.is_some());
    md.push_str(if ranks { "| rank | operator " } else { "| operator " });
    md.push_str("| GPU ms | wall ms | calls | mean ms |\n|");
    md.push_str(if ranks { "---|---|" } else { "---|" });
    md.push_str("---:|---:|---:|---:|\n");
    for r in rows.iter().take(n) {
        let gpu = r.gpu_ms.map_or("–".to_string(), |g| format!("{g:.3}"));
        if ranks {
            let _ = write!(md, "| {} ", crate::markdown::text(r.rank.as_deref().unwrap_or("–")));
        }
        let _ = writeln!(md, "| {} | {gpu} | {:.3} | {} | {:.4} |", code(&r.name), r.total_ms, r.calls, r.mean_ms);
    }
}

/// `stakeholder_summary.md`.
pub(crate) fn stakeholder_summary(inputs: &Inputs, d: &Derived) -> String {
    let mut md = String::from("# Stakeholder summary\n\n");
    fix_first(&mut md, &d.findings, inputs.nsys_breakdown.as_ref());
    environment(&mut md, inputs);
    aggregates(&mut md, inputs);
    stages(&mut md, inputs);
    mfu(&mut md, inputs, d);
    top_operators(&mut md, &d.operators);
    top_kernels(&mut md, &d.kernels, inputs.roofline.as_ref(), d.join.as_ref());
    if let Some(r) = &d.ranks {
        ranks_section(&mut md, r);
    }
    if let Some(j) = &d.join {
        region_join(&mut md, j);
    }
    narrative(&mut md, inputs, d);
    md
}

/// "What to fix first": the findings' tables, their notes, ncu's advice and
/// the breakdown (the same tables report.html writes).
fn fix_first(
    md: &mut String,
    f: &super::findings::FindingsReport,
    breakdown: Option<&crate::aggregate::nsys::breakdown::BreakdownReport>,
) {
    use super::findings::tables;
    md.push_str("## What to fix first\n\n");
    if !f.findings.is_empty() {
        let _ = writeln!(
            md,
            "{} ([findings.json](findings.json) has the evidence and how each bound was computed).\n",
            tables::intro(f)
        );
        md.push_str(&tables::findings(f).markdown());
        md.push_str("\nWhere each lies, and what to try:\n\n");
        md.push_str(&tables::where_and_what(f).markdown());
        md.push('\n');
        for (i, line) in tables::ncu_commands(f) {
            let _ = writeln!(md, "ncu on the top kernel of #{i} (then `llmperf import ncu llmperf-….ncu-rep -o RUN`; with several processes, profile one rank):\n\n```sh\n{}\n```\n", crate::markdown::visible(&line));
        }
    }
    let shown = f.findings.len().min(super::findings::tables::SHOWN_FINDINGS);
    if f.findings.len() > shown {
        // Numbered as the tables number them, so that no count reads as "findings not shown".
        let _ = writeln!(md, "- findings {}–{} are in [findings.json](findings.json)", shown + 1, f.findings.len());
    }
    for n in &f.notes {
        let _ = writeln!(md, "- {}", text(n));
    }
    md.push('\n');
    if !f.tensor_cores.is_empty() {
        md.push_str("FLOPs on tensor cores per region (ncu's `sm__ops_path_tensor_*` counters):\n\n");
        md.push_str(&tables::tensor_cores(f).markdown());
        md.push('\n');
    }
    if !f.ncu_advice.is_empty() {
        md.push_str("ncu's own advice on the kernels with the most GPU time ([ncu/rules.json](ncu/rules.json)): per kernel, its headline reading first, then the rules by their Estimated Speedup (weighted: times the kernel's share of GPU time):\n\n");
        md.push_str(&tables::ncu_advice(f).markdown());
        md.push('\n');
    }
    if let Some(b) = breakdown.filter(|b| !b.devices.is_empty()) {
        md.push_str("Where the wall time of each top-level region went ([nsys/breakdown.json](nsys/breakdown.json)), % of wall:\n\n");
        md.push_str(&tables::breakdown(b).markdown());
        md.push_str("\nKernel time by category (all devices):\n\n");
        md.push_str(&tables::categories(b).markdown());
        md.push('\n');
    }
}

/// Regions of the Ranks table: the ones with the most time on their slowest rank.
const RANK_ROWS: usize = 15;

/// `ranks.md` of a merged job: the Ranks section alone.
pub(crate) fn ranks_md(r: &crate::aggregate::ranks::RanksReport) -> String {
    let mut md = String::from("# Ranks\n\n");
    ranks_tables(&mut md, r);
    md
}

/// The Ranks section of the summary and of report.md.
pub(crate) fn ranks_section(md: &mut String, r: &crate::aggregate::ranks::RanksReport) {
    md.push_str("## Ranks\n\n");
    ranks_tables(md, r);
}

/// Each rank's totals, then the regions whose ranks differ most.
fn ranks_tables(md: &mut String, r: &crate::aggregate::ranks::RanksReport) {
    md.push_str("| rank | host | processes | devices | kernels | GPU ms | of it communication | in top-level ranges ms |\n|---:|---|---|---|---:|---:|---:|---:|\n");
    let ms = |ns: i64| format!("{:.3}", ns as f64 / 1e6);
    let list = |v: &[i64]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ");
    for k in &r.ranks {
        let failed = k.failure.as_deref().map(|f| format!(" ({})", f.replace('|', "\\|"))).unwrap_or_default();
        let _ = writeln!(
            md,
            "| {}{failed} | {} | {} | {} | {} | {} | {} | {} |",
            k.rank,
            k.host.as_deref().unwrap_or("–"),
            list(&k.process_ids),
            list(&k.devices),
            k.kernels,
            ms(k.gpu_time_ns),
            ms(k.comm_gpu_time_ns),
            ms(k.wall_ns)
        );
    }
    for m in &r.missing {
        let _ = writeln!(md, "| {} | – | missing: {} | | | | | |", m.rank, m.reason.replace('|', "\\|"));
    }
    for m in &r.not_profiled {
        let _ = writeln!(md, "| {} | – | not profiled: {} | | | | | |", m.rank, m.reason.replace('|', "\\|"));
    }
    let how = match r.rank_source.as_str() {
        "cuda_device" => {
            "each process's rank is its CUDA device's place among the devices (the device its kernels ran on)".into()
        }
        "process" => "the processes ran no kernels: ranks are numbered by process id".into(),
        "run_directory" => "each rank wrote its own ranks/<rank>/ directory".into(),
        other => match other.strip_prefix("environment (").and_then(|v| v.strip_suffix(')')) {
            Some(var) => format!("each process's rank is the {var} its launcher gave it"),
            None => other.to_string(),
        },
    };
    let _ = writeln!(md, "\nRanks: {how}. Same-named regions of different ranks ran in parallel: their times are per rank, never summed.\n");
    let mut rows: Vec<_> = r.regions.iter().filter(|x| x.per_rank.len() > 1).collect();
    // GPU time first where the ranks ran kernels in their regions: the most on one rank.
    let gpu_of = |x: &crate::aggregate::ranks::RankedRegion| {
        x.per_rank.keys().map(|k| x.comm_ns.get(k).unwrap_or(&0) + x.compute_ns.get(k).unwrap_or(&0)).max().unwrap_or(0)
    };
    let by_gpu = rows.iter().any(|x| gpu_of(x) > 0);
    rows.sort_by_key(|x| (std::cmp::Reverse(if by_gpu { gpu_of(x) } else { 0 }), std::cmp::Reverse(x.max_ns)));
    if rows.is_empty() {
        return;
    }
    md.push_str(if by_gpu { "| region | ranks | max GPU ms |" } else { "| region | ranks |" });
    md.push_str(" min ms | median ms | max ms | skew | straggler |\n|---|---:|");
    md.push_str(if by_gpu { "---:|" } else { "" });
    md.push_str("---:|---:|---:|---:|---:|\n");
    for x in rows.iter().take(RANK_ROWS) {
        let shown = code(&crate::regions::selector(&crate::regions::display(&x.path_names), &x.domain));
        let gpu = if by_gpu { format!(" {} |", ms(gpu_of(x))) } else { String::new() };
        let _ = writeln!(
            md,
            "| {shown} | {} |{gpu} {} | {} | {} | {} | {} |",
            x.per_rank.len(),
            ms(x.min_ns),
            ms(x.median_ns),
            ms(x.max_ns),
            x.skew_pct.map_or("–".into(), |v| format!("{v:.1}%")),
            x.straggler_rank.map_or("–".into(), |v| v.to_string())
        );
    }
    let _ = writeln!(
        md,
        "\n{}min, median and max are each rank's wall time; skew = (max − min) / median over the ranks; all regions, per rank, in ranks.json.\n",
        if by_gpu { "Regions with the most GPU time on one rank first; " } else { "Regions with the most wall time on one rank first; " }
    );
}

/// Rows of the nsys × ncu table shown; region_join.json has them all.
const JOIN_ROWS: usize = 15;

/// nsys and ncu side by side per region: coverage, HFU, MBU.
fn region_join(md: &mut String, j: &super::join::RegionJoin) {
    md.push_str(
        "## nsys × ncu per region

",
    );
    md.push_str("| region | nsys wall ms | nsys GPU ms | ncu results | ncu GPU ms (replayed) | coverage | HFU | MBU |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
    let mut rows: Vec<_> = j.regions.iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.nsys.as_ref().map_or(0, |n| n.gpu_time_ns)));
    let pct = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.1}%"));
    let ms = |ns: i64| format!("{:.3}", ns as f64 / 1e6);
    for r in rows.iter().take(JOIN_ROWS) {
        let shown = if r.path_names.len() > 1 { crate::regions::display(&r.path_names) } else { r.path.clone() };
        let name = code(&crate::regions::selector(&shown, &r.domain));
        let (wall, gpu) = r.nsys.as_ref().map_or(("–".into(), "–".into()), |n| {
            (if n.instances > 0 { ms(n.wall_ns) } else { "–".into() }, ms(n.gpu_time_ns))
        });
        let (calls, ncu_ms) = r
            .ncu
            .as_ref()
            .map_or(("–".into(), "–".into()), |n| (n.calls.to_string(), format!("{:.3}", n.gpu_time_ms)));
        let _ = writeln!(
            md,
            "| {name} | {wall} | {gpu} | {calls} | {ncu_ms} | {} | {} | {} |",
            pct(r.coverage_pct),
            pct(r.hfu_pct),
            pct(r.mbu_pct)
        );
    }
    if j.regions.len() > JOIN_ROWS {
        let _ = writeln!(md, "\n{} more in region_join.json.", j.regions.len() - JOIN_ROWS);
    }
    let coverage = match j.ncu_results.as_str() {
        "range" => "ncu measured each range as one result (range replay): no per-kernel coverage".to_string(),
        _ => "coverage = nsys GPU time of the region's kernels that ncu profiled there / all its nsys GPU time".into(),
    };
    let joined = j.kernels.iter().filter(|k| k.nsys_name.is_some()).count();
    let _ = writeln!(
        md,
        "\n{coverage}. {joined} of {} ncu kernel names joined an nsys kernel ({} by a normalized spelling). HFU = hardware FLOPs (ncu counters) / the profiled kernels' GPU time / peak FLOP/s; MBU = DRAM bytes / the same time / peak bandwidth. Peak: {}. Clocks: {}.\n",
        j.kernels.len(),
        j.kernels.iter().filter(|k| k.matched == crate::kernel_names::Matched::Normalized).count(),
        j.peak.as_deref().or(j.peak_missing.as_deref()).unwrap_or("–"),
        j.clocks
    );
}

/// The GPU of an import without env.json or an nsys capture: the configured
/// name, else what ncu's results say (device indices only; a CSV names no GPU).
fn imported_gpu(inputs: &Inputs) -> String {
    if let Some(name) = inputs.config.as_ref().and_then(|c| c.hardware.gpu.clone()) {
        return format!("{} (hardware.gpu)", crate::markdown::text(&name));
    }
    if !inputs.trace_gpus.is_empty() {
        let named: Vec<String> =
            inputs.trace_gpus.iter().map(|(id, name)| format!("{id}: {}", crate::markdown::text(name))).collect();
        return format!("{} (the trace's deviceProperties)", named.join(", "));
    }
    let devices: Vec<String> = inputs
        .ncu
        .iter()
        .flat_map(|n| &n.scopes)
        .filter_map(|s| s.scope.strip_prefix("device:"))
        .map(crate::markdown::text)
        .collect();
    let cc = inputs
        .roofline
        .as_ref()
        .and_then(|r| r.compute_capability.as_deref())
        .map_or(String::new(), |cc| format!("; compute capability {} (ncu's CSV)", crate::markdown::text(cc)));
    match devices.is_empty() {
        true => format!("not recorded (an import; hardware.gpu=NAME names it){cc}"),
        false => format!(
            "not recorded: an import, and ncu's results name device {} only (hardware.gpu=NAME names the GPU for the peak table){cc}",
            devices.join(", ")
        ),
    }
}

fn environment(md: &mut String, inputs: &Inputs) {
    if let (None, Some(c)) = (&inputs.env, &inputs.capture) {
        return capture_environment(md, c);
    }
    let env = inputs.env.as_ref();
    let at = |f: fn(&Env) -> Option<String>| env.and_then(f).unwrap_or_else(|| "–".into());
    md.push_str("## Environment\n\n| item | value |\n|---|---|\n");
    let gpus: Vec<String> =
        env.map(|e| e.gpus.devices.iter().map(|d| format!("{}: {}", d.index, d.name)).collect()).unwrap_or_default();
    let gpu = match (env, gpus.is_empty()) {
        (Some(_), true) => format!("none ({})", at(|e| e.gpus.note.clone())),
        (Some(_), false) => gpus.join(", "),
        // An import: nothing recorded the machine, which is not "no GPU".
        (None, _) => imported_gpu(inputs),
    };
    let tools = match env {
        Some(_) => format!("{} / {}", at(|e| e.tools.nsys.version.clone()), at(|e| e.tools.ncu.version.clone())),
        None => "not recorded (an import: CSV pages do not say which version wrote them)".to_string(),
    };
    let rows = [
        ("GPU", gpu),
        (
            "CPU",
            format!(
                "{} ({} logical cores)",
                at(|e| Some(e.cpu.model.clone())),
                at(|e| Some(e.cpu.logical_cores.to_string()))
            ),
        ),
        (
            "driver / CUDA",
            format!(
                "{} / {}",
                at(|e| e.gpus.devices.first().map(|d| d.driver_version.clone())),
                at(|e| e.gpus.driver_cuda_version.clone())
            ),
        ),
        ("nsys / ncu", tools),
        (
            "libtorch",
            format!("{} (CUDA build {})", at(|e| e.libtorch.version.clone()), at(|e| e.libtorch.cuda_build.clone())),
        ),
        (
            "llmperf",
            format!("{} ({})", at(|e| Some(e.llmperf.version.clone())), at(|e| Some(e.llmperf.git_revision.clone()))),
        ),
    ];
    for (k, v) in rows {
        let _ = writeln!(md, "| {k} | {v} |");
    }
    if let Some(t) = &inputs.timings {
        let m = &t.model;
        let _ = writeln!(
            md,
            "| model | {} {} — {} parameters, {} layers, hidden {}, {} heads, vocab {} |",
            m.name,
            m.variant.as_deref().unwrap_or(""),
            m.parameters,
            opt(m.layers),
            opt(m.hidden_size),
            opt(m.heads),
            opt(m.vocab_size)
        );
        let _ = writeln!(
            md,
            "| run | {} on {}, batch {}, {} measured iterations after {} warm-up |",
            t.dtype, t.device, t.batch_size, t.iters, t.warmup_iters
        );
    }
    md.push('\n');
}

/// An imported nsys capture: its own machine, from the export (no env.json:
/// the machine llmperf ran on is not the one that was profiled).
fn capture_environment(md: &mut String, c: &CaptureHost) {
    let s = |v: &Option<String>| v.clone().unwrap_or_else(|| "–".into());
    let gpus: Vec<String> = c
        .gpus
        .iter()
        .map(|g| {
            let mut t = format!("{}: {}", g.id.map_or("?".into(), |i| i.to_string()), s(&g.name));
            if let (Some(sm), Some(mem)) = (g.sm_count, g.memory_bytes) {
                let _ = write!(t, " ({sm} SMs, {:.1} GiB)", mem as f64 / (1u64 << 30) as f64);
            }
            t
        })
        .collect();
    md.push_str("## Environment\n\n| item | value |\n|---|---|\n");
    let rows = [
        ("GPU", if gpus.is_empty() { "none recorded".to_string() } else { gpus.join(", ") }),
        ("CPU", format!("{} ({} cores)", s(&c.cpu), c.cpu_cores.map_or("–".into(), |n| n.to_string()))),
        ("driver / CUDA", format!("{} / –", c.driver_version.as_deref().map_or("–".to_string(), driver_version))),
        ("OS / host", format!("{} / {}", s(&c.os), s(&c.hostname))),
        ("nsys", format!("exported by {} (captured with {})", s(&c.exported_by), s(&c.nsys_target_dir))),
    ];
    for (k, v) in rows {
        let _ = writeln!(md, "| {k} | {v} |");
    }
    md.push_str("\nThe machine of the capture, from its SQLite export (nsys/capture.json): this run directory was imported.\n\n");
}

/// A driver version as people write it: older nsys exports record 450.51.05
/// as the integer 4505105 (major × 10000 + minor × 100 + patch).
fn driver_version(recorded: &str) -> String {
    match recorded.parse::<u64>() {
        Ok(v) if recorded.len() >= 6 && (100..1000).contains(&(v / 10_000)) => {
            format!("{}.{:02}.{:02}", v / 10_000, v / 100 % 100, v % 100)
        }
        _ => crate::markdown::text(recorded),
    }
}

fn opt(v: Option<i64>) -> String {
    v.map_or("–".into(), |v| v.to_string())
}

/// GPU busy time and kernel count over the whole capture (nsys).
fn gpu_totals(inputs: &Inputs) -> Option<(f64, usize)> {
    let r = inputs.regions.as_ref()?;
    let top: Vec<_> = r.regions.iter().filter(|x| x.depth == 0 && x.style == RangeStyle::PushPop).collect();
    let ns: i64 = top.iter().map(|x| x.gpu_time_ns).sum::<i64>() + r.unattributed.gpu_time_ns;
    let n: usize = top.iter().map(|x| x.kernel_count).sum::<usize>() + r.unattributed.kernel_count;
    Some((ns as f64 / 1e6, n))
}

/// The kernels CUDA graphs ran, attributed to the ranges around the graph
/// launches and outside every range, as text; None when there were none.
fn graph_totals(inputs: &Inputs) -> Option<String> {
    let r = inputs.regions.as_ref()?;
    let top = r.regions.iter().filter(|x| x.depth == 0 && x.style == RangeStyle::PushPop);
    let (n, ns) = top.fold((0, 0), |(n, ns), x| (n + x.graph_kernel_count, ns + x.graph_gpu_time_ns));
    let (un, uns) = (r.unattributed.graph_kernel_count, r.unattributed.graph_gpu_time_ns);
    (n + un > 0).then(|| {
        format!(
            "{} kernels, {:.3} ms: {n} ({:.3} ms) in the ranges around their graph launches, {un} ({:.3} ms) launched outside every range",
            n + un,
            (ns + uns) as f64 / 1e6,
            ns as f64 / 1e6,
            uns as f64 / 1e6
        )
    })
}

fn aggregates(md: &mut String, inputs: &Inputs) {
    md.push_str("## Aggregates\n\n| metric | value |\n|---|---:|\n");
    let t = inputs.timings.as_ref();
    let _ = writeln!(
        md,
        "| measured time (workload clock) | {} |",
        t.map_or("–".into(), |t| format!("{:.3} ms", t.measured_ms))
    );
    match gpu_totals(inputs) {
        Some((ms, n)) => {
            let _ = writeln!(md, "| GPU busy time (sum of kernel times, {}) | {ms:.3} ms |", inputs.timeline.name());
            let _ = writeln!(md, "| kernels | {n} |");
            if let Some(g) = graph_totals(inputs) {
                let _ = writeln!(md, "| of them run by CUDA graphs (nsys, node trace) | {g} |");
            }
        }
        None => md.push_str("| GPU busy time | – (no nsys capture) |\n| kernels | – |\n"),
    }
    // Throughputs of the kinds the workload has: a ResNet has samples, no tokens.
    let tp = t.map(|t| &t.throughput);
    for (name, v, unit) in [
        ("decode tokens/s", tp.and_then(|t| t.decode_tokens_per_s), "tokens/s"),
        ("prefill tokens/s", tp.and_then(|t| t.prefill_tokens_per_s), "tokens/s"),
        ("samples/s", tp.and_then(|t| t.samples_per_s), "samples/s"),
    ] {
        if let Some(v) = v {
            let _ = writeln!(md, "| {name} | {v:.1} {unit} |");
        }
    }
    let warning = overhead(md, inputs);
    md.push('\n');
    if let Some(w) = warning {
        let _ = writeln!(md, "{w}\n");
    }
}

/// Overhead of profiling: the measured loop under nsys against the same loop
/// without a profiler. Past 25% the summary warns.
pub(crate) const OVERHEAD_LIMIT_PCT: f64 = 25.0;

fn overhead(md: &mut String, inputs: &Inputs) -> Option<String> {
    let (Some(t), Some(b)) = (&inputs.timings, &inputs.baseline) else {
        md.push_str("| profiling overhead | – (no unprofiled baseline: runner.run.baseline=true runs one) |\n");
        return None;
    };
    if b.measured_ms <= 0.0 {
        return None;
    }
    let pct = 100.0 * (t.measured_ms - b.measured_ms) / b.measured_ms;
    let _ = writeln!(md, "| measured time without a profiler (baseline) | {:.3} ms |", b.measured_ms);
    let _ = writeln!(md, "| profiling overhead (nsys run vs baseline) | {pct:+.1}% |");
    (pct > OVERHEAD_LIMIT_PCT).then(|| {
        format!(
            "> **Warning:** the profiled run was {pct:.1}% slower than the unprofiled one (limit {OVERHEAD_LIMIT_PCT:.0}%): its times are inflated. Hint: use light mode (runner.run.mode=light), or trace less (pipeline.nsys.trace=cuda,nvtx)."
        )
    })
}

fn stages(md: &mut String, inputs: &Inputs) {
    md.push_str("## Per-Stage Timings\n\n");
    let Some(t) = &inputs.timings else {
        md.push_str("No workload timings (a user command: see nsys/regions.json for its NVTX ranges).\n\n");
        return;
    };
    md.push_str("| stage | calls | mean ms | median ms | p90 ms | total ms |\n|---|---:|---:|---:|---:|---:|\n");
    for (name, s) in &t.stages {
        let _ = writeln!(
            md,
            "| {} | {} | {:.4} | {:.4} | {:.4} | {:.3} |",
            code(name),
            s.count,
            s.mean_ms,
            s.median_ms,
            s.p90_ms,
            s.total_ms
        );
    }
    if let Some(step) = t.stages.keys().find(|s| s.ends_with("decode_step")) {
        let _ = writeln!(
            md,
            "\n{} is one decode step; its mean and median are over every step of every sequence.\n",
            code(step)
        );
    } else {
        md.push('\n');
    }
    repeats(md, t);
}

/// With `runner.run.repeat` > 1: each stage's median per repeat and their
/// spread, the run's own noise between repeats (what `llmperf check` allows for).
fn repeats(md: &mut String, t: &crate::timings::Timings) {
    let rows = crate::report::model::repeat_rows(t);
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "### Spread across {} repeats of the measured loop\n\n| stage | median ms of each repeat | spread |\n|---|---|---:|",
        t.repeat
    );
    for (name, each, spread) in rows {
        let _ = writeln!(md, "| {} | {each} | {spread} |", code(&name));
    }
    md.push_str("\nSpread: (slowest − fastest) / median of the repeats' medians.\n\n");
}

fn mfu(md: &mut String, inputs: &Inputs, d: &Derived) {
    let (peak, uses) = (d.peak.as_ref(), d.uses.as_slice());
    md.push_str("## MFU\n\n");
    let flops = inputs.config.as_ref().map(|c| &c.workload.flops).filter(|f| !f.is_empty());
    let Some(t) = &inputs.timings else {
        match (flops, &inputs.regions, peak) {
            (Some(_), Some(_), Some(p)) => user_mfu(md, p, uses, &d.unmatched_flops, inputs.timeline),
            (Some(_), None, _) => md.push_str("MFU not computed: workload.flops is set, but there is no nsys capture to time its regions (hint: keep nsys on).\n\n"),
            _ => md.push_str("MFU not computed: no analytic FLOP count (a user command, not a built-in workload; hint: give the FLOPs of one instance per region, workload.flops='{prefill: 2.1e12}', and a peak, hardware.peak_tflops or a GPU in the peak table).\n\n"),
        }
        return;
    };
    let Some(peak) = peak else {
        md.push_str("MFU not computed: no configuration in the run directory.\n\n");
        return;
    };
    if let Some(why) = &peak.missing {
        let _ = writeln!(md, "{why}\n");
    } else {
        let _ = writeln!(
            md,
            "Peak: {} FLOP/s{}, from {}.\n",
            eng(peak.flops.unwrap_or(0.0)),
            peak.bytes_per_s.map_or(String::new(), |b| format!(" and {} B/s", eng(b))),
            peak.source
        );
    }
    if uses.is_empty() {
        // A TorchScript model (or any workload without an analytic count): no row to show.
        let _ = writeln!(
            md,
            "MFU not computed: the workload counted no FLOPs for any stage ({}; hint: give the FLOPs of one instance per region, workload.flops='{{prefill: 2.1e12}}').\n",
            t.flops.formula
        );
        return;
    }
    md.push_str("| stage | FLOPs per call | median ms | mean ms | achieved FLOP/s | MFU | bytes per call | MBU |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for u in uses {
        let pct = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.2}%"));
        let _ = writeln!(
            md,
            "| {} | {} | {:.4} | {:.4} | {} | {} | {} | {} |",
            code(&u.stage),
            eng(u.flops_per_call),
            u.median_ms,
            u.mean_ms,
            eng(u.achieved_flops),
            pct(u.mfu_pct),
            u.bytes_per_call.map_or("–".to_string(), eng),
            pct(u.mbu_pct)
        );
    }
    let _ = writeln!(md, "\nAssumptions: {}.", t.flops.formula);
    if let Some(b) = &t.decode_bytes {
        let _ = writeln!(md, "Bytes per decode step: {}.", b.formula);
    }
    md.push_str("Achieved FLOP/s = FLOPs per call / median wall time of the stage's calls (NVTX range, workload clock); the mean beside it, which a few slow calls move.\n\n");
}

/// MFU of a user's command, per region named in `workload.flops`.
fn user_mfu(md: &mut String, peak: &Peak, uses: &[StageUse], unmatched: &[String], timeline: crate::run_dir::Timeline) {
    match &peak.missing {
        Some(why) => {
            let _ = writeln!(md, "{why}\n");
        }
        None => {
            let _ = writeln!(md, "Peak: {} FLOP/s, from {}.\n", eng(peak.flops.unwrap_or(0.0)), peak.source);
        }
    }
    md.push_str("| region | FLOPs per instance | median ms | mean ms | achieved FLOP/s | MFU |\n|---|---:|---:|---:|---:|---:|\n");
    for u in uses {
        let mfu = u.mfu_pct.map_or("–".to_string(), |v| format!("{v:.2}%"));
        let _ = writeln!(
            md,
            "| {} | {} | {:.4} | {:.4} | {} | {mfu} |",
            code(&u.stage),
            eng(u.flops_per_call),
            u.median_ms,
            u.mean_ms,
            eng(u.achieved_flops)
        );
    }
    if !unmatched.is_empty() {
        let _ = writeln!(
            md,
            "\nNot in the capture (no {} of that name): {} (hint: spell them as {} does, `DOMAIN@outer::inner`).",
            timeline.range(),
            unmatched.iter().map(|u| code(u)).collect::<Vec<_>>().join(", "),
            timeline.regions_file()
        );
    }
    let _ = write!(md, "\nFLOPs per instance: workload.flops (configuration). Median and mean ms: the region's wall time per instance in the {} capture (", timeline.name());
    md.push_str("a selector that names regions of several threads or processes pools their instances: the median column is then their mean). Achieved FLOP/s = FLOPs per instance / median wall time.\n\n");
}

/// 1.23e9 → "1.23 G".
fn eng(v: f64) -> String {
    let (d, s) = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(d, _)| v.abs() >= *d)
        .unwrap_or((1.0, ""));
    format!("{:.3} {s}", v / d).trim_end().to_string()
}

fn top_operators(md: &mut String, ops: &OperatorsReport) {
    md.push_str("## Top Operators\n\n");
    if ops.operators.is_empty() {
        md.push_str("No operator ranges (NVTX ranges other than the workload's stages).\n\n");
        return;
    }
    operator_table(md, &ops.operators, 10);
    let _ = writeln!(
        md,
        "\nSource: {}; {} (all of them, and by operator over every call path, in operators.md).\n",
        ops.source,
        ranked_by(ops)
    );
}

/// The top kernels; with ncu counters (roofline.json), their intensity and
/// throughputs too, matched by kernel name ("–" when ncu did not see that name;
/// no such columns when none of the top kernels has a match, e.g. nsys and ncu
/// name them differently).
fn top_kernels(
    md: &mut String,
    k: &KernelsReport,
    roofline: Option<&crate::aggregate::roofline::Roofline>,
    join: Option<&super::join::RegionJoin>,
) {
    md.push_str("## Top Kernels\n\n");
    if k.kernels.is_empty() {
        let _ = writeln!(md, "{}\n", k.note.as_deref().unwrap_or("No kernels."));
        return;
    }
    let top = &k.kernels[..k.kernels.len().min(10)];
    let found: Vec<_> = top.iter().map(|r| super::join::point_of(roofline, join, &r.kernel_name)).collect();
    let points = found.iter().any(Option::is_some);
    md.push_str("| kernel | total ms | calls | mean ms | share |");
    if points {
        md.push_str(" FLOP/byte (ncu) | SM % (ncu) | DRAM % (ncu) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
    } else {
        md.push_str("\n|---|---:|---:|---:|---:|\n");
    }
    let opt = |v: Option<f64>, digits: usize| v.map_or("–".to_string(), |v| format!("{v:.digits$}"));
    for (r, p) in top.iter().zip(found) {
        let (total, mean, share) = r.time_cells();
        let _ = write!(md, "| {} | {total} | {} | {mean} | {share} |", code(&r.label), r.calls);
        if points {
            let _ = write!(
                md,
                " {} | {} | {} |",
                opt(p.and_then(|p| p.arithmetic_intensity), 2),
                opt(p.and_then(|p| p.sm_throughput_pct), 1),
                opt(p.and_then(|p| p.dram_throughput_pct), 1)
            );
        }
        md.push('\n');
    }
    let _ = writeln!(md, "\nSource: {} (all of them in kernels.md).\n", k.source);
}

/// Three biggest costs by time, each read by a rule; every number is in a table above.
fn narrative(md: &mut String, inputs: &Inputs, d: &Derived) {
    md.push_str("## Narrative\n\n");
    for (i, l) in super::narrative::sentences(inputs, d).iter().enumerate() {
        let _ = writeln!(md, "{}. {l}", i + 1);
    }
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use super::super::model::utilization;
    use super::*;
    use crate::timings::Timings;

    /// env.json of the project's own CPU run (tests/fixtures/runs), with these GPUs.
    fn env_with(devices: serde_json::Value) -> crate::provenance::Env {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/runs/cpu_llm_tiny/env.json");
        let mut env: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        env["gpus"]["devices"] = devices;
        serde_json::from_value(env).unwrap()
    }

    /// A decoder run's timings (our own format), numbers chosen to check by hand.
    fn timings() -> Timings {
        serde_json::from_value(serde_json::json!({
            "schema": "llmperf.timings/v1",
            "model": {"name": "decoder_llm", "variant": "x", "parameters": 1000, "layers": 2, "hidden_size": 8,
                      "heads": 2, "vocab_size": 16, "dtype": "bf16", "input_shapes": []},
            "device": "cuda:0", "dtype": "bf16", "nvtx": true, "batch_size": 1, "warmup_iters": 1, "iters": 2,
            "measured_ms": 50.0,
            "stages": {
                "prefill": {"count": 2, "total_ms": 20.0, "mean_ms": 10.0, "median_ms": 10.0, "p90_ms": 10.0, "min_ms": 10.0, "max_ms": 10.0},
                "decode_all::decode_step": {"count": 8, "total_ms": 16.0, "mean_ms": 2.0, "median_ms": 2.0, "p90_ms": 2.0, "min_ms": 2.0, "max_ms": 2.0}
            },
            "operators": {},
            "throughput": {"decode_tokens_per_s": null, "prefill_tokens_per_s": null, "samples_per_s": null},
            "flops": {"formula": "f", "per_call": {"prefill": 1.0e12, "decode_all::decode_step": 2.0e9}},
            "decode_bytes": {"formula": "b", "weight_bytes": 1.0e9, "kv_cache_bytes_mean": 0.0, "total_bytes_mean": 1.0e9},
            "calibration": null
        }))
        .unwrap()
    }

    #[test]
    fn integer_driver_versions_read_as_people_write_them() {
        // abacus's nsys 2022.4 export: NvDriverVersion 4505105.
        assert_eq!(driver_version("4505105"), "450.51.05");
        assert_eq!(driver_version("580.95.05"), "580.95.05");
        assert_eq!(driver_version("12345"), "12345");
    }

    #[test]
    fn mfu_and_mbu_by_hand() {
        let peak = Peak { flops: Some(989e12), bytes_per_s: Some(3350e9), source: "H100".into(), missing: None };
        let u = utilization(&timings(), &peak);
        let decode = u.iter().find(|u| u.stage == "decode_all::decode_step").unwrap();
        // 2e9 FLOPs in 2 ms = 1e12 FLOP/s; / 989e12 = 0.1011%.
        assert!((decode.achieved_flops - 1e12).abs() < 1.0);
        assert!((decode.mfu_pct.unwrap() - 100.0 / 989.0).abs() < 1e-9);
        // 1e9 bytes in 2 ms = 5e11 B/s; / 3350e9 = 14.925%.
        assert!((decode.mbu_pct.unwrap() - 100.0 * 5e11 / 3350e9).abs() < 1e-9);
        let prefill = u.iter().find(|u| u.stage == "prefill").unwrap();
        // 1e12 FLOPs in 10 ms = 1e14 FLOP/s; / 989e12 = 10.11%; no bytes model for prefill.
        assert!((prefill.mfu_pct.unwrap() - 100.0 * 1e14 / 989e12).abs() < 1e-9);
        assert_eq!(prefill.mbu_pct, None);
        let none = Peak { flops: None, bytes_per_s: None, source: String::new(), missing: Some("x".into()) };
        assert!(utilization(&timings(), &none).iter().all(|u| u.mfu_pct.is_none() && u.mbu_pct.is_none()));
    }

    #[test]
    fn overhead_is_disclosed_and_warned_past_25_percent() {
        let inputs = |profiled: f64| {
            let mut t = timings();
            t.measured_ms = profiled;
            Inputs { timings: Some(t), baseline: Some(timings()), ..Inputs::empty() }
        };
        // Baseline 50 ms. 60 ms profiled: +20%, no warning; 70 ms: +40%, a warning with the hint.
        let i = inputs(60.0);
        let md = stakeholder_summary(&i, &Derived::of(&i));
        assert!(md.contains("| profiling overhead (nsys run vs baseline) | +20.0% |"), "{md}");
        assert!(!md.contains("Warning"));
        let i = inputs(70.0);
        let md = stakeholder_summary(&i, &Derived::of(&i));
        assert!(md.contains("+40.0%") && md.contains("**Warning:** the profiled run was 40.0% slower"), "{md}");
        assert!(md.contains("runner.run.mode=light"));
    }

    #[test]
    fn the_summary_names_its_peak_or_why_there_is_none() {
        let env = env_with(serde_json::json!([{"index": 0, "name": "NVIDIA H100 80GB HBM3", "driver_version": "570"}]));
        let config = crate::config::load(&crate::config::LoadOptions::default()).unwrap().config;
        let inputs = |env: crate::provenance::Env| Inputs {
            config: Some(config.clone()),
            env: Some(env),
            timings: Some(timings()),
            ..Inputs::empty()
        };
        let i = inputs(env);
        let md = stakeholder_summary(&i, &Derived::of(&i));
        for section in [
            "## Environment",
            "## Aggregates",
            "## Per-Stage Timings",
            "## MFU",
            "## Top Operators",
            "## Top Kernels",
            "## Narrative",
        ] {
            assert!(md.contains(section), "{section}");
        }
        assert!(md.contains("from H100 SXM5, FP16/BF16 tensor"), "{md}");
        assert!(
            md.contains(
                "| `decode_all::decode_step` | 2.000 G | 2.0000 | 2.0000 | 1.000 T | 0.10% | 1.000 G | 14.93% |"
            ),
            "{md}"
        );
        let unknown =
            env_with(serde_json::json!([{"index": 0, "name": "NVIDIA GeForce RTX 5090", "driver_version": "570"}]));
        let i = inputs(unknown);
        let md = stakeholder_summary(&i, &Derived::of(&i));
        assert!(md.contains("MFU not computed: unknown peak for NVIDIA GeForce RTX 5090"), "{md}");
        // A TorchScript model counts no FLOPs: a sentence, not an empty table.
        let mut i = inputs(env_with(
            serde_json::json!([{"index": 0, "name": "NVIDIA H100 80GB HBM3", "driver_version": "570"}]),
        ));
        let t = i.timings.as_mut().unwrap();
        t.flops.per_call.clear();
        t.flops.formula = "no analytic model for a TorchScript module".into();
        let md = stakeholder_summary(&i, &Derived::of(&i));
        let section = md.split("## MFU").nth(1).unwrap().split("\n## ").next().unwrap();
        assert!(section.contains("MFU not computed: the workload counted no FLOPs for any stage (no analytic model for a TorchScript module;"), "{section}");
        assert!(!section.contains("| stage |"), "{section}");
    }
}
