//! report: the summary's narrative. Each sentence is made by one rule from
//! its evidence (MFU and MBU against the peak, ncu's throughputs and its own
//! reading of the busiest pipeline, the kernel's category), so no sentence
//! can say what its numbers do not: a step at 6% MBU is not "memory bound", a
//! random-number kernel is not told about tensor cores, a run without a
//! decode step is not told about decoding, a host without a GPU is not told
//! to trace CUDA.
use super::model::{Derived, Inputs, OperatorRow, StageUse};
use crate::aggregate::categories::Category;
use crate::aggregate::roofline::Point;
use crate::markdown::code;

/// At or above this share of its peak (%), a unit is the one that bounds:
/// ncu's own rules call less than 60% of peak a latency issue.
pub(crate) const BOUND_PCT: f64 = 60.0;
/// Below this share of its peak (%) for both, neither unit is busy.
pub(crate) const IDLE_PCT: f64 = 20.0;

/// The narrative's sentences, in order: the largest stage, the operator with
/// the most GPU time of its own, the top kernel.
pub(crate) fn sentences(inputs: &Inputs, d: &Derived) -> Vec<String> {
    let mut lines = Vec::new();
    lines.extend(largest_stage(inputs, &d.uses));
    lines.extend(top_module_groups(inputs));
    lines.extend(top_operator(d));
    lines.push(top_kernel(inputs, d));
    lines
}

/// The largest stage of a built-in workload's timings, read by its MFU and
/// MBU where it has them.
fn largest_stage(inputs: &Inputs, uses: &[StageUse]) -> Option<String> {
    let t = inputs.timings.as_ref()?;
    let mut stages: Vec<(&String, &crate::stats::Stats)> =
        t.stages.iter().filter(|(n, _)| !n.contains(crate::regions::SEP)).collect();
    stages.sort_by(|a, b| b.1.total_ms.total_cmp(&a.1.total_ms));
    let whole: f64 = stages.iter().map(|s| s.1.total_ms).sum();
    let (name, s) = stages.first().filter(|_| whole > 0.0)?;
    let share = 100.0 * s.total_ms / whole;
    // A decode stage is read by its step's utilization (which has the MBU), another by its own.
    let step = || uses.iter().find(|u| u.stage.ends_with("decode_step"));
    let used = name.starts_with("decode").then(step).flatten().or_else(|| uses.iter().find(|u| &&u.stage == name));
    let reading = match used {
        Some(u) => utilization_reading(u),
        None if name.starts_with("decode") => {
            "one token per step, no MFU or MBU to say more (no peak for this device): batching more sequences per step is the usual lever".into()
        }
        None => "the largest stage: optimize it first".into(),
    };
    Some(format!(
        "{} takes {share:.1}% of the stage time ({:.3} ms of {whole:.3} ms): {reading}.",
        code(name),
        s.total_ms
    ))
}

/// What a stage's MFU and MBU say, by the rule their values meet.
pub(crate) fn utilization_reading(u: &StageUse) -> String {
    let (mfu, mbu) = (u.mfu_pct, u.mbu_pct);
    let step = if u.stage.ends_with("decode_step") { "per decode step" } else { "per call" };
    match (mfu, mbu) {
        (_, Some(b)) if b >= BOUND_PCT && b >= mfu.unwrap_or(0.0) => format!(
            "memory bound (MBU {b:.1}% of peak bandwidth {step}, MFU {:.1}%): fewer bytes per token move it, such as more sequences per step sharing each weight read, a smaller KV cache (bf16/fp8) or quantized weights",
            mfu.unwrap_or(0.0)
        ),
        (Some(f), _) if f >= BOUND_PCT => format!(
            "compute bound (MFU {f:.1}% of peak {step}{}): lower precision on tensor cores is the lever",
            mbu.map_or(String::new(), |b| format!(", MBU {b:.1}%"))
        ),
        (Some(f), b) if f < IDLE_PCT && b.is_none_or(|b| b < IDLE_PCT) => format!(
            "neither compute nor memory is near its peak (MFU {f:.1}%{} {step}): too little work per call for the device, so fixed costs (launches, Python, syncs) dominate; more work per call (batching) or fewer launches (CUDA graphs, torch.compile) help",
            b.map_or(String::new(), |b| format!(", MBU {b:.1}%"))
        ),
        (Some(f), b) => format!(
            "between the roofs (MFU {f:.1}%{} {step}): latency bound; a trace of its kernels (nsys) says whether launch gaps or one slow kernel hold it",
            b.map_or(String::new(), |b| format!(", MBU {b:.1}%"))
        ),
        (None, _) => "the largest stage: optimize it first".to_string(),
    }
}

