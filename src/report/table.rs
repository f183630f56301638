//! report: a table built once and written as Markdown or HTML (hyperfine's
//! `MarkupExporter`: the rows are made by one function, each format only
//! writes syntax). Every cell that holds a name from the profiled program is
//! escaped for the format it is written in.
use crate::markdown;

/// One cell: prose, a name (a code span, with the whole name as a tooltip in
/// HTML where the shown one is cut), or a number (right-aligned).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Text(String),
    Code { shown: String, whole: Option<String> },
    Num(String),
}

impl Cell {
    pub(crate) fn text(s: impl Into<String>) -> Cell {
        Cell::Text(s.into())
    }

    pub(crate) fn code(s: impl Into<String>) -> Cell {
        Cell::Code { shown: s.into(), whole: None }
    }

    /// A name shown as `shown`, the whole of it in HTML's tooltip.
    pub(crate) fn code_titled(shown: impl Into<String>, whole: impl Into<String>) -> Cell {
        Cell::Code { shown: shown.into(), whole: Some(whole.into()) }
    }

    pub(crate) fn num(s: impl Into<String>) -> Cell {
        Cell::Num(s.into())
    }

    fn markdown(&self) -> String {
        match self {
            Cell::Text(s) | Cell::Num(s) => markdown::text(s),
            Cell::Code { shown, .. } => markdown::code(shown),
        }
    }

    fn html(&self) -> String {
        match self {
            Cell::Text(s) => format!("<td>{}</td>", markdown::html(s)),
            Cell::Num(s) => format!("<td class=\"n\">{}</td>", markdown::html(s)),
            Cell::Code { shown, whole: Some(w) } => {
                format!("<td><code title=\"{}\">{}</code></td>", markdown::html(w), markdown::html(shown))
            }
            Cell::Code { shown, whole: None } => format!("<td><code>{}</code></td>", markdown::html(shown)),
        }
    }
}

/// A table: its column names (a `>` before a name marks a numeric,
/// right-aligned column) and rows.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Table {
    pub(crate) head: Vec<&'static str>,
    pub(crate) rows: Vec<Vec<Cell>>,
}

impl Table {
    /// Columns by name; `>ms` is a numeric column named `ms`.
    pub(crate) fn new(head: &[&'static str]) -> Table {
        Table { head: head.to_vec(), rows: Vec::new() }
    }

    pub(crate) fn row(&mut self, cells: Vec<Cell>) {
        debug_assert_eq!(cells.len(), self.head.len());
        self.rows.push(cells);
    }

    fn numeric(name: &str) -> bool {
        name.starts_with('>')
    }

    fn name(name: &str) -> &str {
        name.strip_prefix('>').unwrap_or(name)
    }

    /// GitHub-flavoured Markdown.
    pub(crate) fn markdown(&self) -> String {
        let mut md = String::new();
        md.push('|');
        for h in &self.head {
            md.push_str(&format!(" {} |", Self::name(h)));
        }
        md.push_str("\n|");
        for h in &self.head {
            md.push_str(if Self::numeric(h) { "---:|" } else { "---|" });
        }
        md.push('\n');
        for r in &self.rows {
            md.push('|');
            for c in r {
                md.push_str(&format!(" {} |", c.markdown()));
            }
            md.push('\n');
        }
        md
    }

    /// An HTML `<table>` (report.html's stylesheet keeps its first column readable).
    pub(crate) fn html(&self) -> String {
        let mut h = String::from("<table><tr>");
        for name in &self.head {
            h.push_str(&format!("<th>{}</th>", markdown::html(Self::name(name))));
        }
        h.push_str("</tr>\n");
        for r in &self.rows {
            h.push_str("<tr>");
            for c in r {
                h.push_str(&c.html());
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</table>\n");
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_table_is_written_as_markdown_and_html_with_names_escaped_for_each() {
        let mut t = Table::new(&["kernel", ">ms"]);
        t.row(vec![Cell::code_titled("a|b", "a|b<c>"), Cell::num("1.000")]);
        assert_eq!(t.markdown(), "| kernel | ms |\n|---|---:|\n| `a\\|b` | 1.000 |\n");
        assert_eq!(
            t.html(),
            "<table><tr><th>kernel</th><th>ms</th></tr>\n<tr><td><code title=\"a|b&lt;c&gt;\">a|b</code></td><td class=\"n\">1.000</td></tr>\n</table>\n"
        );
    }
}
