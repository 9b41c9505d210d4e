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
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| error(Some(e.line()), e.to_string()))?;
        decode_value(value, &mut objects).map_err(|m| error(None, m))?;
        return Ok(objects);
    }
    for (start, chunk) in documents(text) {
        // An error at the end of input is reported past the last line; name the last one.
        let last = chunk.lines().count().max(1);
        let value: serde_yaml::Value = serde_yaml::from_str(chunk).map_err(|e| {
            let line = e.location().map(|l| start + l.line().min(last) - 1);
            error(line, e.to_string())
        })?;
        if value.is_null() {
            continue;
        }
        let value: serde_json::Value =
            serde_json::to_value(value).map_err(|e| error(Some(start), e.to_string()))?;
        decode_value(value, &mut objects).map_err(|m| error(Some(start), m))?;
    }
    Ok(objects)
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
mod tests {
    use super::*;

    #[test]
    fn documents_report_their_start_line() {
        let docs = documents("a: 1\n---\nb: 2\n--- # c\nc: 3\n");
        let starts: Vec<usize> = docs.iter().map(|d| d.0).collect();
        assert_eq!(starts, vec![1, 3, 5]);
    }

    #[test]
    fn a_syntax_error_names_the_line() {
        let text =
            "apiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\napiVersion: v1\nkind: [\n";
        let err = parse_file(Path::new("x.yaml"), text).err();
        assert_eq!(err.map(|e| e.line), Some(Some(6)));
    }

    #[test]
    fn a_bad_field_names_the_object_and_path() {
        let text = "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {name: p}\nspec:\n  routes: 7\n";
        let err = parse_file(Path::new("x.yaml"), text)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("x.yaml:1") && err.contains("HTTPProxy p") && err.contains("spec.routes"),
            "{err}"
        );
    }

    #[test]
    fn unknown_kinds_are_skipped() {
        let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n";
        assert_eq!(
            parse_file(Path::new("x.yaml"), text).map(|o| o.len()),
            Ok(0)
        );
    }
}
