//! OPA Gatekeeper's policies, enforced without Gatekeeper: ConstraintTemplates
//! (`templates.gatekeeper.sh`) and their Constraints (`constraints.gatekeeper.sh`, one
//! kind per template), read from the cluster or the manifest directory.
//!
//! A template's Rego (`spec.targets[0].rego` and `libs`, or `code[]` with
//! `engine: Rego`) is evaluated by regorus, Gatekeeper's way: `violation[{"msg": …}]`
//! over `input.review` (the object as an admission request carries it: `kind` as
//! group/version/kind, `name`, `namespace`, `object`) and `input.parameters` (the
//! Constraint's `spec.parameters`), with `data.inventory` in Gatekeeper's layout. Each
//! Constraint applies to the HTTPProxies, Ingresses and routes its `spec.match` selects
//! (`kinds`, `namespaces`, `excludedNamespaces`, `labelSelector`, `name`, `scope`), and
//! acts on a violation as its `enforcementAction` says: `deny` (the default) makes the
//! object invalid (`PolicyDenied`, not served; the webhook rejects it), `warn` gives a
//! `PolicyWarning`, `dryrun` only counts it. The Constraint's status gets
//! `totalViolations` and `violations` (the first 20, as Gatekeeper's audit writes
//! them); the template's gets `created`, or the errors that kept it from compiling.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use isobar_sdk::api::ObjectMeta;
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::{
    DynamicKinds, Kind, KindId, KindInfo, Object, ObjectKey, Objects, Resource, StatusReport,
    StatusStyle,
};

/// How many violations a Constraint's status lists (Gatekeeper's audit default).
pub const VIOLATIONS_MAX: usize = 20;

const TEMPLATE_ID: KindId = KindId::new("templates.gatekeeper.sh", "ConstraintTemplate");
pub const CONSTRAINT_TEMPLATE: Kind = Kind::new(&TEMPLATE_ID);

const CONSTRAINT_ID: KindId = KindId::new("constraints.gatekeeper.sh", "Constraint");
/// Every Constraint, whatever its kind, stored in the namespace its kind names.
pub const CONSTRAINT: Kind = Kind::new(&CONSTRAINT_ID);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConstraintTemplate {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Value,
}

impl Resource for ConstraintTemplate {
    const KIND: Kind = CONSTRAINT_TEMPLATE;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Constraint {
    /// Its own kind (`K8sHttpsOnly`): the template's `spec.crd.spec.names.kind`.
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Value,
}

impl Resource for Constraint {
    const KIND: Kind = CONSTRAINT;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: CONSTRAINT_TEMPLATE,
        versions: &["v1", "v1beta1", "v1alpha1"],
        plural: "constrainttemplates",
        namespaced: false,
        decode: isobar_sdk::kind::decode_object::<ConstraintTemplate>,
        status: StatusStyle::Fields,
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: CONSTRAINT,
        versions: &["v1beta1", "v1", "v1alpha1"],
        plural: "constraints",
        // Stored per kind: the namespace is the Constraint's kind.
        namespaced: true,
        decode: decode_constraint,
        status: StatusStyle::Fields,
    }
}

isobar_sdk::inventory::submit! {
    DynamicKinds {
        kind: CONSTRAINT,
        group: "constraints.gatekeeper.sh",
        declared_by: CONSTRAINT_TEMPLATE,
        declares: declared_kind,
    }
}

/// A Constraint, placed in the namespace its kind names (two kinds may share a name).
fn decode_constraint(mut value: Value) -> Result<Object, String> {
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if kind.is_empty() {
        return Err("a Constraint needs its kind".to_string());
    }
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("namespace".into(), kind.into());
    }
    isobar_sdk::kind::decode_object::<Constraint>(value)
}

/// The Constraint kind a template declares, and its plural (the kind in lower case, as
/// Gatekeeper names the resource).
fn declared_kind(object: &Object) -> Option<(String, String)> {
    let template = object.get::<ConstraintTemplate>()?;
    let kind = template
        .spec
        .pointer("/crd/spec/names/kind")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())?;
    Some((kind.to_string(), kind.to_ascii_lowercase()))
}

