//! Status write-back (Kubernetes provider, leader only), in the style each kind's table
//! entry names (`StatusShape`): Contour's (HTTPProxy: the `Valid` condition with
//! `errors`/`warnings`, `currentStatus`, `description`, `observedGeneration`, and
//! `status.loadBalancer`), the load balancer alone (Ingress), Gateway API's object shape
//! (`conditions`, `listeners[]`, `addresses`) and route shape (`parents[]`, each naming
//! this controller).
//!
//! - Each build publishes the statuses it wants ([`Desired`]) on a watch channel: only the
//!   latest is kept, so nothing queues up while a replica waits to lead.
//! - A status is written only when it differs from what this writer last wrote; when it
//!   does, the object is read, merged and compared again, so a status already in place
//!   (another replica wrote it) costs a read and no write.
//! - Conditions of other types, and route parents of other controllers, are kept;
//!   `lastTransitionTime` moves only when a condition's status changes.
//! - A 409 Conflict re-reads and retries with backoff; a deleted object is dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use isobar_sdk::status::{NoStatus, StatusShape, Writes};
use isobar_sdk::{Kind, ObjectKey, Objects, StatusReport};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::provider::kube::ApiVersions;

/// The controller name written in a route's `status.parents[]` unless a source names
/// another (Contour's default `gateway.controllerName`).
pub const CONTROLLER_NAME: &str = "projectcontour.io/gateway-controller";

/// Statuses a build wants written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Desired {
    /// Objects whose status carries conditions → (generation seen by the build,
    /// rendered status as JSON text: text is a fraction of the memory of a JSON tree,
    /// and 10,000 of these are kept; equal texts rendered by one build are one shared
    /// copy, as most proxies say the same).
    pub proxies: BTreeMap<ObjectKey, (Option<i64>, Arc<str>)>,
    /// Objects the build served that get `status.loadBalancer` only (Ingresses).
    pub ingresses: BTreeSet<ObjectKey>,
    /// `status.loadBalancer` (and a Gateway's `addresses`).
    pub load_balancer: Value,
}

impl Desired {
    /// What to write after a build: every object the pipeline reported on, in its kind's style.
    /// Route-style statuses are rendered under `controller`.
    pub fn from_build(
        report: &StatusReport,
        objects: &Objects,
        load_balancer: Value,
        controller: &str,
    ) -> Desired {
        let mut desired = Desired {
            load_balancer,
            ..Default::default()
        };
        desired.update(report, objects, report.objects.keys(), controller);
        desired
    }

    /// Brings the entries of `keys` up to `report` (a build that covered only them).
    pub fn update<'a>(
        &mut self,
        report: &StatusReport,
        objects: &Objects,
        keys: impl IntoIterator<Item = &'a ObjectKey>,
        controller: &str,
    ) {
        let mut texts: std::collections::HashSet<Arc<str>> = std::collections::HashSet::new();
        for key in keys {
            let reported = report.objects.contains_key(key);
            let shape = shape(key.kind);
            match shape.writes() {
                Writes::Address if reported => {
                    self.ingresses.insert(key.clone());
                }
                Writes::Address => {
                    self.ingresses.remove(key);
                }
                Writes::Nothing => {}
                Writes::Rendered if reported => {
                    let generation = objects.object(key).and_then(|o| o.metadata().generation);
                    let rendered = shape.render(report, key, controller);
                    let rendered = rendered.map(|r| r.to_string()).unwrap_or_default();
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
                _ => {
                    self.proxies.remove(key);
                }
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
    /// The version each kind is read (and its status written) at.
    pub versions: Arc<ApiVersions>,
    /// The controller name of this instance's route-style status entries: others' are
    /// kept as they are.
    pub controller: String,
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
                        desired_status(key.kind, rendered, *generation, &batch.load_balancer)
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
        let dynamic = crate::provider::kube::dynamic_resource_of(key);
        let resource = self.versions.resource(key.kind);
        let api: Api<DynamicObject> = if let Some(resource) = &dynamic {
            // A kind of a dynamic group: cluster-scoped, named by the key's namespace.
            Api::all_with(self.client.clone(), resource)
        } else if key.kind.namespaced() {
            Api::namespaced_with(self.client.clone(), &key.namespace, &resource)
        } else {
            Api::all_with(self.client.clone(), &resource)
        };
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
            let merged = merge(key.kind, &current, status, &self.controller);
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

fn shape(kind: Kind) -> &'static dyn StatusShape {
    kind.info().map_or(&NoStatus, |i| i.status)
}

/// The status the writer would write for an object of `kind` with `rendered` conditions
/// and `generation` (an API server gives a new object generation 1), where no load
/// balancer address is known: what `isobar translate` shows.
pub fn as_written(kind: Kind, rendered: &Value, generation: Option<i64>) -> Value {
    let mut status = desired_status(
        kind,
        &rendered.to_string(),
        Some(generation.unwrap_or(1)),
        &json!({}),
    );
    // Without a load balancer address nothing of one is written.
    if let Some(o) = status.as_object_mut() {
        for field in ["addresses", "loadBalancer"] {
            let empty = o.get(field).is_some_and(|v| {
                v.as_array().is_some_and(Vec::is_empty)
                    || v.as_object().is_some_and(|m| m.is_empty())
            });
            if empty {
                o.remove(field);
            }
        }
    }
    status
}

/// The status a build wants for an object of `kind`: its rendered conditions (JSON
/// text) with the generation they were computed from, and where it is served:
/// `status.loadBalancer` (Contour's style), `addresses` (a Gateway).
fn desired_status(
    kind: Kind,
    rendered: &str,
    generation: Option<i64>,
    load_balancer: &Value,
) -> Value {
    let mut status: Value = serde_json::from_str(rendered).unwrap_or_else(|_| json!({}));
    if let Some(generation) = generation {
        let mark = |conditions: Option<&mut Vec<Value>>| {
            for condition in conditions.into_iter().flatten() {
                condition["observedGeneration"] = json!(generation);
            }
        };
        mark(status.get_mut("conditions").and_then(Value::as_array_mut));
        for part in ["parents", "listeners", "ancestors"] {
            let entries = status.get_mut(part).and_then(Value::as_array_mut);
            for entry in entries.into_iter().flatten() {
                mark(entry.get_mut("conditions").and_then(Value::as_array_mut));
            }
        }
    }
    shape(kind).serve_at(&mut status, load_balancer);
    status
}

/// The object's status with Isobar's parts replaced and everything else kept.
fn merge(kind: Kind, current: &Value, desired: &Value, controller: &str) -> Value {
    let now = || {
        json!(
            k8s_openapi::jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string()
        )
    };
    shape(kind).merge(current, desired, controller, &now)
}

#[cfg(test)]
mod tests;
