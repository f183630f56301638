//! Typed errors with a kind (which decides the exit code) and a hint (the fix).
//!
//! Leaves build an [`Error`]; stages add `anyhow` context; `main` finds the
//! `Error` in the chain to pick the exit code and print the hint.
use std::fmt;

/// What went wrong, in the terms the exit code promises (docs/cli.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ErrorKind {
    /// Wrong flag or argument.
    Usage,
    /// Bad configuration: unknown key, bad value, malformed YAML.
    Config,
    /// A profiler is missing or not permitted to read GPU counters.
    ProfilerUnavailable,
    /// A profiler or the workload failed, crashed or timed out.
    StageFailed,
    /// A profiler's output could not be parsed.
    Unparseable,
    /// Ctrl-C or SIGTERM.
    Interrupted,
    /// Anything else: I/O, a bug.
    Internal,
}

impl ErrorKind {
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::Internal => 1,
            ErrorKind::Usage => 2,
            ErrorKind::Config => 3,
            ErrorKind::ProfilerUnavailable => 4,
            ErrorKind::StageFailed => 5,
            ErrorKind::Unparseable => 6,
            ErrorKind::Interrupted => 130,
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    pub hint: Option<String>,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into(), hint: None }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn config(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Config, message)
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Usage, message)
    }
}

/// The first [`Error`] in an anyhow chain, if any.
pub fn find(err: &anyhow::Error) -> Option<&Error> {
    err.chain().find_map(|e| e.downcast_ref::<Error>())
}

/// "did you mean X?" for a misspelt name, when one candidate is close enough.
pub fn did_you_mean<'a>(wrong: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(wrong, c), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| format!("did you mean {c}?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        let keys = ["replay_mode", "target_processes", "set"];
        assert_eq!(did_you_mean("replay_mod", keys).as_deref(), Some("did you mean replay_mode?"));
        assert_eq!(did_you_mean("zzzz", keys), None);
    }

    #[test]
    fn exit_codes_are_distinct() {
        let kinds = [
            ErrorKind::Internal,
            ErrorKind::Usage,
            ErrorKind::Config,
            ErrorKind::ProfilerUnavailable,
            ErrorKind::StageFailed,
            ErrorKind::Unparseable,
            ErrorKind::Interrupted,
        ];
        let mut codes: Vec<_> = kinds.iter().map(|k| k.exit_code()).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), kinds.len());
    }
}
