//! NVTX region names: the one source of truth shared by the instrumented
//! workloads and the code that reads profiles back.
//!
//! Regions nest: a range pushed inside another is reported as `outer::inner`
//! (`A::A1`, `decode_all::decode_step::layer_3::attn`).

/// Separator of nested region names in reports.
pub(crate) const SEP: &str = "::";

/// The separator reports show instead when a name holds `::` itself
/// (PyTorch's `aten::to › aten::_to_copy`); selectors accept it too.
pub(crate) const PLAIN_SEP: &str = " › ";

/// NVTX domain of the LLM workload's ranges (ncu writes `LLM@prefill/`, nsys `prefill@LLM`).
pub const LLM_DOMAIN: &str = "LLM";
pub const PREFILL: &str = "prefill";
pub const DECODE_ALL: &str = "decode_all";
pub const DECODE_STEP: &str = "decode_step";
/// `--model hf`: the warm-up generations, kept apart from the measured phases.
pub(crate) const WARMUP: &str = "warmup";
pub const ATTN: &str = "attn";
pub const MLP: &str = "mlp";
pub const LM_HEAD: &str = "lm_head";

/// ResNet ranges (default domain).
pub const STEM: &str = "stem";
pub const HEAD: &str = "head";

/// The regions demonstration (default domain): `A`, `A::A1`, `B`.
pub const DEMO_A: &str = "A";
pub const DEMO_A1: &str = "A1";
pub const DEMO_B: &str = "B";

/// TorchScript: one range per forward call.
pub const FORWARD: &str = "forward";

/// `layer_3`: the range around one transformer layer.
pub fn layer(index: usize) -> String {
    format!("layer_{index}")
}

/// `block_2`: the range around one residual block.
pub fn block(index: usize) -> String {
    format!("block_{index}")
}

/// PyTorch's NVTX names carry per-call attributes after the operator:
/// `torch.autograd.profiler.emit_nvtx` writes `aten::mul, op_id = 317177`,
/// `aten::to, seq = 12, op_id = 998949`, and with shapes recorded
/// `aten::addmm, seq = 3, op_id = 5, sizes = [[8, 16], [16, 32]], input_op_ids = [2, 4]`.
/// `strip_attributes` returns the operator (`aten::mul`) and the attributes
/// when every part after the first `, ` is `KEY = VALUE` with KEY in `keys`
/// (values may hold `, ` inside brackets); any other name is None, kept as is.
pub(crate) fn strip_attributes<'a>(name: &'a str, keys: &[String]) -> Option<(&'a str, Vec<(&'a str, &'a str)>)> {
    let (head, mut rest) = name.split_once(", ")?;
    let mut attrs = Vec::new();
    loop {
        let (key, after) = rest.split_once(" = ")?;
        if !keys.iter().any(|k| k == key) {
            return None;
        }
        // The value runs to the next `, ` outside brackets, or to the end.
        let mut depth = 0i32;
        let mut end = after.len();
        let bytes = after.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                b'[' | b'(' => depth += 1,
                b']' | b')' => depth -= 1,
                b',' if depth == 0 && bytes.get(i + 1) == Some(&b' ') => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        attrs.push((key, &after[..end]));
        if end == after.len() {
            return (!head.is_empty()).then_some((head, attrs));
        }
        rest = &after[end + 2..];
    }
}

/// Which NVTX API made a range: push/pop (`nvtxRangePush`, nested on a
/// thread; `torch.cuda.nvtx.range_push`) or start/end (`nvtxRangeStart`, any
/// thread). The one form from nsys's export (regions.json writes `PushPop` /
/// `StartEnd`, the export's own words) through the ncu plan, which writes the
/// two differently, to the preflight (`push_pop` / `start_end`, [`RangeStyle::snake`]).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[schemars(rename = "Style")]
pub(crate) enum RangeStyle {
    #[default]
    PushPop,
    StartEnd,
}

