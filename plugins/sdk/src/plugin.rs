//! The plugin traits and the registry built-in plugins join with `inventory::submit!`.
//!
//! A build runs, in the order `contour.yaml` gives: every filter over every object, then
//! every source (each adds IR fragments and conditions), then every processor over the
//! whole IR.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::condition::StatusReport;
use crate::ir::Ir;
use crate::kind::{Kind, Resource};
use crate::object::{Object, ObjectKey, Objects};

/// Which namespaces may use which secrets of other namespaces. Processors fill it
/// (`tls-delegation`, from TLSCertificateDelegations) before the sources run; with none,
/// no secret is usable outside its own namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretGrants {
    /// (secret namespace, secret name) → namespaces allowed to use it (`*`: all).
    map: BTreeMap<(String, String), BTreeSet<String>>,
}

static NO_GRANTS: SecretGrants = SecretGrants {
    map: BTreeMap::new(),
};

impl SecretGrants {
    pub fn grant(&mut self, namespace: &str, name: &str, to: &str) {
        self.map
            .entry((namespace.to_string(), name.to_string()))
            .or_default()
            .insert(to.to_string());
    }

    /// Whether objects in `user_namespace` may use secret `namespace/name`; always true
    /// within one namespace.
    pub fn permits(&self, namespace: &str, name: &str, user_namespace: &str) -> bool {
        namespace == user_namespace
            || self
                .map
                .get(&(namespace.to_string(), name.to_string()))
                .is_some_and(|to| to.contains("*") || to.contains(user_namespace))
    }
}

/// What a build reads: every stored object, less those a filter turned away.
///
/// EndpointSlices are here for completeness, but a plugin's output must not depend on
/// them: an EndpointSlice change does not run the pipeline, it only recomputes the
/// ClusterLoadAssignments of the Services it belongs to (from the IR's clusters).
#[derive(Debug, Clone, Copy)]
pub struct BuildContext<'a> {
    pub objects: &'a Objects,
    rejected: &'a BTreeSet<ObjectKey>,
    grants: &'a SecretGrants,
    /// `tls.fallback-certificate`: (namespace, name), for vhosts that enable it.
    fallback: Option<&'a (String, String)>,
    /// In a dry build (admission), the one object whose verdict is wanted.
    focus: Option<&'a ObjectKey>,
    /// In a dry build, every object (`objects` then holds only those the verdict
    /// depends on).
    store: Option<&'a Objects>,
    /// In a build of part of the store (a change spliced into the previous build), the
    /// routing objects it covers; the others are still looked up, never iterated.
    scope: Option<&'a BTreeSet<ObjectKey>>,
    /// `enableExternalNameService`: ExternalName Services are routed to.
    external_names: bool,
}

impl<'a> BuildContext<'a> {
    /// A context without secret grants.
    pub fn new(objects: &'a Objects, rejected: &'a BTreeSet<ObjectKey>) -> Self {
        BuildContext {
            objects,
            rejected,
            grants: &NO_GRANTS,
            fallback: None,
            focus: None,
            store: None,
            scope: None,
            external_names: false,
        }
    }

    /// Iterates only the routing objects in `scope` (when given).
    pub fn with_scope(self, scope: Option<&'a BTreeSet<ObjectKey>>) -> Self {
        BuildContext { scope, ..self }
    }

    /// A dry build over part of the store: `objects` holds what the verdict on `focus`
    /// depends on, `store` everything (for processors that read the whole inventory).
    pub fn with_store(self, store: Option<&'a Objects>) -> Self {
        BuildContext { store, ..self }
    }

