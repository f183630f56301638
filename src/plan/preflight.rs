//! plan: the preflight of a range-replay run. Before ncu runs, every
//! configured region is looked up in what nsys captured of the same run
//! (`nsys/regions.json`): found or not (with did-you-mean), push/pop or
//! start/end (which chooses the expression), instances, CUDA work inside,
//! nesting, and which other regions the expression will match too (ncu matches
//! a nested region by its last name). Pure: the captured regions in (the
//! pipeline reads them from nsys/regions.json), `ncu/preflight.json` out. No profiler tool does this; a misspelled region otherwise costs a
//! whole ncu run that profiles nothing.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::regions;

pub(crate) const PREFLIGHT_SCHEMA: &str = "llmperf.ncu-preflight/v1";

/// `ncu/preflight.json`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Preflight {
    pub(crate) schema: String,
    /// `nsys/regions.json` when nsys ran, else null.
    pub(crate) checked_against: Option<String>,
    /// What could not be checked, and why.
    pub(crate) not_checked: Vec<String>,
    pub(crate) regions: Vec<Check>,
}

/// One configured region, as nsys saw it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Check {
    /// As configured: `A::A1`, `LLM@decode_all`, `decode*`.
    pub(crate) selector: String,
    pub(crate) found: bool,
    /// The captured regions it names (`domain@path`), with a glob several.
    pub(crate) matches: Vec<String>,
    /// `push_pop`, `start_end`, or null when not found.
    pub(crate) style: Option<String>,
    /// Instances over the matched regions, processes and threads.
    pub(crate) instances: usize,
    /// CUDA kernels nsys saw launched inside (0: ncu will find nothing to profile).
    pub(crate) kernels: usize,
    pub(crate) gpu_time_ns: i64,
    /// Nesting depth of the shallowest match (0 = outermost).
    pub(crate) depth: Option<usize>,
    /// Captured regions with the same last name that ncu's expression will
    /// match as well (range replay matches the last name only).
    pub(crate) also_matched: Vec<String>,
    /// Nearest captured names, when not found.
    pub(crate) did_you_mean: Vec<String>,
}

/// A region nsys captured, as the preflight needs it (one per process and
/// thread that ran it, as nsys/regions.json lists them).
#[derive(Debug, Clone)]
pub(crate) struct Region {
    /// `A::A1`, without the domain.
    pub path: String,
    /// The last name.
    pub name: String,
    /// Empty for the default domain.
    pub domain: String,
    pub(crate) style: crate::regions::RangeStyle,
    pub depth: usize,
    pub instances: usize,
    pub kernel_count: usize,
    pub gpu_time_ns: i64,
}

impl Preflight {
    /// When nsys did not run: nothing could be checked.
    pub(crate) fn unchecked(why: &str) -> Preflight {
        Preflight {
            schema: PREFLIGHT_SCHEMA.into(),
            checked_against: None,
            not_checked: vec![format!(
                "{why}: whether each region exists, its range style (push/pop assumed), instances, CUDA work and nesting"
            )],
            regions: Vec::new(),
        }
    }

    /// The regions not in the capture, as one error naming each with its
    /// nearest captured names.
    pub(crate) fn missing(&self) -> Option<Error> {
        let missing: Vec<&Check> = self.regions.iter().filter(|c| !c.found).collect();
        if missing.is_empty() {
            return None;
        }
        let names: Vec<String> = missing.iter().map(|c| format!("`{}`", c.selector)).collect();
        let suggestions: Vec<String> = missing
            .iter()
            .filter(|c| !c.did_you_mean.is_empty())
            .map(|c| {
                format!(
                    "`{}`: did you mean {}?",
                    c.selector,
                    c.did_you_mean.iter().map(|d| format!("`{d}`")).collect::<Vec<_>>().join(" or ")
                )
            })
            .collect();
        let hint = if suggestions.is_empty() {
            "see the captured regions in nsys/regions.json of the run directory (nested names join with ::, a named domain comes first: LLM@decode_all)".to_string()
        } else {
            format!("{} (every captured region: nsys/regions.json)", suggestions.join("; "))
        };
        Some(
            Error::config(format!(
                "ncu preflight: {} not among the NVTX regions nsys captured in this run, so ncu would profile nothing",
                names.join(", ")
            ))
            .with_hint(hint),
        )
    }
}

/// Check each selector against the regions nsys captured.
pub(crate) fn check(selectors: &[String], captured: &[Region]) -> Preflight {
    let regions = selectors
        .iter()
        .filter(|s| !s.starts_with("expr:") && !s.starts_with("regex:"))
        .map(|s| check_one(s, captured))
        .collect();
    let raw: Vec<&String> = selectors.iter().filter(|s| s.starts_with("expr:") || s.starts_with("regex:")).collect();
    let not_checked = if raw.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "raw expressions go to ncu unchecked: {}",
            raw.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        )]
    };
    Preflight {
        schema: PREFLIGHT_SCHEMA.into(),
        checked_against: Some(crate::run_dir::NSYS_REGIONS.to_string()),
        not_checked,
        regions,
    }
}

