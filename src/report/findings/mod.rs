//! report: what to fix first (`findings.json`, and the section at the top of
//! stakeholder_summary.md and report.html). Each finding names a cause, the
//! device and region it lies in, the numbers behind it, the time fixing it
//! could recover at most and how that bound was computed, and a confidence.
//! A short, fixed vocabulary ([`Kind`]; docs/artifacts.md has one paragraph
//! per kind), and no finding without its numbers: "nothing stands out" is a
//! valid answer.
//!
//! - From the device down where a GPU ran anything ([`device`]): each device's
//!   span cut into parts that never overlap, ranked by their share of it; GPU
//!   work charged to the regions that issued it, host-side causes to the
//!   regions whose wall time holds them; ncu's counters read into the kernel
//!   families they profiled.
//! - On a capture without GPU work (a CPU run), from the operator ranges of
//!   regions.json ([`ranges`]).
//! - With ncu alone, its kernel families over the profiled GPU time ([`ncu`]).
//!
//! [`model`] holds the types, [`tables`] the tables Markdown and HTML both write.
mod device;
mod model;
mod ncu;
mod ranges;
pub(crate) mod tables;

pub(crate) use model::{FindingsReport, KernelShare};
pub(crate) use ncu::NcuCounters;

use crate::aggregate::categories::Categories;
use crate::aggregate::nsys::breakdown::BreakdownReport;
use crate::aggregate::nsys::RegionsReport;
use crate::aggregate::rules::RulesReport;
use crate::report::peaks::GpuPeak;
use model::{Finding, Source, FINDINGS_SCHEMA, MAX_FINDINGS, MIN_SHARE};

/// What the findings are made from; each part may be missing.
pub(crate) struct Sources<'a> {
    pub(crate) breakdown: Option<&'a BreakdownReport>,
    pub(crate) regions: Option<&'a RegionsReport>,
    /// kernels.json's rows.
    pub(crate) kernels: &'a [KernelShare<'a>],
    pub(crate) rules: Option<&'a RulesReport>,
    pub(crate) ncu: Option<NcuCounters<'a>>,
    /// The category table of the run (None where it could not be read: see `notes`).
    pub(crate) categories: Option<&'a Categories>,
    pub(crate) gpu: Option<&'a GpuPeak>,
    /// The profiled command (argv), where known.
    pub(crate) command: &'a [String],
    /// Said before (a category table that could not be read).
    pub(crate) notes: Vec<String>,
}

/// The findings of a run, ranked by their share (of the device's span where
/// there is one), at most [`MAX_FINDINGS`].
pub(crate) fn build(s: Sources) -> FindingsReport {
    let mut notes = s.notes;
    let families = s.ncu.as_ref().map(ncu::families).unwrap_or_default();
    let (mut source, mut found) = match (s.breakdown, s.regions) {
        (Some(b), _) if !b.devices.is_empty() => {
            notes.extend(b.notes.iter().cloned());
            let x = device::DeviceInputs {
                breakdown: b,
                kernels: s.kernels,
                categories: s.categories,
                ncu: &families,
                gpu: s.gpu,
                command: s.command,
                regions: s.regions,
            };
            (Source::NsysBreakdown, device::from_breakdown(&x))
        }
        // Operator ranges stand in for the GPU timeline only where there was none.
        (_, Some(r)) if !r.regions.is_empty() && gpu_kernels(r) == 0 => {
            notes.push("no GPU work in the capture: findings come from the operator ranges (host time); a GPU capture measures the GPU's idle time itself".to_string());
            (Source::NsysRanges, ranges::from_ranges(r))
        }
        _ => {
            notes.extend(s.breakdown.iter().flat_map(|b| b.notes.iter().cloned()));
            (Source::None, Vec::new())
        }
    };
    let mut tensor_cores = Vec::new();
    if let Some(n) = &s.ncu {
        if source == Source::NsysBreakdown {
            // The families' readings are in the device findings above.
            tensor_cores = ncu::tensor_rows(n);
            notes.extend(ncu::unjudged(n));
        } else {
            let (more, tensor, more_notes) = ncu::from_ncu(n);
            if source == Source::None && !more.is_empty() {
                source = Source::NcuCounters;
            }
            found.extend(more);
            tensor_cores = tensor;
            notes.extend(more_notes);
        }
    }
    found.sort_by(Finding::rank_order);
    if found.len() > MAX_FINDINGS {
        notes.push(format!(
            "findings.json keeps the {MAX_FINDINGS} largest of {} findings; the other {} are left out",
            found.len(),
            found.len() - MAX_FINDINGS
        ));
        found.truncate(MAX_FINDINGS);
    }
    match source {
        Source::None => notes.push(
            "nothing to rank: no nsys timeline of GPU work (an nsys SQLite export gives one: nsys/breakdown.json)"
                .to_string(),
        ),
        _ if found.is_empty() => notes.push(format!(
            "nothing stands out: no cause is worth {:.0}% of its device's span (of its region's wall time without a GPU timeline) and {:.1} ms",
            MIN_SHARE * 100.0,
            model::ms(model::MIN_NS)
        )),
        _ => {}
    }
    FindingsReport {
        schema: FINDINGS_SCHEMA.into(),
        source,
        findings: found,
        notes,
        ncu_advice: ncu::ncu_advice(s.rules, s.kernels),
        tensor_cores,
    }
}

/// Kernels of the capture, every process and device.
fn gpu_kernels(r: &RegionsReport) -> usize {
    r.processes.iter().flat_map(|p| &p.devices).map(|d| d.kernel_count).sum()
}
