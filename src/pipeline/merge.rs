//! `llmperf merge JOB_DIR…`: the cross-rank reports of a job whose ranks each
//! wrote `ranks/<rank>/` (`llmperf profile --rank-from-env`). Reads each
//! rank's small files only (rank.json, nsys/regions.json, env.json,
//! manifest.json), so its time and memory do not grow with the captures.
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::aggregate::nsys::RegionsReport;
use crate::aggregate::ranks::{self, MissingRank, RankInput};
use crate::error::Error;
use crate::manifest::{Manifest, Status};
use crate::plan::rank::RankId;
use crate::run_dir::{self, read_json_file as read};

/// One rank's directory, and its small files but the regions (read when added).
struct Found {
    rank: u32,
    dir: PathBuf,
    id: Option<RankId>,
    has_regions: bool,
    manifest: Option<Manifest>,
}

/// Writes `ranks.json` and `ranks.md` into the first job directory; returns it.
pub(crate) fn merge(job_dirs: &[PathBuf]) -> Result<PathBuf, Error> {
    let mut found: BTreeMap<u32, Found> = BTreeMap::new();
    for job in job_dirs {
        let ranks_dir = job.join(run_dir::RANKS_DIR);
        let entries = std::fs::read_dir(&ranks_dir).map_err(|e| {
            Error::usage(format!("{}: cannot read its ranks/ directory ({e})", job.display())).with_hint(
                "pass the job directory that `llmperf profile --rank-from-env` wrote: <root>/<job>, holding ranks/<rank>/",
            )
        })?;
        for e in entries.flatten() {
            let dir = e.path();
            let Some(rank) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            if !dir.is_dir() {
                continue;
            }
            if let Some(other) = found.get(&rank) {
                return Err(Error::usage(format!(
                    "rank {rank} is in two job directories: {} and {}",
                    other.dir.display(),
                    dir.display()
                ))
                .with_hint("merge the directories of one job only (its ranks are numbered once)"));
            }
            let id: Option<RankId> = read(&dir.join(run_dir::RANK_JSON));
            let regions_file = run_dir::Timeline::of_dir(&dir).regions_file();
            let has_regions = dir.join(regions_file).is_file();
            let manifest = read(&dir.join(run_dir::MANIFEST_JSON));
            found.insert(rank, Found { rank, dir, id, has_regions, manifest });
        }
    }
    if found.is_empty() {
        return Err(Error::usage(format!(
            "no rank directories (ranks/<rank>/) under {}",
            job_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
        ))
        .with_hint("each rank writes one with `llmperf profile --rank-from-env`; pass <root>/<job>"));
    }
    one_job(&found)?;
    let world = found.values().filter_map(|f| f.id.as_ref()?.world_size).max();
    let mut missing = Vec::new();
    for rank in 0..world.unwrap_or(0) {
        if !found.contains_key(&rank) {
            missing.push(MissingRank {
                rank,
                reason: "no run directory: it did not start, or its node's job directory was not given to merge".into(),
            });
        }
    }
    // One rank's regions at a time: read, added, dropped.
    let mut builder = ranks::Builder::default();
    let mut not_profiled = Vec::new();
    for f in found.values() {
        if let Some(reason) = without_nsys(f) {
            not_profiled.push(MissingRank { rank: f.rank, reason });
            continue;
        }
        let regions: Option<RegionsReport> =
            if f.has_regions { read(&f.dir.join(run_dir::Timeline::of_dir(&f.dir).regions_file())) } else { None };
        match &regions {
            Some(regions) => builder.add(&RankInput {
                rank: f.rank,
                host: f.id.as_ref().map(|i| i.host.clone()),
                regions,
                processes: None,
                status: f.manifest.as_ref().map(|m| m.status.to_string()),
                failure: f.manifest.as_ref().filter(|m| m.status != Status::Ok).map(|_| why_missing(f)),
            }),
            None if f.has_regions => missing.push(MissingRank {
                rank: f.rank,
                reason: format!(
                    "{} is not a regions.json this llmperf reads (rebuild it: llmperf report {})",
                    f.dir.join(run_dir::Timeline::of_dir(&f.dir).regions_file()).display(),
                    f.dir.display()
                ),
            }),
            None => missing.push(MissingRank { rank: f.rank, reason: why_missing(f) }),
        }
    }
    missing.sort_by_key(|m| m.rank);
    let mut report = builder.finish("run_directory", missing);
    report.not_profiled = not_profiled;
    let out = &job_dirs[0];
    run_dir::write_json_atomic(&out.join(run_dir::RANKS_JSON), &report)?;
    run_dir::write_atomic(&out.join(run_dir::RANKS_MD), crate::report::summary::ranks_md(&report).as_bytes())?;
    let job = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    run_dir::write_atomic(&out.join(run_dir::RANKS_HTML), crate::report::html::ranks_page(&job, &report).as_bytes())?;
    tracing::info!("merged {} ranks ({} missing) into {}", report.ranks.len(), report.missing.len(), out.display());
    Ok(out.clone())
}

