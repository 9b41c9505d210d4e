//! How the status of a kind's objects is written back: each kind's table entry
//! ([`crate::KindInfo::status`]) names a [`StatusShape`], which renders a build's report
//! on one object, says where the object is served, and merges what Isobar wants into
//! what the object has. The shapes here are Kubernetes' (none, an Ingress's
//! `loadBalancer`) and Gateway API's; a plugin whose kind has another shape implements
//! the trait for it (Contour's are in `isobar-contour`).

use serde_json::{Value, json};

use crate::condition::WHILE_THEY_HOLD;
use crate::{ObjectKey, StatusReport};

/// What Isobar writes into an object's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writes {
    /// Nothing (Services, Secrets, …): their `status` is not even read.
    Nothing,
    /// `status.loadBalancer` alone, once an address is known (Ingress).
    Address,
    /// A status rendered from each build's report (see [`StatusShape::render`]).
    Rendered,
}

/// The shape of one kind's status.
pub trait StatusShape: Sync + std::fmt::Debug {
    /// What it writes.
    fn writes(&self) -> Writes {
        Writes::Rendered
    }

    /// A build's report on `key` as the status to write, before it is merged
    /// (`controller` names the writer in a route's `parents[]`); `None` when the shape
    /// writes no rendered status.
    fn render(&self, report: &StatusReport, key: &ObjectKey, controller: &str) -> Option<Value>;

    /// Puts where the object is served into its rendered status (`load_balancer`: Envoy's
    /// Service's `status.loadBalancer`).
    fn serve_at(&self, _status: &mut Value, _load_balancer: &Value) {}

    /// The status to write: `current` (what the object has) with Isobar's parts taken
    /// from `desired`, everything else kept. `now` is the time for conditions whose
    /// status changes.
    fn merge(
        &self,
        current: &Value,
        desired: &Value,
        controller: &str,
        now: &dyn Fn() -> Value,
    ) -> Value;

    /// For a status kept per parent (Gateway API's routes and policies): the field of its
    /// entries and of each entry's reference (`parents`, `parentRef`).
    fn per_parent(&self) -> Option<(&'static str, &'static str)> {
        None
    }
}

/// `current` if it is an object, else an empty object: what a merge starts from.
pub fn or_empty(current: &Value) -> Value {
    match current {
        Value::Object(_) => current.clone(),
        _ => json!({}),
    }
}

/// No status (Services, EndpointSlices, Secrets, TLSCertificateDelegations).
#[derive(Debug)]
pub struct NoStatus;

impl StatusShape for NoStatus {
    fn writes(&self) -> Writes {
        Writes::Nothing
    }

    fn render(&self, _: &StatusReport, _: &ObjectKey, _: &str) -> Option<Value> {
        None
    }

    fn merge(&self, current: &Value, _: &Value, _: &str, _: &dyn Fn() -> Value) -> Value {
        or_empty(current)
    }
}

/// `status.loadBalancer` only (Ingress).
#[derive(Debug)]
pub struct LoadBalancer;

/// Puts `desired`'s `loadBalancer` into `out` once it has an address.
pub fn merge_address(out: &mut Value, desired: &Value) {
    let address = &desired["loadBalancer"];
    if address.as_object().is_some_and(|lb| !lb.is_empty()) {
        out["loadBalancer"] = address.clone();
    }
}

impl StatusShape for LoadBalancer {
    fn writes(&self) -> Writes {
        Writes::Address
    }

    fn render(&self, _: &StatusReport, _: &ObjectKey, _: &str) -> Option<Value> {
        None
    }

    fn merge(&self, current: &Value, desired: &Value, _: &str, _: &dyn Fn() -> Value) -> Value {
        let mut out = or_empty(current);
        merge_address(&mut out, desired);
        out
    }
}

fn gateway_status(report: &StatusReport, key: &ObjectKey) -> crate::GatewayStatus {
    let status = report.objects.get(key);
    status
        .and_then(|s| s.gateway.as_deref())
        .cloned()
        .unwrap_or_default()
}

/// Gateway API's object shape: `conditions` of the object itself (with
/// `observedGeneration`) and, per listener, `status.listeners[]` (Gateway, GatewayClass,
/// ListenerSet).
#[derive(Debug)]
pub struct Gateway;

impl StatusShape for Gateway {
    fn render(&self, report: &StatusReport, key: &ObjectKey, _: &str) -> Option<Value> {
        Some(gateway_status(report, key).render_object())
    }

    /// An empty `addresses`: a Gateway served where Envoy is (GatewayClasses and
    /// ListenerSets have none).
    fn serve_at(&self, status: &mut Value, load_balancer: &Value) {
        let empty = status.get("addresses").and_then(Value::as_array);
        if empty.is_some_and(Vec::is_empty) {
            status["addresses"] = addresses(load_balancer);
        }
    }

