//! The `opa` processor's configuration: its policies, what a denial does, what becomes
//! of an object a policy could not judge, and its budgets.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::*;

pub use crate::enforcement::{Enforcement, FailurePolicy};

/// The `plugins.opa` section of `contour.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, isobar_sdk::schemars::JsonSchema)]
#[schemars(crate = "isobar_sdk::schemars")]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct OpaConfig {
    /// Policy files (`.rego`, or `.wasm` from `opa build -t wasm`) or directories of
    /// them; `*_test.rego` files are skipped.
    #[serde(default)]
    pub policies: Vec<String>,
    /// Given to every policy as `data.config`.
    #[serde(default = "empty_object")]
    pub data: serde_json::Value,
    #[serde(default)]
    pub enforcement: Enforcement,
    /// The longest one policy may take for one object (`100ms`); past it the object
    /// gets a `PolicyNotEvaluated` warning.
    #[serde(default = "default_timeout", with = "millis")]
    #[schemars(with = "String")]
    pub eval_timeout: Duration,
    /// The most memory (MiB) an OPA wasm policy may hold while loading its data or
    /// evaluating one object; past it the evaluation fails (`PolicyNotEvaluated`).
    #[serde(default = "default_max_memory_mb")]
    pub max_memory_mb: u32,
    /// Enforce Gatekeeper's ConstraintTemplates and Constraints found among the objects
    /// (the cluster's, or the manifest directory's). Their statuses count violations
    /// over every object, so with this on every change rebuilds everything.
    #[serde(default = "yes")]
    pub gatekeeper: bool,
    /// How long one build may spend on Gatekeeper templates that read `data.inventory`
    /// (`1s`); the objects left over are judged by the next builds, which follow at once
    /// (after the hold-off) until none is left.
    #[serde(default = "default_inventory_budget", with = "millis")]
    #[schemars(with = "String")]
    pub inventory_budget: Duration,
    /// What becomes of an object a policy file could not judge.
    #[serde(default)]
    pub failure_policy: FailurePolicy,
    /// The same for Gatekeeper's Constraints; a Constraint's annotation
    /// `isobar.projectcontour.io/failure-policy` says it for that Constraint.
    #[serde(default)]
    pub gatekeeper_failure_policy: FailurePolicy,
}

fn yes() -> bool {
    true
}

fn default_max_memory_mb() -> u32 {
    256
}

fn empty_object() -> serde_json::Value {
    serde_json::json!({})
}

fn default_inventory_budget() -> Duration {
    gatekeeper::INVENTORY_BUDGET
}

fn default_timeout() -> Duration {
    Duration::from_millis(100)
}

impl Default for OpaConfig {
    fn default() -> Self {
        OpaConfig {
            policies: Vec::new(),
            data: empty_object(),
            enforcement: Enforcement::Deny,
            eval_timeout: default_timeout(),
            max_memory_mb: default_max_memory_mb(),
            gatekeeper: true,
            inventory_budget: default_inventory_budget(),
            failure_policy: FailurePolicy::Ignore,
            gatekeeper_failure_policy: FailurePolicy::Ignore,
        }
    }
}

/// Durations written `250ms` or `2s`.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}ms", d.as_millis()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        let parsed = if let Some(ms) = text.strip_suffix("ms") {
            ms.trim().parse::<u64>().ok().map(Duration::from_millis)
        } else if let Some(s) = text.strip_suffix('s') {
            s.trim().parse::<u64>().ok().map(Duration::from_secs)
        } else {
            None
        };
        parsed.filter(|d| !d.is_zero()).ok_or_else(|| {
            serde::de::Error::custom(format!("{text:?} is not a duration like 100ms or 2s"))
        })
    }
}
