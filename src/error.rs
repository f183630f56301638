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
    /// `--fail-on-empty`: a configured region matched nothing, or ncu profiled nothing.
    Empty,
    /// `llmperf check`: a region or kernel got slower past its budget, or went missing.
    Regression,
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
            ErrorKind::Empty => 7,
            ErrorKind::Regression => 8,
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
    /// Messages quote files and command output: they are made [`printable`].
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: printable(&message.into()), hint: None }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(printable(&hint.into()));
        self
    }

    /// The same error, naming `to` where it named `from`: a file read from the
    /// run directory's copy is reported as the file the user passed.
    pub(crate) fn naming(mut self, from: &std::path::Path, to: &std::path::Path) -> Self {
        let (from, to) = (from.display().to_string(), to.display().to_string());
        if let Some(rest) = self.message.strip_prefix(&from) {
            self.message = printable(&format!("{to}{rest}"));
        }
        self
    }

    pub fn config(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Config, message)
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Usage, message)
    }
}

/// The longest message or hint, in characters: a one-line 200 MB file quoted
/// in an error must not become a 200 MB message.
pub(crate) const MAX_TEXT: usize = 1000;

/// `text` safe to print on a terminal: control characters (escape sequences,
/// carriage returns, C1 codes) escaped as `\u{1b}`, and the middle cut out of
/// text longer than [`MAX_TEXT`] characters, saying how much.
pub fn printable(text: &str) -> String {
    let escape = |part: &str| -> String {
        let mut out = String::with_capacity(part.len());
        for c in part.chars() {
            match c {
                '\n' | '\t' => out.push(c),
                c if c.is_control() => out.extend(c.escape_unicode()),
                c => out.push(c),
            }
        }
        out
    };
    let n = text.chars().count();
    if n <= MAX_TEXT {
        return escape(text);
    }
    let (head, tail) = (MAX_TEXT * 3 / 4, MAX_TEXT / 5);
    let cut = |k: usize| text.char_indices().nth(k).map_or(text.len(), |(i, _)| i);
    let (start, end) = (cut(head), cut(n - tail));
    format!("{} [… {} characters cut …] {}", escape(&text[..start]), n - head - tail, escape(&text[end..]))
}

/// The first [`Error`] in an anyhow chain, if any.
pub fn find(err: &anyhow::Error) -> Option<&Error> {
    err.chain().find_map(|e| e.downcast_ref::<Error>())
}

/// "did you mean X?" for a misspelt name, when one candidate is close enough.
pub(crate) fn did_you_mean<'a>(wrong: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
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
    fn messages_are_printable_and_bounded() {
        let e = Error::new(ErrorKind::Unparseable, "f.csv:1: \u{1b}[31mred\u{9b}2J\r over");
        assert_eq!(e.message, r"f.csv:1: \u{1b}[31mred\u{9b}2J\u{d} over");
        let long = format!("f.csv:1: {}", "x".repeat(5_000_000));
        let e = Error::new(ErrorKind::Unparseable, long).with_hint("h\u{7}");
        assert!(e.message.chars().count() < MAX_TEXT + 60, "{}", e.message.len());
        assert!(e.message.starts_with("f.csv:1: xxx") && e.message.contains("characters cut"));
        assert_eq!(e.hint.as_deref(), Some(r"h\u{7}"));
        let named = Error::new(ErrorKind::Unparseable, "/run/ncu/import.csv:3: bad")
            .naming(std::path::Path::new("/run/ncu/import.csv"), std::path::Path::new("x.csv"));
        assert_eq!(named.message, "x.csv:3: bad");
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
            ErrorKind::Empty,
            ErrorKind::Regression,
            ErrorKind::Interrupted,
        ];
        let mut codes: Vec<_> = kinds.iter().map(|k| k.exit_code()).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), kinds.len());
    }
}
