//! plan: `--annotate modules|ops|auto`, NVTX ranges around a user's PyTorch
//! modules with the program unchanged. The run directory gets a bootstrap
//! (`annotate/sitecustomize.py`, the Python text next to this file, and its
//! NVTX binding), and the application runs as `env PYTHONPATH=<run>/annotate:…
//! LLMPERF_BOOTSTRAP=… CMD`: every Python process of the command imports it at
//! start-up, and once the program imports torch, its `nn.Module.__call__`
//! pushes a range per module call named by the module's path, in the NVTX
//! domain [`DOMAIN`] (the default domain with `ops`).
use std::ffi::OsString;
use std::path::Path;

use crate::config::schema::{Annotate, AnnotateMode, TorchConfig};
use crate::error::Error;

/// The NVTX domain of the injected module ranges: their selectors read
/// `llmperf.modules@PATH`. With `ops` they are in the default domain instead,
/// with PyTorch's operator ranges, so that operators nest under their modules.
pub(crate) const DOMAIN: &str = "llmperf.modules";

/// The domain of the module ranges of `mode` ("" = the default domain).
pub(crate) fn domain_of(mode: AnnotateMode) -> &'static str {
    if mode == AnnotateMode::Ops {
        ""
    } else {
        DOMAIN
    }
}

/// The bootstrap written into the run directory.
pub(crate) const BOOTSTRAP: &str = include_str!("annotate_sitecustomize.py");

/// The NVTX binding the bootstrap and the `--model hf` workload import (`_llmperf_nvtx`).
pub(crate) const NVTX: &str = include_str!("nvtx_ctypes.py");

/// `annotate.mode=auto` settled: `modules` when the application is Python
/// (`python`: a command whose program is `python…`, `torchrun` or a `.py`
/// file, or `--model hf`), else off. Other modes stay as asked.
pub(crate) fn resolve(cfg: &Annotate, python: bool) -> Annotate {
    let mode = match cfg.mode {
        AnnotateMode::Auto if python => AnnotateMode::Modules,
        AnnotateMode::Auto => {
            tracing::info!("--annotate auto: the command is not a Python program; no ranges are injected");
            AnnotateMode::Off
        }
        other => other,
    };
    Annotate { mode, ..cfg.clone() }
}

/// Whether `argv` runs a Python program: by the name of its program.
pub(crate) fn is_python(argv: &[OsString]) -> bool {
    let Some(program) = argv.first().and_then(|p| Path::new(p).file_name()).and_then(|n| n.to_str()) else {
        return false;
    };
    program.starts_with("python") || program == "torchrun" || program.ends_with(".py")
}

/// What `annotate.*` asks, checked before a run directory exists; `libtorch`:
/// the application is a built-in workload of the libtorch plugin (not Python).
pub(crate) fn check(cfg: &Annotate, libtorch: bool) -> Result<(), Error> {
    if cfg.mode == AnnotateMode::Off {
        return Ok(());
    }
    if libtorch {
        return Err(Error::usage("--annotate injects ranges into a Python command after `--` (or --model hf); the libtorch built-in workloads have their own")
            .with_hint("drop --annotate (annotate.mode=off), or profile your script: llmperf profile --annotate modules -- python infer.py"));
    }
    if cfg.depth == 0 {
        return Err(Error::config("annotate.depth=0 leaves every module without a range")
            .with_hint("set annotate.depth to 1 (the outermost module) or more; the default is 4"));
    }
    if let Some(pattern) = &cfg.include {
        // Python's `re` reads it; a pattern the regex crate refuses is most likely a typo there too.
        regex::Regex::new(pattern).map_err(|e| {
            Error::config(format!("annotate.include is not a regular expression: {e}"))
                .with_hint("a pattern searched in each module path, e.g. annotate.include='mlp|attn'")
        })?;
    }
    Ok(())
}

