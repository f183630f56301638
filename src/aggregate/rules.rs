//! aggregate: ncu's own advice by kernel (`ncu/rules.json`): the `OPT` and
//! `WRN` rule results of the details CSVs ([`crate::parse::ncu::rules`]), one
//! row per kernel and rule, with ncu's largest Estimated Speedup over the
//! kernel's launches.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::parse::ncu::rules::RuleRow;

pub(crate) const RULES_SCHEMA: &str = "llmperf.ncu-rules/v1";

/// `ncu/rules.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct RulesReport {
    pub(crate) schema: String,
    /// By Estimated Speedup, largest first (rules without one last).
    pub(crate) rules: Vec<KernelRule>,
    /// Files without rule results (ncu before 2023, the raw page) or unreadable, and why.
    pub(crate) notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct KernelRule {
    /// The kernel as ncu names it.
    pub(crate) kernel: String,
    pub(crate) rule: String,
    /// `OPT` (an optimization ncu estimates) or `WRN` (a warning).
    pub(crate) kind: String,
    pub(crate) section: String,
    /// ncu's words, from the launch with the largest estimate.
    pub(crate) description: String,
    /// `global` (of the kernel's duration) or `local` (of the part of the kernel the rule looks at), or empty.
    pub(crate) speedup_type: String,
    /// ncu's largest Estimated Speedup (%) over the kernel's launches.
    pub(crate) speedup_pct: Option<f64>,
    /// Launches ncu gave this rule for.
    pub(crate) launches: usize,
}

/// One row per (kernel, rule) of `rows`, sorted by speedup.
pub(crate) fn by_kernel(rows: Vec<RuleRow>, notes: Vec<String>) -> RulesReport {
    let mut out: Vec<KernelRule> = Vec::new();
    let mut at: std::collections::HashMap<(String, String), usize> = Default::default();
    for r in rows {
        let key = (r.kernel.clone(), r.rule.clone());
        match at.get(&key) {
            Some(&i) => {
                let k = &mut out[i];
                k.launches += 1;
                if r.speedup_pct > k.speedup_pct {
                    (k.speedup_pct, k.description, k.speedup_type) = (r.speedup_pct, r.description, r.speedup_type);
                }
            }
            None => {
                at.insert(key, out.len());
                out.push(KernelRule {
                    kernel: r.kernel,
                    rule: r.rule,
                    kind: r.kind,
                    section: r.section,
                    description: r.description,
                    speedup_type: r.speedup_type,
                    speedup_pct: r.speedup_pct,
                    launches: 1,
                });
            }
        }
    }
    out.sort_by(|a, b| {
        b.speedup_pct
            .unwrap_or(-1.0)
            .total_cmp(&a.speedup_pct.unwrap_or(-1.0))
            .then_with(|| a.kernel.cmp(&b.kernel))
            .then_with(|| a.rule.cmp(&b.rule))
    });
    RulesReport { schema: RULES_SCHEMA.into(), rules: out, notes }
}