/// A template compiled: the engine with its Rego and libs, and the rule to ask.
pub struct Compiled {
    engine: regorus::Engine,
    violation: String,
    /// Whether its Rego reads `data.inventory`.
    pub reads_inventory: bool,
    /// How its inventory reads are answered from an index (see `join`); `None` when
    /// each object is judged against the whole inventory.
    joins: Option<crate::join::Joins>,
    /// Why its reads of `data.inventory` are not answered from an index.
    walked: Option<String>,
}

/// How long one build may spend on templates that read `data.inventory` by default
/// (`plugins.opa.inventory-budget`) when their reads cannot be answered from an index
/// (`join`). Such a template judges each object against every other one (at 10,000
/// Ingresses, 20 ms and more per object in regorus); the objects left over are judged
/// by later builds.
pub const INVENTORY_BUDGET: Duration = Duration::from_secs(1);

/// What Gatekeeper's enforcement keeps between builds: each template compiled (by the
/// digest of its spec), and each Constraint's messages for each object version it judged,
/// so a build judges only the objects that changed.
#[derive(Default)]
pub struct Cache {
    compiled: Mutex<HashMap<u64, Arc<Result<Compiled, String>>>>,
    verdicts: Mutex<Verdicts>,
    /// Whether the last whole build left objects unjudged (out of time).
    unfinished: std::sync::atomic::AtomicBool,
    /// The joins' values of each inventory object.
    index: crate::join::IndexCache,
    /// The objects of the last whole build's inventory.
    inventory: Mutex<Arc<Vec<Object>>>,
}

/// (Constraint, with its template's digest; the object's address) → what it said.
type Verdicts = HashMap<(u64, usize), Held>;

/// A verdict kept for the next build, and what it was made from.
#[derive(Clone)]
struct Held {
    /// The object, held so that its address is not reused.
    object: Object,
    messages: Vec<String>,
    /// With joins: the values the object offered and the inventory objects it was
    /// judged against (the verdict holds while they are the same).
    keys: Vec<Vec<String>>,
    against: Vec<Object>,
    /// A template walking the whole inventory: the inventory it was judged against.
    inventory: Option<Arc<Vec<Object>>>,
}

impl Held {
    fn against_same(&self, objects: &[&Object]) -> bool {
        self.against.len() == objects.len()
            && self.against.iter().zip(objects).all(|(a, b)| a.ptr_eq(b))
    }
}

