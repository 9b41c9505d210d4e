//! Status write-back (Kubernetes provider, leader only): HTTPProxy `status` (Contour's
//! `Valid` condition with `errors`/`warnings`, `currentStatus`, `description`,
//! `observedGeneration`) and `status.loadBalancer` of HTTPProxies and Ingresses.
//!
//! - Each build publishes the statuses it wants ([`Desired`]) on a watch channel: only the
//!   latest is kept, so nothing queues up while a replica waits to lead.
//! - A status is written only when it differs from what this writer last wrote; when it
//!   does, the object is read, merged and compared again, so a status already in place
//!   (another replica wrote it) costs a read and no write.
//! - Conditions of other types (other controllers') are kept; `lastTransitionTime`
//!   moves only when the `Valid` condition's status changes.
//! - A 409 Conflict re-reads and retries with backoff; a deleted object is dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use isobar_sdk::{Kind, ObjectKey, Objects, StatusReport, StatusStyle};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::provider::kube::api_resource;

/// Statuses a build wants written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Desired {
    /// HTTPProxy key → (generation seen by the build, rendered status as JSON text: text
    /// is a fraction of the memory of a JSON tree, and 10,000 of these are kept; equal
    /// texts rendered by one build are one shared copy, as most proxies say the same).
    pub proxies: BTreeMap<ObjectKey, (Option<i64>, Arc<str>)>,
    /// Ingresses the build served (they get `status.loadBalancer` only).
    pub ingresses: BTreeSet<ObjectKey>,
    /// `status.loadBalancer` for both kinds.
    pub load_balancer: Value,
}

impl Desired {
    /// What to write after a build: every HTTPProxy and Ingress the pipeline reported on.
    pub fn from_build(report: &StatusReport, objects: &Objects, load_balancer: Value) -> Desired {
        let mut desired = Desired {
            load_balancer,
            ..Default::default()
        };
        desired.update(report, objects, report.objects.keys());
        desired
    }

    /// Brings the entries of `keys` up to `report` (a build that covered only them).
    pub fn update<'a>(
        &mut self,
        report: &StatusReport,
        objects: &Objects,
        keys: impl IntoIterator<Item = &'a ObjectKey>,
    ) {
        let mut texts: std::collections::HashSet<Arc<str>> = std::collections::HashSet::new();
        for key in keys {
            let reported = report.objects.contains_key(key);
            match key.kind.info().map_or(StatusStyle::None, |i| i.status) {
                StatusStyle::Contour if reported => {
                    let generation = objects.object(key).and_then(|o| o.metadata().generation);
                    let rendered = serde_json::to_string(&report.render(key)).unwrap_or_default();
                    let rendered = match texts.get(rendered.as_str()) {
                        Some(shared) => shared.clone(),
                        None => {
                            let text: Arc<str> = rendered.into();
                            texts.insert(text.clone());
                            text
                        }
                    };
                    self.proxies.insert(key.clone(), (generation, rendered));
                }
                StatusStyle::LoadBalancer if reported => {
                    self.ingresses.insert(key.clone());
                }
                StatusStyle::Contour => {
                    self.proxies.remove(key);
                }
                StatusStyle::LoadBalancer => {
                    self.ingresses.remove(key);
                }
                _ => {}
            }
        }
    }
}

/// `status.loadBalancer`: the fixed `ingress-status-address` list, else the Envoy
/// Service's own load balancer status (`envoy_service`), else nothing.
pub fn load_balancer(
    fixed: &str,
    envoy_service: Option<&k8s_openapi::api::core::v1::LoadBalancerStatus>,
) -> Value {
    let addresses: Vec<Value> = fixed
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|a| {
            if a.parse::<std::net::IpAddr>().is_ok() {
                json!({"ip": a})
            } else {
                json!({"hostname": a})
            }
        })
        .collect();
    if !addresses.is_empty() {
        return json!({"ingress": addresses});
    }
    envoy_service
        .and_then(|lb| serde_json::to_value(lb).ok())
        .unwrap_or_else(|| json!({}))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Written,
    Unchanged,
    Gone,
    Failed,
}

pub struct StatusWriter {
    pub client: kube::Client,
    pub metrics: Arc<Metrics>,
    /// Parallel writes in flight.
    pub concurrency: usize,
}

const ATTEMPTS: u32 = 5;

impl StatusWriter {
    /// Writes each published [`Desired`] while `leader` is true.
    pub async fn run(
        self,
        mut desired: watch::Receiver<Option<Arc<Desired>>>,
        mut leader: watch::Receiver<bool>,
    ) {
        // A hash of what this writer last wrote (or found in place), by object.
        let mut written: BTreeMap<ObjectKey, u64> = BTreeMap::new();
        loop {
            if !*leader.borrow_and_update() {
                // Not leading: forget what was written (the next leader may have changed
                // it) and wait; only the latest desired state is kept meanwhile.
                written.clear();
                if leader.changed().await.is_err() {
                    return;
                }
                continue;
            }
            let Some(batch) = desired.borrow_and_update().clone() else {
                tokio::select! {
                    changed = desired.changed() => if changed.is_err() { return },
                    changed = leader.changed() => if changed.is_err() { return },
                }
                continue;
            };
            self.write_batch(&batch, &mut written).await;
            tokio::select! {
                changed = desired.changed() => if changed.is_err() { return },
                changed = leader.changed() => if changed.is_err() { return },
            }
        }
    }

