//! Contour's status shapes: HTTPProxy's (`Valid` with sub-conditions, `currentStatus`,
//! `description`, `loadBalancer`) and ExtensionService's (`conditions` alone).

use isobar_sdk::status::{StatusShape, conditions, merge_address, or_empty};
use isobar_sdk::{ObjectKey, StatusReport};
use serde_json::{Value, json};

/// Contour's: a `Valid` condition with errors and warnings as sub-conditions,
/// `currentStatus`, `description`, `observedGeneration`, and `status.loadBalancer`
/// (HTTPProxy, and kinds of that shape).
#[derive(Debug)]
pub struct Contour;

impl StatusShape for Contour {
    fn render(&self, report: &StatusReport, key: &ObjectKey, _: &str) -> Option<Value> {
        serde_json::to_value(report.render(key)).ok()
    }

    fn serve_at(&self, status: &mut Value, load_balancer: &Value) {
        status["loadBalancer"] = load_balancer.clone();
    }

    fn merge(&self, current: &Value, desired: &Value, _: &str, now: &dyn Fn() -> Value) -> Value {
        let mut out = or_empty(current);
        merge_address(&mut out, desired);
        out["currentStatus"] = desired["currentStatus"].clone();
        out["description"] = desired["description"].clone();
        out["conditions"] = conditions(&current["conditions"], &desired["conditions"], now);
        out
    }
}

/// Contour's `Valid` condition alone, in `status.conditions` (ExtensionService).
#[derive(Debug)]
pub struct Conditions;

impl StatusShape for Conditions {
    fn render(&self, report: &StatusReport, key: &ObjectKey, _: &str) -> Option<Value> {
        Some(json!({"conditions": report.render(key).conditions}))
    }

    fn merge(&self, current: &Value, desired: &Value, _: &str, now: &dyn Fn() -> Value) -> Value {
        let mut out = or_empty(current);
        out["conditions"] = conditions(&current["conditions"], &desired["conditions"], now);
        out
    }
}