fn digest_of(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

impl Cache {
    /// Whether the last whole build left objects for a later one.
    pub fn unfinished(&self) -> bool {
        self.unfinished.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The template compiled, and the digest of its spec.
    pub fn compiled(&self, template: &ConstraintTemplate) -> (u64, Arc<Result<Compiled, String>>) {
        let digest = digest_of(&template.spec.to_string());
        let mut cache = self.compiled.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(found) = cache.get(&digest) {
            return (digest, found.clone());
        }
        let name = template.metadata.name.clone().unwrap_or_default();
        let compiled = Arc::new(compile(&name, &template.spec));
        // Templates edited away are not kept forever.
        if cache.len() > 1024 {
            cache.clear();
        }
        cache.insert(digest, compiled.clone());
        (digest, compiled)
    }
}

/// The Rego sources of a template: (rego, libs, whether it is Rego v1).
fn sources(spec: &Value) -> Result<(String, Vec<String>, bool), String> {
    let target = spec
        .pointer("/targets/0")
        .ok_or("spec.targets is empty: a template needs a target with Rego")?;
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    if let Some(rego) = target.get("rego").and_then(Value::as_str) {
        return Ok((rego.to_string(), strings(target.get("libs")), false));
    }
    let code = target.get("code").and_then(Value::as_array);
    for entry in code.into_iter().flatten() {
        if entry.get("engine").and_then(Value::as_str) != Some("Rego") {
            continue;
        }
        let source = &entry["source"];
        if let Some(rego) = source.get("rego").and_then(Value::as_str) {
            let v1 = source.get("version").and_then(Value::as_str) == Some("v1");
            return Ok((rego.to_string(), strings(source.get("libs")), v1));
        }
    }
    Err("spec.targets[0] has no Rego (rego, or code with engine Rego); other engines (CEL) are not evaluated".to_string())
}

fn compile(name: &str, spec: &Value) -> Result<Compiled, String> {
    let (rego, libs, v1) = sources(spec)?;
    let mut engine = regorus::Engine::new();
    engine.set_rego_v0(!v1);
    engine.set_execution_timer_config(regorus::utils::limits::ExecutionTimerConfig {
        limit: std::time::Duration::from_millis(100),
        check_interval: std::num::NonZeroU32::MIN,
    });
    add_builtins(&mut engine)?;
    let file = format!("{name}.rego");
    let package = engine
        .add_policy(file.clone(), rego.clone())
        .map_err(|e| crate::rego::one_line(&e.to_string(), &file))?;
    for (i, lib) in libs.iter().enumerate() {
        let lib_file = format!("{name}.lib{i}.rego");
        engine
            .add_policy(lib_file.clone(), lib.clone())
            .map_err(|e| crate::rego::one_line(&e.to_string(), &lib_file))?;
    }
    let declared = engine
        .has_declared_rule_rooted_at(&file, "violation")
        .map_err(|e| format!("{file}: {e}"))?;
    if !declared {
        return Err(format!("{file}: package {package} has no violation rule"));
    }
    let reads_inventory = std::iter::once(&rego)
        .chain(&libs)
        .any(|t| t.contains("inventory") || t.contains("data["));
    let (joins, walked) = if reads_inventory {
        match joins(&mut engine, name, &package, v1) {
            Ok(joins) => (joins, None),
            Err(why) => {
                tracing::info!(
                    template = name,
                    "the template's reads of data.inventory are not answered from an index ({why}): each object is judged against the whole inventory, within plugins.opa.inventory-budget per build"
                );
                (None, Some(why))
            }
        }
    } else {
        (None, None)
    };
    Ok(Compiled {
        engine,
        violation: format!("{package}.violation"),
        reads_inventory,
        joins,
        walked,
    })
}

/// Adds the rules answering the template's inventory reads from an index (`join`) to
/// its engine, once each evaluates; `Err` says why they cannot be.
fn joins(
    engine: &mut regorus::Engine,
    name: &str,
    package: &str,
    v1: bool,
) -> Result<Option<crate::join::Joins>, String> {
    let short = package.strip_prefix("data.").unwrap_or(package);
    let modules = engine.get_modules().clone();
    let Some(plan) = crate::join::plan(&modules, short, v1)? else {
        return Ok(None);
    };
    let joins = crate::join::Joins {
        package: package.to_string(),
        count: plan.joins,
    };
    let mut trial = engine.clone();
    let file = format!("{name}.isobar-join.rego");
    trial
        .add_policy(file.clone(), plan.source)
        .map_err(|e| crate::rego::one_line(&e.to_string(), &file))?;
    // Each rule evaluates: an unsafe variable or a statement that cannot stand alone
    // shows here.
    trial.set_input(regorus::Value::new_object());
    joins.check(&mut trial)?;
    *engine = trial;
    Ok(Some(joins))
}

/// Built-ins Gatekeeper's library still uses that OPA has deprecated (`re_match`).
fn add_builtins(engine: &mut regorus::Engine) -> Result<(), String> {
    engine
        .add_extension(
            "re_match".to_string(),
            2,
            Box::new(|args: Vec<regorus::Value>| {
                let pattern = args[0].as_string()?;
                let text = args[1].as_string()?;
                Ok(regorus::Value::from(re_match(pattern, text)?))
            }),
        )
        .map_err(|e| e.to_string())
}

/// `re_match` with each pattern compiled once: a template reading the inventory calls
/// it once per inventory entry for every object it judges, and compiling the pattern
/// each time was most of that cost.
fn re_match(pattern: &str, text: &str) -> Result<bool, regex::Error> {
    static COMPILED: Mutex<Option<HashMap<String, regex::Regex>>> = Mutex::new(None);
    let mut compiled = COMPILED.lock().unwrap_or_else(|p| p.into_inner());
    let compiled = compiled.get_or_insert_with(HashMap::new);
    if let Some(re) = compiled.get(pattern) {
        return Ok(re.is_match(text));
    }
    let re = regex::Regex::new(pattern)?;
    let matched = re.is_match(text);
    // Patterns built from the objects themselves would otherwise grow it without end.
    if compiled.len() >= 512 {
        compiled.clear();
    }
    compiled.insert(pattern.to_string(), re);
    Ok(matched)
}

impl Compiled {
    /// Whether its reads of `data.inventory` are answered from an index (`join`).
    pub fn indexed(&self) -> bool {
        self.joins.is_some()
    }

    /// Why its reads of `data.inventory` are walked instead (`None`: indexed, or it
    /// does not read the inventory).
    pub fn walked_because(&self) -> Option<&str> {
        self.walked.as_deref()
    }

    /// The engine with the build's data loaded, to ask about objects one by one.
    fn prepare(&self, data: &regorus::Value) -> Result<regorus::Engine, String> {
        let mut engine = self.engine.clone();
        engine.add_data(data.clone()).map_err(|e| e.to_string())?;
        Ok(engine)
    }

    /// The violations' messages for one input.
    fn violations(
        &self,
        engine: &mut regorus::Engine,
        input: &Value,
    ) -> Result<Vec<String>, String> {
        engine.set_input(regorus::Value::from(input.clone()));
        let value = engine
            .eval_rule(self.violation.clone())
            .map_err(|e| e.to_string())?;
        if value == regorus::Value::Undefined {
            return Ok(Vec::new());
        }
        let json: Value = serde_json::from_str(&value.to_json_str().map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        crate::messages(&json, &self.violation)
    }
}

/// The templates of a build, compiled, by the Constraint kind each declares: the
/// template's key, the digest of its spec, and what it compiled to.
pub type Templates = BTreeMap<String, (ObjectKey, u64, Arc<Result<Compiled, String>>)>;

/// One build's enforcement of every Constraint.
pub struct Judge<'a> {
    pub templates: &'a Templates,
    pub constraints: Vec<&'a Object>,
    pub data: &'a crate::Data,
    /// Whether this build judges every object (not a dry build judging one): then the
    /// templates' and Constraints' statuses are reported, and what was judged is kept.
    pub whole: bool,
    pub cache: &'a Cache,
    /// For Constraints that do not say their own.
    pub failure: crate::FailurePolicy,
    /// The build's time for templates reading `data.inventory` (`INVENTORY_BUDGET`).
    pub budget: Duration,
    /// The judged kinds' objects, as `data.inventory` holds them.
    pub inventory: &'a crate::inventory::Inventory,
}

/// What one build carries from Constraint to Constraint.
struct Round {
    /// What the next build may reuse.
    kept: Verdicts,
    /// The time spent on templates walking the whole inventory.
    spent: Duration,
    inventory: Arc<Vec<Object>>,
}

/// One Constraint's asking of objects within a build.
struct Asking<'j, 'a> {
    judge: &'j Judge<'a>,
    compiled: &'j Compiled,
    /// The template's digest.
    template: u64,
    parameters: Value,
    inventory: Arc<Vec<Object>>,
    /// The template's engine with the build's whole data.
    engine: Option<regorus::Engine>,
    /// With joins: the template's engine without data, and the build's index.
    keys_engine: Option<regorus::Engine>,
    index: Option<crate::join::Index>,
}

/// What became of one object.
enum Asked {
    Judged(Held),
    /// Left for a later build (out of time).
    Deferred,
    /// This object could not be judged.
    Failed(String),
    /// No object can be.
    Broken(String),
}

impl Asking<'_, '_> {
    fn input(&self, object: &Object) -> Value {
        let review = review(object, &crate::inventory::manifest(object));
        json!({"review": review, "parameters": self.parameters})
    }

    /// Judges `object`, or reuses `held` (its last verdict) while what that was made
    /// from is the same. `spent`: the build's time on templates walking the inventory.
    fn ask(&mut self, object: &Object, held: Option<Held>, spent: &mut Duration) -> Asked {
        let compiled = self.compiled;
        if let Some(joins) = &compiled.joins {
            return self.ask_joined(joins, object, held);
        }
        let walks = compiled.reads_inventory;
        let inventory = walks.then(|| self.inventory.clone());
        if let Some(held) = held {
            let same = match (&held.inventory, &inventory) {
                (Some(then), Some(now)) => Arc::ptr_eq(then, now),
                (None, None) => true,
                _ => false,
            };
            if same {
                return Asked::Judged(held);
            }
        }
        if walks && self.judge.whole && *spent >= self.judge.budget {
            return Asked::Deferred;
        }
        let started = std::time::Instant::now();
        let input = self.input(object);
        let engine = match &mut self.engine {
            Some(engine) => engine,
            None => match compiled.prepare(&self.judge.data.rego()) {
                Ok(prepared) => self.engine.insert(prepared),
                Err(e) => return Asked::Broken(format!("loading data: {e}")),
            },
        };
        let judged = compiled.violations(engine, &input);
        if walks {
            *spent += started.elapsed();
        }
        match judged {
            Ok(messages) => Asked::Judged(Held {
                object: object.clone(),
                messages,
                keys: Vec::new(),
                against: Vec::new(),
                inventory,
            }),
            Err(e) => Asked::Failed(e),
        }
    }

    /// `ask` for a template whose inventory reads are answered from the index: the
    /// object is judged against the inventory objects its keys select.
    fn ask_joined(
        &mut self,
        joins: &crate::join::Joins,
        object: &Object,
        held: Option<Held>,
    ) -> Asked {
        let compiled = self.compiled;
        let mut input = None;
        let keys = match &held {
            Some(held) => held.keys.clone(),
            None => {
                let value = input.insert(self.input(object));
                let engine = self
                    .keys_engine
                    .get_or_insert_with(|| compiled.engine.clone());
                engine.set_input(regorus::Value::from(value.clone()));
                match joins.keys(engine) {
                    Ok(keys) => keys,
                    Err(e) => return Asked::Failed(e),
                }
            }
        };
        if self.index.is_none() {
            let judge = self.judge;
            match joins.index(
                &compiled.engine,
                self.template,
                judge.inventory,
                &judge.cache.index,
                judge.whole,
            ) {
                Ok(index) => self.index = Some(index),
                Err(e) => return Asked::Broken(format!("indexing the inventory: {e}")),
            }
        }
        let places = self
            .index
            .as_ref()
            .map(|index| index.places(&keys))
            .unwrap_or_default();
        let objects = self.judge.inventory.objects();
        let against: Vec<&Object> = places.iter().filter_map(|p| objects.get(p)).collect();
        if let Some(held) = held
            && held.against_same(&against)
        {
            return Asked::Judged(held);
        }
        let input = match input {
            Some(input) => input,
            None => self.input(object),
        };
        let mut engine = compiled.engine.clone();
        let data = regorus::Value::from(self.judge.inventory.subset(&places));
        if let Err(e) = engine.add_data(data) {
            return Asked::Failed(e.to_string());
        }
        match compiled.violations(&mut engine, &input) {
            Ok(messages) => Asked::Judged(Held {
                object: object.clone(),
                messages,
                keys,
                against: against.into_iter().cloned().collect(),
                inventory: None,
            }),
            Err(e) => Asked::Failed(e),
        }
    }
}

/// The annotation by which a Constraint says its own failure policy.
pub const FAILURE_POLICY_ANNOTATION: &str = "isobar.projectcontour.io/failure-policy";

/// One Constraint's outcome in a build.
#[derive(Default)]
struct Outcome {
    errors: Vec<String>,
    total: usize,
    listed: Vec<Value>,
    /// Objects left for a later build (out of time).
    deferred: usize,
    /// The Constraint could not judge at all (`errors` says why); what becomes of the
    /// objects it may select.
    failed: Option<crate::FailurePolicy>,
}

impl Judge<'_> {
    /// Asks each Constraint about the objects it matches; a `deny` violation puts the
    /// object in `rejected`.
    pub fn enforce(
        &self,
        objects: &[(ObjectKey, &Object)],
        status: &mut StatusReport,
        rejected: &mut BTreeSet<ObjectKey>,
    ) {
        if self.whole {
            for (key, _, compiled) in self.templates.values() {
                let errors: Vec<Value> = match compiled.as_ref() {
                    Ok(_) => Vec::new(),
                    Err(e) => vec![json!({"code": "ingest_error", "message": e})],
                };
                status.field(key, "created", json!(errors.is_empty()));
                status.field(key, "byPod", json!([{"id": "isobar", "errors": errors}]));
            }
        }
        let mut round = Round {
            kept: HashMap::new(),
            spent: Duration::ZERO,
            inventory: self.inventory_objects(),
        };
        let mut unfinished = false;
        for object in &self.constraints {
            let Some(constraint) = object.get::<Constraint>() else {
                continue;
            };
            let outcome = self.constraint(constraint, objects, status, rejected, &mut round);
            unfinished |= outcome.deferred > 0;
            if let (Some(failure), Some(error)) = (outcome.failed, outcome.errors.first()) {
                // Every object it may select (all of them when its selector cannot be read).
                let who = format!(
                    "{}/{}",
                    constraint.kind,
                    constraint.metadata.name.as_deref().unwrap_or_default()
                );
                let why = format!("constraint {who}: {error}");
                for (key, object) in objects {
                    if matches(&constraint.spec, object).unwrap_or(true) {
                        failure.not_judged(key, &who, &why, status, rejected);
                    }
                }
            }
            if self.whole {
                let key = object.key();
                let errors: Vec<Value> = outcome
                    .errors
                    .iter()
                    .map(|e| json!({"code": "isobar_error", "message": e}))
                    .collect();
                status.field(&key, "totalViolations", json!(outcome.total));
                status.field(&key, "violations", Value::Array(outcome.listed));
                status.field(
                    &key,
                    "byPod",
                    json!([{"id": "isobar", "enforced": errors.is_empty(), "errors": errors}]),
                );
            }
        }
        if self.whole {
            self.cache
                .unfinished
                .store(unfinished, std::sync::atomic::Ordering::Relaxed);
            // Only what this build judged or reused: objects and Constraints that went
            // away are forgotten.
            *self
                .cache
                .verdicts
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = round.kept;
        }
    }

    /// The inventory's objects; the same `Arc` as the last whole build's while they are
    /// the same objects (verdicts of templates walking the inventory hold while it is).
    fn inventory_objects(&self) -> Arc<Vec<Object>> {
        let now: Vec<&Object> = self.inventory.objects().values().collect();
        let mut last = self
            .cache
            .inventory
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if last.len() == now.len() && last.iter().zip(&now).all(|(a, b)| a.ptr_eq(b)) {
            return last.clone();
        }
        let now = Arc::new(now.into_iter().cloned().collect::<Vec<_>>());
        if self.whole {
            *last = now.clone();
        }
        now
    }

    /// One Constraint over the objects, reusing the messages of object versions it
    /// judged before.
    fn constraint(
        &self,
        constraint: &Constraint,
        objects: &[(ObjectKey, &Object)],
        status: &mut StatusReport,
        rejected: &mut BTreeSet<ObjectKey>,
        round: &mut Round,
    ) -> Outcome {
        let name = constraint.metadata.name.clone().unwrap_or_default();
        let who = format!("{}/{name}", constraint.kind);
        // Whatever keeps the whole Constraint from judging leaves every object it may
        // select unjudged (`enforce` says so to each).
        let mut failure = self.failure;
        let fail = |e: String, failure: crate::FailurePolicy| Outcome {
            errors: vec![e],
            failed: Some(failure),
            ..Outcome::default()
        };
        if let Some(text) = constraint
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(FAILURE_POLICY_ANNOTATION))
        {
            match crate::FailurePolicy::parse(text) {
                Ok(own) => failure = own,
                Err(e) => return fail(format!("{FAILURE_POLICY_ANNOTATION}: {e}"), failure),
            }
        }
        // A dry run refuses nothing, not even what it cannot judge.
        if matches!(action(constraint), Ok(Action::DryRun)) {
            failure = crate::FailurePolicy::Ignore;
        }
        let Some((_, template_digest, compiled)) = self.templates.get(&constraint.kind) else {
            return fail(
                format!("no ConstraintTemplate declares kind {}", constraint.kind),
                failure,
            );
        };
        let compiled = match compiled.as_ref() {
            Ok(c) => c,
            Err(e) => return fail(format!("its template does not compile: {e}"), failure),
        };
        let action = match action(constraint) {
            Ok(a) => a,
            Err(e) => return fail(e, failure),
        };
        let parameters = constraint
            .spec
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let id = digest_of(&format!(
            "{}/{name}/{}/{template_digest}",
            constraint.kind, constraint.spec
        ));
        let mut asking = Asking {
            judge: self,
            compiled,
            template: *template_digest,
            parameters,
            inventory: round.inventory.clone(),
            engine: None,
            keys_engine: None,
            index: None,
        };
        let mut outcome = Outcome::default();
        let mut deferred = 0;
        for (key, object) in objects {
            match matches(&constraint.spec, object) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => return fail(e, failure),
            }
            let slot = (id, object.address());
            let held = self
                .cache
                .verdicts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&slot)
                .filter(|held| held.object.ptr_eq(object))
                .cloned();
            let held = match asking.ask(object, held, &mut round.spent) {
                Asked::Judged(held) => held,
                Asked::Deferred => {
                    deferred += 1;
                    failure.not_judged(
                        key,
                        &who,
                        &format!(
                            "constraint {who}: not judged yet (this build's time for constraints reading data.inventory ran out); the next build judges it"
                        ),
                        status,
                        rejected,
                    );
                    continue;
                }
                Asked::Failed(e) => {
                    let why = format!("constraint {who}: {e}");
                    failure.not_judged(key, &who, &why, status, rejected);
                    continue;
                }
                Asked::Broken(e) => return fail(e, failure),
            };
            let messages = &held.messages;
            for message in messages {
                outcome.total += 1;
                if outcome.listed.len() < VIOLATIONS_MAX {
                    outcome.listed.push(violation(action, object, message));
                }
                // Gatekeeper's admission message: the constraint's name, then the message.
                let text = format!("[{name}] {message}");
                match action {
                    Action::Deny => {
                        status.error(key, ConditionType::PolicyError, Reason::PolicyDenied, text);
                        rejected.insert(key.clone());
                    }
                    Action::Warn => {
                        status.warning(
                            key,
                            ConditionType::PolicyError,
                            Reason::PolicyWarning,
                            text,
                        );
                    }
                    Action::DryRun => {}
                }
            }
            if self.whole {
                round.kept.insert(slot, held);
            }
        }
        outcome.deferred = deferred;
        if deferred > 0 {
            outcome.errors.push(format!(
                "{deferred} objects not judged yet: this build's time for constraints reading data.inventory ran out; later builds judge them"
            ));
        }
        outcome
    }
}