fn check_one(selector: &str, captured: &[Region]) -> Check {
    let wanted = regions::Selector::parse(selector);
    let (domain, leaf) = (wanted.domain, wanted.leaf());
    let hits: Vec<&Region> = captured.iter().filter(|r| wanted.names_region(&r.path, &r.domain)).collect();
    let name_of = |r: &Region| regions::selector(&r.path, &r.domain);
    let mut matches: Vec<String> = hits.iter().map(|r| name_of(r)).collect();
    matches.dedup();
    let mut also: Vec<String> = captured
        .iter()
        .filter(|r| r.domain == domain && regions::glob_match(leaf, &r.name) && !hits.iter().any(|h| h.path == r.path))
        .map(name_of)
        .collect();
    also.sort();
    also.dedup();
    let style = hits.first().map(|r| r.style.snake().to_string());
    let did_you_mean = if hits.is_empty() { nearest(selector, captured.iter().map(name_of)) } else { Vec::new() };
    Check {
        selector: selector.to_string(),
        found: !hits.is_empty(),
        matches,
        style,
        instances: hits.iter().map(|r| r.instances).sum(),
        kernels: hits.iter().map(|r| r.kernel_count).sum(),
        gpu_time_ns: hits.iter().map(|r| r.gpu_time_ns).sum(),
        depth: hits.iter().map(|r| r.depth).min(),
        also_matched: also,
        did_you_mean,
    }
}

/// Up to three captured names nearest to `selector` by edit distance, close
/// enough to be a misspelling (at most a third of the longer name).
fn nearest(selector: &str, captured: impl Iterator<Item = String>) -> Vec<String> {
    let mut scored: Vec<(usize, String)> = captured
        .map(|c| (strsim::levenshtein(selector, &c), c))
        .filter(|(d, c)| *d * 3 <= selector.chars().count().max(c.chars().count()).max(3))
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(3).map(|(_, c)| c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(path: &str, domain: &str, style: &str, instances: usize, kernels: usize) -> Region {
        Region {
            path: path.into(),
            name: path.rsplit("::").next().unwrap().to_string(),
            domain: domain.into(),
            style: if style == "StartEnd" {
                crate::regions::RangeStyle::StartEnd
            } else {
                crate::regions::RangeStyle::PushPop
            },
            depth: path.matches("::").count(),
            instances,
            kernel_count: kernels,
            gpu_time_ns: 0,
        }
    }

    fn captured() -> Vec<Region> {
        vec![
            region("A", "", "PushPop", 3, 6),
            region("A::A1", "", "PushPop", 3, 3),
            region("B", "", "PushPop", 3, 0),
            region("B::A1", "", "PushPop", 1, 0),
            region("se:range", "", "StartEnd", 2, 0),
            region("decode_all", "LLM", "PushPop", 1, 9),
            region("decode_all::decode_step", "LLM", "PushPop", 4, 9),
        ]
    }

    #[test]
    fn found_regions_carry_what_nsys_saw() {
        let p = check(&["A::A1".into(), "se:range".into(), "LLM@decode*".into()], &captured());
        let a1 = &p.regions[0];
        assert!(a1.found && a1.style.as_deref() == Some("push_pop"));
        assert_eq!((a1.instances, a1.kernels, a1.depth), (3, 3, Some(1)));
        assert_eq!(a1.also_matched, ["B::A1"], "ncu's A1/ matches the A1 under B too");
        assert_eq!(p.regions[1].style.as_deref(), Some("start_end"));
        assert_eq!(p.regions[2].matches, ["LLM@decode_all"]);
        assert!(p.missing().is_none());
    }

    #[test]
    fn a_misspelled_region_is_refused_with_did_you_mean() {
        let p = check(&["A::A2".into(), "LLM@decode_al".into(), "nothing_like_it".into()], &captured());
        assert_eq!(p.regions[0].did_you_mean, ["A::A1"]);
        assert_eq!(p.regions[1].did_you_mean, ["LLM@decode_all"]);
        assert!(p.regions[2].did_you_mean.is_empty());
        let e = p.missing().unwrap();
        assert_eq!(e.kind, crate::error::ErrorKind::Config);
        assert!(e.message.contains("`A::A2`, `LLM@decode_al`, `nothing_like_it`"), "{}", e.message);
        let hint = e.hint.unwrap();
        assert!(
            hint.contains("`A::A2`: did you mean `A::A1`?")
                && hint.contains("`LLM@decode_al`: did you mean `LLM@decode_all`?"),
            "{hint}"
        );
    }

    #[test]
    fn a_region_in_the_wrong_domain_is_not_found() {
        let p = check(&["decode_all".into()], &captured());
        assert!(!p.regions[0].found);
        assert_eq!(p.regions[0].did_you_mean, ["LLM@decode_all"]);
    }

    #[test]
    fn raw_expressions_are_listed_as_unchecked() {
        let p = check(&["expr:A/".into(), "A".into()], &captured());
        assert_eq!(p.regions.len(), 1);
        assert!(p.not_checked[0].contains("expr:A/"));
    }
}