    /// Every stored object, even in a dry build over part of them.
    pub fn store(&self) -> &'a Objects {
        self.store.unwrap_or(self.objects)
    }

    /// A dry build made to judge one object (the admission webhook's candidate).
    pub fn with_focus(self, focus: Option<&'a ObjectKey>) -> Self {
        BuildContext { focus, ..self }
    }

    /// In a build of part of the store, the routing objects it covers (those of them
    /// that were deleted too); `None` in a full build.
    pub fn scope(&self) -> Option<&'a BTreeSet<ObjectKey>> {
        self.scope
    }

    /// The object a dry build judges, if this is one. Conditions on other objects are
    /// then only read to compare; a processor whose per-object work is costly (a
    /// policy evaluation) may do it for this object alone.
    pub fn focus(&self) -> Option<&'a ObjectKey> {
        self.focus
    }

    pub fn with_fallback_certificate(self, fallback: Option<&'a (String, String)>) -> Self {
        BuildContext { fallback, ..self }
    }

    pub fn with_external_names(self, external_names: bool) -> Self {
        BuildContext {
            external_names,
            ..self
        }
    }

    /// Whether ExternalName Services are routed to (`enableExternalNameService`): the
    /// argument sources pass to `resolve::service_cluster`.
    pub fn external_names(&self) -> bool {
        self.external_names
    }

    /// The configured fallback certificate, if any: (namespace, name).
    pub fn fallback_certificate(&self) -> Option<&'a (String, String)> {
        self.fallback
    }

    pub fn with_grants(self, grants: &'a SecretGrants) -> Self {
        BuildContext { grants, ..self }
    }

    pub fn grants(&self) -> &'a SecretGrants {
        self.grants
    }

    pub fn admitted(&self, key: &ObjectKey) -> bool {
        !self.rejected.contains(key)
    }

    /// The admitted objects of type `T`, in namespace/name order (within the scope, when
    /// there is one).
    pub fn all<T: Resource>(&self) -> impl Iterator<Item = (ObjectKey, &'a T)> + '_ {
        self.objects_of(T::KIND)
            .filter_map(|(key, o)| Some((key, o.get::<T>()?)))
    }

    /// The admitted objects of `kind`, whatever their type, in namespace/name order
    /// (within the scope, when there is one).
    pub fn objects_of(&self, kind: Kind) -> Box<dyn Iterator<Item = (ObjectKey, &'a Object)> + '_> {
        let all = self.objects.of_kind(kind);
        match self.scope {
            Some(scope) => Box::new(
                scope
                    .range(ObjectKey::new(kind, "", "")..)
                    .take_while(move |k| k.kind == kind)
                    .filter_map(move |key| {
                        let obj = all.get(&(key.namespace.clone(), key.name.clone()))?;
                        self.admitted(key).then(|| (key.clone(), obj))
                    }),
            ),
            None => Box::new(all.iter().filter_map(move |((ns, name), obj)| {
                let key = ObjectKey::new(kind, ns, name);
                self.admitted(&key).then_some((key, obj))
            })),
        }
    }

    /// One admitted `T` by namespace and name.
    pub fn get<T: Resource>(&self, namespace: &str, name: &str) -> Option<&'a T> {
        if !self.rejected.is_empty() && !self.admitted(&ObjectKey::new(T::KIND, namespace, name)) {
            return None;
        }
        self.objects.get(namespace, name)
    }
}

impl BuildContext<'_> {
    /// The secret `reference` (`name` or `namespace/name`) as seen from `user_namespace`:
    /// its namespace and name when it may be used there.
    fn secret_ref<'r>(
        &self,
        user_namespace: &'r str,
        reference: &'r str,
    ) -> Result<(&'r str, &'r str), (crate::Reason, String)> {
        let (ns, name) =
            crate::secret::split_reference(reference, user_namespace).ok_or_else(|| {
                (
                    crate::Reason::SecretNotValid,
                    format!(
                        "Secret \"{reference}\" is not a valid reference (name or namespace/name)"
                    ),
                )
            })?;
        if !self.grants.permits(ns, name, user_namespace) {
            return Err((
                crate::Reason::DelegationNotPermitted,
                format!("Secret \"{ns}/{name}\" certificate delegation not permitted"),
            ));
        }
        Ok((ns, name))
    }

    fn secret_check<'r>(
        &self,
        user_namespace: &'r str,
        reference: &'r str,
    ) -> Result<(&'r str, &'r str, &'_ crate::secret::SecretCheck), (crate::Reason, String)> {
        let (ns, name) = self.secret_ref(user_namespace, reference)?;
        let check = self.objects.secret_check(ns, name).ok_or_else(|| {
            (
                crate::Reason::SecretNotValid,
                format!(
                    "Secret \"{ns}/{name}\" is invalid: {}",
                    crate::SECRET_NOT_FOUND
                ),
            )
        })?;
        Ok((ns, name, check))
    }

    /// A certificate and key for serving TLS: its SDS name and what goes over SDS.
    pub fn certificate(
        &self,
        user_namespace: &str,
        reference: &str,
    ) -> Result<(String, crate::ir::ServedSecret), (crate::Reason, String)> {
        let (ns, name, check) = self.secret_check(user_namespace, reference)?;
        match &check.certificate {
            Ok(cert) => Ok((
                crate::secret::sds_name(ns, name),
                crate::ir::ServedSecret {
                    namespace: ns.to_string(),
                    name: name.to_string(),
                    certificate: cert.clone(),
                },
            )),
            Err(e) => Err((
                crate::Reason::SecretNotValid,
                format!("Secret \"{ns}/{name}\" is invalid: {e}"),
            )),
        }
    }

    /// The JWKS under data key `key` of the `Opaque` Secret `name` in `namespace` (a JWT
    /// provider's `localJWKS`: the proxy's own namespace, no delegation), as Contour's
    /// main words why not.
    pub fn jwks(&self, namespace: &str, name: &str, key: &str) -> Result<String, String> {
        let check = self.objects.secret_check(namespace, name);
        let check = check.ok_or_else(|| "Secret not found".to_string())?;
        check.jwks(key).map(|jwks| jwks.to_string())
    }

    /// A CA bundle (`ca.crt`).
    pub fn ca_bundle(
        &self,
        user_namespace: &str,
        reference: &str,
    ) -> Result<crate::ir::PemBundle, (crate::Reason, String)> {
        let (ns, name, check) = self.secret_check(user_namespace, reference)?;
        check.ca.clone().map(Into::into).map_err(|e| {
            (
                crate::Reason::SecretNotValid,
                format!("Secret \"{ns}/{name}\" is invalid: {e}"),
            )
        })
    }

    /// Certificate revocation lists (`crl.pem`).
    pub fn crl(
        &self,
        user_namespace: &str,
        reference: &str,
    ) -> Result<crate::ir::PemBundle, (crate::Reason, String)> {
        let (ns, name, check) = self.secret_check(user_namespace, reference)?;
        check.crl.clone().map(Into::into).map_err(|e| {
            (
                crate::Reason::SecretNotValid,
                format!("Secret \"{ns}/{name}\" is invalid: {e}"),
            )
        })
    }
}