/// What a Constraint does with a violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Deny,
    Warn,
    DryRun,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Deny => "deny",
            Action::Warn => "warn",
            Action::DryRun => "dryrun",
        }
    }
}

/// A Constraint's `spec.enforcementAction`; an action Isobar does not know is an error
/// (Gatekeeper's too).
pub fn action(constraint: &Constraint) -> Result<Action, String> {
    match constraint
        .spec
        .get("enforcementAction")
        .and_then(Value::as_str)
    {
        None | Some("deny") => Ok(Action::Deny),
        Some("warn") => Ok(Action::Warn),
        Some("dryrun") => Ok(Action::DryRun),
        Some(other) => Err(format!(
            "enforcementAction {other:?} is not supported (deny, warn, dryrun)"
        )),
    }
}

/// `input.review` for one object: what an admission request carries of it.
pub fn review(object: &Object, manifest: &Value) -> Value {
    let kind = object.kind();
    let version = kind
        .info()
        .and_then(|i| i.versions.first().copied())
        .unwrap_or("v1");
    let key = object.key();
    json!({
        "kind": {"group": kind.group(), "version": version, "kind": kind.as_str()},
        "name": key.name,
        "namespace": key.namespace,
        "object": manifest,
    })
}

/// Whether a Constraint's `spec.match` selects `object`. `Err` for a selector Isobar
/// cannot evaluate (`namespaceSelector`: Namespaces are not read).
pub fn matches(spec: &Value, object: &Object) -> Result<bool, String> {
    let Some(m) = spec.get("match").filter(|m| !m.is_null()) else {
        return Ok(true);
    };
    if m.get("namespaceSelector").is_some_and(|s| !s.is_null()) {
        return Err(
            "match.namespaceSelector is not supported (Isobar does not read Namespaces)"
                .to_string(),
        );
    }
    let kind = object.kind();
    let key = object.key();
    let list = |v: Option<&Value>| -> Option<Vec<String>> {
        v.and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
    };
    if let Some(kinds) = m
        .get("kinds")
        .and_then(Value::as_array)
        .filter(|k| !k.is_empty())
    {
        let any = |names: Option<Vec<String>>, wanted: &str| {
            names.is_none_or(|n| n.is_empty() || n.iter().any(|x| x == "*" || x == wanted))
        };
        let selected = kinds.iter().any(|k| {
            any(list(k.get("apiGroups")), kind.group()) && any(list(k.get("kinds")), kind.as_str())
        });
        if !selected {
            return Ok(false);
        }
    }
    match m.get("scope").and_then(Value::as_str) {
        Some("Cluster") if kind.namespaced() => return Ok(false),
        Some("Namespaced") if !kind.namespaced() => return Ok(false),
        _ => {}
    }
    if let Some(namespaces) = list(m.get("namespaces")).filter(|n| !n.is_empty())
        && !namespaces.iter().any(|n| glob(n, &key.namespace))
    {
        return Ok(false);
    }
    if list(m.get("excludedNamespaces"))
        .unwrap_or_default()
        .iter()
        .any(|n| glob(n, &key.namespace))
    {
        return Ok(false);
    }
    if let Some(name) = m.get("name").and_then(Value::as_str)
        && !glob(name, &key.name)
    {
        return Ok(false);
    }
    if let Some(selector) = m.get("labelSelector").filter(|s| !s.is_null()) {
        let labels = object.metadata().labels.clone().unwrap_or_default();
        return label_selector(selector, &labels);
    }
    Ok(true)
}