    async fn write_batch(&self, batch: &Desired, written: &mut BTreeMap<ObjectKey, u64>) {
        let lb = batch.load_balancer.to_string();
        let has_address = batch
            .load_balancer
            .as_object()
            .is_some_and(|lb| !lb.is_empty());
        // Fingerprints first: a status is only materialised when it needs writing.
        let mut wanted: BTreeMap<&ObjectKey, u64> = BTreeMap::new();
        for (key, (generation, rendered)) in &batch.proxies {
            wanted.insert(key, fingerprint(&(rendered, generation, &lb)));
        }
        for key in batch.ingresses.iter().filter(|_| has_address) {
            wanted.insert(key, fingerprint(&("ingress", &lb)));
        }
        written.retain(|key, _| wanted.contains_key(key));
        let todo: Vec<(ObjectKey, u64, Value)> = wanted
            .into_iter()
            .filter(|(key, print)| written.get(*key) != Some(print))
            .map(|(key, print)| {
                let status = match batch.proxies.get(key) {
                    Some((generation, rendered)) => {
                        proxy_status(rendered, *generation, &batch.load_balancer)
                    }
                    None => json!({"loadBalancer": batch.load_balancer.clone()}),
                };
                (key.clone(), print, status)
            })
            .collect();
        let results: Vec<(ObjectKey, u64, Outcome)> = futures::stream::iter(todo)
            .map(|(key, print, status)| async move {
                let outcome = self.write(&key, &status).await;
                (key, print, outcome)
            })
            .buffer_unordered(self.concurrency.max(1))
            .collect()
            .await;
        for (key, print, outcome) in results {
            let result = match outcome {
                Outcome::Written => "written",
                Outcome::Unchanged => "unchanged",
                Outcome::Gone => "gone",
                Outcome::Failed => "failed",
            };
            self.metrics.status_write(result);
            if matches!(outcome, Outcome::Written | Outcome::Unchanged) {
                written.insert(key, print);
            }
        }
    }

    /// Read, merge, compare, write; retried on conflict.
    async fn write(&self, key: &ObjectKey, status: &Value) -> Outcome {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &key.namespace, &api_resource(key.kind));
        let mut backoff = Duration::from_millis(50);
        for _ in 0..ATTEMPTS {
            let mut object = match api.get_opt(&key.name).await {
                Ok(Some(object)) => object,
                Ok(None) => return Outcome::Gone,
                Err(error) => {
                    tracing::warn!(object = %key, %error, "reading an object to write its status failed");
                    return Outcome::Failed;
                }
            };
            let current = object.data.get("status").cloned().unwrap_or(Value::Null);
            let merged = merge(key.kind, &current, status);
            if merged == current {
                return Outcome::Unchanged;
            }
            object.data["status"] = merged;
            object.metadata.managed_fields = None;
            match api
                .replace_status(&key.name, &PostParams::default(), &object)
                .await
            {
                Ok(_) => return Outcome::Written,
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    self.metrics.status_write("conflict");
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
                Err(kube::Error::Api(e)) if e.code == 404 => return Outcome::Gone,
                Err(error) => {
                    tracing::warn!(object = %key, %error, "writing status failed");
                    return Outcome::Failed;
                }
            }
        }
        tracing::warn!(object = %key, "status still conflicting after {ATTEMPTS} attempts");
        Outcome::Failed
    }
}

/// A hash of what makes a status, to remember what was written without keeping it.
fn fingerprint(parts: &impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut hasher);
    hasher.finish()
}

/// An HTTPProxy's status: the rendered `Valid` condition (JSON text), its generation and
/// the load balancer addresses.
fn proxy_status(rendered: &str, generation: Option<i64>, load_balancer: &Value) -> Value {
    let mut status: Value = serde_json::from_str(rendered).unwrap_or_else(|_| json!({}));
    if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut)
        && let Some(generation) = generation
    {
        for condition in conditions {
            condition["observedGeneration"] = json!(generation);
        }
    }
    status["loadBalancer"] = load_balancer.clone();
    status
}

/// The object's status with Isobar's parts replaced and everything else kept.
fn merge(kind: Kind, current: &Value, desired: &Value) -> Value {
    let mut out = match current {
        Value::Object(_) => current.clone(),
        _ => json!({}),
    };
    let address = &desired["loadBalancer"];
    if address.as_object().is_some_and(|lb| !lb.is_empty()) {
        out["loadBalancer"] = address.clone();
    }
    if kind.info().is_none_or(|i| i.status != StatusStyle::Contour) {
        return out;
    }
    out["currentStatus"] = desired["currentStatus"].clone();
    out["description"] = desired["description"].clone();
    let old: Vec<Value> = current
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut conditions: Vec<Value> = Vec::new();
    for mut condition in desired
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
    {
        let previous = old.iter().find(|c| c["type"] == condition["type"]);
        let time = match previous {
            Some(p)
                if p["status"] == condition["status"] && p.get("lastTransitionTime").is_some() =>
            {
                p["lastTransitionTime"].clone()
            }
            _ => json!(
                k8s_openapi::jiff::Timestamp::now()
                    .strftime("%Y-%m-%dT%H:%M:%SZ")
                    .to_string()
            ),
        };
        condition["lastTransitionTime"] = time;
        conditions.push(condition);
    }
    // Conditions Isobar does not own stay as they are.
    for condition in old {
        if !conditions.iter().any(|c| c["type"] == condition["type"]) {
            conditions.push(condition);
        }
    }
    out["conditions"] = Value::Array(conditions);
    out
}
