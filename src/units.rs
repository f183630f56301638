//! parse: values as Nsight Compute prints them, normalized to base units.
//!
//! Seen in real files (the shared corpus): `"1,275,068,416"` (grouping), `"7,914.56"`,
//! `"27.595.520"` and `"65,77"` (a European locale), `"n/a"` with an empty unit,
//! and units that change with version and options (`nsecond`/`usecond`/`us`,
//! `byte`/`Kbyte`/`Mbyte`, `Gbyte/second`/`Gbyte/s`, `cycle/nsecond`/`Ghz`/`hz`, `%`).

/// What a metric cell holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Number(f64),
    /// `n/a`: not collected. Never treated as 0.
    NotAvailable,
    /// Anything else (a name, a "(128, 1, 1)" shape).
    Text(String),
}

/// Number notation of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Locale {
    /// `1,234.5`: comma groups, dot is the decimal mark.
    #[default]
    C,
    /// `1.234,5`: dot groups, comma is the decimal mark.
    European,
}

/// A cell as a value. A number is always finite: `inf`, `nan` and numbers too
/// big for an f64 (`1e400`) stay text, so that no sum becomes infinite (and
/// no JSON number `null`); a time that is text counts as untimed.
pub(crate) fn parse_value(text: &str, locale: Locale) -> Value {
    let t = text.trim();
    if t.eq_ignore_ascii_case("n/a") {
        return Value::NotAvailable;
    }
    parse_number(t, locale).filter(|v| v.is_finite()).map_or_else(|| Value::Text(t.to_string()), Value::Number)
}

/// `1,234,567` → 1234567; `7,914.56` → 7914.56; European: `27.595.520`, `65,77`.
pub(crate) fn parse_number(t: &str, locale: Locale) -> Option<f64> {
    let body = t.strip_prefix(['-', '+']).unwrap_or(t);
    if body.is_empty()
        || !body
            .chars()
            .all(|c| c.is_ascii_digit() || c == ',' || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+')
    {
        return None;
    }
    // Exponents, and C-locale values without grouping (most of them), parse as
    // they are ("1.2.3" fails there just as below).
    if body.contains(['e', 'E']) || (locale == Locale::C && !body.contains(',')) {
        return t.parse().ok();
    }
    let (group, decimal) = match locale {
        Locale::C => (',', '.'),
        Locale::European => ('.', ','),
    };
    let normalized: String = t.chars().filter(|&c| c != group).map(|c| if c == decimal { '.' } else { c }).collect();
    if normalized.matches('.').count() > 1 {
        return None;
    }
    normalized.parse().ok()
}

/// Guess a file's locale from one value: European when a value uses dots as
/// group separators (`27.595.520`) or a comma followed by other than 3 digits
/// (`65,77`); `None` when the value does not tell (`12`, `1,234`, `3.5`).
pub(crate) fn locale_hint(t: &str) -> Option<Locale> {
    let t = t.trim();
    if t.matches('.').count() > 1 {
        return Some(Locale::European);
    }
    if t.matches(',').count() > 1 {
        return Some(Locale::C);
    }
    match (t.find(','), t.find('.')) {
        (Some(c), Some(d)) => Some(if c < d { Locale::C } else { Locale::European }),
        (Some(c), None) => {
            let after = &t[c + 1..];
            (after.len() != 3 && after.chars().all(|ch| ch.is_ascii_digit())).then_some(Locale::European)
        }
        _ => None,
    }
}

/// A numeric value in its base unit; None for n/a and text.
pub(crate) fn in_base(value: &Value, unit: &str) -> Option<(f64, Base)> {
    match value {
        Value::Number(v) => {
            let (factor, base) = to_base(unit);
            Some((v * factor, base))
        }
        _ => None,
    }
}

/// [`in_base`] of a named metric: a value printed without its unit (ncu
/// renders most units empty for a chip it does not know, with the values in
/// base units, and writes `==WARNING==` lines between rows) takes the unit its name says for
/// certain ([`inferred_unit`]); any other unit-less value is kept as printed.
pub(crate) fn in_base_named(name: &str, value: &Value, unit: &str) -> Option<(f64, Base)> {
    // The name is looked at only for an empty unit: this runs for every metric row.
    let inferred = if unit.trim().is_empty() { inferred_unit(name) } else { None };
    in_base(value, inferred.unwrap_or(unit))
}

/// The base unit of an ncu metric whose name says it for certain, for a value
/// printed without a unit: durations (`gpu__time_duration.sum`: ns), shares
/// of a peak (`….pct_of_peak_sustained_elapsed`, `….pct`, `…_pct`: %), byte counts and
/// rates (`dram__bytes.sum`: byte; `dram__bytes.sum.per_second`:
/// byte/second), clock rates (`gpc__cycles_elapsed.avg.per_second`: Hz).
/// None for everything else: a count, a ratio, a name this does not know.
pub(crate) fn inferred_unit(name: &str) -> Option<&'static str> {
    let (counter, rest) = name.split_once('.').unwrap_or((name, ""));
    let per_second = rest.ends_with("per_second");
    if counter.ends_with("_pct") || rest.split('.').any(|part| part == "pct" || part.starts_with("pct_of_peak")) {
        Some("%")
    } else if counter.ends_with("__time_duration") && !per_second {
        Some("nsecond")
    } else if counter.contains("__bytes") {
        Some(if per_second { "byte/second" } else { "byte" })
    } else if counter.ends_with("__cycles_elapsed") && per_second {
        Some("cycle/second")
    } else {
        None
    }
}

