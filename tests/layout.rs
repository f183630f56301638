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
    &["report"],
    &["aggregate"],
    &["parse"],
    &["plan", "provenance"],
    &["profile"],
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
