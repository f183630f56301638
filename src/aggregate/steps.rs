//! aggregate: a serving engine's steps, from the regions of its trace. vLLM
//! names each engine step's range by what it scheduled:
//! `execute_context_C(CT)_generation_G(GT)` is C requests with CT prompt
//! tokens in prefill and G requests with GT tokens in decode (one token
//! each). A step is a **prefill** step (C > 0, G = 0), a **decode** step
//! (C = 0, G > 0), **mixed** (both), or **empty** (neither). Per kind: the
//! steps, their time and its distribution, the requests and tokens they
//! carried, and their GPU work. Regions of other names are not steps.
use std::collections::BTreeMap;

use serde::Serialize;

/// A step kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    Prefill,
    Decode,
    Mixed,
    Empty,
}

/// What a step's name says it scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub(crate) struct Scheduled {
    pub(crate) context_requests: u64,
    pub(crate) context_tokens: u64,
    pub(crate) generation_requests: u64,
    pub(crate) generation_tokens: u64,
}

impl Scheduled {
    pub(crate) fn kind(&self) -> Kind {
        match (self.context_requests > 0, self.generation_requests > 0) {
            (true, false) => Kind::Prefill,
            (false, true) => Kind::Decode,
            (true, true) => Kind::Mixed,
            (false, false) => Kind::Empty,
        }
    }
}

/// `execute_context_C(CT)_generation_G(GT)`, else None.
pub(crate) fn parse(name: &str) -> Option<Scheduled> {
    let rest = name.strip_prefix("execute_context_")?;
    let (context, rest) = rest.split_once("_generation_")?;
    let pair = |s: &str| -> Option<(u64, u64)> {
        let (n, t) = s.strip_suffix(')')?.split_once('(')?;
        Some((n.parse().ok()?, t.parse().ok()?))
    };
    let (context_requests, context_tokens) = pair(context)?;
    let (generation_requests, generation_tokens) = pair(rest)?;
    Some(Scheduled { context_requests, context_tokens, generation_requests, generation_tokens })
}

/// One region of the trace, as much as the step table reads.
pub(crate) struct Region<'a> {
    pub(crate) name: &'a str,
    pub(crate) instances: u64,
    pub(crate) inclusive_ns: i64,
    pub(crate) gpu_time_ns: i64,
    pub(crate) kernel_count: u64,
    /// Its instances' durations (all of them, or an even sample).
    pub(crate) samples_ns: &'a [i64],
}

/// One step name: its instances and what each scheduled.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub(crate) struct StepName {
    pub(crate) name: String,
    pub(crate) kind: Kind,
    #[serde(flatten)]
    pub(crate) scheduled: Scheduled,
    pub(crate) steps: u64,
    pub(crate) time_ns: i64,
    pub(crate) gpu_time_ns: i64,
    pub(crate) kernel_count: u64,
}

/// The steps of one kind.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub(crate) struct KindRow {
    pub(crate) kind: Kind,
    pub(crate) steps: u64,
    pub(crate) time_ns: i64,
    /// Step durations: mean, median, p90, p99, max (ms), from the samples.
    pub(crate) duration: Option<crate::load::Percentiles>,
    /// Requests and tokens summed over the steps.
    pub(crate) context_tokens: u64,
    pub(crate) generation_tokens: u64,
    /// Requests scheduled per step, on average (prefill and decode together).
    pub(crate) requests_per_step: f64,
    pub(crate) gpu_time_ns: i64,
    pub(crate) kernel_count: u64,
}

/// `serve/steps.json`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub(crate) struct Steps {
    pub(crate) schema: String,
    pub(crate) kinds: Vec<KindRow>,
    pub(crate) names: Vec<StepName>,
    /// Prompt tokens prefilled and tokens decoded, over every step.
    pub(crate) context_tokens: u64,
    pub(crate) generation_tokens: u64,
}

pub(crate) fn steps(regions: &[Region<'_>]) -> Steps {
    let mut by_name: BTreeMap<&str, (Scheduled, u64, i64, i64, u64)> = BTreeMap::new();
    let mut samples: BTreeMap<Kind, Vec<i64>> = BTreeMap::new();
    for r in regions {
        let Some(s) = parse(r.name) else { continue };
        let e = by_name.entry(r.name).or_insert((s, 0, 0, 0, 0));
        e.1 += r.instances;
        e.2 = e.2.saturating_add(r.inclusive_ns);
        e.3 = e.3.saturating_add(r.gpu_time_ns);
        e.4 += r.kernel_count;
        samples.entry(s.kind()).or_default().extend_from_slice(r.samples_ns);
    }
    let names: Vec<StepName> = by_name
        .into_iter()
        .map(|(name, (scheduled, steps, time_ns, gpu_time_ns, kernel_count))| StepName {
            name: name.to_string(),
            kind: scheduled.kind(),
            scheduled,
            steps,
            time_ns,
            gpu_time_ns,
            kernel_count,
        })
        .collect();
    let mut kinds: BTreeMap<Kind, KindRow> = BTreeMap::new();
    for n in &names {
        let row = kinds.entry(n.kind).or_insert(KindRow {
            kind: n.kind,
            steps: 0,
            time_ns: 0,
            duration: None,
            context_tokens: 0,
            generation_tokens: 0,
            requests_per_step: 0.0,
            gpu_time_ns: 0,
            kernel_count: 0,
        });
        row.steps += n.steps;
        row.time_ns = row.time_ns.saturating_add(n.time_ns);
        row.context_tokens += n.steps * n.scheduled.context_tokens;
        row.generation_tokens += n.steps * n.scheduled.generation_tokens;
        row.requests_per_step += (n.steps * (n.scheduled.context_requests + n.scheduled.generation_requests)) as f64;
        row.gpu_time_ns = row.gpu_time_ns.saturating_add(n.gpu_time_ns);
        row.kernel_count += n.kernel_count;
    }
    for row in kinds.values_mut() {
        row.requests_per_step /= row.steps.max(1) as f64;
        row.duration = samples.get(&row.kind).and_then(|s| crate::load::percentiles(s));
    }
    let kinds: Vec<KindRow> = kinds.into_values().collect();
    Steps {
        schema: "llmperf.serve-steps/v1".into(),
        context_tokens: kinds.iter().map(|k| k.context_tokens).sum(),
        generation_tokens: kinds.iter().map(|k| k.generation_tokens).sum(),
        kinds,
        names,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_step_names_parse_into_what_they_scheduled() {
        let s = parse("execute_context_3(48)_generation_1(1)").unwrap();
        assert_eq!((s.context_requests, s.context_tokens, s.generation_requests, s.generation_tokens), (3, 48, 1, 1));
        assert_eq!(s.kind(), Kind::Mixed);
        assert_eq!(parse("execute_context_0(0)_generation_4(4)").unwrap().kind(), Kind::Decode);
        assert_eq!(parse("execute_context_1(16)_generation_0(0)").unwrap().kind(), Kind::Prefill);
        assert_eq!(parse("execute_context_0(0)_generation_0(0)").unwrap().kind(), Kind::Empty);
        for other in ["execute_context_1(16)", "gpu_model_runner: forward", "execute_context_x(1)_generation_0(0)", ""]
        {
            assert_eq!(parse(other), None, "{other}");
        }
    }
}