/// Per phase (the first name of the repeated modules' paths: `prefill`,
/// `decode_all`, …), the repeated module (a group of regions.json's
/// `module_groups` with no group inside it) that takes the most time: GPU
/// time where the groups launched kernels, else wall time. Only for the
/// module ranges `--annotate` records: a program's own ranges that differ in
/// an index are no modules, and their names may hold `::`.
fn top_module_groups(inputs: &Inputs) -> Vec<String> {
    let Some(r) = inputs.regions.as_ref() else { return Vec::new() };
    let Some(g) = r.module_groups.as_ref() else { return Vec::new() };
    let modules = crate::plan::annotate::domain_of(crate::config::schema::AnnotateMode::Modules);
    let groups: Vec<&crate::aggregate::nsys::ModuleGroup> = g.groups.iter().filter(|x| x.domain == modules).collect();
    let leaf = |x: &&&crate::aggregate::nsys::ModuleGroup| {
        let inner = format!("{}{}", x.path, crate::regions::SEP);
        !groups.iter().any(|y| y.process_id == x.process_id && y.path.starts_with(&inner))
    };
    let time = |x: &crate::aggregate::nsys::ModuleGroup| if x.gpu_time_ns > 0 { x.gpu_time_ns } else { x.inclusive_ns };
    let mut by_phase: std::collections::BTreeMap<&str, &crate::aggregate::nsys::ModuleGroup> = Default::default();
    for &x in groups.iter().filter(leaf) {
        let phase = x.path.split(crate::regions::SEP).next().unwrap_or_default();
        if phase == crate::regions::WARMUP && inputs.timings.is_some() {
            continue;
        }
        let best = by_phase.entry(phase).or_insert(x);
        if time(x) > time(best) {
            *best = x;
        }
    }
    by_phase
        .into_iter()
        .map(|(phase, x)| {
            let what = if x.gpu_time_ns > 0 { "GPU" } else { "wall" };
            // The phase's own time of the same kind, over every process's instances.
            let whole: i64 = r
                .regions
                .iter()
                .filter(|p| p.depth == 0 && p.path == phase && p.process_id == x.process_id)
                .map(|p| if x.gpu_time_ns > 0 { p.gpu_time_ns } else { p.inclusive_ns })
                .sum();
            let share = if whole > 0 { format!(", {:.1}% of the phase's", 100.0 * time(x) as f64 / whole as f64) } else { String::new() };
            format!(
                "In {}, the repeated module with the most {what} time is {} ({} members, {:.3} ms{share}): look at it first.",
                code(phase),
                code(&super::regions_md::short_path(&x.path)),
                x.members,
                time(x) as f64 / 1e6
            )
        })
        .collect()
}

/// The operator whose own kernels take the most GPU time (a range around the
/// whole run, or a wrapper like `FlashAttnFunc` around `_flash_attn_forward`,
/// holds its callees' time, not its own), else the largest by wall time.
fn top_operator(d: &Derived) -> Option<String> {
    let ops = &d.operators;
    let own = |o: &&OperatorRow| o.gpu_self_ms.unwrap_or(-1.0);
    let op = match ops.ranked_by.as_str() {
        "gpu_time" => ops.operators.iter().max_by(|a, b| own(a).total_cmp(&own(b)).then_with(|| b.name.cmp(&a.name))),
        _ => ops.operators.first(),
    }?;
    let on = op.rank.as_deref().map(|r| format!(" on {}", crate::markdown::text(r))).unwrap_or_default();
    let lead = match op.gpu_ms {
        Some(g) if g < 0.5 * op.total_ms => format!(
            "its kernels run {g:.3} ms of its {:.3} ms: the rest is host time (launch overhead, Python/framework work, synchronization); CUDA graphs or fusing small kernels help",
            op.total_ms
        ),
        Some(g) if g > op.total_ms => format!(
            "its kernels run {g:.3} ms on the GPU, launched in {:.3} ms of host time (launches are asynchronous): the device is busy there; look at its kernels' counters",
            op.total_ms
        ),
        Some(g) => format!("its kernels run {g:.3} ms of its {:.3} ms: the device is busy there; look at its kernels' counters", op.total_ms),
        None => format!("{} calls at {:.4} ms each", op.calls, op.mean_ms),
    };
    Some(match op.gpu_ms {
        Some(_) => format!(
            "The operator whose own kernels take the most GPU time is {}{on} ({:.3} ms of its own); {lead}.",
            code(&op.name),
            op.gpu_self_ms.unwrap_or(0.0)
        ),
        None => format!("The largest operator is {}{on} with {:.3} ms in all; {lead}.", code(&op.name), op.total_ms),
    })
}

