//! Gateway API's status shape, next to Contour's `Valid` model: conditions of an object
//! itself (Accepted, Programmed, …), of each parent a route attaches to
//! (`status.parents[]`) and of each listener of a Gateway (`status.listeners[]`).
//! The status writer adds `observedGeneration`, `lastTransitionTime` and the
//! controller's name.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A condition's `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl From<bool> for ConditionStatus {
    fn from(value: bool) -> ConditionStatus {
        if value {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

/// One condition, as Gateway API objects carry them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
}

impl Condition {
    pub fn new(
        type_: &str,
        status: impl Into<ConditionStatus>,
        reason: &str,
        message: impl Into<String>,
    ) -> Condition {
        Condition {
            type_: type_.to_string(),
            status: status.into(),
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// A route's reference to a parent, spelt as in its `spec.parentRefs[]`.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ParentRef {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// What a route's status says of one parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentStatus {
    pub parent_ref: ParentRef,
    pub conditions: Vec<Condition>,
}

/// A kind of route a listener accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteGroupKind {
    pub group: String,
    pub kind: String,
}

/// What a Gateway's status says of one of its listeners.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStatus {
    pub name: String,
    pub supported_kinds: Vec<RouteGroupKind>,
    pub attached_routes: i32,
    pub conditions: Vec<Condition>,
}

/// Condition types Gateway API has a Gateway carry only while they hold
/// (`DefaultGateway`: while `defaultScope` is set; `InsecureFrontendValidationMode`: while
/// clients without a valid certificate are let in): a controller no longer reporting one
/// removes it, where conditions of other types another writer set are kept.
pub const WHILE_THEY_HOLD: &[&str] = &["DefaultGateway", "InsecureFrontendValidationMode"];

/// An object's status in Gateway API's shape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatewayStatus {
    /// The object's own conditions, one per type.
    pub conditions: Vec<Condition>,
    /// A route's parents, in the order they were first reported.
    pub parents: Vec<ParentStatus>,
    /// A Gateway's listeners, in the order they were first reported.
    pub listeners: Vec<ListenerStatus>,
    /// A GatewayClass's `supportedFeatures` (feature names, sorted).
    pub supported_features: Vec<String>,
    /// A Gateway's `attachedListenerSets` (when it takes ListenerSets or is named by
    /// one).
    pub attached_listener_sets: Option<i32>,
    /// A Gateway's `addresses` (type, value), when it has addresses of its own.
    pub addresses: Vec<(String, String)>,
    /// A Gateway served where Envoy is: without addresses of its own, the status writer
    /// gives it the Envoy Service's (rendered as an empty `addresses` for it to fill).
    /// GatewayClasses and ListenerSets have no addresses.
    pub addresses_from_service: bool,
}

/// Replaces the condition of the same type, or adds it. (The lists are kept as long
/// as the statuses, one per object: no spare room.)
fn set(conditions: &mut Vec<Condition>, condition: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => *existing = condition,
        None => {
            conditions.reserve_exact(1);
            conditions.push(condition);
        }
    }
}

impl GatewayStatus {
    /// Sets one of the object's own conditions (replacing one of the same type).
    pub fn set(&mut self, condition: Condition) {
        set(&mut self.conditions, condition);
    }

    /// Sets a condition on the entry of `parent` (added on first use).
    pub fn set_parent(&mut self, parent: &ParentRef, condition: Condition) {
        let entry = match self.parents.iter().position(|p| p.parent_ref == *parent) {
            Some(i) => &mut self.parents[i],
            None => {
                self.parents.reserve_exact(1);
                self.parents.push(ParentStatus {
                    parent_ref: parent.clone(),
                    conditions: Vec::new(),
                });
                let last = self.parents.len() - 1;
                &mut self.parents[last]
            }
        };
        set(&mut entry.conditions, condition);
    }

    /// The entry of listener `name` (added on first use, accepting no kinds).
    pub fn listener(&mut self, name: &str) -> &mut ListenerStatus {
        let at = match self.listeners.iter().position(|l| l.name == name) {
            Some(i) => i,
            None => {
                self.listeners.push(ListenerStatus {
                    name: name.to_string(),
                    supported_kinds: Vec::new(),
                    attached_routes: 0,
                    conditions: Vec::new(),
                });
                self.listeners.len() - 1
            }
        };
        &mut self.listeners[at]
    }

    /// Sets a condition on listener `name`.
    pub fn set_listener(&mut self, name: &str, condition: Condition) {
        set(&mut self.listener(name).conditions, condition);
    }

    /// `status` as Gateway API's `Gateway`/`GatewayClass` carry it: `conditions` and,
    /// when there are any, `listeners` and `supportedFeatures`.
    pub fn render_object(&self) -> serde_json::Value {
        let mut out = serde_json::json!({ "conditions": self.conditions });
        if !self.listeners.is_empty() {
            out["listeners"] = serde_json::json!(self.listeners);
        }
        if let Some(n) = self.attached_listener_sets {
            out["attachedListenerSets"] = serde_json::json!(n);
        }
        if !self.addresses.is_empty() {
            let addresses: Vec<serde_json::Value> = self
                .addresses
                .iter()
                .map(|(type_, value)| serde_json::json!({ "type": type_, "value": value }))
                .collect();
            out["addresses"] = serde_json::Value::Array(addresses);
        } else if self.addresses_from_service {
            out["addresses"] = serde_json::json!([]);
        }
        if !self.supported_features.is_empty() {
            let features: Vec<serde_json::Value> = self
                .supported_features
                .iter()
                .map(|name| serde_json::json!({ "name": name }))
                .collect();
            out["supportedFeatures"] = serde_json::Value::Array(features);
        }
        out
    }

    /// `status` as a policy carries it: one `ancestors[]` entry per ancestor (kept in
    /// `parents`), each naming `controller`.
    pub fn render_policy(&self, controller: &str) -> serde_json::Value {
        let ancestors: Vec<serde_json::Value> = self
            .parents
            .iter()
            .map(|p| {
                serde_json::json!({
                    "ancestorRef": p.parent_ref,
                    "controllerName": controller,
                    "conditions": p.conditions,
                })
            })
            .collect();
        serde_json::json!({ "ancestors": ancestors })
    }

    /// `status` as a route carries it: one `parents[]` entry per parent, each naming
    /// `controller` (the controller writing it).
    pub fn render_route(&self, controller: &str) -> serde_json::Value {
        let parents: Vec<serde_json::Value> = self
            .parents
            .iter()
            .map(|p| {
                serde_json::json!({
                    "parentRef": p.parent_ref,
                    "controllerName": controller,
                    "conditions": p.conditions,
                })
            })
            .collect();
        serde_json::json!({ "parents": parents })
    }
}

#[cfg(test)]
mod tests;
