//! config: bounds on the YAML files a user hands llmperf (`--config-dir`
//! files, `--budgets`, `report.kernel_categories`, a run's `config.yaml`),
//! checked before the YAML parser sees them: the parser's time grows with the
//! cube of the nesting (a 400 kB budgets file nested 200,000 deep ran for
//! minutes). The bounds are far above what any of these files needs
//! (docs/cli.md lists them).
use std::path::Path;

use crate::error::Error;

/// The largest YAML file read: llmperf's own files are a few kB.
pub(crate) const MAX_YAML_BYTES: u64 = 1 << 20;

/// The deepest nesting of a YAML file: block levels (by indentation), `- `
/// entries opened on one line, and flow brackets together. The shipped
/// configuration nests 5 deep.
pub(crate) const MAX_YAML_DEPTH: usize = 64;

/// A user's YAML file, read only if it is a regular file within
/// [`MAX_YAML_BYTES`] whose nesting is within [`MAX_YAML_DEPTH`]. `what`
/// names it in errors (`--budgets`, `--config-dir`). A path that is
/// no readable file is a usage error (exit 2); a file past the bounds, or not
/// text, a configuration error (exit 3).
pub(crate) fn read_yaml(path: &Path, what: &str) -> Result<String, Error> {
    let unreadable = |why: String| {
        Error::usage(format!("{what}: cannot read {}: {why}", path.display()))
            .with_hint(format!("give {what} the path of a YAML file"))
    };
    let meta = std::fs::metadata(path).map_err(|e| unreadable(e.to_string()))?;
    // A FIFO without a writer would block the read for ever; a directory or device is no file.
    if !meta.is_file() {
        return Err(Error::usage(format!("{what}: {} is not a regular file", path.display()))
            .with_hint(format!("give {what} the path of a YAML file")));
    }
    if meta.len() > MAX_YAML_BYTES {
        return Err(Error::config(format!(
            "{what}: {} is {} bytes, more than the {MAX_YAML_BYTES} llmperf reads",
            path.display(),
            meta.len()
        ))
        .with_hint("these files are a few kB of YAML: is this the file you meant?"));
    }
    let bytes = std::fs::read(path).map_err(|e| unreadable(e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::config(format!(
            "{what}: {}: not UTF-8 text (byte {} is not)",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
        .with_hint("name a YAML file (text), not a binary one")
    })?;
    check_nesting(&path.display().to_string(), &text)?;
    Ok(text)
}

/// Refuse `text` if it nests deeper than [`MAX_YAML_DEPTH`] (a cheap scan, not
/// a parse: quoted text and comments are skipped, block scalars' lines too).
pub(crate) fn check_nesting(label: &str, text: &str) -> Result<(), Error> {
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    // The indentation of a block scalar's header line (`key: |`): deeper lines are its text.
    let mut scalar_at: Option<usize> = None;
    for (i, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let rest = &line[indent..];
        if rest.is_empty() || rest.starts_with('#') {
            continue;
        }
        if let Some(at) = scalar_at {
            if indent > at {
                continue;
            }
            scalar_at = None;
        }
        if flow == 0 {
            while indents.last().is_some_and(|&top| top >= indent) {
                indents.pop();
            }
            indents.push(indent);
        }
        let mut dashes = 0;
        let mut body = rest;
        while let Some(after) = body.strip_prefix("- ").or_else(|| body.strip_prefix("? ")) {
            dashes += 1;
            body = after.trim_start_matches(' ');
        }
        let code = outside_quotes(body);
        for c in code.chars() {
            match c {
                '[' | '{' => {
                    flow += 1;
                    if indents.len() + dashes + flow > MAX_YAML_DEPTH {
                        return Err(too_deep(label, i + 1));
                    }
                }
                ']' | '}' => flow = flow.saturating_sub(1),
                _ => {}
            }
        }
        if indents.len() + dashes > MAX_YAML_DEPTH {
            return Err(too_deep(label, i + 1));
        }
        let trimmed = code.trim_end();
        if trimmed.ends_with(['|', '>']) || trimmed.rsplit_once(' ').is_some_and(|(_, t)| t.starts_with(['|', '>'])) {
            scalar_at = Some(indent);
        }
    }
    Ok(())
}

/// A line's text outside quoted strings, up to a comment.
fn outside_quotes(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '#' && prev.is_whitespace() => break,
            None => out.push(c),
        }
        prev = c;
    }
    out
}

fn too_deep(label: &str, line: usize) -> Error {
    Error::config(format!("{label}:{line}: YAML nested deeper than {MAX_YAML_DEPTH} levels"))
        .with_hint("llmperf's YAML files nest a few levels (docs/configuration.md); flatten this one")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_configuration_is_within_the_bounds() {
        for f in crate::config::tree::ConfTree::embedded_files() {
            check_nesting(&f.label, &f.text).unwrap();
        }
    }

    #[test]
    fn flow_and_block_nesting_count_together() {
        let flow = format!("a: {}1{}", "[".repeat(70), "]".repeat(70));
        assert!(check_nesting("f", &flow).unwrap_err().message.contains("f:1: YAML nested deeper than 64"));
        let block: String = (0..70).map(|d| format!("{}k{d}:\n", " ".repeat(d))).collect();
        assert!(check_nesting("b", &block).unwrap_err().message.contains("b:65:"));
        let dashes = format!("{}x\n", "- ".repeat(70));
        assert!(check_nesting("d", &dashes).is_err());
        // Brackets inside quotes, comments and block scalars are text.
        let text = format!("a: \"{}\"\nb: 1 # {}\nc: |\n  {}\nd: 2\n", "[".repeat(99), "{".repeat(99), "[".repeat(99));
        check_nesting("t", &text).unwrap();
        let ok: String = (0..60).map(|d| format!("{}k{d}:\n", " ".repeat(2 * d))).collect();
        check_nesting("ok", &ok).unwrap();
    }
}
