//! parse: the kernel summary CSV of `nsys stats`: `cuda_gpu_kern_sum` (2023.1+) or
//! `gpukernsum` (before), with `--format csv`. Columns are found by name:
//! `Total Time (ns)`, `Instances`, `Min (ns)`, `Max (ns)`, `Name` (older
//! renderings spell `Minimum (ns)`/`Maximum (ns)`). Some versions add
//! `GridXYZ`/`BlockXYZ`, so one kernel name can span several rows: rows are
//! summed by name. There is no NVTX in this file, only kernel totals.
use std::collections::HashMap;
use std::path::Path;

use crate::error::{Error, ErrorKind};

/// One kernel name's rows of the summary, added up.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KernelSum {
    pub(crate) name: String,
    /// (calls, total ns, min ns, max ns).
    pub(crate) sums: (usize, i64, i64, i64),
}

const HINT: &str =
    "pass the CSV of `nsys stats --report cuda_gpu_kern_sum --format csv` (gpukernsum before nsys 2023.1), \
                    or the report itself (.nsys-rep, .qdrep, .sqlite)";

/// Every kernel name with its calls, total, min and max (rows of one name added up).
pub(crate) fn read_kernel_summary(path: &Path) -> Result<Vec<KernelSum>, Error> {
    let bad = |line: u64, what: String| {
        Error::new(ErrorKind::Unparseable, format!("{}:{line}: {what}", path.display())).with_hint(HINT)
    };
    // A kernel summary is small (a row per kernel name): read it whole, so
    // that its last byte tells whether it was cut short.
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut super::input::open_text(path)?, &mut bytes)
        .map_err(|e| Error::new(ErrorKind::Unparseable, format!("{}: {e}", path.display())))?;
    if bytes.last().is_some_and(|b| *b != b'\n') {
        let line = bytes.iter().filter(|b| **b == b'\n').count() + 1;
        return Err(bad(line as u64, "the file ends in the middle of a row (truncated?)".into()));
    }
    let mut reader = csv::ReaderBuilder::new().flexible(false).from_reader(bytes.as_slice());
    let header = reader.headers().map_err(|e| bad(1, format!("malformed CSV: {e}")))?.clone();
    let col = |names: &[&str]| header.iter().position(|h| names.contains(&h.trim()));
    let (Some(total), Some(calls), Some(min), Some(max), Some(name)) = (
        col(&["Total Time (ns)"]),
        col(&["Instances"]),
        col(&["Min (ns)", "Minimum (ns)"]),
        col(&["Max (ns)", "Maximum (ns)"]),
        col(&["Name"]),
    ) else {
        return Err(bad(1, format!("not an nsys kernel summary: header is {:?}", header.iter().collect::<Vec<_>>())));
    };
    let mut by_name: HashMap<String, (usize, i64, i64, i64)> = HashMap::new();
    for (i, record) in reader.records().enumerate() {
        let line = i as u64 + 2;
        let record = record.map_err(|e| match e.kind() {
            csv::ErrorKind::UnequalLengths { .. } => {
                bad(line, "the row has a different number of fields than the header (truncated?)".into())
            }
            _ => bad(line, format!("malformed CSV: {e}")),
        })?;
        let int = |c: usize, what: &str| -> Result<i64, Error> {
            let text = record.get(c).unwrap_or_default().trim();
            text.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .map(|v| v.round() as i64)
                .ok_or_else(|| bad(line, format!("{what} is {text:?}, not a number")))
        };
        let (t, n, lo, hi) =
            (int(total, "Total Time (ns)")?, int(calls, "Instances")?, int(min, "Min")?, int(max, "Max")?);
        let e = by_name.entry(record.get(name).unwrap_or_default().to_string()).or_insert((0, 0, i64::MAX, i64::MIN));
        *e = (e.0 + n as usize, e.1 + t, e.2.min(lo), e.3.max(hi));
    }
    Ok(by_name.into_iter().map(|(name, sums)| KernelSum { name, sums }).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn rows_of_one_name_with_other_grids_are_summed() {
        let f = write(
            "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),GridXYZ,BlockXYZ,Name\n\
             60.0,600,3,200.0,200.0,100,300,1.0,   1    1    1,   8    1    1,k\n\
             40.0,400,1,400.0,400.0,400,400,0.0,   2    1    1,   8    1    1,k\n",
        );
        let rows = read_kernel_summary(f.path()).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0], KernelSum { name: "k".into(), sums: (4, 1000, 100, 400) });
    }

    #[test]
    fn a_row_cut_short_is_named_not_read_as_a_kernel() {
        let whole = "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n\
                     60.0,600,3,200.0,200.0,100,300,1.0,k\n\
                     40.0,400,1,400.0,400.0,400,400,0.0,\"void gemv2N_kernel<int, int, float2, float2>\"\n";
        assert_eq!(read_kernel_summary(write(whole).path()).unwrap().len(), 2);
        let cut = &whole[..whole.len() - 8];
        let e = read_kernel_summary(write(cut).path()).unwrap_err();
        assert!(e.message.ends_with(":3: the file ends in the middle of a row (truncated?)"), "{}", e.message);
        // A byte-order mark is not part of the first column's name.
        assert_eq!(read_kernel_summary(write(&format!("\u{feff}{whole}")).path()).unwrap().len(), 2);
    }

    #[test]
    fn bad_files_name_the_line() {
        let f = write("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n1,10,1,10,10,10,10,0,a\n1,x,1,1,1,1,1,0,b\n");
        let e = read_kernel_summary(f.path()).unwrap_err();
        assert!(e.message.ends_with(":3: Total Time (ns) is \"x\", not a number"), "{}", e.message);
        let f = write(
            "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n1,10,1,10,10\n",
        );
        let e = read_kernel_summary(f.path()).unwrap_err();
        assert!(e.message.contains(":2: the row has a different number of fields"), "{}", e.message);
        let f = write("Start (ns),Duration (ns),Name\n1,2,x\n");
        let e = read_kernel_summary(f.path()).unwrap_err();
        assert!(e.message.contains(":1: not an nsys kernel summary") && e.hint.is_some(), "{}", e.message);
    }
}
