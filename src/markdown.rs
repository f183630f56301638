//! Markdown (and terminal) text of names the profiled program chose. Region,
//! kernel and operator names come from someone else's code or capture: a
//! backtick, a pipe or a newline in one must not break a table, `<!--` must
//! not hide the rest of a GitHub step summary, and an escape sequence must not
//! reach the terminal that prints the Markdown.

/// A name as an inline code span that survives any content: control
/// characters (newlines included) shown as `\u{..}`, pipes escaped for
/// tables, and a fence one backtick longer than the longest run inside
/// (CommonMark §6.1), padded where the name starts or ends with a backtick.
pub fn code(name: &str) -> String {
    let shown = visible(name).replace('|', "\\|");
    let longest = shown.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if shown.starts_with('`') || shown.ends_with('`') || shown.is_empty() { " " } else { "" };
    format!("{fence}{pad}{shown}{pad}{fence}")
}

/// Prose that quotes names (notes, reasons): control characters shown as
/// `\u{..}`, `<`, `>` and `&` as HTML entities (no tag or comment can
/// start), and the characters that would open a code span, end a table
/// cell or a link's text (and the backslash itself) escaped with a backslash. Emphasis is
/// left alone: it changes how a name looks, not what the page holds.
pub(crate) fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            c if c.is_control() => out.extend(c.escape_unicode()),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '`' | '|' | '\\' | '[' | ']' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// A name or prose as HTML text (element content or a quoted attribute):
/// `&`, `<`, `>` and `"` as entities, control characters shown as `\u{..}`
/// as every other output shows them.
pub(crate) fn html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            c if c.is_control() => out.extend(c.escape_unicode()),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// Control characters (C0, DEL, C1; newline and tab included) as `\u{..}`.
pub(crate) fn visible(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_spans_hold_backticks_pipes_newlines_and_escapes() {
        assert_eq!(code("decode"), "`decode`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`x"), "`` `x ``");
        assert_eq!(code("a|b"), "`a\\|b`");
        assert_eq!(code("a\nb\x1b]0;pwned\x07"), "`a\\u{a}b\\u{1b}]0;pwned\\u{7}`");
        assert_eq!(code("<!-- x"), "`<!-- x`");
        assert_eq!(code(""), "`  `");
    }

    #[test]
    fn html_text_holds_no_tag_no_attribute_end_and_no_control_byte() {
        assert_eq!(html("<b a=\"x\">&\u{7}\n"), "&lt;b a=&quot;x&quot;&gt;&amp;\\u{7}\\u{a}");
    }

    #[test]
    fn text_cannot_open_a_comment_a_tag_or_a_code_span() {
        assert_eq!(text("region <!-- x ran"), "region &lt;!-- x ran");
        assert_eq!(text("a`b|c*d\r"), "a\\`b\\|c*d\\u{d}");
    }
}
