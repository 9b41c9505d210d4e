//! The plugin traits and the registry built-in plugins join with `inventory::submit!`.
//!
//! A build runs, in the order `contour.yaml` gives: every filter over every object, then
//! every source (each adds IR fragments and conditions), then every processor over the
//! whole IR.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::networking::v1::Ingress;
use serde::de::DeserializeOwned;

use crate::api::HTTPProxy;
use crate::condition::StatusReport;
use crate::ir::Ir;
use crate::object::{Kind, Object, ObjectKey, Objects};

/// What a build reads: every stored object, less those a filter turned away.
#[derive(Debug, Clone, Copy)]
pub struct BuildContext<'a> {
    pub objects: &'a Objects,
    rejected: &'a BTreeSet<ObjectKey>,
}

impl<'a> BuildContext<'a> {
    pub fn new(objects: &'a Objects, rejected: &'a BTreeSet<ObjectKey>) -> Self {
        BuildContext { objects, rejected }
    }

    pub fn admitted(&self, key: &ObjectKey) -> bool {
        !self.rejected.contains(key)
    }

    /// Admitted Ingresses, in namespace/name order.
    pub fn ingresses(&self) -> impl Iterator<Item = (ObjectKey, &'a Arc<Ingress>)> + '_ {
        self.objects
            .ingresses
            .iter()
            .filter_map(move |((ns, name), obj)| {
                let key = ObjectKey::new(Kind::Ingress, ns, name);
                self.admitted(&key).then_some((key, obj))
            })
    }

    /// Admitted HTTPProxies, in namespace/name order.
    pub fn httpproxies(&self) -> impl Iterator<Item = (ObjectKey, &'a Arc<HTTPProxy>)> + '_ {
        self.objects
            .httpproxies
            .iter()
            .filter_map(move |((ns, name), obj)| {
                let key = ObjectKey::new(Kind::HTTPProxy, ns, name);
                self.admitted(&key).then_some((key, obj))
            })
    }
}

impl<'a> BuildContext<'a> {
    /// One admitted HTTPProxy by namespace and name.
    pub fn httpproxy(&self, namespace: &str, name: &str) -> Option<&'a Arc<HTTPProxy>> {
        let key = ObjectKey::new(Kind::HTTPProxy, namespace, name);
        if !self.admitted(&key) {
            return None;
        }
        self.objects
            .httpproxies
            .get(&(namespace.to_string(), name.to_string()))
    }
}

/// Turns one family of objects into IR.
pub trait Source: Send + Sync {
    /// The kinds this source reads; providers watch exactly the union of these.
    fn kinds(&self) -> &'static [Kind];
    fn build(&self, ctx: &BuildContext<'_>, ir: &mut Ir, status: &mut StatusReport);
}

/// Decides whether an object takes part in the build at all.
pub trait Filter: Send + Sync {
    /// False turns the object away; the filter may say why in `status`.
    fn admit(&self, object: &Object, status: &mut StatusReport) -> bool;
}

/// Validates or transforms the build as a whole: `reject` runs before the sources, with
/// a view of every admitted object (to settle conflicts between them), and `process`
/// after them, on the IR.
pub trait Processor: Send + Sync {
    /// Objects the sources must not see; the processor says why in `status`.
    fn reject(&self, _ctx: &BuildContext<'_>, _status: &mut StatusReport) -> BTreeSet<ObjectKey> {
        BTreeSet::new()
    }

    fn process(&self, _ctx: &BuildContext<'_>, _ir: &mut Ir, _status: &mut StatusReport) {}
}

/// A plugin setting that cannot be used; the message names the field and the valid choices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

pub type SourceFactory = fn(&serde_json::Value) -> Result<Box<dyn Source>, ConfigError>;
pub type FilterFactory = fn(&serde_json::Value) -> Result<Box<dyn Filter>, ConfigError>;
pub type ProcessorFactory = fn(&serde_json::Value) -> Result<Box<dyn Processor>, ConfigError>;

/// How a plugin is built from its config section.
#[derive(Debug, Clone, Copy)]
pub enum Factory {
    Source(SourceFactory),
    Filter(FilterFactory),
    Processor(ProcessorFactory),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PluginKind {
    Source,
    Filter,
    Processor,
}

impl PluginKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::Source => "source",
            PluginKind::Filter => "filter",
            PluginKind::Processor => "processor",
        }
    }
}

/// One built-in plugin, found by `name` at start-up.
#[derive(Debug)]
pub struct PluginRegistration {
    pub name: &'static str,
    /// One line for `isobar plugins` and error messages.
    pub summary: &'static str,
    pub factory: Factory,
}

impl PluginRegistration {
    pub fn kind(&self) -> PluginKind {
        match self.factory {
            Factory::Source(_) => PluginKind::Source,
            Factory::Filter(_) => PluginKind::Filter,
            Factory::Processor(_) => PluginKind::Processor,
        }
    }
}

inventory::collect!(PluginRegistration);

/// Every plugin linked into this binary, sorted by name.
pub fn registered() -> Vec<&'static PluginRegistration> {
    let mut all: Vec<_> = inventory::iter::<PluginRegistration>.into_iter().collect();
    all.sort_by_key(|p| p.name);
    all
}

/// Reads a plugin's section; a missing section (`null`) gives the defaults.
pub fn parse_config<T: DeserializeOwned + Default>(
    value: &serde_json::Value,
) -> Result<T, ConfigError> {
    if value.is_null() {
        return Ok(T::default());
    }
    serde_json::from_value(value.clone()).map_err(|e| ConfigError(e.to_string()))
}

/// Names from a list setting whose entries may themselves be comma-separated (as a
/// `--flag a,b` arrives), trimmed, without empty ones.
pub fn comma_separated(entries: &[String]) -> Vec<String> {
    entries
        .iter()
        .flat_map(|n| n.split(','))
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}
