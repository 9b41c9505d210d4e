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

mod config;
mod enforcement;
pub mod gatekeeper;
mod inventory;
mod join;
mod rego;
mod wasm;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::plugin::{ConfigError, Factory, PluginRegistration, parse_config};
use isobar_sdk::{BuildContext, ObjectKey, Processor, StatusReport};

pub use config::{Enforcement, FailurePolicy, OpaConfig};
pub use inventory::{Inventory, input_for};

pub const NAME: &str = "opa";

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

    /// A policy's verdict on `key` in its status: each denial an error (and the object
    /// refused) under `enforcement: deny`, a warning under `warn`; each warning a warning.
    fn report(
        &self,
        key: &ObjectKey,
        verdict: Verdict,
        status: &mut StatusReport,
        rejected: &mut BTreeSet<ObjectKey>,
    ) {
        for message in verdict.deny {
            match self.enforcement {
                Enforcement::Deny => {
                    status.error(
                        key,
                        ConditionType::PolicyError,
                        Reason::PolicyDenied,
                        message,
                    );
                    rejected.insert(key.clone());
                }
                Enforcement::Warn => status.warning(
                    key,
                    ConditionType::PolicyError,
                    Reason::PolicyWarning,
                    message,
                ),
            }
        }
        for message in verdict.warn {
            status.warning(
                key,
                ConditionType::PolicyError,
                Reason::PolicyWarning,
                message,
            );
        }
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
                Ok(verdict) => self.report(&key, verdict, status, &mut rejected),
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