/// The ranks' rank.json files must describe one job: the same job id, the
/// same world size, and each rank in the directory of its own number. A rank
/// directory copied from another job would otherwise be merged without a
/// word, and disagreeing world sizes read as ranks "missing".
fn one_job(found: &BTreeMap<u32, Found>) -> Result<(), Error> {
    let ids: Vec<(&Found, &RankId)> = found.values().filter_map(|f| Some((f, f.id.as_ref()?))).collect();
    if let Some((f, id)) = ids.iter().find(|(f, id)| id.rank != f.rank) {
        return Err(Error::usage(format!(
            "{} holds rank {}'s rank.json, not rank {}'s",
            f.dir.display(),
            id.rank,
            f.rank
        ))
        .with_hint("a rank directory was moved or copied: each rank's run directory is ranks/<its rank>/"));
    }
    let differ = |what: &str, value: &dyn Fn(&RankId) -> String| -> Result<(), Error> {
        let Some((first, first_id)) = ids.first() else { return Ok(()) };
        match ids.iter().find(|(_, id)| value(id) != value(first_id)) {
            Some((f, id)) => Err(Error::usage(format!(
                "the ranks disagree on their {what}: rank {} ({}) says {}, rank {} ({}) says {}",
                first.rank,
                first.dir.display(),
                value(first_id),
                f.rank,
                f.dir.display(),
                value(id)
            ))
            .with_hint("merge the run directories of one job only (rank.json records each rank's job and world size)")),
            None => Ok(()),
        }
    };
    differ("job", &|id| format!("{:?}", id.job))?;
    differ("world size", &|id| id.world_size.map_or("unknown".into(), |n| n.to_string()))
}

/// Why a rank has no nsys regions by design: it was not in
/// `pipeline.nsys.ranks` (stage `plain:nsys`), or nsys was disabled; None
/// when nsys was meant to run there (then it is missing, or has regions).
fn without_nsys(f: &Found) -> Option<String> {
    let m = f.manifest.as_ref().filter(|_| !f.has_regions)?;
    let stage = m.stages.iter().find(|s| s.name == "plain:nsys" || s.name == "nsys")?;
    let why = match (stage.name.as_str(), stage.status) {
        ("plain:nsys", _) => "not in pipeline.nsys.ranks: ran the application without nsys",
        ("nsys", Status::Skipped) if stage.reason.as_deref().is_some_and(|r| r.starts_with("disabled")) => {
            "nsys disabled (pipeline.nsys.enable=false)"
        }
        _ => return None,
    };
    let by = f.id.as_ref().map(|i| i.profiled.clone()).unwrap_or_default();
    let by = if by.is_empty() { String::new() } else { format!("; profiled by {}", by.join(", ")) };
    Some(match m.status {
        Status::Ok => format!("{why} (run ok{by})"),
        _ => format!("{why}; {}", why_missing(f)),
    })
}

/// What went wrong in a rank's run: its manifest's status and failed stage.
fn why_missing(f: &Found) -> String {
    let Some(m) = &f.manifest else {
        return format!("{} has no manifest.json: the rank stopped before it began", f.dir.display());
    };
    let failed = m.stages.iter().find(|s| matches!(s.status, Status::Failed | Status::Interrupted));
    match failed {
        Some(s) => {
            let exit = s.exit.as_ref().map(|e| match (e.code, e.signal) {
                (_, Some(sig)) => format!(" (killed by signal {sig})"),
                (Some(code), _) => format!(" (exit status {code})"),
                _ => String::new(),
            });
            let reason = s.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
            format!("run {}; stage {} {}{}{reason}", m.status, s.name, s.status, exit.unwrap_or_default())
        }
        None if !f.has_regions => {
            format!("run {}, without nsys/regions.json (nsys did not run or wrote no capture)", m.status)
        }
        None => format!("run {}", m.status),
    }
}