    fn merge(&self, current: &Value, desired: &Value, _: &str, now: &dyn Fn() -> Value) -> Value {
        let mut out = or_empty(current);
        // Conditions a Gateway carries only while they hold go once not reported.
        let reported = |c: &Value| {
            desired["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|d| d["type"] == c["type"])
        };
        let kept: Vec<Value> = current["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| {
                reported(c)
                    || !c["type"]
                        .as_str()
                        .is_some_and(|t| WHILE_THEY_HOLD.contains(&t))
            })
            .cloned()
            .collect();
        out["conditions"] = conditions(&Value::Array(kept), &desired["conditions"], now);
        if desired.get("listeners").is_some() {
            let old = current["listeners"].as_array().cloned().unwrap_or_default();
            let listeners = desired["listeners"].as_array().into_iter().flatten();
            let merged: Vec<Value> = listeners
                .map(|listener| {
                    let mut listener = listener.clone();
                    let was = old.iter().find(|l| l["name"] == listener["name"]);
                    let was = was.map_or(&Value::Null, |l| &l["conditions"]);
                    listener["conditions"] = conditions(was, &listener["conditions"], now);
                    listener
                })
                .collect();
            out["listeners"] = Value::Array(merged);
        }
        if desired["addresses"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
        {
            out["addresses"] = desired["addresses"].clone();
        }
        for field in ["attachedListenerSets", "supportedFeatures"] {
            if desired.get(field).is_some() {
                out[field] = desired[field].clone();
            }
        }
        out
    }
}

/// `status.loadBalancer` as a Gateway's `addresses`.
fn addresses(load_balancer: &Value) -> Value {
    let entries = load_balancer["ingress"].as_array().into_iter().flatten();
    let addresses: Vec<Value> = entries
        .filter_map(
            |entry| match (entry["ip"].as_str(), entry["hostname"].as_str()) {
                (Some(ip), _) => Some(json!({"type": "IPAddress", "value": ip})),
                (None, Some(host)) => Some(json!({"type": "Hostname", "value": host})),
                (None, None) => None,
            },
        )
        .collect();
    json!(addresses)
}

/// Gateway API's route shape: `status.parents[]`, one entry per parent reference, each
/// with its conditions and this controller's name.
#[derive(Debug)]
pub struct Route;

impl StatusShape for Route {
    fn render(&self, report: &StatusReport, key: &ObjectKey, controller: &str) -> Option<Value> {
        Some(gateway_status(report, key).render_route(controller))
    }

    fn merge(
        &self,
        current: &Value,
        desired: &Value,
        controller: &str,
        now: &dyn Fn() -> Value,
    ) -> Value {
        merge_entries(current, desired, controller, ("parents", "parentRef"), now)
    }

    fn per_parent(&self) -> Option<(&'static str, &'static str)> {
        Some(("parents", "parentRef"))
    }
}

/// Gateway API's policy shape (BackendTLSPolicy): `status.ancestors[]`, one entry per
/// ancestor (a Gateway) the policy reaches, as a route's parents.
#[derive(Debug)]
pub struct Policy;

impl StatusShape for Policy {
    fn render(&self, report: &StatusReport, key: &ObjectKey, controller: &str) -> Option<Value> {
        Some(gateway_status(report, key).render_policy(controller))
    }

    fn merge(
        &self,
        current: &Value,
        desired: &Value,
        controller: &str,
        now: &dyn Fn() -> Value,
    ) -> Value {
        merge_entries(
            current,
            desired,
            controller,
            ("ancestors", "ancestorRef"),
            now,
        )
    }

    fn per_parent(&self) -> Option<(&'static str, &'static str)> {
        Some(("ancestors", "ancestorRef"))
    }
}

/// This controller's entries of `list` replaced by the desired ones (each keeping its
/// conditions' transition times), other controllers' kept as they are.
fn merge_entries(
    current: &Value,
    desired: &Value,
    controller: &str,
    (list, reference): (&str, &str),
    now: &dyn Fn() -> Value,
) -> Value {
    let mut out = or_empty(current);
    let old = current[list].as_array().cloned().unwrap_or_default();
    let ours = |p: &Value| p["controllerName"] == controller;
    let mut entries: Vec<Value> = Vec::new();
    for entry in desired[list].as_array().into_iter().flatten() {
        let mut entry = entry.clone();
        let was = old
            .iter()
            .find(|p| ours(p) && p[reference] == entry[reference]);
        let was = was.map_or(&Value::Null, |p| &p["conditions"]);
        entry["conditions"] = conditions(was, &entry["conditions"], now);
        entries.push(entry);
    }
    entries.extend(old.into_iter().filter(|p| !ours(p)));
    // A route none of whose parents are this controller's, and never were, is left as
    // it is.
    if !entries.is_empty() || current.get(list).is_some() {
        out[list] = Value::Array(entries);
    }
    out
}

/// Top-level fields a plugin sets as they are (`StatusReport::field`), each replacing
/// the field of that name; other fields are kept (Gatekeeper's Constraints:
/// `totalViolations`, `violations`).
#[derive(Debug)]
pub struct Fields;

impl StatusShape for Fields {
    fn render(&self, report: &StatusReport, key: &ObjectKey, _: &str) -> Option<Value> {
        let fields = report.objects.get(key).and_then(|s| s.fields.as_deref());
        Some(Value::Object(fields.cloned().unwrap_or_default()))
    }

    fn merge(&self, current: &Value, desired: &Value, _: &str, _: &dyn Fn() -> Value) -> Value {
        let mut out = or_empty(current);
        for (name, value) in desired.as_object().into_iter().flatten() {
            out[name] = value.clone();
        }
        out
    }
}

/// `desired` conditions, each keeping the `lastTransitionTime` of the `old` one of its
/// type when its status did not change; `old` conditions of other types stay after them.
pub fn conditions(old: &Value, desired: &Value, now: &dyn Fn() -> Value) -> Value {
    let old: Vec<Value> = old.as_array().cloned().unwrap_or_default();
    let mut conditions: Vec<Value> = Vec::new();
    for mut condition in desired.as_array().cloned().unwrap_or_default() {
        let previous = old.iter().find(|c| c["type"] == condition["type"]);
        let time = match previous {
            Some(p)
                if p["status"] == condition["status"] && p.get("lastTransitionTime").is_some() =>
            {
                p["lastTransitionTime"].clone()
            }
            _ => now(),
        };
        condition["lastTransitionTime"] = time;
        conditions.push(condition);
    }
    for condition in old {
        if !conditions.iter().any(|c| c["type"] == condition["type"]) {
            conditions.push(condition);
        }
    }
    Value::Array(conditions)
}