impl RangeStyle {
    /// `push_pop` or `start_end`, as preflight.json writes it.
    pub(crate) fn snake(self) -> &'static str {
        match self {
            RangeStyle::PushPop => "push_pop",
            RangeStyle::StartEnd => "start_end",
        }
    }
}

/// How profiler results find their NVTX region: one type from the ncu plan
/// (`ncu/plan.json`, per pass) through the readers and the aggregator to the
/// region report (`source.attribution`), where the prose is chosen by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Attribution {
    /// Kernel replay with `--nvtx`: each row's push/pop stack.
    NvtxStack,
    /// Range replay: a result is a range, one of the pass's regions.
    Range,
    /// Only in a report: kernel replay whose rows carried no NVTX stack.
    None,
}

/// A region as users write it: names joined by `::`, a named domain first
/// (`LLM@decode_all::decode_step`); each name may be a glob ([`glob_match`]).
/// The one parser of that spelling, for the ncu expression compiler, the
/// pass planner, the preflight and the region attribution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Selector<'a> {
    /// Empty for the default domain.
    pub(crate) domain: &'a str,
    pub(crate) names: Vec<&'a str>,
}

impl<'a> Selector<'a> {
    pub(crate) fn parse(text: &'a str) -> Selector<'a> {
        let (domain, path) = match text.split_once('@') {
            Some((d, p)) if !d.is_empty() && !p.is_empty() => (d, p),
            _ => ("", text),
        };
        Selector::of(path, domain)
    }

    /// A region's `::` path in a domain, or its ` › ` path (see [`display`]).
    pub(crate) fn of(path: &'a str, domain: &'a str) -> Selector<'a> {
        let sep = if path.contains(PLAIN_SEP) { PLAIN_SEP } else { SEP };
        Selector { domain, names: path.split(sep).collect() }
    }

    /// Whether the region of these nested names in `domain` is this one, name
    /// by name: exact where a name holds `::` itself. A `::` selector
    /// names such a region by its `::` spelling as a whole.
    pub(crate) fn names_path(&self, names: &[String], domain: &str) -> bool {
        if self.domain != domain {
            return false;
        }
        let by_name =
            names.len() == self.names.len() && self.names.iter().zip(names).all(|(want, name)| glob_match(want, name));
        by_name || self.names_region(&join(names), domain)
    }

    /// The innermost name.
    pub(crate) fn leaf(&self) -> &'a str {
        self.names.last().copied().unwrap_or_default()
    }

    /// Whether the region at `path` in `domain` is this one, name by name.
    pub(crate) fn names_region(&self, path: &str, domain: &str) -> bool {
        let got: Vec<&str> = path.split(SEP).collect();
        self.domain == domain
            && got.len() == self.names.len()
            && self.names.iter().zip(&got).all(|(want, name)| glob_match(want, name))
    }
}

/// A region written as a selector: `A::A1`, or `LLM@decode_all` in a domain.
pub(crate) fn selector(path: &str, domain: &str) -> String {
    if domain.is_empty() {
        path.to_string()
    } else {
        format!("{domain}@{path}")
    }
}

/// Nested names as reports show them: `A::A1`, unless a name holds `::`
/// itself; then every name apart, ` › ` between (`aten::to › aten::_to_copy`),
/// a spelling that selectors accept as well.
pub(crate) fn display<S: AsRef<str>>(names: &[S]) -> String {
    if names.iter().any(|n| n.as_ref().contains(SEP)) {
        names.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(PLAIN_SEP)
    } else {
        join(names)
    }
}

/// Join nested names: `join(["A", "A1"]) == "A::A1"`.
pub fn join<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> String {
    names.into_iter().map(|s| s.as_ref().to_string()).collect::<Vec<_>>().join(SEP)
}

