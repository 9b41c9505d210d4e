//! Decoding manifest files: multi-document YAML (or JSON) into typed objects.
//!
//! Errors carry the file and line. A document of a kind Isobar does not read is skipped
//! with a debug log; `kind: List` documents are unpacked.

use isobar_sdk::{Kind, Object};
use std::path::{Path, PathBuf};

/// A manifest file that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {message}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct ManifestError {
    pub path: PathBuf,
    pub line: Option<usize>,
    pub message: String,
}

/// Every object in one file, or the first error in it.
pub fn parse_file(path: &Path, text: &str) -> Result<Vec<Object>, ManifestError> {
    let error = |line: Option<usize>, message: String| ManifestError {
        path: path.to_path_buf(),
        line,
        message,
    };
    let mut objects = Vec::new();
    if path.extension().is_some_and(|e| e == "json") {
        // An error at the end of input is reported past the last line; name the last one.
        let last = text.lines().count().max(1);
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| error(Some(e.line().min(last)), e.to_string()))?;
        decode_value(value, &mut objects).map_err(|m| error(None, m))?;
        return Ok(objects);
    }
    for (start, chunk) in documents(text) {
        if let Some(line) = too_deep(chunk) {
            return Err(error(
                Some(start + line - 1),
                format!("flow collections ([ ] or {{ }}) nested more than {MAX_FLOW_DEPTH} deep"),
            ));
        }
        // An error at the end of input is reported past the last line; name the last one.
        let last = chunk.lines().count().max(1);
        // Straight into JSON's form (the form objects decode from), with no YAML value
        // between: a third of the time a start with 100,000 files took to parse.
        let value: serde_json::Value = serde_yaml::from_str(chunk).map_err(|e| {
            let line = e.location().map(|l| start + l.line().min(last) - 1);
            error(line, e.to_string())
        })?;
        if value.is_null() {
            continue;
        }
        decode_value(value, &mut objects).map_err(|m| error(Some(start), m))?;
    }
    Ok(objects)
}

/// The deepest nesting of flow collections a document may have. The YAML parser refuses
/// more than 128 levels anyway, but only after a scan that slows down with the depth
/// (a 200 KB file of `[[[…` took a minute): such a document is refused before it.
const MAX_FLOW_DEPTH: usize = 128;

/// The 1-based line where `doc`'s flow collections (`[`, `{` outside quotes, comments
/// and block scalars) first nest deeper than [`MAX_FLOW_DEPTH`], if they do.
fn too_deep(doc: &str) -> Option<usize> {
    let mut depth = 0usize;
    // Inside a block scalar (`key: |`): lines indented deeper than this are its text.
    let mut scalar_indent: Option<usize> = None;
    for (n, line) in doc.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        if let Some(at) = scalar_indent {
            if line.trim().is_empty() || indent > at {
                continue;
            }
            scalar_indent = None;
        }
        let mut quote: Option<char> = None;
        let mut previous = ' ';
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (quote, c) {
                (Some('"'), '\\') => {
                    chars.next();
                }
                (Some(q), _) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') if depth > 0 || previous.is_whitespace() || previous == ':' => {
                    quote = Some(c);
                }
                (None, '#') if previous.is_whitespace() => break,
                (None, '[' | '{') => {
                    depth += 1;
                    if depth > MAX_FLOW_DEPTH {
                        return Some(n + 1);
                    }
                }
                (None, ']' | '}') => depth = depth.saturating_sub(1),
                _ => {}
            }
            previous = c;
        }
        let bare = line.split(" #").next().unwrap_or_default().trim_end();
        let block = bare
            .rsplit(|c: char| c.is_whitespace())
            .next()
            .is_some_and(|last| {
                (last.starts_with('|') || last.starts_with('>'))
                    && last[1..]
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == '-' || c == '+')
            });
        if block && depth == 0 {
            scalar_indent = Some(indent);
        }
    }
    None
}

/// Splits YAML text at `---` lines, with the 1-based line each document starts on.
fn documents(text: &str) -> Vec<(usize, &str)> {
    let mut docs = Vec::new();
    let mut start_line = 1;
    let mut start_byte = 0;
    let mut offset = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end();
        if bare == "---" || bare.starts_with("--- ") || bare.starts_with("---#") {
            docs.push((start_line, &text[start_byte..offset]));
            start_line = i + 2;
            start_byte = offset + line.len();
        }
        offset += line.len();
    }
    docs.push((start_line, &text[start_byte..]));
    docs
}

fn decode_value(value: serde_json::Value, out: &mut Vec<Object>) -> Result<(), String> {
    let field = |name: &str| {
        value
            .get(name)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let (api_version, kind_name) = (field("apiVersion"), field("kind"));
    if kind_name == "List" {
        let items = value
            .get("items")
            .and_then(|v| v.as_array())
            .cloned()
            .unwrap_or_default();
        for item in items {
            decode_value(item, out)?;
        }
        return Ok(());
    }
    let name = value
        .pointer("/metadata/name")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string();
    let Some(kind) = Kind::from_type(&api_version, &kind_name) else {
        if api_version.is_empty() || kind_name.is_empty() {
            return Err("a document needs apiVersion and kind".to_string());
        }
        tracing::debug!(%api_version, kind = %kind_name, %name, "ignoring a kind isobar does not read");
        return Ok(());
    };
    if name.is_empty() {
        return Err(format!("{kind_name}: metadata.name is required"));
    }
    out.push(decode(kind, value)?);
    Ok(())
}

/// Decodes one object of a known kind; the error names the object and the field path.
pub fn decode(kind: Kind, value: serde_json::Value) -> Result<Object, String> {
    let name = value
        .pointer("/metadata/name")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string();
    let info = kind
        .info()
        .ok_or_else(|| format!("{kind} {name}: no plugin reads this kind"))?;
    (info.decode)(value).map_err(|e| format!("{kind} {name}: {e}"))
}

#[cfg(test)]
mod tests;
