//! The ncu CSV ingesters (the streaming reader of either layout, and the
//! parallel details reader) and the region aggregation on arbitrary bytes:
//! errors are fine, panics are not.
#![no_main]
use libfuzzer_sys::fuzz_target;
use llmperf::aggregate::ncu::{Builder, Options, Stamp};
use llmperf::parse::ncu as reader;
use llmperf::regions::Attribution;

fuzz_target!(|data: &[u8]| {
    fast(data);
    let path = std::path::Path::new("fuzz.csv");
    let Ok((_, launches)) = reader::read_any(std::io::Cursor::new(data.to_vec()), path) else { return };
    let mut builder = Builder::new(Options { aggregate: true, ..Options::default() });
    let regions = ["A".to_string(), "A::A1".to_string()];
    for (i, launch) in launches.enumerate() {
        let Ok(launch) = launch else { return };
        let how = if i % 2 == 0 { Attribution::NvtxStack } else { Attribution::Range };
        builder.add_launch(&launch, how, &regions);
    }
    let _ = builder.finish(&Stamp::default());
});

/// The parallel reader reads files: one per input, with tiny blocks so that
/// launches straddle reads.
fn fast(data: &[u8]) {
    let Ok(mut file) = tempfile::NamedTempFile::new() else { return };
    if std::io::Write::write_all(&mut file, data).is_err() {
        return;
    }
    let mut builder = Builder::new(Options { aggregate: true, ..Options::default() });
    if let Ok(true) = reader::ingest_blocks(file.path(), &mut builder, Attribution::NvtxStack, &[], 512) {
        let _ = builder.finish(&Stamp::default());
    }
}