/// What one routing object claims and names: a change to it reaches every object
/// claiming one of its hosts or including it or included by it, and a change to a
/// Service or routing object it names reaches it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The vhost FQDNs it adds routes to, as the source's IR spells them.
    pub hosts: Vec<String>,
    /// The objects it includes (their routes become part of its vhosts).
    pub includes: Vec<ObjectKey>,
    /// The Services (namespace, name) it sends traffic to.
    pub services: Vec<(String, String)>,
    /// Other routing objects whose output goes into its own (the ExtensionService its
    /// vhost's authorization calls): a change to one of them reaches it.
    pub uses: Vec<ObjectKey>,
    /// For an object others use: a digest of everything their output reads of it. A
    /// change that leaves it as it was does not reach them (an ExtensionService's
    /// balancing goes only into its own cluster). `None`: every change reaches them.
    pub face: Option<u64>,
}

/// Turns one family of objects into IR.
pub trait Source: Send + Sync {
    /// The kinds this source turns into routes, its own: filters judge their objects,
    /// a change to one is rebuilt with what it is linked to, the admission webhook
    /// reviews them and their status is written back.
    fn kinds(&self) -> &'static [Kind];

    /// Other kinds it reads (Services, EndpointSlices, Secrets, …). Providers watch the
    /// union of every enabled plugin's kinds.
    fn reads(&self) -> &'static [Kind] {
        &[]
    }

    /// What an object of one of its kinds claims and names (see [`Claim`]), as
    /// `objects` has it now; an object it does not have claims nothing.
    fn claim(&self, _objects: &Objects, _key: &ObjectKey) -> Claim {
        Claim::default()
    }

    fn build(&self, ctx: &BuildContext<'_>, ir: &mut Ir, status: &mut StatusReport);

    /// Whether this plugin's output for an object depends only on the objects linked to
    /// it: those it includes or is included by, and those claiming one of its hosts.
    /// When every enabled plugin says so, a change is rebuilt over the objects it reaches
    /// and spliced into the previous build; otherwise every change rebuilds everything.
    fn local(&self) -> bool {
        false
    }

    /// Whether its objects may name Services in namespaces other than their own (Gateway
    /// API routes, under a ReferenceGrant): then a change to a Service looks for the
    /// objects naming it among all of its objects, not only those of its namespace.
    fn names_other_namespaces(&self) -> bool {
        false
    }

    /// Kinds of its own whose objects' output depends on every object of its kinds (a
    /// Gateway's listeners carry the count of routes attached to them): a change to one
    /// is built in full, and their status is taken from every build, spliced or not.
    fn whole_kinds(&self) -> &'static [Kind] {
        &[]
    }

    /// The controller name its route-style statuses are written under (a route's
    /// `status.parents[].controllerName`, a policy's ancestors'): Gateway API's
    /// `controllerName` setting. `None`: Contour's default.
    fn controller_name(&self) -> Option<&str> {
        None
    }
}

/// Decides whether an object takes part in the build at all.
pub trait Filter: Send + Sync {
    /// False turns the object away; the filter may say why in `status`.
    fn admit(&self, object: &Object, status: &mut StatusReport) -> bool;

