//! The llmperf binary: parse arguments, set up logging, run, map errors to exit codes.
use clap::Parser;
use std::io::Write;
use std::process::ExitCode;

use llmperf::cli::Cli;
use llmperf::error::{self, ErrorKind};

/// Counts what llmperf holds, for the ingestion's memory budget (memory.rs).
#[global_allocator]
static ALLOC: llmperf::memory::Counting = llmperf::memory::Counting;

fn main() -> ExitCode {
    // Arguments need not be UTF-8 (file names); the manifest records them lossily.
    let argv: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    let cli = match Cli::try_parse_from(mpi_style(std::env::args_os())) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { ErrorKind::Usage.exit_code() as u8 } else { 0 });
        }
    };
    init_tracing(cli.verbose, cli.quiet);
    match llmperf::app::run(cli, argv) {
        Ok(code) => ExitCode::from(code as u8),
        Err(err) => {
            // stderr may be gone (a closed terminal, 2>/dev/full): the exit code still tells.
            let mut stderr = std::io::stderr().lock();
            let _ = writeln!(stderr, "error: {}", error::printable(&format!("{err:#}")));
            let known = error::find(&err);
            if let Some(hint) = known.and_then(|e| e.hint.as_deref()) {
                let _ = writeln!(stderr, "hint: {hint}");
            }
            let kind = known.map_or(ErrorKind::Internal, |e| e.kind);
            ExitCode::from(kind.exit_code() as u8)
        }
    }
}

/// Logs go to stderr; stdout carries results. `LLMPERF_LOG` (an env-filter
/// directive such as `llmperf=debug`) overrides -v/-q.
fn init_tracing(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "info",
        (false, 1) => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("LLMPERF_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("llmperf={level}")));
    // Colour only on a terminal: a log redirected to a file (CI, `2> log`) stays plain
    // text; NO_COLOR (no-color.org) turns it off on a terminal too.
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false)
        .without_time()
        .init();
}

/// mpirun's `-np N` spelled as mpirun users type it (`llmperf profile
/// --launcher mpirun -np 2`): clap knows `--np`; the application's words
/// after `--` are left alone.
fn mpi_style(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut own = true;
    args.map(|a| {
        if a == "--" {
            own = false;
        }
        if own && a == "-np" {
            "--np".into()
        } else {
            a
        }
    })
    .collect()
}
