//! config: the command-line override grammar, a subset of Hydra's (specs/overrides.md):
//!
//! ```text
//! a.b.c=value                  set an existing key (value parsed as YAML)
//! +a.b=value                   add a key that does not exist yet
//! ~a.b                         delete a key
//! group=option                 choose a config group option, e.g. runner=light
//! group/sub@package=option     e.g. profiling/ncu@pipeline.ncu=ncu.high
//! ```
use serde_yaml::Value;

use crate::error::Error;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Override {
    Set { key: String, value: Value, add: bool, raw: String },
    Delete { key: String, raw: String },
    Group { group: String, package: Option<String>, option: String, raw: String },
}

impl Override {
    pub(crate) fn raw(&self) -> &str {
        match self {
            Override::Set { raw, .. } | Override::Delete { raw, .. } | Override::Group { raw, .. } => raw,
        }
    }
}

/// Parse one override. `is_group` tells whether a name is a config group
/// directory: `runner=light` picks an option, `device=cpu` sets a value.
pub(crate) fn parse(raw: &str, is_group: impl Fn(&str) -> bool) -> Result<Override, Error> {
    let bad = |why: &str| {
        Error::usage(format!("bad override `{raw}`: {why}")).with_hint(
            "write key.path=value, +key.path=value, ~key.path or group@package=option (docs/configuration.md)",
        )
    };
    if let Some(key) = raw.strip_prefix('~') {
        let key = key.split_once('=').map_or(key, |(k, _)| k);
        check_key(key).map_err(|why| bad(&why))?;
        return Ok(Override::Delete { key: key.into(), raw: raw.into() });
    }
    let (lhs, rhs) = raw.split_once('=').ok_or_else(|| bad("missing `=`"))?;
    let (add, lhs) = match lhs.strip_prefix('+') {
        Some(rest) => (true, rest),
        None => (false, lhs),
    };
    let (group, package) = match lhs.split_once('@') {
        Some((g, p)) => (g, Some(p)),
        None => (lhs, None),
    };
    if !add && (package.is_some() || group.contains('/') || is_group(group)) {
        if rhs.is_empty() {
            return Err(bad("a group needs an option after `=`"));
        }
        if let Some(p) = package {
            check_key(p).map_err(|why| bad(&why))?;
        }
        return Ok(Override::Group {
            group: group.trim_end_matches('/').into(),
            package: package.map(str::to_string),
            option: rhs.into(),
            raw: raw.into(),
        });
    }
    check_key(lhs).map_err(|why| bad(&why))?;
    let value = parse_value(rhs).map_err(|why| bad(&why))?;
    Ok(Override::Set { key: lhs.into(), value, add, raw: raw.into() })
}

/// A value is YAML: `3`, `true`, `null`, `[a,b]`, `"quoted"`. An empty value is
/// the empty string, as in Hydra. A glob stays a string, as users write it:
/// `*` and `*decode` are YAML aliases, and `[*, decode*]` holds them, but an
/// override has no anchors to refer to.
fn parse_value(text: &str) -> Result<Value, String> {
    if text.is_empty() {
        return Ok(Value::String(String::new()));
    }
    let glob = |t: &str| t.starts_with('*') && !t.contains(['"', '\'', '[', ']', '{', '}', ',']);
    if glob(text) {
        return Ok(Value::String(text.to_string()));
    }
    if let Some(items) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        if items.split(',').any(|i| glob(i.trim())) && !items.contains(['[', ']', '{', '}', '"', '\'']) {
            let items = items.split(',').map(str::trim).filter(|i| !i.is_empty());
            return items.map(parse_value).collect::<Result<Vec<_>, _>>().map(Value::Sequence);
        }
    }
    super::bounded::check_nesting("the value", text).map_err(|e| e.message)?;
    serde_yaml::from_str(text).map_err(|e| format!("value is not valid YAML: {e}"))
}

fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("empty key".into());
    }
    let ok = key
        .split('.')
        .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
    if ok {
        Ok(())
    } else {
        Err(format!("`{key}` is not a dotted key (letters, digits, `_`, `-` separated by `.`)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(name: &str) -> bool {
        matches!(name, "runner" | "profiling/ncu")
    }

    fn set(key: &str, value: Value, add: bool, raw: &str) -> Override {
        Override::Set { key: key.into(), value, add, raw: raw.into() }
    }

    #[test]
    fn values_are_yaml() {
        let cases = [
            ("a.b=3", Value::from(3)),
            ("a.b=true", Value::Bool(true)),
            ("a.b=null", Value::Null),
            ("a.b=range", Value::from("range")),
            ("a.b=\"007\"", Value::from("007")),
            ("a.b=", Value::from("")),
            ("a.b=2.5", Value::from(2.5)),
        ];
        for (raw, value) in cases {
            assert_eq!(parse(raw, groups).unwrap(), set("a.b", value, false, raw), "{raw}");
        }
        let list = parse("a.b=[x,y]", groups).unwrap();
        let Override::Set { value: Value::Sequence(items), .. } = list else { panic!("{list:?}") };
        assert_eq!(items, vec![Value::from("x"), Value::from("y")]);
    }

    #[test]
    fn globs_stay_strings() {
        let value = |raw: &str| match parse(raw, groups).unwrap() {
            Override::Set { value, .. } => value,
            other => panic!("{other:?}"),
        };
        assert_eq!(value("a.b=*"), Value::from("*"));
        assert_eq!(value("a.b=*decode"), Value::from("*decode"));
        assert_eq!(value("a.b=decode*"), Value::from("decode*"));
        let list = Value::Sequence(vec![Value::from("*"), Value::from("decode*"), Value::from(3)]);
        assert_eq!(value("a.b=[*, decode*, 3]"), list);
        assert_eq!(value("a.b=[A, B]"), Value::Sequence(vec![Value::from("A"), Value::from("B")]));
    }

    #[test]
    fn add_and_delete() {
        assert_eq!(parse("+x.y=1", groups).unwrap(), set("x.y", Value::from(1), true, "+x.y=1"));
        assert_eq!(parse("~x.y", groups).unwrap(), Override::Delete { key: "x.y".into(), raw: "~x.y".into() });
    }

    #[test]
    fn groups_with_and_without_package() {
        assert_eq!(
            parse("profiling/ncu@pipeline.ncu=ncu.high", groups).unwrap(),
            Override::Group {
                group: "profiling/ncu".into(),
                package: Some("pipeline.ncu".into()),
                option: "ncu.high".into(),
                raw: "profiling/ncu@pipeline.ncu=ncu.high".into(),
            }
        );
        assert!(matches!(parse("runner=light", groups).unwrap(), Override::Group { package: None, .. }));
        // `device` is not a group directory: a plain value.
        assert!(matches!(parse("device=cuda:0", groups).unwrap(), Override::Set { .. }));
    }

    #[test]
    fn malformed_overrides_are_usage_errors() {
        for raw in ["novalue", "=3", "a..b=1", "a.b=[unclosed", "runner=", "a b=1", "~"] {
            let err = parse(raw, groups).unwrap_err();
            assert_eq!(err.kind, crate::error::ErrorKind::Usage, "{raw}");
            assert!(err.message.contains(raw), "{}", err.message);
            assert!(err.hint.is_some());
        }
    }
}