/// The base unit a value is normalized to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    Nanoseconds,
    Bytes,
    BytesPerSecond,
    Hertz,
    Percent,
    /// A count or ratio kept as printed (cycle, inst, warp, register/thread, ...).
    Other,
}

/// (factor, base) so that `value × factor` is in `base`.
pub(crate) fn to_base(unit: &str) -> (f64, Base) {
    let u = unit.trim();
    // Lower-cased on the stack: this runs for every metric row of every file.
    let mut stack = [0u8; 32];
    let heap;
    let lower: &str = match stack.get_mut(..u.len()) {
        Some(b) => {
            b.copy_from_slice(u.as_bytes());
            b.make_ascii_lowercase();
            std::str::from_utf8(b).unwrap_or(u)
        }
        None => {
            heap = u.to_ascii_lowercase();
            &heap
        }
    };
    let time = |f| (f, Base::Nanoseconds);
    match lower {
        "ns" | "nsecond" | "nsec" => return time(1.0),
        "us" | "usecond" | "usec" => return time(1e3),
        "ms" | "msecond" | "msec" => return time(1e6),
        "s" | "second" | "sec" => return time(1e9),
        "%" => return (1.0, Base::Percent),
        "hz" => return (1.0, Base::Hertz),
        "khz" => return (1e3, Base::Hertz),
        "mhz" => return (1e6, Base::Hertz),
        "ghz" => return (1e9, Base::Hertz),
        "cycle/nsecond" | "cycle/ns" => return (1e9, Base::Hertz),
        "cycle/usecond" | "cycle/us" => return (1e6, Base::Hertz),
        "cycle/msecond" | "cycle/ms" => return (1e3, Base::Hertz),
        "cycle/second" | "cycle/s" => return (1.0, Base::Hertz),
        _ => {}
    }
    let (bytes, per) = match lower.split_once('/') {
        Some((b, per)) => (b, Some(per)),
        None => (lower, None),
    };
    let scale = match bytes {
        "byte" => Some(1.0),
        "kbyte" => Some(1e3),
        "mbyte" => Some(1e6),
        "gbyte" => Some(1e9),
        "tbyte" => Some(1e12),
        "pbyte" => Some(1e15),
        _ => None,
    };
    match (scale, per) {
        (Some(s), None) => (s, Base::Bytes),
        (Some(s), Some("second" | "s")) => (s, Base::BytesPerSecond),
        (Some(s), Some("msecond" | "ms")) => (s * 1e3, Base::BytesPerSecond),
        (Some(s), Some("usecond" | "us")) => (s * 1e6, Base::BytesPerSecond),
        (Some(s), Some("nsecond" | "ns")) => (s * 1e9, Base::BytesPerSecond),
        _ => (1.0, Base::Other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_as_ncu_prints_them() {
        let c = Locale::C;
        assert_eq!(parse_number("1,275,068,416", c), Some(1275068416.0));
        assert_eq!(parse_number("7,914.56", c), Some(7914.56));
        assert_eq!(parse_number("13.72", c), Some(13.72));
        assert_eq!(parse_number("3995313115.40", c), Some(3995313115.40));
        assert_eq!(parse_number("-2.5", c), Some(-2.5));
        assert_eq!(parse_number("1e-3", c), Some(0.001));
        let eu = Locale::European;
        assert_eq!(parse_number("27.595.520", eu), Some(27595520.0));
        assert_eq!(parse_number("65,77", eu), Some(65.77));
        assert_eq!(parse_number("(128, 1, 1)", c), None);
        assert_eq!(parse_value("n/a", c), Value::NotAvailable);
        assert_eq!(parse_value("(128, 1, 1)", c), Value::Text("(128, 1, 1)".into()));
        // Never an infinite number: a sum of it would be infinite, and JSON `null`.
        for text in ["inf", "-inf", "nan", "1e400", "-1e400"] {
            assert_eq!(parse_value(text, c), Value::Text(text.into()), "{text}");
        }
    }

    #[test]
    fn locale_is_told_by_unambiguous_values_only() {
        assert_eq!(locale_hint("27.595.520"), Some(Locale::European));
        assert_eq!(locale_hint("65,77"), Some(Locale::European));
        assert_eq!(locale_hint("1,275,068,416"), Some(Locale::C));
        assert_eq!(locale_hint("7,914.56"), Some(Locale::C));
        assert_eq!(locale_hint("1.234,5"), Some(Locale::European));
        for ambiguous in ["12", "1,234", "3.5", "n/a"] {
            assert_eq!(locale_hint(ambiguous), None, "{ambiguous}");
        }
    }

    /// Names from ncu's raw pages (the corpus's 2024.1 renderings) and what
    /// their units were there.
    #[test]
    fn units_inferred_from_metric_names_where_certain() {
        assert_eq!(inferred_unit("gpu__time_duration.sum"), Some("nsecond"));
        assert_eq!(inferred_unit("gpu__time_duration.avg"), Some("nsecond"));
        assert_eq!(inferred_unit("sm__throughput.avg.pct_of_peak_sustained_elapsed"), Some("%"));
        assert_eq!(inferred_unit("sm__warps_active.avg.pct_of_peak_sustained_active"), Some("%"));
        assert_eq!(inferred_unit("sm__maximum_warps_per_active_cycle_pct"), Some("%"));
        assert_eq!(inferred_unit("dram__bytes.sum"), Some("byte"));
        assert_eq!(inferred_unit("dram__bytes_read.sum.per_second"), Some("byte/second"));
        assert_eq!(inferred_unit("gpc__cycles_elapsed.avg.per_second"), Some("cycle/second"));
        for unknown in ["sm__cycles_elapsed.avg", "launch__grid_size", "device__attribute_max_threads_per_block"] {
            assert_eq!(inferred_unit(unknown), None, "{unknown}");
        }
        let v = Value::Number(5184.0);
        assert_eq!(in_base_named("gpu__time_duration.sum", &v, ""), Some((5184.0, Base::Nanoseconds)));
        // A printed unit wins.
        assert_eq!(in_base_named("gpu__time_duration.sum", &v, "usecond"), Some((5184e3, Base::Nanoseconds)));
        assert_eq!(in_base_named("launch__grid_size", &v, ""), Some((5184.0, Base::Other)));
    }

    #[test]
    fn units_normalize_to_base() {
        assert_eq!(to_base("usecond"), (1e3, Base::Nanoseconds));
        assert_eq!(to_base("us"), (1e3, Base::Nanoseconds));
        assert_eq!(to_base("msecond"), (1e6, Base::Nanoseconds));
        assert_eq!(to_base("Mbyte"), (1e6, Base::Bytes));
        assert_eq!(to_base("Kbyte"), (1e3, Base::Bytes));
        assert_eq!(to_base("Gbyte/second"), (1e9, Base::BytesPerSecond));
        assert_eq!(to_base("Gbyte/s"), (1e9, Base::BytesPerSecond));
        assert_eq!(to_base("Ghz"), (1e9, Base::Hertz));
        assert_eq!(to_base("cycle/nsecond"), (1e9, Base::Hertz));
        assert_eq!(to_base("%"), (1.0, Base::Percent));
        assert_eq!(to_base("inst/cycle"), (1.0, Base::Other));
        assert_eq!(to_base(""), (1.0, Base::Other));
    }
}