    /// Filters judge one object at a time.
    fn local(&self) -> bool {
        true
    }
}

/// Validates or transforms the build as a whole: `reject` runs before the sources, with
/// a view of every admitted object (to settle conflicts between them), and `process`
/// after them, on the IR.
pub trait Processor: Send + Sync {
    /// Kinds this processor reads beyond what the sources read.
    fn kinds(&self) -> &'static [Kind] {
        &[]
    }

    /// Kinds of its own whose status counts every object (a Gatekeeper Constraint's
    /// violations): every build reports it, a build of part of the store too.
    fn whole_kinds(&self) -> &'static [Kind] {
        &[]
    }

    /// Objects the sources must not see; the processor says why in `status`.
    fn reject(&self, _ctx: &BuildContext<'_>, _status: &mut StatusReport) -> BTreeSet<ObjectKey> {
        BTreeSet::new()
    }

    /// Grants objects of some namespaces the use of secrets in others; runs after
    /// `reject`, before the sources.
    fn grant(&self, _ctx: &BuildContext<'_>, _grants: &mut SecretGrants) {}

    fn process(&self, _ctx: &BuildContext<'_>, _ir: &mut Ir, _status: &mut StatusReport) {}

    /// Whether this plugin's output for an object depends only on the objects linked to
    /// it: those it includes or is included by, and those claiming one of its hosts.
    /// When every enabled plugin says so, a change is rebuilt over the objects it reaches
    /// and spliced into the previous build; otherwise every change rebuilds everything.
    fn local(&self) -> bool {
        false
    }

    /// Whether the last whole build left work for a later one (objects it had no time
    /// to judge): the host then builds again after the hold-off, even if nothing changes.
    fn unfinished(&self) -> bool {
        false
    }
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

/// A plugin's settings: its `plugins.<name>` section of `contour.yaml` at its defaults,
/// and their JSON schema, both from the Rust type the plugin reads them into.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    defaults: fn() -> serde_json::Value,
    schema: fn() -> serde_json::Value,
}

fn defaults_of<T: Default + Serialize>() -> serde_json::Value {
    serde_json::to_value(T::default()).unwrap_or_else(|_| serde_json::json!({}))
}

fn schema_of<T: JsonSchema>() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default()
}

impl Settings {
    /// The settings a plugin reads into a `T`.
    pub const fn of<T: Default + Serialize + JsonSchema>() -> Settings {
        Settings {
            defaults: defaults_of::<T>,
            schema: schema_of::<T>,
        }
    }

    /// The section at its defaults.
    pub fn defaults(&self) -> serde_json::Value {
        (self.defaults)()
    }

    /// The JSON schema of the section.
    pub fn schema(&self) -> serde_json::Value {
        (self.schema)()
    }
}

/// One built-in plugin, found by `name` at start-up.
#[derive(Debug)]
pub struct PluginRegistration {
    pub name: &'static str,
    /// One line for `isobar plugins` and error messages.
    pub summary: &'static str,
    pub factory: Factory,
    /// Its settings, when it has any: `contour.yaml` shows them at their defaults and
    /// `isobar plugins` prints them.
    pub settings: Option<Settings>,
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

/// How a plugin reads keys of `contour.yaml` outside its own `plugins.<name>` section
/// (Contour's top-level settings it acts on: `policy`, `globalExtAuth`, `gateway`, …),
/// registered beside the plugin and read whenever the pipeline is made.
pub struct TopLevelKeys {
    /// The plugin they configure.
    pub plugin: &'static str,
    /// From the whole of `contour.yaml` (as JSON, keys as the file spells them, every
    /// default filled in), what those keys give the plugin.
    pub read: fn(&serde_json::Value) -> FromTopLevel,
}

inventory::collect!(TopLevelKeys);

/// What `contour.yaml`'s top-level keys give one plugin.
#[derive(Debug, Default, PartialEq)]
pub struct FromTopLevel {
    /// Settings put in its section over what `plugins.<name>` says: an object's keys
    /// each replace that key; anything else replaces the section.
    pub settings: serde_json::Value,
    /// Whether they enable the plugin (a source not listed in `pipeline.sources`), and
    /// where it then goes.
    pub enable: Option<Enable>,
}

/// Where a source enabled by `contour.yaml`'s top-level keys goes in `pipeline.sources`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enable {
    First,
    Last,
}

/// Every plugin's reading of `contour.yaml`'s top-level keys, by plugin name.
pub fn top_level_keys() -> Vec<&'static TopLevelKeys> {
    let mut all: Vec<_> = inventory::iter::<TopLevelKeys>.into_iter().collect();
    all.sort_by_key(|k| k.plugin);
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
