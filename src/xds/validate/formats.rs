//! String formats, patterns with RE2's meaning, and the small readers of values the
//! checks share.

use super::*;

/// protoc-gen-validate's well-known string formats, as its C++ validators read them.
pub(super) type Format = (&'static str, fn(&str) -> bool);

pub(super) const FORMATS: [Format; 9] = [
    ("email", is_email),
    ("hostname", is_hostname),
    ("ip", |t| t.parse::<std::net::IpAddr>().is_ok()),
    ("ipv4", |t| t.parse::<std::net::Ipv4Addr>().is_ok()),
    ("ipv6", |t| t.parse::<std::net::Ipv6Addr>().is_ok()),
    ("uri", is_uri),
    ("uri_ref", |t| {
        !t.chars().any(|c| c.is_whitespace() || c.is_control())
    }),
    ("address", |t| {
        t.parse::<std::net::IpAddr>().is_ok() || is_hostname(t)
    }),
    ("uuid", is_uuid),
];

/// A host name: at most 253 characters (one trailing dot allowed), labels of 1 to 63
/// letters, digits and hyphens, not starting or ending with a hyphen.
pub(super) fn is_hostname(text: &str) -> bool {
    let text = text.strip_suffix('.').unwrap_or(text);
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// `local@host`: a local part of 1 to 64 characters and a host name.
pub(super) fn is_email(text: &str) -> bool {
    let text = text
        .rsplit_once('<')
        .and_then(|(_, rest)| rest.strip_suffix('>'))
        .unwrap_or(text);
    match text.rsplit_once('@') {
        Some((local, host)) => {
            !local.is_empty()
                && local.len() <= 64
                && !local.chars().any(|c| c.is_whitespace() || c.is_control())
                && is_hostname(host)
        }
        None => false,
    }
}

/// An absolute URI: a scheme (a letter, then letters, digits, `+`, `-`, `.`), `:`, and
/// no white space or control characters.
pub(super) fn is_uri(text: &str) -> bool {
    let Some((scheme, _)) = text.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !text.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// 8-4-4-4-12 hexadecimal digits.
pub(super) fn is_uuid(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A `Duration`'s or `Timestamp`'s nanoseconds.
pub(super) fn nanos_of(m: &DynamicMessage) -> i128 {
    let seconds = m
        .get_field_by_name("seconds")
        .and_then(|v| v.as_i64())
        .unwrap_or(0);
    let nanos = m
        .get_field_by_name("nanos")
        .and_then(|v| v.as_i32())
        .unwrap_or(0);
    i128::from(seconds) * 1_000_000_000 + i128::from(nanos)
}

pub(super) fn enum_of(field: &FieldDescriptor) -> Option<EnumDescriptor> {
    match field.kind() {
        Kind::Enum(e) => Some(e),
        _ => None,
    }
}

pub(super) fn ignore_empty(rules: &RuleSet) -> bool {
    rule(rules, "ignore_empty").is_some_and(|v| v.as_bool() == Some(true))
}

/// The set member of a `FieldRules`' `type` oneof: its name and rules.
pub(super) fn typed_rules(rules: &DynamicMessage) -> Option<(String, Value)> {
    rules
        .descriptor()
        .oneofs()
        .next()
        .and_then(|o| o.fields().find(|f| rules.has_field(f)))
        .map(|f| (f.name().to_string(), rules.get_field(&f).into_owned()))
}

pub(super) fn number_of(value: &Value) -> Option<f64> {
    match value {
        Value::I32(v) => Some(f64::from(*v)),
        Value::I64(v) => Some(*v as f64),
        Value::U32(v) => Some(f64::from(*v)),
        Value::U64(v) => Some(*v as f64),
        Value::F32(v) => Some(f64::from(*v)),
        Value::F64(v) => Some(*v),
        Value::EnumNumber(v) => Some(f64::from(*v)),
        _ => None,
    }
}

pub(super) fn map_key(key: &MapKey) -> String {
    match key {
        MapKey::String(s) => format!("{s:?}"),
        other => format!("{other:?}"),
    }
}

pub(super) fn map_key_value(key: &MapKey) -> Value {
    match key {
        MapKey::Bool(b) => Value::Bool(*b),
        MapKey::I32(v) => Value::I32(*v),
        MapKey::I64(v) => Value::I64(*v),
        MapKey::U32(v) => Value::U32(*v),
        MapKey::U64(v) => Value::U64(*v),
        MapKey::String(s) => Value::String(s.clone()),
    }
}

/// A protoc-gen-validate `pattern` matched against `text` with RE2's meaning (Envoy's
/// validators run RE2): see [`re2_meaning`]; compiled once each.
pub(super) fn matches_pattern(pattern: &str, text: &str) -> bool {
    matches_bytes_pattern(pattern, text.as_bytes())
}

pub(super) fn matches_bytes_pattern(pattern: &str, data: &[u8]) -> bool {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<regex::bytes::Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    let Ok(mut cache) = cache.lock() else {
        return true;
    };
    let compiled = cache
        .entry(pattern.to_string())
        .or_insert_with(|| regex::bytes::Regex::new(&re2_meaning(pattern)).ok());
    compiled.as_ref().is_none_or(|r| r.is_match(data))
}

/// `pattern` rewritten so that Rust's regex gives it RE2's meaning: RE2's Perl classes
/// (`\d`, `\w`, `\s` and their negations) are ASCII-only where Rust's are Unicode, and
/// `\s` leaves out the vertical tab. Everything else means the same in both.
pub fn re2_meaning(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(next) = chars.next() else {
                    out.push(c);
                    break;
                };
                let (inner, negated) = match next {
                    'd' => ("0-9", false),
                    'w' => ("0-9A-Za-z_", false),
                    's' => ("\\t\\n\\x0C\\r ", false),
                    'D' => ("0-9", true),
                    'W' => ("0-9A-Za-z_", true),
                    'S' => ("\\t\\n\\x0C\\r ", true),
                    _ => {
                        out.push(c);
                        out.push(next);
                        continue;
                    }
                };
                match (in_class, negated) {
                    (false, false) => out.push_str(&format!("[{inner}]")),
                    (false, true) => out.push_str(&format!("[^{inner}]")),
                    (true, false) => out.push_str(inner),
                    // A negated class inside a class: Rust's nested class keeps it.
                    (true, true) => out.push_str(&format!("[^{inner}]")),
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push(c);
                // A leading `]` (or `^]`) is a literal, not the end.
                let rest = chars.as_str();
                let skip = if rest.starts_with("^]") {
                    2
                } else if rest.starts_with(']') {
                    1
                } else {
                    0
                };
                for _ in 0..skip {
                    if let Some(n) = chars.next() {
                        out.push(n);
                    }
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}
