//! aggregate::nsys::issued: the GPU work each top-level region *issued*, per
//! device (`issued` in nsys/breakdown.json), beside the breakdown's wall
//! windows. A kernel is issued by the ranges open on the thread that launched
//! it when its launch call began (its correlation id: regions.json's
//! attribution), wherever on the GPU's timeline it ran: an NCCL kernel
//! launched inside `AllToAll4D` that ran while the host waited in `aten::to`
//! is `AllToAll4D`'s work, and `aten::to`'s wall time.
//!
//! Made from regions.json's top-level regions (their kernels by name,
//! inclusive) and the category table. regions.json does not split a region's
//! kernels by device, so a process whose kernels ran on several devices gets
//! no issuing view (`issued_note` says so) rather than a guess.
use super::breakdown::{BreakdownReport, DeviceBreakdown, IssuedCategory, IssuedOutside, IssuedRegion};
use super::model::{Region, RegionsReport};
use crate::aggregate::categories::Categories;
use crate::regions::RangeStyle;

/// The issuing view of every device of `b`, from `regions` (the same pass)
/// and the category table that made the breakdown's categories.
pub(crate) fn add_issued(b: &mut BreakdownReport, regions: &RegionsReport, categories: &Categories) {
    let devices_of = |pid: i64| b.devices.iter().filter(|d| d.process_id == pid).count();
    let several: Vec<bool> = b.devices.iter().map(|d| devices_of(d.process_id) > 1).collect();
    for (d, several) in b.devices.iter_mut().zip(several) {
        if several {
            d.issued_note = Some(format!(
                "process {} ran kernels on several devices and regions.json does not split a region's kernels by device: no issuing view for GPU {}",
                d.process_id, d.device
            ));
            continue;
        }
        d.issued = issued_of(d, regions, categories);
        let (kernels, ns) = d.issued.iter().fold((0, 0), |(k, n), r| (k + r.kernels, n + r.gpu_time_ns));
        let all_kernels: usize = d.categories.iter().map(|c| c.kernels).sum();
        let all_ns: i64 = d.categories.iter().map(|c| c.ns).sum();
        d.issued_outside =
            IssuedOutside { kernels: all_kernels.saturating_sub(kernels), gpu_time_ns: (all_ns - ns).max(0) };
    }
}

/// The depth-0 push/pop regions of the device's process that launched
/// kernels, one row per (domain, name), most GPU time first.
fn issued_of(d: &DeviceBreakdown, regions: &RegionsReport, categories: &Categories) -> Vec<IssuedRegion> {
    let mut rows: Vec<IssuedRegion> = Vec::new();
    let tops = regions.regions.iter().filter(|r| is_issuer(r) && r.process_id == d.process_id);
    for r in tops {
        let i = match rows.iter().position(|x| x.name == r.name && x.domain == r.domain) {
            Some(i) => i,
            None => {
                rows.push(IssuedRegion {
                    name: r.name.clone(),
                    domain: r.domain.clone(),
                    kernels: 0,
                    gpu_time_ns: 0,
                    categories: Vec::new(),
                });
                rows.len() - 1
            }
        };
        let row = &mut rows[i];
        row.kernels += r.kernel_count;
        row.gpu_time_ns += r.gpu_time_ns;
        for k in &r.kernels {
            let c = categories.of(&k.name);
            match row.categories.iter_mut().find(|x| x.category == c) {
                Some(x) => (x.kernels, x.ns) = (x.kernels + k.calls, x.ns + k.gpu_time_ns),
                None => row.categories.push(IssuedCategory { category: c, kernels: k.calls, ns: k.gpu_time_ns }),
            }
        }
    }
    for r in &mut rows {
        r.categories.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.category.cmp(&b.category)));
    }
    rows.sort_by(|a, b| b.gpu_time_ns.cmp(&a.gpu_time_ns).then_with(|| a.name.cmp(&b.name)));
    rows
}

/// A top-level push/pop region that launched kernels.
fn is_issuer(r: &Region) -> bool {
    r.depth == 0 && r.style == RangeStyle::PushPop && r.kernel_count > 0
}
