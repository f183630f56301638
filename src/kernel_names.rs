//! kernel_names: one kernel's identity across the two tools' spellings.
//!
//! nsys prints a kernel's demangled name in full (`void flash::flash_fwd_kernel<
//! Flash_fwd_kernel_traits<(int)128, …, cutlass::bfloat16_t, …>, (bool)0, …>(
//! flash::Flash_fwd_params)`); ncu's CSVs print the same kernel without
//! namespace qualifiers and without the casts on template literals (`void
//! flash_fwd_kernel<Flash_fwd_kernel_traits<128, …, bfloat16_t, …>, 0, …>(
//! Flash_fwd_params)`; as in the DeepSeek-OCR CSVs the tests read from the shared corpus).
//! Neither artifact we read records mangled names (ncu prints them only with
//! `--print-kernel-base mangled`, which the reports would then show), so the
//! join is: the same name, else the same [`key`], when exactly one name of
//! the other tool has it.
use std::sync::OnceLock;

use regex::Regex;

/// A namespace qualifier (`flash::`, `(anonymous namespace)::`, nsys's
/// `<unnamed>::`, which ncu prints `unnamed>::`), a cast on a template literal
/// (`(bool)0`, `(int)-1`, `(unsigned int)8`), or a lambda's bracket (nsys
/// `const::[lambda() (instance 7)]`, ncu `lambda() (instance 7)]`).
fn spelling_parts() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(concat!(
            r"(?P<u><?unnamed>::)",
            r"|(?P<q>(?:\(anonymous namespace\)|\b[A-Za-z_][A-Za-z0-9_]*)::)",
            r"|(?P<c>\([A-Za-z_][A-Za-z0-9_ ]*\))(?P<d>-?[0-9])",
            r"|(?P<b>[\[\]])"
        ))
        .expect("valid regex")
    })
}

/// The spelling both tools agree on: namespace qualifiers, the casts on
/// template literals and lambdas' brackets dropped, runs of spaces made one.
/// A member after a template (`enable_if<…>::type`) is kept: both tools print it.
pub(crate) fn key(name: &str) -> String {
    // nsys's `at::native::<unnamed>::k` is ncu's `unnamed>::k`: the `<` went
    // with the qualifiers. Inside a template ncu's `<unnamed>::` keeps the
    // template's `<` (`Copy<unnamed>::T`, nsys `Copy<at::native::<unnamed>::T`).
    let name = name.replace("::<unnamed>::", "::");
    let stripped = spelling_parts().replace_all(&name, |c: &regex::Captures| match c.name("u") {
        Some(u) if u.as_str().starts_with('<') => "<".to_string(),
        _ => c.name("d").map_or(String::new(), |d| d.as_str().to_string()),
    });
    stripped.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A regular expression (ECMAScript and the regex crate agree on it) that
/// matches `name` as nsys spells it and as ncu does: every namespace
/// qualifier and every cast optional, the rest literal. For ncu's
/// `--kernel-name regex:` with `--kernel-name-base demangled`.
pub(crate) fn spelling_regex(name: &str, escape: impl Fn(&str) -> String) -> String {
    let mut out = String::with_capacity(name.len() * 2);
    let mut at = 0;
    for c in spelling_parts().captures_iter(name) {
        let whole = c.get(0).expect("a match");
        out.push_str(&escape(&name[at..whole.start()]));
        match (c.name("q"), c.name("c"), c.name("d")) {
            _ if c.name("u").is_some() => out.push_str(&format!("(?:{}?{})?", escape("<"), escape("unnamed>::"))),
            _ if c.name("b").is_some() => out.push_str(&format!("{}?", escape(whole.as_str()))),
            (Some(q), _, _) => out.push_str(&format!("(?:{})?", escape(q.as_str()))),
            (_, Some(cast), Some(d)) => out.push_str(&format!("(?:{})?{}", escape(cast.as_str()), escape(d.as_str()))),
            _ => out.push_str(&escape(whole.as_str())),
        }
        at = whole.end();
    }
    out.push_str(&escape(&name[at..]));
    out
}

/// A communication kernel: NCCL's (`ncclDevKernel_…`, `ncclKernel_…`), by
/// either tool's spelling.
pub(crate) fn is_comm(kernel: &str) -> bool {
    let base = kernel.strip_prefix("void ").unwrap_or(kernel);
    base.starts_with("nccl")
}

/// How an ncu kernel name found its nsys name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Matched {
    /// Spelled the same.
    Exact,
    /// The same [`key`], and no other nsys name has it.
    Normalized,
    /// Several nsys names have its key: not joined.
    Ambiguous,
    /// No nsys name has its key.
    None,
}

/// The nsys names, looked up by name and by [`key`]; each name's key is
/// computed once (a regular expression over names of hundreds of characters).
pub(crate) struct Index<'a> {
    keys: std::collections::HashMap<&'a str, String>,
    by_key: std::collections::HashMap<String, Vec<&'a str>>,
}

