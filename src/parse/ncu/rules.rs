//! parse: ncu's own advice in a `--page details` CSV: the rule rows
//! (`Rule Name`, `Rule Type`, `Rule Description`, `Estimated Speedup Type`,
//! `Estimated Speedup`; ncu 2023 and later) of the kinds that ask for a
//! change, `OPT` and `WRN`, and ncu's reading of the busiest pipeline
//! (`HighPipeUtilization`, an `INF`), which the summary's narrative quotes.
//! The region reader keeps metric rows; this one reads only the lines that
//! hold such a rule (found by their `","OPT","`, `","WRN","` or `","INF","`
//! cell before they are parsed), so a file of millions of metric rows costs a
//! byte search.
use std::path::Path;

use super::rows::open_file;
use crate::error::{Error, ErrorKind};

/// One rule result of one launch.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleRow {
    pub kernel: String,
    pub section: String,
    pub rule: String,
    /// `OPT`, `WRN`, or `INF` (`HighPipeUtilization` only).
    pub kind: String,
    pub description: String,
    /// `global` (ncu's estimate of the kernel's duration) or `local` (of the
    /// part of the kernel the rule looks at), or empty.
    pub speedup_type: String,
    /// ncu's Estimated Speedup (%), where it gave one.
    pub speedup_pct: Option<f64>,
}

const KINDS: [&[u8]; 3] = [b"\",\"OPT\",\"", b"\",\"WRN\",\"", b"\",\"INF\",\""];

/// The `INF` rule kept: ncu's reading of the busiest pipeline.
pub(crate) const PIPE_RULE: &str = "HighPipeUtilization";

/// The `OPT` and `WRN` rule rows of a details CSV, and its
/// `HighPipeUtilization` rows; none when it has no `Rule Name` column (ncu
/// before 2023, or the raw page).
pub fn read(path: &Path) -> Result<Vec<RuleRow>, Error> {
    let mut file = open_file(path)?;
    // Mapped where it can be (a details CSV can be hundreds of MB); read otherwise.
    let mapped = crate::parse::mapped::Mapped::open(&file, path);
    let mut read = Vec::new();
    if mapped.is_none() {
        std::io::Read::read_to_end(&mut file, &mut read)
            .map_err(|e| Error::new(ErrorKind::Unparseable, format!("{}: {e}", path.display())))?;
    }
    let bytes: &[u8] = mapped.as_ref().map_or(&read, |m| m.bytes());
    // The header: the first line that starts with "ID" (log lines come before it).
    let mut at = 0;
    let header = loop {
        let end = memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |i| at + i);
        let line = &bytes[at..end];
        if line.starts_with(b"\"ID\",") {
            break fields(line);
        }
        if end >= bytes.len() {
            return Ok(Vec::new());
        }
        at = end + 1;
    };
    let col = |name: &str| header.iter().position(|h| h == name);
    let (Some(kernel), Some(section), Some(rule), Some(kind), Some(description)) =
        (col("Kernel Name"), col("Section Name"), col("Rule Name"), col("Rule Type"), col("Rule Description"))
    else {
        return Ok(Vec::new());
    };
    let (speedup_type, speedup) = (col("Estimated Speedup Type"), col("Estimated Speedup"));
    let mut out = Vec::new();
    let mut starts = Vec::new();
    for pattern in KINDS {
        for hit in memchr::memmem::find_iter(&bytes[at..], pattern) {
            let hit = at + hit;
            let start = memchr::memrchr(b'\n', &bytes[..hit]).map_or(0, |i| i + 1);
            starts.push(start);
        }
    }
    starts.sort_unstable();
    starts.dedup();
    for start in starts {
        let end = memchr::memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |i| start + i);
        let row = fields(&bytes[start..end]);
        let cell = |i: usize| row.get(i).cloned().unwrap_or_default();
        let k = cell(kind);
        if k != "OPT" && k != "WRN" && !(k == "INF" && cell(rule) == PIPE_RULE) {
            continue;
        }
        out.push(RuleRow {
            kernel: cell(kernel),
            section: cell(section),
            rule: cell(rule),
            kind: k,
            description: cell(description),
            speedup_type: speedup_type.map(cell).unwrap_or_default(),
            speedup_pct: speedup.map(cell).and_then(|v| speedup_pct(&v)),
        });
    }
    Ok(out)
}

/// An Estimated Speedup cell in the file's notation (`80.34`, or `80,34`
/// where ncu wrote a decimal comma, told as the readers of metric values tell
/// it); None for what is not a percentage of 0 to 100.
fn speedup_pct(cell: &str) -> Option<f64> {
    let locale = crate::units::locale_hint(cell).unwrap_or_default();
    crate::units::parse_number(cell.trim(), locale).filter(|v| (0.0..=100.0).contains(v))
}

/// The cells of one CSV line (quoted cells unquoted; `""` inside one is `"`).
fn fields(line: &[u8]) -> Vec<String> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut rdr = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(line);
    let mut record = csv::StringRecord::new();
    match rdr.read_record(&mut record) {
        Ok(true) => record.iter().map(str::to_string).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_rows_are_read_and_metric_rows_left() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d.csv");
        std::fs::write(
            &p,
            concat!(
                "==PROF== Disconnected\n",
                "\"ID\",\"Kernel Name\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\",\"Rule Name\",\"Rule Type\",\"Rule Description\",\"Estimated Speedup Type\",\"Estimated Speedup\"\n",
                "\"0\",\"k\",\"SpeedOfLight\",\"Duration\",\"ns\",\"5\"\n",
                "\"0\",\"k\",\"Occupancy\",\"\",\"\",\"\",\"TheoreticalOccupancy\",\"OPT\",\"Only 2 \"\"warps\"\", see\",\"global\",\"80.34\"\n",
                "\"0\",\"k\",\"SpeedOfLight_RooflineChart\",\"\",\"\",\"\",\"SOLFPRoofline\",\"INF\",\"fp32 ratio\",\"\",\"\"\n",
                "\"0\",\"k\",\"ComputeWorkloadAnalysis\",\"\",\"\",\"\",\"HighPipeUtilization\",\"INF\",\"ALU is the highest-utilized pipeline (55.7%)\",\"\",\"\"\n",
            ),
        )
        .unwrap();
        let rows = read(&p).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[1].rule.as_str(), rows[1].kind.as_str()), ("HighPipeUtilization", "INF"));
        assert_eq!(rows[0].rule, "TheoreticalOccupancy");
        assert_eq!(rows[0].description, "Only 2 \"warps\", see");
        assert_eq!(rows[0].speedup_pct, Some(80.34));
        assert_eq!(rows[0].speedup_type, "global");
    }

    /// A decimal comma is read as one; what is no percentage gives no estimate, not a number.
    #[test]
    fn speedups_in_either_notation_and_nothing_out_of_range() {
        assert_eq!(speedup_pct("80.34"), Some(80.34));
        assert_eq!(speedup_pct("80,34"), Some(80.34));
        assert_eq!(speedup_pct(" 7 "), Some(7.0));
        assert_eq!(speedup_pct("8,034"), None);
        assert_eq!(speedup_pct("n/a"), None);
        assert_eq!(speedup_pct(""), None);
    }
}
