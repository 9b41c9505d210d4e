//! XBackendTrafficPolicy (`gateway.networking.x-k8s.io/v1alpha1`, experimental): how
//! traffic to a Service is shaped, whatever route sends it there.
//!
//! - `retryConstraint`: Envoy's retry budget on the Service's clusters. Envoy bounds the
//!   retries *in flight*: `budget.percent` of the requests in flight may be retries, and
//!   `minRetryRate.count` retries may always be in flight. The two `interval`s have no
//!   Envoy counterpart and are not used (Envoy measures at each retry, not over a window).
//!   Left out, the CRD's defaults apply (20 %, 10).
//! - `sessionPersistence`: the session of every route rule sending to the Service that
//!   keeps none of its own (a rule's `sessionPersistence` wins), made as a rule's is.
//!
//! Per Service the oldest policy (then namespace/name) applies and later ones are
//! `Conflicted`; a policy whose session cannot be made is `Invalid` and applies nothing.
//! Status goes to `ancestors[]`, one entry per Gateway (or ListenerSet) a route sending to
//! the Service is attached to.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gateway_api::apis::experimental::httproutes::HttpRouteRulesSessionPersistence;
use isobar_sdk::condition::Condition;
use isobar_sdk::ir::{HashPolicy, RetryBudget};
use isobar_sdk::{BuildContext, ObjectKey, StatusReport};

use crate::kinds::{BackendTrafficPolicy, every};

/// What a policy asks of the traffic to its Services.
#[derive(Debug, Clone, Default)]
pub struct Traffic {
    pub retry_budget: Option<RetryBudget>,
    pub session: Option<HashPolicy>,
}

#[derive(Debug)]
struct Judged {
    /// What applies; none when the policy is not accepted.
    traffic: Option<Traffic>,
    conditions: Vec<Condition>,
}

/// Every XBackendTrafficPolicy of the store, judged, by Service.
#[derive(Debug, Default)]
pub struct BackendTraffic {
    /// The policy applying to each Service (namespace, name).
    winners: BTreeMap<(String, String), ObjectKey>,
    /// Every policy naming a Service (winners and losers).
    by_service: BTreeMap<(String, String), BTreeSet<ObjectKey>>,
    judged: BTreeMap<ObjectKey, Judged>,
}

impl BackendTraffic {
    pub fn new(ctx: &BuildContext<'_>) -> BackendTraffic {
        let mut out = BackendTraffic::default();
        let mut policies: Vec<(ObjectKey, &BackendTrafficPolicy)> = every(ctx).collect();
        policies.sort_by(|(ka, a), (kb, b)| {
            let created = |p: &BackendTrafficPolicy| p.metadata.creation_timestamp.clone();
            created(a).cmp(&created(b)).then_with(|| ka.cmp(kb))
        });
        for (key, policy) in policies {
            let mut judged = judge(policy);
            let services: Vec<(String, String)> = policy
                .spec
                .target_refs
                .iter()
                .filter(|t| t.group.is_empty() && t.kind == "Service")
                .map(|t| (key.namespace.clone(), t.name.clone()))
                .collect();
            let mut lost = false;
            for service in &services {
                out.by_service
                    .entry(service.clone())
                    .or_default()
                    .insert(key.clone());
                if judged.traffic.is_none() {
                    continue;
                }
                match out.winners.get(service) {
                    Some(_) => lost = true,
                    None => {
                        out.winners.insert(service.clone(), key.clone());
                    }
                }
            }
            let refused = if services.is_empty() {
                Some((
                    "Invalid",
                    "no targetRef names a Service (group \"\", kind Service)",
                ))
            } else if lost {
                Some((
                    "Conflicted",
                    "an older XBackendTrafficPolicy targets the same Service",
                ))
            } else {
                None
            };
            if let Some((reason, message)) = refused {
                judged.conditions = vec![Condition::new("Accepted", false, reason, message)];
            }
            out.judged.insert(key, judged);
        }
        out
    }

    /// What applies to Service `namespace/service`, and the policy saying it.
    pub fn lookup(&self, namespace: &str, service: &str) -> Option<(&ObjectKey, &Traffic)> {
        if self.winners.is_empty() {
            return None;
        }
        let key = self
            .winners
            .get(&(namespace.to_string(), service.to_string()))?;
        let traffic = self.judged.get(key)?.traffic.as_ref()?;
        Some((key, traffic))
    }

    /// The policies naming Service `namespace/service`, winners or not.
    pub fn naming(&self, namespace: &str, service: &str) -> impl Iterator<Item = &ObjectKey> {
        self.by_service
            .get(&(namespace.to_string(), service.to_string()))
            .into_iter()
            .flatten()
    }

    pub fn is_empty(&self) -> bool {
        self.judged.is_empty()
    }

    /// Writes each policy's conditions under each Gateway (`ancestors`) that routes
    /// sending to its Services are attached to.
    pub fn report(
        &self,
        ancestors: &BTreeMap<ObjectKey, BTreeSet<ObjectKey>>,
        status: &mut StatusReport,
    ) {
        for (key, judged) in &self.judged {
            crate::backend_tls::report_ancestors(key, &judged.conditions, ancestors, status);
        }
    }
}

/// A policy's verdict, targets aside.
fn judge(policy: &BackendTrafficPolicy) -> Judged {
    let mut traffic = Traffic::default();
    if let Some(r) = &policy.spec.retry_constraint {
        let percent = r.budget.as_ref().and_then(|b| b.percent).unwrap_or(20);
        let count = r
            .min_retry_rate
            .as_ref()
            .and_then(|m| m.count)
            .unwrap_or(10);
        let interval = match r.budget.as_ref().and_then(|b| b.interval.as_deref()) {
            None => Duration::from_secs(10),
            Some(i) => match crate::rules::duration(i) {
                Ok(d) if (Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&d) => d,
                _ => {
                    return invalid(format!(
                        "retryConstraint: budget.interval {i:?} is not a duration of 1s to 1h"
                    ));
                }
            },
        };
        let (Ok(percent @ 0..=100), Ok(min_concurrency @ 1..)) =
            (u32::try_from(percent), u32::try_from(count))
        else {
            return invalid(format!(
                "retryConstraint: budget.percent {percent} must be within 0-100 and minRetryRate.count {count} at least 1"
            ));
        };
        traffic.retry_budget = Some(RetryBudget {
            percent,
            interval,
            min_concurrency,
        });
    }
    if let Some(s) = &policy.spec.session_persistence {
        // The same fields as a rule's; a rule's reading makes the session.
        let as_rule = serde_json::to_value(s)
            .and_then(serde_json::from_value::<HttpRouteRulesSessionPersistence>)
            .map_err(|e| e.to_string())
            .and_then(|s| crate::rules::session(&s));
        match as_rule {
            Ok(hash) => traffic.session = Some(hash),
            Err(e) => return invalid(format!("sessionPersistence: {e}")),
        }
    }
    Judged {
        traffic: Some(traffic),
        conditions: vec![Condition::new("Accepted", true, "Accepted", "")],
    }
}

fn invalid(message: String) -> Judged {
    Judged {
        traffic: None,
        conditions: vec![Condition::new("Accepted", false, "Invalid", message)],
    }
}