/// Gatekeeper's namespace and name patterns: exact, or one `*` at the start or end.
fn glob(pattern: &str, value: &str) -> bool {
    if let Some(prefix) = pattern.strip_suffix('*') {
        value.starts_with(prefix)
    } else if let Some(suffix) = pattern.strip_prefix('*') {
        value.ends_with(suffix)
    } else {
        pattern == value
    }
}

fn label_selector(selector: &Value, labels: &BTreeMap<String, String>) -> Result<bool, String> {
    for (k, v) in selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if labels.get(k).map(String::as_str) != v.as_str() {
            return Ok(false);
        }
    }
    let expressions = selector.get("matchExpressions").and_then(Value::as_array);
    for e in expressions.into_iter().flatten() {
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let have = labels.get(key).map(String::as_str);
        let ok = match e.get("operator").and_then(Value::as_str) {
            Some("In") => have.is_some_and(|h| values.contains(&h)),
            Some("NotIn") => have.is_none_or(|h| !values.contains(&h)),
            Some("Exists") => have.is_some(),
            Some("DoesNotExist") => have.is_none(),
            other => return Err(format!("labelSelector operator {other:?} is not supported")),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// One violation, as a Constraint's status lists it.
pub fn violation(action: Action, object: &Object, message: &str) -> Value {
    let kind = object.kind();
    let key = object.key();
    let version = kind
        .info()
        .and_then(|i| i.versions.first().copied())
        .unwrap_or("v1");
    json!({
        "enforcementAction": action.as_str(),
        "group": kind.group(),
        "version": version,
        "kind": kind.as_str(),
        "namespace": key.namespace,
        "name": key.name,
        "message": message,
    })
}

/// The templates by the Constraint kind they declare.
pub fn templates(objects: &Objects) -> BTreeMap<String, (ObjectKey, Arc<ConstraintTemplate>)> {
    let mut out = BTreeMap::new();
    for object in objects.of_kind(CONSTRAINT_TEMPLATE).values() {
        if let (Some(template), Some((kind, _))) =
            (object.arc::<ConstraintTemplate>(), declared_kind(object))
        {
            out.insert(kind, (object.key(), template));
        }
    }
    out
}