impl<'a> Index<'a> {
    pub(crate) fn new(names: impl IntoIterator<Item = &'a str>) -> Index<'a> {
        let keys: std::collections::HashMap<&str, String> = names.into_iter().map(|n| (n, key(n))).collect();
        let mut by_key: std::collections::HashMap<String, Vec<&str>> = Default::default();
        for (n, k) in &keys {
            by_key.entry(k.clone()).or_default().push(n);
        }
        for v in by_key.values_mut() {
            v.sort_unstable();
        }
        Index { keys, by_key }
    }

    /// The nsys name of `other` (an ncu spelling), and how it was found.
    pub(crate) fn find(&self, other: &str) -> (Option<&'a str>, Matched) {
        if let Some((n, _)) = self.keys.get_key_value(other) {
            return (Some(n), Matched::Exact);
        }
        match self.by_key.get(&key(other)).map(Vec::as_slice) {
            Some([one]) => (Some(one), Matched::Normalized),
            Some([]) | None => (None, Matched::None),
            Some(_) => (None, Matched::Ambiguous),
        }
    }

    /// [`Self::find`] among some of the indexed names (a region's), for
    /// `other` whose key is `other_key`: the same name, else the one of them
    /// with that key.
    pub(crate) fn find_among<'b>(
        &self,
        among: impl IntoIterator<Item = &'b str>,
        other: &str,
        other_key: &str,
    ) -> Option<&'b str> {
        let mut same_key = None;
        let mut count = 0;
        for n in among {
            if n == other {
                return Some(n);
            }
            if self.keys.get(n).is_some_and(|k| k == other_key) {
                same_key = Some(n);
                count += 1;
            }
        }
        same_key.filter(|_| count == 1)
    }
}

/// Labels for kernels whose shown names collide: PyTorch's
/// `elementwise_kernel` is many kernels, which nsys's short names (and a cut
/// full name) print alike. Each colliding row gets `label ‹t1…t2›`, where the
/// tokens are its own at the first place its name (as [`key`] spells it)
/// differs from each other row of the group: `elementwise_kernel ‹2…MulFunctor›`
/// beside `elementwise_kernel ‹4…gpu_kernel_impl›`. Rows still alike get `#N`.
/// `rows`: (shown name, full name); the result is in the same order.
pub(crate) fn distinct_labels(rows: &[(&str, &str)]) -> Vec<String> {
    const MAX_TOKENS: usize = 3;
    const MAX_TOKEN_CHARS: usize = 24;
    let tokens: Vec<Vec<String>> =
        rows.iter().map(|(_, full)| words().find_iter(&key(full)).map(|m| m.as_str().to_string()).collect()).collect();
    let mut labels: Vec<String> = rows.iter().map(|(shown, _)| shown.to_string()).collect();
    let mut groups: std::collections::BTreeMap<&str, Vec<usize>> = std::collections::BTreeMap::new();
    for (i, (shown, _)) in rows.iter().enumerate() {
        groups.entry(shown).or_default().push(i);
    }
    for members in groups.values().filter(|m| m.len() > 1) {
        for &i in members {
            // Per other row: where this row's tokens first differ from it, and this row's
            // token there from the `_`-separated part that differs (TensorRT's names are
            // one long identifier: `…_nhwc_tilesize128x128x32_stage4_…`).
            let mut at: Vec<(usize, usize, String)> = members
                .iter()
                .filter(|&&o| o != i)
                .filter_map(|&o| {
                    let t = (0..tokens[i].len()).find(|&t| tokens[o].get(t) != Some(&tokens[i][t]))?;
                    let (from, part) = differing_part(&tokens[i][t], tokens[o].get(t).map_or("", String::as_str));
                    Some((t, from, part))
                })
                .collect();
            at.sort();
            at.dedup();
            let mut picked: Vec<String> = Vec::new();
            for (_, _, part) in at {
                let part: String = part.chars().take(MAX_TOKEN_CHARS).collect();
                if !picked.contains(&part) && picked.len() < MAX_TOKENS {
                    picked.push(part);
                }
            }
            if !picked.is_empty() {
                labels[i] = format!("{} ‹{}›", rows[i].0, picked.join("…"));
            }
        }
    }
    // Whatever is still alike (names that differ in punctuation only, or not at all): numbered.
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for l in &labels {
        *seen.entry(l.clone()).or_default() += 1;
    }
    let mut nth: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for l in labels.iter_mut() {
        if seen[l.as_str()] > 1 {
            let n = nth.entry(l.clone()).or_default();
            *n += 1;
            *l = format!("{l} #{n}");
        }
    }
    labels
}

/// `mine` from the start of its `_`-separated part where it first differs
/// from `other`, and where that part begins.
fn differing_part(mine: &str, other: &str) -> (usize, String) {
    let same = mine.bytes().zip(other.bytes()).take_while(|(a, b)| a == b).count();
    let from = mine[..same].rfind('_').map_or(0, |i| i + 1);
    (from, mine[from..].to_string())
}

