//! The `opa` processor: admission policies written in Rego (evaluated in-process by
//! regorus) or compiled by `opa build -t wasm` (run by opa-wasm on wasmtime).
//!
//! Every policy is asked about every admitted HTTPProxy, Ingress and Gateway API route
//! (HTTPRoute, GRPCRoute, TLSRoute, TCPRoute), before the sources
//! run. A `deny` message turns the object away with a `PolicyDenied` error (the admission
//! webhook rejects it with the same message); a `warn` message becomes a `PolicyWarning`.
//! The contract a policy is written against (`input`, `data.inventory`, `data.isobar`,
//! `data.config`) is documented in `policies/README.md`. Policies written for OPA
//! Gatekeeper (`violation` over `input.review` and `input.parameters`) or for OPA's
//! kube-mgmt (`deny` over `input.request`) are read as written; ConstraintTemplates and
//! Constraints are enforced with Gatekeeper's semantics (`gatekeeper.rs`).

pub mod gatekeeper;
mod inventory;
mod join;
mod rego;
mod wasm;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::plugin::{ConfigError, Factory, PluginRegistration, parse_config};
use isobar_sdk::{BuildContext, ObjectKey, Processor, StatusReport};

pub use inventory::{Inventory, input_for};

pub const NAME: &str = "opa";

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

/// What one policy said about one object.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub deny: Vec<String>,
    pub warn: Vec<String>,
}

/// One loaded policy file.
trait Policy: Send + Sync {
    fn name(&self) -> &str;
    /// Whether the policy may read `data.inventory` (building it costs a copy of every
    /// HTTPProxy and Ingress, so it is only built when some policy may read it).
    fn reads_inventory(&self) -> bool;
    /// Readies the policy for one build with the inventory as data.
    fn prepare(&self, data: &Data) -> Result<Box<dyn Prepared + '_>, String>;
}

/// A build's `data`, as JSON and (converted once, on first use) as a regorus value.
pub struct Data {
    json: serde_json::Value,
    rego: std::sync::OnceLock<regorus::Value>,
}

impl Data {
    fn new(json: serde_json::Value) -> Data {
        Data {
            json,
            rego: std::sync::OnceLock::new(),
        }
    }

    fn rego(&self) -> regorus::Value {
        self.rego
            .get_or_init(|| regorus::Value::from(self.json.clone()))
            .clone()
    }
}

/// A policy with a build's data loaded, asked about objects one by one.
trait Prepared {
    fn evaluate(&mut self, input: &serde_json::Value) -> Result<Verdict, String>;
}

pub struct Opa {
    policies: Vec<Box<dyn Policy>>,
    config: serde_json::Value,
    enforcement: Enforcement,
    /// Gatekeeper's templates and constraints: enforced when on, their templates
    /// compiled once each.
    gatekeeper: Option<gatekeeper::Cache>,
    /// What becomes of objects the policy files could not judge.
    failure: FailurePolicy,
    /// The same for Constraints without their own.
    gatekeeper_failure: FailurePolicy,
    /// A build's time for templates reading `data.inventory`.
    inventory_budget: Duration,
}

impl std::fmt::Debug for Opa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opa")
            .field(
                "policies",
                &self.policies.iter().map(|p| p.name()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// The policy files a setting names, in a stable order.
fn policy_files(entries: &[String]) -> Result<Vec<PathBuf>, ConfigError> {
    let mut files = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let path = Path::new(entry);
        let meta = std::fs::metadata(path)
            .map_err(|e| ConfigError(format!("policies[{i}]: {entry}: {e}")))?;
        if meta.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| ConfigError(format!("policies[{i}]: {entry}: {e}")))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| is_policy(p))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(path.to_path_buf());
        }
    }
    Ok(files)
}

fn is_policy(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    (name.ends_with(".rego") && !name.ends_with("_test.rego")) || name.ends_with(".wasm")
}

impl Opa {
    pub fn load(config: &OpaConfig) -> Result<Opa, ConfigError> {
        let mut policies: Vec<Box<dyn Policy>> = Vec::new();
        for file in policy_files(&config.policies)? {
            let shown = file.display().to_string();
            let policy: Box<dyn Policy> = if shown.ends_with(".wasm") {
                let bytes = std::fs::read(&file)
                    .map_err(|e| ConfigError(format!("policies: {shown}: {e}")))?;
                Box::new(
                    wasm::WasmPolicy::load(&shown, &bytes, config.max_memory_mb)
                        .map_err(|e| ConfigError(format!("policies: {e}")))?,
                )
            } else {
                let text = std::fs::read_to_string(&file)
                    .map_err(|e| ConfigError(format!("policies: {shown}: {e}")))?;
                Box::new(
                    rego::RegoPolicy::load(&shown, &text, config.eval_timeout)
                        .map_err(|e| ConfigError(format!("policies: {e}")))?,
                )
            };
            policies.push(policy);
        }
        Ok(Opa {
            policies,
            config: if config.data.is_null() {
                serde_json::json!({})
            } else {
                config.data.clone()
            },
            enforcement: config.enforcement,
            gatekeeper: config.gatekeeper.then(gatekeeper::Cache::default),
            failure: config.failure_policy,
            gatekeeper_failure: config.gatekeeper_failure_policy,
            inventory_budget: config.inventory_budget,
        })
    }