/// A program `env` can run behind the bootstrap's variables: `env` reads a
/// first word with `=` in it as one more variable (and takes no `--` there).
pub(crate) fn check_program(cfg: &Annotate, argv: &[OsString]) -> Result<(), Error> {
    let Some(program) = argv.first().filter(|_| cfg.mode != AnnotateMode::Off) else { return Ok(()) };
    if program.to_string_lossy().contains('=') {
        return Err(Error::usage(format!(
            "--annotate runs the command behind `env`, which would read its program `{}` as a variable (it holds `=`)",
            program.to_string_lossy()
        ))
        .with_hint("run it through a name or a symlink without `=`, e.g. ln -s 'a=b' ./app and profile ./app"));
    }
    Ok(())
}

/// The application's argv with the bootstrap's environment in front (`env
/// NAME=VALUE… CMD`; `LLMPERF_BOOTSTRAP_*`, not `LLMPERF_ANNOTATE*`, which an
/// llmperf inside the command, `--model hf`'s `llmperf workload`, would read
/// as the config key `annotate`): `dir` first on PYTHONPATH, ahead of `pythonpath` (the
/// caller's own). `own_phases`: the application marks its prefill and decode
/// steps itself (`--model hf`), so the bootstrap adds no phase ranges of its
/// own (they would nest in the application's: `decode_step::decode_step`).
pub(crate) fn wrap(
    cfg: &Annotate,
    dir: &Path,
    pythonpath: Option<&OsString>,
    argv: Vec<OsString>,
    own_phases: bool,
    tracer: Option<&Tracer>,
) -> Vec<OsString> {
    if cfg.mode == AnnotateMode::Off && tracer.is_none() {
        return argv;
    }
    let mut path = OsString::from("PYTHONPATH=");
    path.push(dir);
    if let Some(rest) = pythonpath.filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(rest);
    }
    let mut out: Vec<OsString> = vec!["env".into(), path];
    if cfg.mode != AnnotateMode::Off {
        let mode = if cfg.mode == AnnotateMode::Ops { "ops" } else { "modules" };
        out.push(format!("LLMPERF_BOOTSTRAP={mode}").into());
        out.push(format!("LLMPERF_BOOTSTRAP_DOMAIN={}", domain_of(cfg.mode)).into());
        out.push(format!("LLMPERF_BOOTSTRAP_DEPTH={}", cfg.depth).into());
        if let Some(pattern) = &cfg.include {
            out.push(format!("LLMPERF_BOOTSTRAP_INCLUDE={pattern}").into());
        }
        if own_phases {
            out.push("LLMPERF_BOOTSTRAP_PHASES=0".into());
        }
    }
    if let Some(t) = tracer {
        let c = &t.config;
        out.push("LLMPERF_BOOTSTRAP_TRACER=torch".into());
        let mut folder = OsString::from("LLMPERF_BOOTSTRAP_TRACE_DIR=");
        folder.push(&t.dir);
        out.push(folder);
        out.push(format!("LLMPERF_BOOTSTRAP_TORCH_SHAPES={}", u8::from(c.record_shapes)).into());
        out.push(format!("LLMPERF_BOOTSTRAP_TORCH_STACK={}", u8::from(c.with_stack)).into());
        for (key, value) in [("WAIT", c.wait), ("WARMUP", c.warmup), ("ACTIVE", c.active)] {
            out.push(format!("LLMPERF_BOOTSTRAP_TORCH_{key}={value}").into());
        }
    }
    out.extend(argv);
    out
}

/// `--tracer torch`: where the bootstrap's torch.profiler writes its traces, and how it records.
#[derive(Debug, Clone)]
pub(crate) struct Tracer {
    pub(crate) dir: std::path::PathBuf,
    pub(crate) config: TorchConfig,
}

