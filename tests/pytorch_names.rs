//! PyTorch's NVTX names (`aten::mul, op_id = 317177`) grouped into operators
//! (issue 16), on a real two-process torchrun capture (corpus
//! `real/nsys-ai/mfu_2gpu_before.sqlite`, nsys 2026.2): every operator's
//! instances and time equal plain SQL sums over the raw names, and no
//! report lists `op_id =`.

use std::collections::BTreeMap;

use crate::common::json;

/// The operator of a raw name, by an independent rule: everything before the
/// first `, seq = `, `, op_id = `, `, sizes = `, `, input_op_ids = ` or `, stashed seq = `.
fn operator(raw: &str) -> &str {
    let re = regex::Regex::new(r", (seq|op_id|sizes|input_op_ids|stashed seq) = ").unwrap();
    re.find(raw).map_or(raw, |m| &raw[..m.start()])
}

#[test]
fn pytorch_operators_are_one_region_each_and_sum_to_the_raw_ranges() {
    let test = "pytorch_operators_are_one_region_each_and_sum_to_the_raw_ranges";
    let root = tempfile::tempdir().unwrap();
    let Some(db) = crate::common::corpus_copy(test, "real/nsys-ai/mfu_2gpu_before.sqlite", root.path()) else { return };
    let out = root.path().join("run");
    crate::common::import_nsys(&db, &out, &[]);
    // Plain SQL over the raw names: instances and total ns per operator.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT COALESCE(e.text, s.value), e.end - e.start FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId \
             WHERE e.eventType = 59 AND e.end IS NOT NULL",
        )
        .unwrap();
    let mut sql: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut raw_names = std::collections::HashSet::new();
    for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))).unwrap() {
        let (raw, ns) = row.unwrap();
        let e = sql.entry(operator(&raw).to_string()).or_default();
        e.0 += 1;
        e.1 += ns;
        raw_names.insert(raw);
    }
    let regions = json(&out.join("nsys/regions.json"));
    let mut ours: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for r in regions["regions"].as_array().unwrap().iter().filter(|r| r["style"] == "PushPop") {
        let e = ours.entry(r["name"].as_str().unwrap().to_string()).or_default();
        e.0 += r["instances"].as_i64().unwrap();
        e.1 += r["inclusive_ns"].as_i64().unwrap();
    }
    assert_eq!(ours, sql);
    // Thousands of raw names, a few hundred operators at most.
    let n = &regions["normalized"];
    assert!(raw_names.len() > 10_000 && sql.len() < 500, "{} raw, {} operators", raw_names.len(), sql.len());
    assert!(n["raw_names"].as_u64().unwrap() > 10_000 && n["operators"].as_u64().unwrap() < 500, "{n}");
    assert_eq!(n["keys"][1], "op_id");
    // No report or chart lists PyTorch's per-call attributes.
    for file in ["nsys/regions.json", "operators.md", "operators.json", "stakeholder_summary.md", "report.html"] {
        let text = std::fs::read_to_string(out.join(file)).unwrap();
        assert!(!text.contains("op_id ="), "{file} lists op_id =");
    }
    // report.nvtx_attributes=[] keeps the raw names.
    let raw = root.path().join("raw");
    crate::common::import_nsys(&db, &raw, &["report.nvtx_attributes=[]"]);
    let regions = json(&raw.join("nsys/regions.json"));
    assert!(regions["normalized"].is_null());
    assert!(regions["regions"].as_array().unwrap().iter().any(|r| r["name"].as_str().unwrap().contains(", op_id = ")));
}
