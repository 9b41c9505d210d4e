//! The plugin pipeline: plugins chosen and configured by `contour.yaml`, run in order over
//! the object store to produce the IR and every object's conditions.

use std::collections::{BTreeMap, BTreeSet};

use isobar_sdk::plugin::{Factory, PluginKind, PluginRegistration, SecretGrants, registered};
use isobar_sdk::{
    BuildContext, Filter, Ir, Kind, Object, ObjectKey, Objects, Processor, Source, StatusReport,
};

use crate::config::PipelineConfig;

/// The built-in plugins this binary links (the `isobar-builtin-plugins` crate names
/// each, which keeps its registration from being dropped by the linker).
pub const BUILTIN_PLUGINS: &[&str] = isobar_builtin_plugins::NAMES;

/// A plugin name or setting that stops start-up.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    /// A name in `pipeline.<list>` that no plugin of that kind has.
    #[error("{key}: unknown {kind} {name:?}; valid {kind}s: {valid}")]
    UnknownPlugin {
        key: String,
        kind: &'static str,
        name: String,
        valid: String,
    },
    /// The same plugin listed twice.
    #[error("{key}: {name:?} is listed more than once")]
    Duplicate { key: String, name: String },
    /// A `plugins.<name>` section for a plugin that does not exist.
    #[error("plugins.{name}: no plugin is named {name:?}; valid plugins: {valid}")]
    UnknownSection { name: String, valid: String },
    /// A plugin refused its settings.
    #[error("plugins.{name}: {message}")]
    BadSetting { name: String, message: String },
}

