//! report::findings::ranges: findings of a capture without GPU work (a CPU
//! run), from the operator ranges of regions.json (`aten::…`, from
//! `--annotate ops` or emit_nvtx): host time that a GPU capture would show as
//! sync stalls or launch gaps, with what only such a capture can show said in
//! each finding (`needs`).
use super::model::{ev, ms, Attribution, Confidence, Evidence, Finding, Kind, ShareOf, MIN_NS};
use crate::aggregate::nsys::RegionsReport;

/// A finding must be worth this share of its region's wall time: with no
/// device span to measure against, the region's is the whole.
const RANGE_MIN_SHARE: f64 = 0.05;
/// An operator call whose own host time is under this (ns) is dispatch
/// overhead: a GPU kernel of that op would often be shorter.
const TINY_OP_NS: f64 = 20_000.0;

/// Operators that wait for the GPU's results on the host: a value copied out
/// (`.item()`, `bool(t)`: `aten::_local_scalar_dense`) or an output sized by
/// the data (`nonzero`, `masked_select`, `unique`). On a GPU each drains the
/// queue before the host can go on.
const SYNC_OPS: &[&str] = &[
    "aten::_local_scalar_dense",
    "aten::item",
    "aten::nonzero",
    "aten::masked_select",
    "aten::unique",
    "aten::_unique",
    "aten::_unique2",
    "aten::unique_consecutive",
    "aten::repeat_interleave",
    "aten::is_nonzero",
    "aten::equal",
];

/// A capture without GPU work: per top-level region, its operator ranges
/// (`aten::…`, from `--annotate ops` or emit_nvtx) below it.
pub(crate) fn from_ranges(r: &RegionsReport) -> Vec<Finding> {
    let mut out = Vec::new();
    for top in r.regions.iter().filter(|t| t.depth == 0) {
        let top_names = top.names();
        let inside = r.regions.iter().filter(|x| {
            x.depth > 0
                && x.process_id == top.process_id
                && x.thread_id == top.thread_id
                && x.names().starts_with(&top_names)
        });
        let (mut calls, mut outer_calls, mut tiny_calls, mut tiny_ns, mut op_ns) = (0, 0, 0, 0i64, 0i64);
        let (mut sync_calls, mut sync_ns) = (0, 0i64);
        for x in inside {
            let names = x.names();
            let name = names.last().cloned().unwrap_or_default();
            if !name.starts_with("aten::") {
                continue;
            }
            // `aten::item` calls `aten::_local_scalar_dense`: one sync, counted at the outer.
            let parent = names.len().checked_sub(2).map_or("", |i| names[i].as_str());
            let parent_syncs = SYNC_OPS.contains(&parent);
            calls += x.instances;
            if !parent.starts_with("aten::") {
                outer_calls += x.instances;
            }
            op_ns += x.exclusive_ns;
            if (x.exclusive_ns as f64) < TINY_OP_NS * x.instances as f64 {
                tiny_calls += x.instances;
                tiny_ns += x.exclusive_ns;
            }
            if SYNC_OPS.contains(&name.as_str()) && !parent_syncs {
                sync_calls += x.instances;
                sync_ns += x.inclusive_ns;
            }
        }
        let wall = top.inclusive_ns;
        let per = |n: usize| n as f64 / top.instances.max(1) as f64;
        let mut add = |kind: Kind, ns: i64, bound: &str, evidence: Vec<Evidence>, needs: &str| {
            if ns >= MIN_NS && ns as f64 >= RANGE_MIN_SHARE * wall as f64 {
                out.push(Finding {
                    region: top.path.clone(),
                    attribution: Attribution::WallWindow,
                    process_id: Some(top.process_id),
                    rank: top.rank,
                    needs: Some(needs.to_string()),
                    ..Finding::new(
                        kind,
                        ns,
                        (ns as f64 / wall.max(1) as f64, ShareOf::RegionWall),
                        bound.to_string(),
                        Confidence::Low,
                        evidence,
                    )
                });
            }
        };
        if sync_calls > 0 {
            add(
                Kind::SyncStall,
                sync_ns,
                "the host time of the operators that wait for results on the host (.item(), nonzero, masked_select, unique, ...), inclusive",
                vec![
                    ev("syncing operator calls", sync_calls as f64, "count"),
                    ev("per instance", per(sync_calls), "count"),
                    ev("their host time", ms(sync_ns), "ms"),
                ],
                "a GPU capture: there each of these calls drains the GPU's queue, and the stall is measured as idle time",
            );
        }
        if tiny_calls >= 100 && tiny_ns * 2 >= op_ns {
            add(
                Kind::LaunchBound,
                tiny_ns,
                "the host time of operator calls under 20 us each (their own time, nested operators apart): dispatch overhead, which a CUDA graph or fusion removes",
                vec![
                    ev("outermost operator calls", outer_calls as f64, "count"),
                    ev("per instance", per(outer_calls), "count"),
                    ev("operator calls, nested ones included", calls as f64, "count"),
                    ev("under 20 us each", tiny_calls as f64, "count"),
                    ev("mean host time of those", tiny_ns as f64 / tiny_calls.max(1) as f64 / 1e3, "us"),
                ],
                "a GPU capture: there the GPU idles between these ops' short kernels while the host dispatches the next",
            );
        }
    }
    out
}