    /// The names of the loaded policies (their files).
    pub fn policy_names(&self) -> Vec<&str> {
        self.policies.iter().map(|p| p.name()).collect()
    }

    /// Asks every policy about `objects` (key and `input`) against `inventory`; the
    /// verdicts, per object, in policy order.
    pub fn judge(
        &self,
        inventory: &Inventory,
        objects: &[(ObjectKey, serde_json::Value)],
    ) -> Vec<(ObjectKey, Result<Verdict, String>)> {
        let full = self.policies.iter().any(|p| p.reads_inventory());
        let data = Data::new(inventory.data(&self.config, full));
        let mut out = Vec::new();
        for policy in &self.policies {
            let mut prepared = match policy.prepare(&data) {
                Ok(p) => p,
                Err(e) => {
                    isobar_sdk::telemetry::count(NAME, &format!("load-error:{}", policy.name()));
                    for (key, _) in objects {
                        out.push((key.clone(), Err(format!("policy {}: {e}", policy.name()))));
                    }
                    continue;
                }
            };
            for (key, input) in objects {
                let verdict = prepared
                    .evaluate(input)
                    .map_err(|e| format!("policy {}: {e}", policy.name()));
                if verdict.is_err() {
                    isobar_sdk::telemetry::count(NAME, &format!("eval-error:{}", policy.name()));
                }
                out.push((key.clone(), verdict));
            }
        }
        out
    }
}

fn build(config: &serde_json::Value) -> Result<Box<dyn Processor>, ConfigError> {
    let config: OpaConfig = parse_config(config)?;
    Ok(Box::new(Opa::load(&config)?))
}

isobar_sdk::inventory::submit! {
    PluginRegistration {
        name: NAME,
        summary: "OPA policies (Rego, or OPA wasm) that deny or warn about HTTPProxies, Ingresses and Gateway API routes",
        factory: Factory::Processor(build),
        settings: Some(isobar_sdk::plugin::Settings::of::<OpaConfig>()),
    }
}

