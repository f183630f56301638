//! Every published JSON Schema under specs/ is the one generated from the
//! types that write the artifact. `LLMPERF_UPDATE_SPECS=1 cargo test --release --test tests specs::`
//! rewrites them after a deliberate change.
use std::path::Path;

#[test]
fn published_schemas_are_the_generated_ones() {
    let specs = Path::new(env!("CARGO_MANIFEST_DIR")).join("specs");
    let mut stale = Vec::new();
    for artifact in llmperf::schemas::ARTIFACTS {
        let generated = (artifact.schema)();
        let path = specs.join(artifact.spec);
        if std::env::var_os("LLMPERF_UPDATE_SPECS").is_some() {
            std::fs::write(&path, serde_json::to_string_pretty(&generated).unwrap() + "\n").unwrap();
        }
        let published: Option<serde_json::Value> =
            std::fs::read_to_string(&path).ok().and_then(|t| serde_json::from_str(&t).ok());
        if published.as_ref() != Some(&generated) {
            stale.push(artifact.spec);
        }
    }
    assert!(
        stale.is_empty(),
        "stale or missing: {stale:?}; run LLMPERF_UPDATE_SPECS=1 cargo test --release --test tests specs::"
    );
}
