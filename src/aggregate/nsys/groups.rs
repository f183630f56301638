//! aggregate: regions named by module paths whose only difference is an index
//! (`model.layers.0.mlp`, `model.layers.1.mlp`, …) as one group,
//! `model.layers.[0-31].mlp`, with its total and the spread over its members,
//! and what share of the GPU time the injected module ranges cover
//! (`--annotate`, domain `llmperf.modules`). Pure: regions in, groups out.
use std::collections::BTreeMap;
use std::sync::OnceLock;

use regex::Regex;

use super::model::{Coverage, ModuleGroup, ModuleGroups, Region};

/// A path component's indices: digits between dots (or at either end).
fn index() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"(^|\.)(\d+)(\.|$)").expect("a valid pattern"))
}

/// `name` with its indices taken out (`model.layers.#.mlp`), and the indices.
fn split(name: &str) -> (String, Vec<u64>) {
    let mut numbers = Vec::new();
    let mut out = String::with_capacity(name.len());
    let mut last = 0;
    let mut at = 0;
    // Overlapping matches (`layers.0.1`) need the dot shared: scan by hand.
    while let Some(m) = index().captures_at(name, at) {
        let digits = m.get(2).expect("group 2");
        out.push_str(&name[last..digits.start()]);
        out.push('#');
        last = digits.end();
        at = digits.end();
        numbers.push(digits.as_str().parse().unwrap_or(u64::MAX));
    }
    out.push_str(&name[last..]);
    (out, numbers)
}

/// `0-3,5,7-8`: sorted distinct indices as runs.
fn runs(values: &[u64]) -> String {
    let mut v = values.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if j == i { v[i].to_string() } else { format!("{}-{}", v[i], v[j]) });
        i = j + 1;
    }
    parts.join(",")
}

/// Nested names with their indices taken out (`model.layers.#.mlp`), and the
/// indices in path order; None where no name holds one.
pub(crate) fn shape_of(names: &[String]) -> Option<(Vec<String>, Vec<u64>)> {
    let mut shape = Vec::with_capacity(names.len());
    let mut numbers = Vec::new();
    for n in names {
        let (s, mut k) = split(n);
        shape.push(s);
        numbers.append(&mut k);
    }
    (!numbers.is_empty()).then_some((shape, numbers))
}

/// The names of `shape` with each index written as the indices its members
/// have there (`model.layers.[0-31].mlp`).
pub(crate) fn shown<'a>(shape: &[String], members: impl Iterator<Item = &'a Vec<u64>> + Clone) -> Vec<String> {
    let positions = members.clone().next().map_or(0, Vec::len);
    let seen: Vec<Vec<u64>> = (0..positions).map(|i| members.clone().map(|k| k[i]).collect()).collect();
    let mut at = 0;
    shape
        .iter()
        .map(|s| {
            let mut out = String::new();
            for (i, piece) in s.split('#').enumerate() {
                if i > 0 {
                    out.push_str(&format!("[{}]", runs(&seen[at])));
                    at += 1;
                }
                out.push_str(piece);
            }
            out
        })
        .collect()
}

#[derive(Default)]
struct Acc {
    /// Per member (all indices of the path, in order): inclusive, GPU, instances, its path.
    members: BTreeMap<Vec<u64>, (i64, i64, usize, String)>,
    /// The module classes of the members, where they are known.
    classes: std::collections::BTreeSet<String>,
}

/// Module classes by range name, as `--annotate`'s bootstrap saw them
/// (`annotate/classes.<pid>.json`, merged over processes).
pub(crate) type Classes = BTreeMap<String, std::collections::BTreeSet<String>>;

