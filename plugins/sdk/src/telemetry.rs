//! Counters a plugin raises for the host to export as metrics
//! (`isobar_plugin_events_total{plugin, event}`), so a plugin reports what went wrong
//! without knowing how the host serves metrics.

use std::collections::BTreeMap;
use std::sync::Mutex;

static EVENTS: Mutex<BTreeMap<(String, String), u64>> = Mutex::new(BTreeMap::new());

/// Counts one `event` (a short, bounded label such as `fuel-exhausted:name`) of `plugin`.
pub fn count(plugin: &str, event: &str) {
    let mut events = EVENTS.lock().unwrap_or_else(|p| p.into_inner());
    *events
        .entry((plugin.to_string(), event.to_string()))
        .or_default() += 1;
}

/// Every (plugin, event) counted so far, with its total.
pub fn totals() -> Vec<((String, String), u64)> {
    let events = EVENTS.lock().unwrap_or_else(|p| p.into_inner());
    events.iter().map(|(k, v)| (k.clone(), *v)).collect()
}