/// `*` (any run of characters) and `?` (one character) as users write region
/// globs (`decode*`); any other character stands for itself.
pub(crate) fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_whose_names_hold_the_separator_render_apart_and_select_exactly() {
        let two = ["aten::to".to_string(), "aten::_to_copy".to_string()];
        let four = ["aten", "to", "aten", "_to_copy"].map(String::from);
        assert_eq!(display(&two), "aten::to › aten::_to_copy");
        assert_eq!(display(&four), "aten::to::aten::_to_copy");
        assert_eq!(display(&["A", "A1"]), "A::A1");
        // The shown spelling names only its own region; globs apply per name.
        let shown = Selector::parse("aten::to › aten::_to_copy");
        assert!(shown.names_path(&two, ""));
        assert!(!shown.names_path(&four, ""));
        assert!(Selector::parse("aten::to › aten::*").names_path(&two, ""));
        // The `::` spelling users type still finds both.
        let typed = Selector::parse("aten::to::aten::_to_copy");
        assert!(typed.names_path(&two, "") && typed.names_path(&four, ""));
        assert!(!Selector::parse("LLM@aten::to › aten::_to_copy").names_path(&two, ""));
    }

    #[test]
    fn pytorch_attributes_are_stripped_and_other_names_kept() {
        let keys: Vec<String> = ["seq", "op_id", "sizes", "input_op_ids"].map(String::from).to_vec();
        assert_eq!(
            strip_attributes("aten::mul, op_id = 317177", &keys),
            Some(("aten::mul", vec![("op_id", "317177")]))
        );
        assert_eq!(
            strip_attributes("aten::to, seq = 12, op_id = 998949", &keys),
            Some(("aten::to", vec![("seq", "12"), ("op_id", "998949")]))
        );
        assert_eq!(
            strip_attributes(
                "aten::addmm, seq = 3, op_id = 5, sizes = [[8, 16], [16, 32]], input_op_ids = [2, 4]",
                &keys
            )
            .map(|(h, a)| (h, a.len(), a[2].1)),
            Some(("aten::addmm", 4, "[[8, 16], [16, 32]]"))
        );
        // Not PyTorch's attributes: the name stays whole.
        for name in ["ncclSend", "A, B", "forward, step = 3", "x, op_id=3", ", op_id = 1"] {
            assert_eq!(strip_attributes(name, &keys), None, "{name}");
        }
    }

    #[test]
    fn globs_match_as_users_write_them() {
        for (p, n) in
            [("decode*", "decode_all"), ("*", "x"), ("*", ""), ("layer_?", "layer_3"), ("a*b*c", "aXbYc"), ("A", "A")]
        {
            assert!(glob_match(p, n), "{p} {n}");
        }
        for (p, n) in [("decode*", "prefill"), ("layer_?", "layer_12"), ("A", "A1"), ("a*b", "ab_")] {
            assert!(!glob_match(p, n), "{p} {n}");
        }
    }

    #[test]
    fn selectors_parse_domain_first_and_round_trip() {
        let s = Selector::parse("LLM@decode_all::decode_step");
        assert_eq!((s.domain, s.names.clone(), s.leaf()), ("LLM", vec!["decode_all", "decode_step"], "decode_step"));
        assert_eq!(Selector::parse("A::A1"), Selector { domain: "", names: vec!["A", "A1"] });
        assert_eq!(Selector::parse("odd@").domain, "", "no path after @: not a domain");
        assert!(Selector::parse("LLM@decode*").names_region("decode_all", "LLM"));
        assert!(!Selector::parse("LLM@decode*").names_region("decode_all::decode_step", "LLM"));
        assert!(!Selector::parse("decode_all").names_region("decode_all", "LLM"));
        assert_eq!(selector("decode_all", "LLM"), "LLM@decode_all");
        assert_eq!(selector("A::A1", ""), "A::A1");
    }

    #[test]
    fn nested_names_join_with_double_colon() {
        assert_eq!(join([DEMO_A, DEMO_A1]), "A::A1");
        assert_eq!(join([layer(3).as_str(), ATTN]), "layer_3::attn");
    }
}
