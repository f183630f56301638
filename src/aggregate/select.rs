//! aggregate: Kernel selection (`report.kernels.include` / `exclude`): which results of a
//! region are reported. Patterns are exact names or `regex:<pattern>`.
use regex::Regex;

use crate::error::Error;

/// Kernel name patterns: exact, or `regex:<pattern>`. Exclude wins; no include = all.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    include: Vec<Pattern>,
    exclude: Vec<Pattern>,
    pub(crate) include_patterns: Vec<String>,
    pub(crate) exclude_patterns: Vec<String>,
}

#[derive(Debug, Clone)]
enum Pattern {
    Exact(String),
    Regex(Regex),
}

impl Pattern {
    fn parse(text: &str) -> Result<Pattern, Error> {
        match text.strip_prefix("regex:") {
            Some(re) => Regex::new(re).map(Pattern::Regex).map_err(|e| {
                Error::config(format!("bad kernel pattern `{text}`: {e}"))
                    .with_hint("write regex:<a Rust regex>, or an exact kernel name without the regex: prefix")
            }),
            None => Ok(Pattern::Exact(text.to_string())),
        }
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            Pattern::Exact(s) => s == name,
            Pattern::Regex(r) => r.is_match(name),
        }
    }
}

impl Selection {
    pub(crate) fn new(include: &[String], exclude: &[String]) -> Result<Selection, Error> {
        let parse = |v: &[String]| v.iter().map(|p| Pattern::parse(p)).collect::<Result<Vec<_>, _>>();
        Ok(Selection {
            include: parse(include)?,
            exclude: parse(exclude)?,
            include_patterns: include.to_vec(),
            exclude_patterns: exclude.to_vec(),
        })
    }

    /// Whether any pattern was given.
    pub(crate) fn is_set(&self) -> bool {
        !self.include.is_empty() || !self.exclude.is_empty()
    }

    pub(crate) fn keeps(&self, kernel: &str) -> bool {
        let included = self.include.is_empty() || self.include.iter().any(|p| p.matches(kernel));
        included && !self.exclude.iter().any(|p| p.matches(kernel))
    }
}