pub struct Pipeline {
    filters: Vec<(&'static str, Box<dyn Filter>)>,
    sources: Vec<(&'static str, Box<dyn Source>)>,
    processors: Vec<(&'static str, Box<dyn Processor>)>,
    /// `tls.fallback-certificate`, offered to the sources.
    fallback: Option<(String, String)>,
    /// `enableExternalNameService`, offered to the sources.
    external_names: bool,
    /// The listeners every build starts with (from the configuration).
    listeners: Vec<isobar_sdk::ir::Listener>,
}

/// What one build produced.
pub struct BuildOutput {
    pub ir: Ir,
    pub status: StatusReport,
}

impl Pipeline {
    pub fn from_config(
        config: &PipelineConfig,
        sections: &BTreeMap<String, serde_json::Value>,
    ) -> Result<Pipeline, PipelineError> {
        let all = registered();
        let valid_all = || all.iter().map(|p| p.name).collect::<Vec<_>>().join(", ");
        if let Some(name) = sections
            .keys()
            .find(|n| !all.iter().any(|p| p.name == n.as_str()))
        {
            return Err(PipelineError::UnknownSection {
                name: name.clone(),
                valid: valid_all(),
            });
        }
        let pick = |list: &str, kind: PluginKind, names: &[String]| {
            let mut out = Vec::new();
            let mut seen = BTreeSet::new();
            for (i, name) in names.iter().enumerate() {
                let key = format!("pipeline.{list}[{i}]");
                let found = all
                    .iter()
                    .find(|p| p.name == name.as_str() && p.kind() == kind);
                let Some(found) = found else {
                    return Err(PipelineError::UnknownPlugin {
                        key,
                        kind: kind.as_str(),
                        name: name.clone(),
                        valid: all
                            .iter()
                            .filter(|p| p.kind() == kind)
                            .map(|p| p.name)
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                };
                if !seen.insert(name.as_str()) {
                    return Err(PipelineError::Duplicate {
                        key,
                        name: name.clone(),
                    });
                }
                out.push(*found);
            }
            Ok(out)
        };
        let section = |p: &PluginRegistration| {
            sections
                .get(p.name)
                .cloned()
                .unwrap_or(serde_json::Value::Null)
        };
        let bad = |p: &PluginRegistration, e: isobar_sdk::plugin::ConfigError| {
            PipelineError::BadSetting {
                name: p.name.to_string(),
                message: e.0,
            }
        };

        let mut pipeline = Pipeline {
            filters: Vec::new(),
            sources: Vec::new(),
            processors: Vec::new(),
            fallback: None,
            external_names: false,
            listeners: Vec::new(),
        };
        for p in pick("filters", PluginKind::Filter, &config.filters)? {
            if let Factory::Filter(make) = p.factory {
                pipeline
                    .filters
                    .push((p.name, make(&section(p)).map_err(|e| bad(p, e))?));
            }
        }
        for p in pick("sources", PluginKind::Source, &config.sources)? {
            if let Factory::Source(make) = p.factory {
                pipeline
                    .sources
                    .push((p.name, make(&section(p)).map_err(|e| bad(p, e))?));
            }
        }
        for p in pick("processors", PluginKind::Processor, &config.processors)? {
            if let Factory::Processor(make) = p.factory {
                pipeline
                    .processors
                    .push((p.name, make(&section(p)).map_err(|e| bad(p, e))?));
            }
        }
        Ok(pipeline)
    }

    /// The pipeline `config` asks for: its plugins, Envoy's listeners and the fallback
    /// certificate.
    pub fn for_config(config: &crate::config::Config) -> Result<Pipeline, PipelineError> {
        let mut pipeline = config.pipeline.clone();
        let mut plugins = config.plugins.clone();
        // Contour's top-level keys (`policy`, `globalExtAuth`, `gateway`, …) configure,
        // and may enable, the plugins that act on them, as each plugin reads them.
        let contour = serde_json::to_value(config).unwrap_or_default();
        for keys in isobar_sdk::plugin::top_level_keys() {
            let given = (keys.read)(&contour);
            let empty = match &given.settings {
                serde_json::Value::Null => true,
                serde_json::Value::Object(map) => map.is_empty(),
                _ => false,
            };
            if !empty {
                let section = plugins
                    .entry(keys.plugin.to_string())
                    .or_insert_with(|| serde_json::json!({}));
                match (section.as_object_mut(), given.settings) {
                    (Some(into), serde_json::Value::Object(from)) => into.extend(from),
                    (_, other) => *section = other,
                }
            }
            let listed = pipeline.sources.iter().any(|s| s == keys.plugin);
            match given.enable {
                Some(_) if listed => {}
                Some(isobar_sdk::plugin::Enable::First) => {
                    pipeline.sources.insert(0, keys.plugin.to_string());
                }
                Some(isobar_sdk::plugin::Enable::Last) => {
                    pipeline.sources.push(keys.plugin.to_string());
                }
                None => {}
            }
        }
        Ok(Pipeline::from_config(&pipeline, &plugins)?
            .with_listeners(config.listeners())
            .with_fallback_certificate(config.tls.fallback())
            .with_external_names(config.enable_external_name_service))
    }

    /// Sets the listeners every build starts with, before the sources write to them.
    pub fn with_listeners(mut self, listeners: Vec<isobar_sdk::ir::Listener>) -> Self {
        self.listeners = listeners;
        self
    }

    /// Sets `enableExternalNameService` for the sources.
    pub fn with_external_names(mut self, external_names: bool) -> Self {
        self.external_names = external_names;
        self
    }

    /// Sets `tls.fallback-certificate` ((namespace, name)) for the sources.
    pub fn with_fallback_certificate(mut self, fallback: Option<(String, String)>) -> Self {
        self.fallback = fallback;
        self
    }

    /// Whether a change may be rebuilt over the objects it reaches alone (see
    /// `Processor::local`): every enabled plugin says its output is local.
    pub fn local(&self) -> bool {
        self.filters.iter().all(|(_, f)| f.local())
            && self.sources.iter().all(|(_, s)| s.local())
            && self.processors.iter().all(|(_, p)| p.local())
    }

    /// Whether a processor's last whole build left objects for a later build to judge.
    pub fn unfinished(&self) -> bool {
        self.processors.iter().any(|(_, p)| p.unfinished())
    }

    /// The controller name route-style statuses are written under: the first source's
    /// that names one (Gateway API's `controllerName`), else Contour's default.
    pub fn controller_name(&self) -> &str {
        self.sources
            .iter()
            .find_map(|(_, s)| s.controller_name())
            .unwrap_or(crate::runner::status::CONTROLLER_NAME)
    }

    /// Whether objects of `kind` may name Services of other namespaces (see
    /// `Source::names_other_namespaces`).
    pub fn names_other_namespaces(&self, kind: Kind) -> bool {
        self.sources
            .iter()
            .any(|(_, s)| s.kinds().contains(&kind) && s.names_other_namespaces())
    }

    /// Whether a change to an object of `kind` is built in full, and the status of its
    /// objects taken from every build (see `Source::whole_kinds`).
    pub fn whole(&self, kind: Kind) -> bool {
        self.sources
            .iter()
            .any(|(_, s)| s.whole_kinds().contains(&kind))
            || self
                .processors
                .iter()
                .any(|(_, p)| p.whole_kinds().contains(&kind))
    }

    /// The kinds the enabled sources turn into routes (see `Source::kinds`), in kind
    /// order.
    pub fn routing_kinds(&self) -> BTreeSet<Kind> {
        self.sources
            .iter()
            .flat_map(|(_, s)| s.kinds().iter().copied())
            .collect()
    }

    /// Whether some enabled source turns objects of `kind` into routes.
    pub fn routes(&self, kind: Kind) -> bool {
        self.sources.iter().any(|(_, s)| s.kinds().contains(&kind))
    }

    /// What a routing object claims and names, as the source of its kind says.
    pub fn claim(&self, objects: &Objects, key: &ObjectKey) -> isobar_sdk::Claim {
        let source = self
            .sources
            .iter()
            .find(|(_, s)| s.kinds().contains(&key.kind));
        source
            .map(|(_, s)| s.claim(objects, key))
            .unwrap_or_default()
    }

    /// The kinds the enabled plugins read: what a provider needs to watch.
    pub fn kinds(&self) -> BTreeSet<Kind> {
        self.sources
            .iter()
            .flat_map(|(_, s)| s.kinds().iter().chain(s.reads()).copied())
            .chain(
                self.processors
                    .iter()
                    .flat_map(|(_, p)| p.kinds().iter().copied()),
            )
            .collect()
    }

    /// Filters, then sources, then processors: objects → IR and conditions.
    pub fn build(&self, objects: &Objects) -> BuildOutput {
        self.build_with(objects, None, None, None)
    }

    /// A build of the routing objects in `scope` alone (and everything they look up):
    /// what a change that reaches only them is spliced in from. Needs [`Pipeline::local`].
    pub fn build_scoped(&self, objects: &Objects, scope: &BTreeSet<ObjectKey>) -> BuildOutput {
        self.build_with(objects, None, None, Some(scope))
    }

    /// A build made to judge `focus` (admission) over `objects`, the part of `store` the
    /// verdict depends on: processors may do their per-object work (policy evaluation)
    /// for `focus` alone, and read `store` for the whole inventory.
    pub fn build_dry(
        &self,
        objects: &Objects,
        store: &Objects,
        focus: &isobar_sdk::ObjectKey,
    ) -> BuildOutput {
        self.build_with(objects, Some(store), Some(focus), None)
    }

    fn build_with(
        &self,
        objects: &Objects,
        store: Option<&Objects>,
        focus: Option<&isobar_sdk::ObjectKey>,
        scope: Option<&BTreeSet<ObjectKey>>,
    ) -> BuildOutput {
        let mut status = StatusReport::default();
        let mut rejected = BTreeSet::new();
        if !self.filters.is_empty() {
            let scoped = BuildContext::new(objects, &rejected).with_scope(scope);
            let routing: Vec<Object> = self
                .routing_kinds()
                .into_iter()
                .flat_map(|kind| scoped.objects_of(kind).map(|(_, o)| o.clone()))
                .collect();
            for object in routing {
                for (name, filter) in &self.filters {
                    let _span = tracing::debug_span!("filter", plugin = name).entered();
                    if !filter.admit(&object, &mut status) {
                        rejected.insert(object.key());
                        break;
                    }
                }
            }
        }
        for (name, processor) in &self.processors {
            let _span = tracing::debug_span!("processor", plugin = name).entered();
            let more = processor.reject(
                &BuildContext::new(objects, &rejected)
                    .with_focus(focus)
                    .with_store(store)
                    .with_scope(scope),
                &mut status,
            );
            rejected.extend(more);
        }
        let mut grants = SecretGrants::default();
        for (name, processor) in &self.processors {
            let _span = tracing::debug_span!("processor", plugin = name).entered();
            processor.grant(
                &BuildContext::new(objects, &rejected)
                    .with_focus(focus)
                    .with_store(store)
                    .with_scope(scope),
                &mut grants,
            );
        }
        let ctx = BuildContext::new(objects, &rejected)
            .with_grants(&grants)
            .with_fallback_certificate(self.fallback.as_ref())
            .with_external_names(self.external_names)
            .with_focus(focus)
            .with_store(store)
            .with_scope(scope);
        let mut ir = Ir::with_listeners(self.listeners.iter().cloned());
        for (name, source) in &self.sources {
            let _span = tracing::debug_span!("source", plugin = name).entered();
            source.build(&ctx, &mut ir, &mut status);
        }
        // Every listener of HTTP, whichever source made it, runs the global
        // authorization, rate limits and tracing.
        ir.spread_extensions();
        for (name, processor) in &self.processors {
            let _span = tracing::debug_span!("processor", plugin = name).entered();
            processor.process(&ctx, &mut ir, &mut status);
        }
        ir.prune_clusters();
        BuildOutput { ir, status }
    }
}

/// Every plugin linked in, for `isobar plugins` and for tests.
pub fn registered_plugins() -> Vec<&'static PluginRegistration> {
    registered()
}
