//! The module layout of src/ stays layered: no import cycle between files, and
//! every top-level module names only modules on floors below its own (the
//! floors are the architecture of src/lib.rs and docs/internals.md). Imports
//! are read from the code: `crate::…`, `super::…` and `use …` paths.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level modules, from the top floor down. A module may name modules on
/// lower floors only (files of one module may name each other, without cycles).
const FLOORS: &[&[&str]] = &[
    &["app"],
    &["schemas", "doctor"],
    &["pipeline", "compare"],
    &["export"],
    &["report"],
    &["aggregate"],
    &["parse"],
    &["plan", "provenance"],
    &["profile", "load"],
    &["manifest", "plugin", "cli"],
    &["process"],
    &["run_dir", "timings", "config", "signals"],
    &["memory"],
    &["stats", "flops", "regions", "kernel_names", "markdown", "error", "units"],
];

/// Every module path of src/ (`aggregate::ncu`, `parse::ncu::rows`) with its source, tests left out.
fn modules() -> BTreeMap<String, String> {
    fn walk(dir: &Path, prefix: &[String], out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                let mut next = prefix.to_vec();
                next.push(name);
                walk(&p, &next, out);
            } else if let Some(stem) = name.strip_suffix(".rs") {
                if ["tests", "testdata", "main", "lib"].contains(&stem) {
                    continue;
                }
                let mut path = prefix.to_vec();
                if stem != "mod" {
                    path.push(stem.to_string());
                }
                out.insert(path.join("::"), std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &[], &mut out);
    out
}

/// The code of a file without comments and without its `#[cfg(test)]` module.
fn code(text: &str) -> String {
    let text = text.split("\n#[cfg(test)]\nmod tests").next().unwrap_or(text);
    text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The modules a file names, resolved to the longest known module path.
fn imports(module: &str, text: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    targets(module, text, known)
        .into_iter()
        .filter(|t| !t.is_empty() && t != module && !module.starts_with(&format!("{t}::")))
        .collect()
}

/// Every path a file names, resolved to the longest known module path, its
/// own module and ancestors included (`super::X` of `a::b` for an item X of
/// `a`'s mod.rs is `a`).
fn targets(module: &str, text: &str, known: &BTreeSet<String>) -> Vec<String> {
    let re = regex::Regex::new(r"\b(crate|super)((?:::[a-z_][a-z0-9_]*)*(?:::[A-Za-z_][A-Za-z0-9_]*|::\{))").unwrap();
    // `super` is the parent module, for a file (`a/b.rs`) and a folder (`a/b/mod.rs`) alike.
    let parts: Vec<&str> = module.split("::").collect();
    let parent = &parts[..parts.len() - 1];
    let mut out = Vec::new();
    for c in re.captures_iter(text) {
        let mut path: Vec<String> = match &c[1] {
            "crate" => Vec::new(),
            _ => parent.iter().map(|s| s.to_string()).collect(),
        };
        path.extend(c[2].trim_start_matches("::").split("::").map(String::from));
        while !path.is_empty() && !known.contains(&path.join("::")) {
            path.pop();
        }
        out.push(path.join("::"));
    }
    out
}

fn floor(module: &str) -> usize {
    let top = module.split("::").next().unwrap();
    FLOORS.iter().position(|f| f.contains(&top)).unwrap_or_else(|| panic!("{top} is on no floor: add it to FLOORS"))
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    let known: BTreeSet<String> = mods.keys().cloned().collect();
    mods.iter().map(|(m, text)| (m.clone(), imports(m, &code(text), &known))).collect()
}

#[test]
fn no_module_names_one_on_its_own_floor_or_above() {
    let mut upward = Vec::new();
    for (from, tos) in graph() {
        for to in tos {
            let same_top = from.split("::").next() == to.split("::").next();
            if !same_top && floor(&to) <= floor(&from) {
                upward.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(upward.is_empty(), "imports that run up (or across) the floors: {upward:#?}");
}

/// A file inside a folder names its siblings, never an item of the folder's
/// own mod.rs, which sits above them (it declares, re-exports and runs them):
/// a stage of `pipeline/` does not reach back into `pipeline/mod.rs`.
#[test]
fn no_file_names_its_own_folders_mod_rs() {
    let mods = modules();
    let known: BTreeSet<String> = mods.keys().cloned().collect();
    let mut back = Vec::new();
    for (module, text) in &mods {
        let Some((parent, _)) = module.rsplit_once("::") else { continue };
        if targets(module, &code(text), &known).iter().any(|t| t == parent) {
            back.push(format!("{module} -> {parent} (mod.rs)"));
        }
    }
    assert!(back.is_empty(), "files that name their folder's mod.rs: {back:#?}");
}

#[test]
fn no_import_cycle_between_files() {
    let g = graph();
    // Depth-first search with colours: a grey node seen again closes a cycle.
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) {
        match state.get(n) {
            Some(2) => return,
            Some(1) => {
                let at = path.iter().position(|p| p == n).unwrap();
                panic!("import cycle: {} -> {n}", path[at..].join(" -> "));
            }
            _ => {}
        }
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            // A folder's mod.rs re-exporting its children is not a cycle with them.
            if !m.starts_with(&format!("{n}::")) {
                visit(m, g, state, path);
            }
        }
        path.pop();
        state.insert(n.to_string(), 2);
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        visit(n, &g, &mut state, &mut Vec::new());
    }
    assert!(g.len() > 40, "only {} modules read", g.len());
}

/// The code of a file without comments and without its `#[cfg(test)]`
/// items (a module, a function, a `mod tests;`), as rustfmt lays them out.
fn code_outside_tests(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(|l| l.split("//").next().unwrap_or("")).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.trim() != "#[cfg(test)]" {
            out.push(line);
            i += 1;
            continue;
        }
        // The item under the attribute: one line, or up to its closing brace.
        let indent = &line[..line.len() - line.trim_start().len()];
        let mut j = i + 1;
        while j < lines.len() && lines[j].trim_start().starts_with("#[") {
            j += 1;
        }
        if lines.get(j).is_some_and(|l| l.trim_end().ends_with('{')) {
            let close = format!("{indent}}}");
            j += lines[j..].iter().position(|l| l.trim_end() == close).unwrap_or(lines.len() - j);
        }
        i = j + 1;
    }
    out.join("\n")
}

/// Every function of src/ outside the tests with its length in lines: from
/// its `fn` line to the `}` at the same indent (rustfmt's layout).
fn function_lengths() -> Vec<(String, usize)> {
    let fn_line = regex::Regex::new(r"^( *)(pub(\([a-z]+\))? )?(const )?(unsafe )?fn ([A-Za-z0-9_]+)").unwrap();
    let mut out = Vec::new();
    for (module, text) in modules() {
        let code = code_outside_tests(&text);
        let lines: Vec<&str> = code.lines().map(str::trim_end).collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(c) = fn_line.captures(line) else { continue };
            // The signature ends at its body's `{`, or at `;` in a trait's declaration.
            let Some(sig_end) = lines[i..].iter().position(|l| l.ends_with('{') || l.ends_with(';')) else { continue };
            if lines[i + sig_end].ends_with(';') {
                continue;
            }
            let close = format!("{}}}", &c[1]);
            if let Some(end) = lines[i..].iter().position(|l| *l == close) {
                out.push((format!("{module}::{}", &c[6]), end + 1));
            }
        }
    }
    out
}

/// A function a reader holds in their head: none over 120 lines (the
/// breakdown's reader was 211 before the ingestion driver took its feed).
#[test]
fn no_function_in_src_runs_over_120_lines() {
    let all = function_lengths();
    assert!(all.len() > 500, "only {} functions read", all.len());
    let long: Vec<_> = all.into_iter().filter(|(_, n)| *n > 120).collect();
    assert!(long.is_empty(), "functions over 120 lines: {long:#?}");
}

/// `aggregate/` builds reports from what it is handed: the ingestion's
/// drivers in `parse/` own the threads and the channels between them.
#[test]
fn aggregate_holds_no_channel_or_thread() {
    let mut found = Vec::new();
    for (module, text) in modules().into_iter().filter(|(m, _)| m.starts_with("aggregate")) {
        for needle in ["thread::", "mpsc", "channel(", "Sender<", "Receiver<", "spawn("] {
            if code_outside_tests(&text).contains(needle) {
                found.push(format!("{module}: {needle}"));
            }
        }
    }
    assert!(found.is_empty(), "aggregate/ starts threads or holds channels: {found:#?}");
}

/// `pub` items that no file outside the crate names, public only because a
/// public item's signature names them (the compiler's `private_interfaces`
/// lint refuses them as `pub(crate)`): `config::load` returns a `Resolved`,
/// the torch workloads take an `InferConfig`, `parse::nsys::ingest::ingest`
/// is bounded by `Timeline` and `KernelSink`, and so on.
const PUB_FOR_SIGNATURES: &[(&str, &str)] = &[
    ("aggregate::nsys::breakdown", "Window"),
    ("aggregate::nsys", "Sweep"),
    ("aggregate::nsys::model", "Region"),
    ("aggregate::nsys::model", "RegionKernel"),
    ("aggregate::nsys::model", "Unattributed"),
    ("aggregate::roofline", "Counted"),
    ("aggregate::roofline", "Point"),
    ("aggregate::roofline", "TensorUse"),
    ("aggregate::select", "Selection"),
    ("config", "Resolved"),
    ("parse::nsys::ingest", "Fork"),
    ("config::schema", "HfConfig"),
    ("config::schema", "HfPreset"),
    ("config::schema", "HfSize"),
    ("config::schema", "InferConfig"),
    ("config::schema", "NcuCli"),
    ("config::schema", "NcuConfig"),
    ("config::schema", "Pipeline"),
    ("config::schema", "RunMode"),
    ("config::schema", "RunSettings"),
    ("config::schema", "Runner"),
    ("parse::ncu", "Layout"),
    ("parse::ncu::rows", "LaunchSink"),
    ("parse::ncu::rows", "LaunchView"),
    ("parse::ncu::rows", "MetricRef"),
    ("parse::ncu::rows", "NvtxFrame"),
    ("parse::ncu::rules", "RuleRow"),
    ("parse::nsys::batched", "Stream"),
    ("parse::nsys::beside", "Windows"),
    ("parse::nsys::ingest", "Ingest"),
    ("parse::nsys::ingest", "KernelSink"),
    ("parse::nsys::ingest", "Renamed"),
    ("parse::nsys::ingest", "Timeline"),
    ("parse::nsys::sqlite", "Launched"),
    ("parse::nsys::sqlite", "Names"),
    ("parse::nsys::sqlite", "NvtxRange"),
    ("plan::ncu", "FoundRegion"),
    ("plan::ncu", "KernelFilter"),
    ("plan::ncu", "NcuPlan"),
    ("plan::ncu", "Pass"),
    ("schemas", "Artifact"),
    ("stats", "Stats"),
    ("timings", "DecodeBytes"),
    ("timings", "Flops"),
];

/// Every identifier in the files outside the library that use it: the
/// binary's main.rs, the integration tests, the torch plugin and the fuzz
/// targets.
fn named_outside() -> BTreeSet<String> {
    fn walk(dir: &Path, out: &mut String) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() && !p.ends_with("target") {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("tests/layout.rs") {
                // This file names every item it lists.
                let text = std::fs::read_to_string(&p).unwrap();
                out.extend(text.lines().map(|l| l.split("//").next().unwrap_or("")).flat_map(|l| [l, "\n"]));
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut text = std::fs::read_to_string(root.join("src/main.rs")).unwrap();
    for dir in ["tests", "torch", "fuzz"] {
        walk(&root.join(dir), &mut text);
    }
    let ident = regex::Regex::new(r"[A-Za-z_][A-Za-z0-9_]*").unwrap();
    ident.find_iter(&text).map(|m| m.as_str().to_string()).collect()
}

/// `pub(crate)` is the default: an item is `pub` only where a file outside
/// the library names it (or a public signature does: [`PUB_FOR_SIGNATURES`]).
/// Code written after the sweep that made it the default was `pub` again
/// (71 such items at 22052b5).
#[test]
fn no_pub_item_that_nothing_outside_the_crate_names() {
    let item = regex::Regex::new(
        r"^\s*pub (?:async |const |unsafe )*(?:fn|struct|enum|trait|const|type|static|mod) ([A-Za-z0-9_]+)",
    )
    .unwrap();
    let outside = named_outside();
    assert!(outside.contains("llmperf") && outside.len() > 1000, "only {} identifiers read outside", outside.len());
    let mut unnamed = Vec::new();
    let mut listed = BTreeSet::new();
    for (module, text) in modules() {
        for line in code_outside_tests(&text).lines() {
            let Some(c) = item.captures(line) else { continue };
            let name = &c[1];
            if outside.contains(name) {
                continue;
            }
            if PUB_FOR_SIGNATURES.contains(&(module.as_str(), name)) {
                listed.insert((module.clone(), name.to_string()));
            } else {
                unnamed.push(format!("{module}::{name}"));
            }
        }
    }
    assert!(unnamed.is_empty(), "pub items no file outside the crate names (make them pub(crate)): {unnamed:#?}");
    let stale: Vec<_> =
        PUB_FOR_SIGNATURES.iter().filter(|(m, n)| !listed.contains(&(m.to_string(), n.to_string()))).collect();
    assert!(stale.is_empty(), "PUB_FOR_SIGNATURES names items that are no longer pub and unnamed: {stale:?}");
}
