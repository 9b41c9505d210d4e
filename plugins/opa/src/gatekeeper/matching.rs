//! What a Constraint does (`enforcementAction`), what it selects (`spec.match`), and
//! what the template's Rego reads of an object (`input.review`) and writes of a
//! violation.

use super::*;

/// What a Constraint does with a violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Deny,
    Warn,
    DryRun,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Deny => "deny",
            Action::Warn => "warn",
            Action::DryRun => "dryrun",
        }
    }
}

/// A Constraint's `spec.enforcementAction`; an action Isobar does not know is an error
/// (Gatekeeper's too).
pub fn action(constraint: &Constraint) -> Result<Action, String> {
    match constraint
        .spec
        .get("enforcementAction")
        .and_then(Value::as_str)
    {
        None | Some("deny") => Ok(Action::Deny),
        Some("warn") => Ok(Action::Warn),
        Some("dryrun") => Ok(Action::DryRun),
        Some(other) => Err(format!(
            "enforcementAction {other:?} is not supported (deny, warn, dryrun)"
        )),
    }
}

/// `input.review` for one object: what an admission request carries of it.
pub fn review(object: &Object, manifest: &Value) -> Value {
    let kind = object.kind();
    let version = kind
        .info()
        .and_then(|i| i.versions.first().copied())
        .unwrap_or("v1");
    let key = object.key();
    json!({
        "kind": {"group": kind.group(), "version": version, "kind": kind.as_str()},
        "name": key.name,
        "namespace": key.namespace,
        "object": manifest,
    })
}

/// Whether a Constraint's `spec.match` selects `object`. `Err` for a selector Isobar
/// cannot evaluate (`namespaceSelector`: Namespaces are not read).
pub fn matches(spec: &Value, object: &Object) -> Result<bool, String> {
    let Some(m) = spec.get("match").filter(|m| !m.is_null()) else {
        return Ok(true);
    };
    if m.get("namespaceSelector").is_some_and(|s| !s.is_null()) {
        return Err(
            "match.namespaceSelector is not supported (Isobar does not read Namespaces)"
                .to_string(),
        );
    }
    let kind = object.kind();
    let key = object.key();
    let list = |v: Option<&Value>| -> Option<Vec<String>> {
        v.and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
    };
    if let Some(kinds) = m
        .get("kinds")
        .and_then(Value::as_array)
        .filter(|k| !k.is_empty())
    {
        let any = |names: Option<Vec<String>>, wanted: &str| {
            names.is_none_or(|n| n.is_empty() || n.iter().any(|x| x == "*" || x == wanted))
        };
        let selected = kinds.iter().any(|k| {
            any(list(k.get("apiGroups")), kind.group()) && any(list(k.get("kinds")), kind.as_str())
        });
        if !selected {
            return Ok(false);
        }
    }
    match m.get("scope").and_then(Value::as_str) {
        Some("Cluster") if kind.namespaced() => return Ok(false),
        Some("Namespaced") if !kind.namespaced() => return Ok(false),
        _ => {}
    }
    if let Some(namespaces) = list(m.get("namespaces")).filter(|n| !n.is_empty())
        && !namespaces.iter().any(|n| glob(n, &key.namespace))
    {
        return Ok(false);
    }
    if list(m.get("excludedNamespaces"))
        .unwrap_or_default()
        .iter()
        .any(|n| glob(n, &key.namespace))
    {
        return Ok(false);
    }
    if let Some(name) = m.get("name").and_then(Value::as_str)
        && !glob(name, &key.name)
    {
        return Ok(false);
    }
    if let Some(selector) = m.get("labelSelector").filter(|s| !s.is_null()) {
        let labels = object.metadata().labels.clone().unwrap_or_default();
        return label_selector(selector, &labels);
    }
    Ok(true)
}

/// Gatekeeper's namespace and name patterns: exact, or one `*` at the start or end.
fn glob(pattern: &str, value: &str) -> bool {
    if let Some(prefix) = pattern.strip_suffix('*') {
        value.starts_with(prefix)
    } else if let Some(suffix) = pattern.strip_prefix('*') {
        value.ends_with(suffix)
    } else {
        pattern == value
    }
}

fn label_selector(selector: &Value, labels: &BTreeMap<String, String>) -> Result<bool, String> {
    for (k, v) in selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if labels.get(k).map(String::as_str) != v.as_str() {
            return Ok(false);
        }
    }
    let expressions = selector.get("matchExpressions").and_then(Value::as_array);
    for e in expressions.into_iter().flatten() {
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let have = labels.get(key).map(String::as_str);
        let ok = match e.get("operator").and_then(Value::as_str) {
            Some("In") => have.is_some_and(|h| values.contains(&h)),
            Some("NotIn") => have.is_none_or(|h| !values.contains(&h)),
            Some("Exists") => have.is_some(),
            Some("DoesNotExist") => have.is_none(),
            other => return Err(format!("labelSelector operator {other:?} is not supported")),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// One violation, as a Constraint's status lists it.
pub fn violation(action: Action, object: &Object, message: &str) -> Value {
    let kind = object.kind();
    let key = object.key();
    let version = kind
        .info()
        .and_then(|i| i.versions.first().copied())
        .unwrap_or("v1");
    json!({
        "enforcementAction": action.as_str(),
        "group": kind.group(),
        "version": version,
        "kind": kind.as_str(),
        "namespace": key.namespace,
        "name": key.name,
        "message": message,
    })
}