/// The top kernel, read by its ncu counters where there are any.
fn top_kernel(inputs: &Inputs, d: &Derived) -> String {
    let Some(top) = d.kernels.kernels.first() else {
        return no_kernels(inputs, d);
    };
    let point = super::join::point_of(inputs.roofline.as_ref(), d.join.as_ref(), &top.kernel_name);
    // Why there is no point: ncu measured no FLOP/DRAM counters at all (a report without
    // the SpeedOfLight section), or none under this kernel's name (nsys and ncu name it apart).
    let none = match inputs.roofline.as_ref() {
        Some(r) if r.source == "ncu" || r.launches > 0 => match r.launches_with_counters {
            0 => format!("ncu measured no FLOP or DRAM counters in this run (none of its {} launches had them; a roofline needs the SpeedOfLight section, e.g. --set roofline)", r.launches),
            _ => "ncu has no FLOP or DRAM counters for this kernel by name".to_string(),
        },
        _ => "no ncu counters for it in this run".to_string(),
    };
    let category = d.categories.as_ref().map(|c| c.of(&top.kernel_name));
    let reading = match (point, sm_throughput(inputs)) {
        (Some(p), _) => kernel_reading(p, category, pipe_of(inputs, &p.kernel_name).as_deref()),
        (None, Some((region, v))) if v < IDLE_PCT => format!("{none}; the ncu region {}, which holds most profiled GPU time, runs at {v:.1}% SM throughput: low, which points at launch overhead or occupancy rather than compute", code(&region)),
        (None, Some((region, v))) => format!("{none}; the ncu region {}, which holds most profiled GPU time, runs at {v:.1}% SM throughput", code(&region)),
        (None, None) => none,
    };
    format!(
        "The top kernel {} takes {:.1}% of GPU time ({:.3} ms over {} calls); {reading}.",
        code(&top.label),
        top.share_pct,
        top.total_ms,
        top.calls
    )
}

/// No kernel anywhere: on a host without a GPU that is what a run gives.
fn no_kernels(inputs: &Inputs, d: &Derived) -> String {
    if inputs.env.as_ref().is_some_and(|e| e.gpus.devices.is_empty()) {
        return "No CUDA kernels: this host has no NVIDIA GPU (env.json), so the workload ran on the CPU and the capture holds its NVTX ranges and OS calls; the GPU's side of the run needs a GPU host.".to_string();
    }
    format!("{}.", d.kernels.note.as_deref().unwrap_or("No kernels"))
}

/// ncu's own reading of a kernel's busiest pipeline (`HighPipeUtilization`, ncu/rules.json).
fn pipe_of(inputs: &Inputs, kernel: &str) -> Option<String> {
    let rules = inputs.ncu_rules.as_ref()?;
    let key = crate::kernel_names::key(kernel);
    rules
        .rules
        .iter()
        .find(|r| {
            r.rule == crate::parse::ncu::rules::PIPE_RULE
                && (r.kernel == kernel || crate::kernel_names::key(&r.kernel) == key)
        })
        .map(|r| r.description.split(". ").next().unwrap_or(&r.description).trim_end_matches('.').to_string())
}

/// A rule-based reading of one kernel's ncu counters (roofline.json): which
/// unit is busy, and what helps a kernel of its kind.
pub(crate) fn kernel_reading(p: &Point, category: Option<Category>, pipe: Option<&str>) -> String {
    let shape = match p.arithmetic_intensity {
        Some(ai) => format!("{ai:.2} FLOP/byte"),
        None => "FLOPs not counted".to_string(),
    };
    let matmul = matches!(category, Some(Category::Gemm | Category::Attention));
    match (p.sm_throughput_pct, p.dram_throughput_pct) {
        (Some(sm), Some(dram)) if dram >= BOUND_PCT && dram >= sm => format!(
            "ncu: DRAM throughput {dram:.1}% vs SM {sm:.1}% of peak ({shape}): memory bound; fusing it with its neighbours, reusing data on chip or moving fewer bytes (lower precision) helps"
        ),
        (Some(sm), Some(dram)) if sm >= BOUND_PCT && matmul => format!(
            "ncu: SM throughput {sm:.1}% vs DRAM {dram:.1}% of peak ({shape}): compute bound; tensor cores and lower precision are the levers"
        ),
        (Some(sm), Some(dram)) if sm >= BOUND_PCT => match pipe {
            Some(pipe) => format!(
                "ncu: SM throughput {sm:.1}% vs DRAM {dram:.1}% of peak ({shape}): compute bound, and ncu says \"{pipe}\": fewer instructions of that kind per element (cheaper math, less index arithmetic) is the lever"
            ),
            None => format!(
                "ncu: SM throughput {sm:.1}% vs DRAM {dram:.1}% of peak ({shape}): compute bound; ncu's Compute Workload Analysis names the busiest pipeline, and fewer instructions of that kind per element is the lever"
            ),
        },
        (Some(sm), Some(dram)) if sm < IDLE_PCT && dram < IDLE_PCT => format!(
            "ncu: SM {sm:.1}% and DRAM {dram:.1}% of peak ({shape}): neither is busy, which points at launch overhead, a small grid or low occupancy"
        ),
        (Some(sm), Some(dram)) => format!(
            "ncu: SM {sm:.1}% and DRAM {dram:.1}% of peak ({shape}): latency bound; its occupancy and scheduler statistics say why"
        ),
        _ => format!("ncu: {shape}, no throughput counters"),
    }
}

