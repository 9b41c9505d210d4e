//! Gatekeeper's kinds: ConstraintTemplates, and their Constraints (one kind per
//! template, stored as one kind in the namespace their own kind names).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use isobar_sdk::api::ObjectMeta;
use isobar_sdk::{DynamicKinds, Kind, KindId, KindInfo, Object, Resource};

const TEMPLATE_ID: KindId = KindId::new("templates.gatekeeper.sh", "ConstraintTemplate");
pub const CONSTRAINT_TEMPLATE: Kind = Kind::new(&TEMPLATE_ID);

const CONSTRAINT_ID: KindId = KindId::new("constraints.gatekeeper.sh", "Constraint");
/// Every Constraint, whatever its kind, stored in the namespace its kind names.
pub const CONSTRAINT: Kind = Kind::new(&CONSTRAINT_ID);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConstraintTemplate {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Value,
}

impl Resource for ConstraintTemplate {
    const KIND: Kind = CONSTRAINT_TEMPLATE;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Constraint {
    /// Its own kind (`K8sHttpsOnly`): the template's `spec.crd.spec.names.kind`.
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Value,
}

impl Resource for Constraint {
    const KIND: Kind = CONSTRAINT;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: CONSTRAINT_TEMPLATE,
        versions: &["v1", "v1beta1", "v1alpha1"],
        plural: "constrainttemplates",
        namespaced: false,
        decode: isobar_sdk::kind::decode_object::<ConstraintTemplate>,
        status: &isobar_sdk::status::Fields,
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: CONSTRAINT,
        versions: &["v1beta1", "v1", "v1alpha1"],
        plural: "constraints",
        // Stored per kind: the namespace is the Constraint's kind.
        namespaced: true,
        decode: decode_constraint,
        status: &isobar_sdk::status::Fields,
    }
}

isobar_sdk::inventory::submit! {
    DynamicKinds {
        kind: CONSTRAINT,
        group: "constraints.gatekeeper.sh",
        declared_by: CONSTRAINT_TEMPLATE,
        declares: declared_kind,
    }
}

/// A Constraint, placed in the namespace its kind names (two kinds may share a name).
fn decode_constraint(mut value: Value) -> Result<Object, String> {
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if kind.is_empty() {
        return Err("a Constraint needs its kind".to_string());
    }
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("namespace".into(), kind.into());
    }
    isobar_sdk::kind::decode_object::<Constraint>(value)
}

/// The Constraint kind a template declares, and its plural (the kind in lower case, as
/// Gatekeeper names the resource).
pub(super) fn declared_kind(object: &Object) -> Option<(String, String)> {
    let template = object.get::<ConstraintTemplate>()?;
    let kind = template
        .spec
        .pointer("/crd/spec/names/kind")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())?;
    Some((kind.to_string(), kind.to_ascii_lowercase()))
}
