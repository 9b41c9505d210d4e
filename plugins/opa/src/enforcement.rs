//! What the `opa` processor does with a verdict: a denial's effect, and what becomes of
//! an object a policy could not judge.

use serde::{Deserialize, Serialize};

use super::*;

/// What a `deny` message does.
#[derive(
    Debug,
    Default,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    isobar_sdk::schemars::JsonSchema,
)]
#[schemars(crate = "isobar_sdk::schemars")]
#[serde(rename_all = "kebab-case")]
pub enum Enforcement {
    /// The object is invalid and not served; admission rejects it.
    #[default]
    Deny,
    /// Denials are reported as warnings only (to roll a policy out).
    Warn,
}

/// What becomes of an object a policy could not judge (the policy or its template does
/// not load, its evaluation fails or runs out of time or memory, a Constraint cannot be
/// matched, or the build had no time left for it). Either way the object gets a
/// `PolicyNotEvaluated` condition and `isobar_plugin_events_total{plugin="opa"}` counts
/// it (`failed-open:<policy>` or `failed-closed:<policy>`).
#[derive(
    Debug,
    Default,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    isobar_sdk::schemars::JsonSchema,
)]
#[schemars(crate = "isobar_sdk::schemars")]
pub enum FailurePolicy {
    /// Served unjudged, with a warning (Gatekeeper's and OPA's webhook default).
    #[default]
    #[serde(alias = "ignore")]
    Ignore,
    /// Not served (the admission webhook refuses it) until it can be judged.
    #[serde(alias = "fail")]
    Fail,
}

impl FailurePolicy {
    pub fn parse(text: &str) -> Result<FailurePolicy, String> {
        match text {
            "Ignore" | "ignore" => Ok(FailurePolicy::Ignore),
            "Fail" | "fail" => Ok(FailurePolicy::Fail),
            other => Err(format!("failure policy {other:?} is not Fail or Ignore")),
        }
    }

    /// Reports that `policy` could not judge `key` (`why`): a warning and served
    /// (`Ignore`), or an error and rejected (`Fail`).
    pub fn not_judged(
        self,
        key: &ObjectKey,
        policy: &str,
        why: &str,
        status: &mut StatusReport,
        rejected: &mut BTreeSet<ObjectKey>,
    ) {
        match self {
            FailurePolicy::Ignore => {
                isobar_sdk::telemetry::count(NAME, &format!("failed-open:{policy}"));
                status.warning(
                    key,
                    ConditionType::PolicyError,
                    Reason::PolicyNotEvaluated,
                    format!(
                        "{why}; served without this policy's judgement (failure policy Ignore)"
                    ),
                );
            }
            FailurePolicy::Fail => {
                isobar_sdk::telemetry::count(NAME, &format!("failed-closed:{policy}"));
                status.error(
                    key,
                    ConditionType::PolicyError,
                    Reason::PolicyNotEvaluated,
                    format!(
                        "{why}; not served until this policy can judge it (failure policy Fail)"
                    ),
                );
                rejected.insert(key.clone());
            }
        }
    }
}