/// The groups of `regions` (only those with two members or more), and the
/// coverage of the module domain's ranges out of `total_gpu_ns`. With the
/// module `classes`, members must also be of one class: `mlp.0`, `mlp.1`,
/// `mlp.2` of an nn.Sequential(Linear, GELU, Linear) are no repeated module;
/// without them (an imported capture) the names decide.
pub(crate) fn module_groups(regions: &[Region], total_gpu_ns: i64, classes: Option<&Classes>) -> Option<ModuleGroups> {
    let mut accs: BTreeMap<(i64, String, Vec<String>), Acc> = BTreeMap::new();
    for r in regions {
        let names = r.names();
        let Some((shape, numbers)) = shape_of(&names) else { continue };
        let acc = accs.entry((r.process_id, r.domain.clone(), shape)).or_default();
        if let Some(kinds) = classes.and_then(|c| c.get(names.last()?)) {
            acc.classes.extend(kinds.iter().cloned());
        }
        let m = acc.members.entry(numbers).or_insert((0, 0, 0, r.path.clone()));
        m.0 += r.inclusive_ns;
        m.1 += r.gpu_time_ns;
        m.2 += r.instances;
    }
    let mut groups: Vec<ModuleGroup> = accs
        .into_iter()
        // Members of more than one class: an indexed container of different
        // modules (nn.Sequential(Linear, GELU, Linear)), not a repeat.
        .filter(|(_, a)| a.members.len() > 1 && a.classes.len() <= 1)
        .map(|((process_id, domain, shape), acc)| group(process_id, domain, &shape, &acc))
        .collect();
    let by = |g: &ModuleGroup| if g.gpu_time_ns > 0 { g.gpu_time_ns } else { g.inclusive_ns };
    groups.sort_by(|a, b| by(b).cmp(&by(a)).then_with(|| a.path.cmp(&b.path)));
    let coverage = module_coverage(regions, total_gpu_ns);
    (coverage.is_some() || !groups.is_empty()).then_some(ModuleGroups { coverage, groups })
}

fn group(process_id: i64, domain: String, shape: &[String], acc: &Acc) -> ModuleGroup {
    let names = shown(shape, acc.members.keys());
    let gpu = acc.members.values().any(|m| m.1 > 0);
    let mut totals: Vec<(i64, &str)> =
        acc.members.values().map(|m| (if gpu { m.1 } else { m.0 }, m.3.as_str())).collect();
    totals.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(a.1)));
    let (min, max) = (totals[0].0, totals[totals.len() - 1]);
    ModuleGroup {
        path: crate::regions::join(&names),
        domain,
        process_id,
        members: acc.members.len(),
        instances: acc.members.values().map(|m| m.2).sum(),
        inclusive_ns: acc.members.values().map(|m| m.0).sum(),
        gpu_time_ns: acc.members.values().map(|m| m.1).sum(),
        member_min_ns: min,
        member_median_ns: totals[(totals.len() - 1) / 2].0,
        member_max_ns: max.0,
        member_time: if gpu { "gpu" } else { "wall" }.into(),
        slowest: max.1.to_string(),
    }
}

/// GPU time inside the outermost ranges of the `llmperf.modules` domain: a
/// range of it whose parent is not of it (or that has none).
fn module_coverage(regions: &[Region], total_gpu_ns: i64) -> Option<Coverage> {
    const DOMAIN: &str = "llmperf.modules";
    let domain_of: BTreeMap<(i64, &str), &str> =
        regions.iter().map(|r| ((r.process_id, r.path.as_str()), r.domain.as_str())).collect();
    let mut any = false;
    let mut inside = 0i64;
    for r in regions.iter().filter(|r| r.domain == DOMAIN) {
        any = true;
        let parent_in_domain = r.parent.as_deref().is_some_and(|p| domain_of.get(&(r.process_id, p)) == Some(&DOMAIN));
        if !parent_in_domain {
            inside += r.gpu_time_ns;
        }
    }
    any.then_some(Coverage { module_gpu_time_ns: inside, total_gpu_time_ns: total_gpu_ns })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_between_dots_are_taken_out_and_written_as_runs() {
        assert_eq!(split("model.layers.12.mlp"), ("model.layers.#.mlp".into(), vec![12]));
        assert_eq!(split("layers.3.experts.10.w1"), ("layers.#.experts.#.w1".into(), vec![3, 10]));
        assert_eq!(split("0.1"), ("#.#".into(), vec![0, 1]));
        assert_eq!(split("fc1"), ("fc1".into(), vec![]), "digits inside a name are not an index");
        assert_eq!(split("layer_3"), ("layer_3".into(), vec![]));
        assert_eq!(runs(&[3, 0, 1, 2, 5, 7, 8]), "0-3,5,7-8");
        assert_eq!(runs(&[4]), "4");
    }
}