/// `--tracer torch`, checked before a run directory exists: a Python command
/// (or `--model hf`), one tracer, no launcher around it.
pub(crate) fn check_tracer(cfg: &TorchConfig, python: bool, nsys: bool, launcher: bool) -> Result<(), Error> {
    if !cfg.enable {
        return Ok(());
    }
    if nsys {
        return Err(Error::config("pipeline.torch.enable and pipeline.nsys.enable both ask for the run's timeline")
            .with_hint("pick one tracer: --tracer torch (turns nsys off) or --tracer nsys"));
    }
    if !python {
        return Err(Error::usage(
            "--tracer torch starts torch.profiler inside a Python program; this command is not one (nor --model hf)",
        )
        .with_hint(
            "profile a Python command (llmperf profile --tracer torch -- python3 infer.py), or use --tracer nsys",
        ));
    }
    if launcher {
        return Err(Error::usage("--tracer torch does not run under --launcher yet")
            .with_hint("run each rank as `llmperf profile --rank-from-env --tracer torch -- …` under the launcher, or trace with torch.profiler yourself and `llmperf import torch DIR`"));
    }
    if cfg.active == 0 && (cfg.wait > 0 || cfg.warmup > 0) {
        return Err(Error::config(format!(
            "pipeline.torch.wait={} warmup={} with active=0: no step would be kept",
            cfg.wait, cfg.warmup
        ))
        .with_hint("set pipeline.torch.active to the steps to record, or wait=0 warmup=0 for the whole program"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modules() -> Annotate {
        Annotate { mode: AnnotateMode::Modules, depth: 2, include: Some("mlp".into()) }
    }

    #[test]
    fn the_command_runs_under_env_with_the_bootstrap_first_on_pythonpath() {
        let argv = vec![OsString::from("python3"), "infer.py".into(), "--x=1".into()];
        let old = OsString::from("/opt/lib");
        let got = wrap(&modules(), Path::new("/r/annotate"), Some(&old), argv.clone(), false, None);
        let got: Vec<&str> = got.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            got,
            [
                "env",
                "PYTHONPATH=/r/annotate:/opt/lib",
                "LLMPERF_BOOTSTRAP=modules",
                "LLMPERF_BOOTSTRAP_DOMAIN=llmperf.modules",
                "LLMPERF_BOOTSTRAP_DEPTH=2",
                "LLMPERF_BOOTSTRAP_INCLUDE=mlp",
                "python3",
                "infer.py",
                "--x=1"
            ]
        );
        let off = Annotate::default();
        assert_eq!(wrap(&off, Path::new("/r/annotate"), None, argv.clone(), false, None), argv);
        let plain = wrap(&Annotate { include: None, ..modules() }, Path::new("/r/a"), None, argv.clone(), true, None);
        assert_eq!(plain[1], "PYTHONPATH=/r/a");
        assert!(!plain.iter().any(|a| a.to_string_lossy().starts_with("LLMPERF_BOOTSTRAP_INCLUDE")));
        assert!(plain.iter().any(|a| a == "LLMPERF_BOOTSTRAP_PHASES=0"), "an application with its own phases");

        // --tracer torch without --annotate: the bootstrap starts torch.profiler, and adds no module ranges.
        let config = TorchConfig { active: 3, warmup: 1, record_shapes: true, ..TorchConfig::default() };
        let tracer = Tracer { dir: "/r/torch/trace".into(), config };
        let traced = wrap(&off, Path::new("/r/a"), None, argv.clone(), false, Some(&tracer));
        let traced: Vec<&str> = traced.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            traced,
            [
                "env",
                "PYTHONPATH=/r/a",
                "LLMPERF_BOOTSTRAP_TRACER=torch",
                "LLMPERF_BOOTSTRAP_TRACE_DIR=/r/torch/trace",
                "LLMPERF_BOOTSTRAP_TORCH_SHAPES=1",
                "LLMPERF_BOOTSTRAP_TORCH_STACK=0",
                "LLMPERF_BOOTSTRAP_TORCH_WAIT=0",
                "LLMPERF_BOOTSTRAP_TORCH_WARMUP=1",
                "LLMPERF_BOOTSTRAP_TORCH_ACTIVE=3",
                "python3",
                "infer.py",
                "--x=1"
            ]
        );
        let both = wrap(&modules(), Path::new("/r/a"), None, argv, false, Some(&tracer));
        assert_eq!(both[2], "LLMPERF_BOOTSTRAP=modules");
        assert!(both.iter().any(|a| a == "LLMPERF_BOOTSTRAP_TRACER=torch"));
    }

    #[test]
    fn the_torch_tracer_needs_python_alone_and_a_schedule_that_keeps_a_step() {
        let on = TorchConfig { enable: true, ..TorchConfig::default() };
        assert!(check_tracer(&TorchConfig::default(), false, true, true).is_ok(), "off: nothing to check");
        assert!(check_tracer(&on, true, false, false).is_ok());
        let e = check_tracer(&on, true, true, false).unwrap_err();
        assert!(e.message.contains("both ask for the run's timeline"), "{}", e.message);
        let e = check_tracer(&on, false, false, false).unwrap_err();
        assert!(e.message.contains("this command is not one"), "{}", e.message);
        let e = check_tracer(&on, true, false, true).unwrap_err();
        assert!(e.message.contains("does not run under --launcher"), "{}", e.message);
        let e = check_tracer(&TorchConfig { wait: 2, ..on.clone() }, true, false, false).unwrap_err();
        assert!(e.message.contains("no step would be kept"), "{}", e.message);
        assert!(check_tracer(&TorchConfig { wait: 2, active: 1, ..on }, true, false, false).is_ok());
    }

    #[test]
    fn auto_is_modules_for_python_and_off_for_the_rest() {
        let auto = Annotate { mode: AnnotateMode::Auto, ..modules() };
        for argv in
            [&["python3", "x.py"][..], &["/usr/bin/python3.11", "-m", "m"], &["torchrun", "x.py"], &["./infer.py"]]
        {
            let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
            assert!(is_python(&argv), "{argv:?}");
            assert_eq!(resolve(&auto, is_python(&argv)).mode, AnnotateMode::Modules);
        }
        for argv in [&["sh", "-c", "python3 x.py"][..], &["./a.out"], &[]] {
            let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
            assert!(!is_python(&argv), "{argv:?}");
            assert_eq!(resolve(&auto, false).mode, AnnotateMode::Off);
        }
        assert_eq!(resolve(&modules(), false), modules(), "only auto is settled");
        let ops = wrap(
            &Annotate { mode: AnnotateMode::Ops, ..modules() },
            Path::new("/r"),
            None,
            vec!["python3".into()],
            false,
            None,
        );
        assert_eq!(ops[2], "LLMPERF_BOOTSTRAP=ops");
        assert_eq!(ops[3], "LLMPERF_BOOTSTRAP_DOMAIN=", "operators nest under modules in one domain");
    }

    #[test]
    fn a_program_env_would_take_for_a_variable_is_refused() {
        let argv = |p: &str| vec![OsString::from(p), OsString::from("x=1")];
        let e = check_program(&modules(), &argv("./tools/a=b")).unwrap_err();
        assert!(e.message.contains("would read its program `./tools/a=b` as a variable"), "{}", e.message);
        assert!(check_program(&modules(), &argv("python3")).is_ok(), "an `=` in an argument is the program's own");
        assert!(check_program(&Annotate::default(), &argv("./a=b")).is_ok(), "no env without --annotate");
    }

    #[test]
    fn what_cannot_work_is_refused_before_the_run() {
        assert!(check(&Annotate::default(), true).is_ok());
        let e = check(&modules(), true).unwrap_err();
        assert!(e.message.contains("the libtorch built-in workloads have their own"), "{}", e.message);
        let e = check(&Annotate { depth: 0, ..modules() }, false).unwrap_err();
        assert!(e.message.starts_with("annotate.depth=0"), "{}", e.message);
        let e = check(&Annotate { include: Some("mlp(".into()), ..modules() }, false).unwrap_err();
        assert!(e.message.starts_with("annotate.include is not a regular expression"), "{}", e.message);
        assert!(check(&modules(), false).is_ok());
    }
}