impl Processor for Opa {
    /// With Gatekeeper's constraints, the templates and constraints.
    fn kinds(&self) -> &'static [isobar_sdk::Kind] {
        if self.gatekeeper.is_some() {
            &[gatekeeper::CONSTRAINT_TEMPLATE, gatekeeper::CONSTRAINT]
        } else {
            &[]
        }
    }

    /// Local unless a policy or a Gatekeeper template reads `data.inventory` (every
    /// object of the cluster). A Constraint's status counts every object: a build of part
    /// of the store adds what it judged to what the last builds said of the others.
    fn local(&self) -> bool {
        self.gatekeeper
            .as_ref()
            .is_none_or(|c| !c.reads_inventory())
            && !self.policies.iter().any(|p| p.reads_inventory())
    }

    /// With Gatekeeper's constraints, the templates and Constraints: their status is
    /// reported by every build.
    fn whole_kinds(&self) -> &'static [isobar_sdk::Kind] {
        self.kinds()
    }

    /// Constraints reading `data.inventory` that ran out of the build's time.
    fn unfinished(&self) -> bool {
        self.gatekeeper
            .as_ref()
            .is_some_and(gatekeeper::Cache::unfinished)
    }

    fn reject(&self, ctx: &BuildContext<'_>, status: &mut StatusReport) -> BTreeSet<ObjectKey> {
        let mut rejected = BTreeSet::new();
        let templates: gatekeeper::Templates = match &self.gatekeeper {
            Some(cache) => gatekeeper::templates(ctx.store())
                .into_iter()
                .map(|(kind, (key, t))| {
                    let (digest, compiled) = cache.compiled(&t);
                    (kind, (key, digest, compiled))
                })
                .collect(),
            None => BTreeMap::new(),
        };
        let constraints = ctx.store().of_kind(gatekeeper::CONSTRAINT);
        if self.policies.is_empty() && templates.is_empty() && constraints.is_empty() {
            return rejected;
        }
        let templates_read = templates
            .values()
            .any(|(_, _, c)| c.as_ref().as_ref().is_ok_and(|c| c.reads_inventory));
        if let Some(cache) = &self.gatekeeper
            && ctx.focus().is_none()
            && ctx.scope().is_none()
        {
            cache.set_reads_inventory(templates_read);
        }
        let full = self.policies.iter().any(|p| p.reads_inventory()) || templates_read;
        let wanted = |key: &ObjectKey| ctx.focus().is_none_or(|f| f == key);
        let mut judged = Vec::new();
        for kind in inventory::judged() {
            for (key, object) in ctx.objects_of(kind) {
                if wanted(&key) {
                    judged.push((key, object));
                }
            }
        }
        // Judging one object or part of the store, the host index needs only the hosts
        // the judged objects claim: a lookup by `input.hosts` reads no other.
        let only_hosts = match (ctx.focus(), ctx.scope()) {
            (Some(focus), _) => Some(
                focus_object(ctx, focus)
                    .map(|o| inventory::hosts(&o))
                    .unwrap_or_default(),
            ),
            (None, Some(_)) => Some(
                judged
                    .iter()
                    .flat_map(|(_, object)| inventory::hosts(object))
                    .collect(),
            ),
            (None, None) => None,
        };
        let inventory = Inventory::of(ctx.store(), full, only_hosts.as_deref());
        if let Some(cache) = &self.gatekeeper {
            let data = Data::new(inventory.data(&self.config, full));
            let judge = gatekeeper::Judge {
                templates: &templates,
                constraints: constraints.values().collect(),
                data: &data,
                whole: ctx.focus().is_none(),
                scope: ctx.scope(),
                cache,
                failure: self.gatekeeper_failure,
                budget: self.inventory_budget,
                inventory: &inventory,
            };
            judge.enforce(&judged, status, &mut rejected);
        }
        if self.policies.is_empty() {
            return rejected;
        }
        let inputs: Vec<(ObjectKey, serde_json::Value)> = judged
            .into_iter()
            .map(|(key, object)| (key, input_for(object)))
            .collect();
        // Verdicts come policy by policy, each over every input.
        let names = self.policy_names();
        let per_policy = inputs.len().max(1);
        for (i, (key, verdict)) in self.judge(&inventory, &inputs).into_iter().enumerate() {
            match verdict {
                Ok(verdict) => {
                    for message in verdict.deny {
                        match self.enforcement {
                            Enforcement::Deny => {
                                status.error(
                                    &key,
                                    ConditionType::PolicyError,
                                    Reason::PolicyDenied,
                                    message,
                                );
                                rejected.insert(key.clone());
                            }
                            Enforcement::Warn => status.warning(
                                &key,
                                ConditionType::PolicyError,
                                Reason::PolicyWarning,
                                message,
                            ),
                        }
                    }
                    for message in verdict.warn {
                        status.warning(
                            &key,
                            ConditionType::PolicyError,
                            Reason::PolicyWarning,
                            message,
                        );
                    }
                }
                Err(error) => {
                    // Rolling a policy out (`enforcement: warn`) refuses nothing.
                    let failure = match self.enforcement {
                        Enforcement::Deny => self.failure,
                        Enforcement::Warn => FailurePolicy::Ignore,
                    };
                    let policy = names.get(i / per_policy).copied().unwrap_or_default();
                    failure.not_judged(&key, policy, &error, status, &mut rejected);
                }
            }
        }
        rejected
    }
}

fn focus_object(ctx: &BuildContext<'_>, key: &ObjectKey) -> Option<isobar_sdk::Object> {
    ctx.store().object(key).cloned()
}

/// Reads a policy's answer for one rule (`rule` names it): a set or array of messages,
/// each a string or an object with `msg` (Gatekeeper's shape), or a boolean (`true`
/// counts as one message naming the rule).
fn messages(value: &serde_json::Value, rule: &str) -> Result<Vec<String>, String> {
    let items = match value {
        serde_json::Value::Null | serde_json::Value::Bool(false) => return Ok(Vec::new()),
        serde_json::Value::Bool(true) => {
            return Ok(vec![format!(
                "{rule} is true (a boolean rule: give it messages to say why)"
            )]);
        }
        serde_json::Value::Array(items) => items,
        other => return Err(format!("expected a set of messages, got {other}")),
    };
    let mut out = Vec::new();
    for item in items {
        match item {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Object(o) => match o.get("msg") {
                Some(serde_json::Value::String(s)) => out.push(s.clone()),
                _ => return Err(format!("a message object without a string msg: {item}")),
            },
            other => out.push(other.to_string()),
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}