/// `sm__throughput.avg.pct_of_peak_sustained_elapsed` of the busiest top-level region (ncu), with its name.
fn sm_throughput(inputs: &Inputs) -> Option<(String, f64)> {
    let scope = inputs.ncu.as_ref()?.scopes.first()?;
    let region = scope
        .regions
        .iter()
        .filter(|r| r.depth == 0)
        .max_by(|a, b| a.inclusive.gpu_time_ms.total_cmp(&b.inclusive.gpu_time_ms))?;
    region
        .metrics
        .iter()
        .find(|m| {
            m.name == "sm__throughput.avg.pct_of_peak_sustained_elapsed"
                || crate::aggregate::roofline::SM_PCT_LABELS.contains(&m.name.as_str())
        })
        .and_then(|m| m.value)
        .map(|v| (region.name.clone(), v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(sm: Option<f64>, dram: Option<f64>) -> Point {
        Point {
            kernel_name: "k".into(),
            device: "0".into(),
            calls: 1,
            gpu_time_ns: 1000.0,
            flops: Some(2000.0),
            dram_bytes: Some(1000.0),
            arithmetic_intensity: Some(2.0),
            achieved_flop_per_s: Some(2e12),
            sm_throughput_pct: sm,
            dram_throughput_pct: dram,
            tensor: None,
        }
    }

    #[test]
    fn kernel_readings_follow_the_busier_unit_and_the_kernels_kind() {
        let gemm = Some(Category::Gemm);
        let read = |sm, dram| kernel_reading(&point(sm, dram), gemm, None);
        assert!(read(Some(30.0), Some(85.0))
            .starts_with("ncu: DRAM throughput 85.0% vs SM 30.0% of peak (2.00 FLOP/byte): memory bound"));
        assert!(read(Some(90.0), Some(40.0)).contains("compute bound; tensor cores"));
        assert!(read(Some(70.0), Some(70.0)).contains("memory bound"), "DRAM wins a tie");
        assert!(read(Some(5.0), Some(3.0)).contains("launch overhead, a small grid or low occupancy"));
        assert!(read(Some(40.0), Some(30.0)).contains("latency bound"));
        assert_eq!(read(None, Some(30.0)), "ncu: 2.00 FLOP/byte, no throughput counters");
        // A compute-bound kernel that is no matrix multiply is not told about tensor cores.
        let rng = kernel_reading(
            &point(Some(65.8), Some(14.5)),
            Some(Category::Elementwise),
            Some("ALU is the highest-utilized pipeline (55.7%) based on active cycles"),
        );
        assert!(!rng.contains("tensor"), "{rng}");
        assert!(rng.contains("ALU is the highest-utilized pipeline (55.7%)"), "{rng}");
    }

    fn used(stage: &str, mfu: Option<f64>, mbu: Option<f64>) -> StageUse {
        StageUse {
            stage: stage.into(),
            flops_per_call: 1.0,
            median_ms: 1.0,
            mean_ms: 1.0,
            achieved_flops: 1.0,
            mfu_pct: mfu,
            bytes_per_call: None,
            mbu_pct: mbu,
        }
    }

    #[test]
    fn a_step_is_memory_bound_only_near_the_bandwidth_roof() {
        let step = "decode_all::decode_step";
        let tiny = utilization_reading(&used(step, Some(0.3), Some(5.9)));
        assert!(!tiny.contains("memory bound"), "{tiny}");
        assert!(
            tiny.starts_with("neither compute nor memory is near its peak (MFU 0.3%, MBU 5.9% per decode step)"),
            "{tiny}"
        );
        assert!(utilization_reading(&used(step, Some(2.0), Some(75.0))).starts_with("memory bound (MBU 75.0%"));
        assert!(utilization_reading(&used("prefill", Some(70.0), None)).starts_with("compute bound (MFU 70.0%"));
        assert!(utilization_reading(&used(step, Some(10.0), Some(40.0))).starts_with("between the roofs"));
    }
}