/// Identifiers and numbers: what a label's distinguishing tokens are made of.
fn words() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+").expect("valid regex"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_that_read_alike_get_what_tells_them_apart() {
        let rows = [
            ("elementwise_kernel", "void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float>>>(int, T3)"),
            ("elementwise_kernel", "void at::native::elementwise_kernel<(int)128, (int)4, void at::native::gpu_kernel_impl<at::native::BinaryFunctor<float>>>(int, T3)"),
            ("gemm", "gemm_tilesize128x64_stage3"),
            ("gemm", "gemm_tilesize256x64_stage3"),
            ("same", "void k(int)"),
            ("same", "void k(int *)"),
            ("alone", "void alone()"),
        ];
        let labels = distinct_labels(&rows);
        assert_eq!(
            labels,
            [
                "elementwise_kernel ‹2›",
                "elementwise_kernel ‹4›",
                "gemm ‹tilesize128x64_stage3›",
                "gemm ‹tilesize256x64_stage3›",
                "same #1",
                "same #2",
                "alone",
            ]
        );
    }

    const NSYS: &str = "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<(int)128, (int)64, (int)128, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)64, (int)128, (int)4, cutlass::bfloat16_t>>, (bool)0, (bool)0, (bool)0, (bool)0, (bool)1, (bool)0, (bool)1, (bool)0>(flash::Flash_fwd_params)";
    const NCU: &str = "void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, 0, 0, bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, bfloat16_t>>, 0, 0, 0, 0, 1, 0, 1, 0>(Flash_fwd_params)";

    #[test]
    fn both_spellings_have_one_key() {
        assert_eq!(key(NSYS), NCU);
        assert_eq!(key(NCU), NCU);
        // A member after a template stays; a negative literal keeps its sign.
        assert_eq!(
            key("std::enable_if<!T7, void>::type internal::gemvx::kernel<(int)-1>(T13)"),
            "enable_if<!T7, void>::type kernel<-1>(T13)"
        );
        assert_eq!(key("(anonymous namespace)::k<(unsigned int)8>"), "k<8>");
        // Anonymous namespaces and lambdas, as the two tools print them (DeepSeek-OCR files).
        assert_eq!(
            key("void at::native::<unnamed>::CatArrayBatchedCopy<at::native::<unnamed>::OpaqueType<(unsigned int)2>, (int)4>(T1 *)"),
            key("void unnamed>::CatArrayBatchedCopy<unnamed>::OpaqueType<2>, 4>(T1 *)")
        );
        assert_eq!(
            key("f(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>"),
            key("f(TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() lambda(float) (instance 1)], array<char *, 2>")
        );
        // Other parentheses are not casts.
        assert_eq!(key("void at::native::f<(bool)1>(at::Tensor (*)(int))"), "void f<1>(Tensor (*)(int))");
    }

    #[test]
    fn the_spelling_regex_matches_both_spellings_and_no_other() {
        let escape = |s: &str| regex::escape(s);
        let re = Regex::new(&format!("^(?:{})$", spelling_regex(NSYS, escape))).unwrap();
        assert!(re.is_match(NSYS));
        assert!(re.is_match(NCU));
        assert!(!re.is_match(&NCU.replace("128, 64, 128, 4, 0", "64, 64, 256, 4, 0")));
        assert!(!re.is_match(&NSYS.replace("void flash::", "void pytorch_flash::")));
        let nsys = "void at::native::<unnamed>::k<at::native::<unnamed>::T<(unsigned int)2>>(f(at::X &)::[lambda() (instance 3)]::operator ()() const::[lambda(float) (instance 1)])";
        let ncu = "void unnamed>::k<unnamed>::T<2>>(f(X &)::[lambda() (instance 3)]::operator ()() lambda(float) (instance 1)])";
        let re = Regex::new(&format!("^(?:{})$", spelling_regex(nsys, escape))).unwrap();
        assert!(re.is_match(nsys) && re.is_match(ncu));
    }

    #[test]
    fn an_index_finds_exact_then_unique_normalized_names() {
        let other = NSYS.replace("flash::Flash_fwd_params", "other::Flash_fwd_params");
        let idx = Index::new([NSYS, "k"]);
        assert_eq!(idx.find(NSYS), (Some(NSYS), Matched::Exact));
        assert_eq!(idx.find(NCU), (Some(NSYS), Matched::Normalized));
        assert_eq!(idx.find("j"), (None, Matched::None));
        let two = Index::new([NSYS, other.as_str()]);
        assert_eq!(two.find(NCU), (None, Matched::Ambiguous));
        // Among some of the names: ambiguous in all, unique in one of them.
        assert_eq!(two.find_among([NSYS], NCU, &key(NCU)), Some(NSYS));
        assert_eq!(two.find_among([NSYS, other.as_str()], NCU, &key(NCU)), None);
        assert_eq!(two.find_among([other.as_str(), NSYS], NSYS, &key(NSYS)), Some(NSYS));
    }
}
