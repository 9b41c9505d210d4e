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

use serde_json::{Value, json};

use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::{Kind, Object, ObjectKey, Objects, StatusReport};

mod ask;
mod builtins;
mod compile;
mod kinds;
mod matching;

use ask::{Asked, Asking, Held, Round};
pub use compile::Compiled;
use compile::compile;
use kinds::declared_kind;
pub use kinds::{CONSTRAINT, CONSTRAINT_TEMPLATE, Constraint, ConstraintTemplate};
pub use matching::{Action, action, matches, review, violation};

/// How many violations a Constraint's status lists (Gatekeeper's audit default).
pub const VIOLATIONS_MAX: usize = 20;

/// How long one build may spend on templates that read `data.inventory` by default
/// (`plugins.opa.inventory-budget`) when their reads cannot be answered from an index
/// (`join`). Such a template judges each object against every other one (at 10,000
/// Ingresses, 20 ms and more per object in regorus); the objects left over are judged
/// by later builds.
pub const INVENTORY_BUDGET: Duration = Duration::from_secs(1);

/// What Gatekeeper's enforcement keeps between builds: each template compiled (by the
/// digest of its spec), each Constraint's messages for each object version it judged,
/// so a build judges only the objects that changed, and each Constraint's violations by
/// object, so a build of part of the store (a change spliced in) reports its totals.
#[derive(Default)]
pub struct Cache {
    compiled: Mutex<HashMap<u64, Arc<Result<Compiled, String>>>>,
    verdicts: Mutex<Verdicts>,
    tallies: Mutex<HashMap<u64, Tally>>,
    /// Whether a template of the last whole build reads `data.inventory` (then an
    /// object's verdict may depend on any other object: every build is a whole one).
    reads_inventory: std::sync::atomic::AtomicBool,
    /// Whether the last whole build left objects unjudged (out of time).
    unfinished: std::sync::atomic::AtomicBool,
    /// The joins' values of each inventory object.
    index: crate::join::IndexCache,
    /// The objects of the last whole build's inventory.
    inventory: Mutex<Arc<Vec<Object>>>,
}

/// (Constraint, with its template's digest; the object) → what it said of the version
/// held.
type Verdicts = HashMap<(u64, ObjectKey), Held>;

/// One Constraint's violations by object (in the order its status lists them: judged
/// kind, then key), objects without any left out: how many, and the first
/// [`VIOLATIONS_MAX`] as its status lists them.
type Tally = BTreeMap<(usize, ObjectKey), (usize, Vec<Value>)>;

/// Where objects of `kind` come in a Constraint's violations.
fn kind_order(kind: Kind) -> usize {
    crate::inventory::judged()
        .position(|k| k == kind)
        .unwrap_or(usize::MAX)
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

    /// Whether a template of the last whole build reads `data.inventory`.
    pub fn reads_inventory(&self) -> bool {
        self.reads_inventory
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Notes whether the templates of a whole build read `data.inventory`.
    pub fn set_reads_inventory(&self, reads: bool) {
        self.reads_inventory
            .store(reads, std::sync::atomic::Ordering::Relaxed);
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
    /// In a build of part of the store (no template reads `data.inventory`), the
    /// routing objects it covers: `objects` are those of them still stored, and what
    /// the last builds said of every other object still holds.
    pub scope: Option<&'a BTreeSet<ObjectKey>>,
    pub cache: &'a Cache,
    /// For Constraints that do not say their own.
    pub failure: crate::FailurePolicy,
    /// The build's time for templates reading `data.inventory` (`INVENTORY_BUDGET`).
    pub budget: Duration,
    /// The judged kinds' objects, as `data.inventory` holds them.
    pub inventory: &'a crate::inventory::Inventory,
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

impl Outcome {
    /// A Constraint's outcome from its violations by object (`tally`) and the number of
    /// objects left for a later build.
    fn of(tally: &Tally, deferred: usize) -> Outcome {
        let mut outcome = Outcome::default();
        for (count, listed) in tally.values() {
            outcome.total += count;
            let room = VIOLATIONS_MAX - outcome.listed.len();
            outcome.listed.extend(listed.iter().take(room).cloned());
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
            tallies: HashMap::new(),
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
        if !self.whole {
            return;
        }
        let mut verdicts = self
            .cache
            .verdicts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *self.cache.tallies.lock().unwrap_or_else(|p| p.into_inner()) = round.tallies;
        match self.scope {
            // The verdicts on the objects it covers are replaced (those deleted go).
            Some(scope) => {
                let ids: BTreeSet<u64> = verdicts.keys().map(|(id, _)| *id).collect();
                for key in scope {
                    for id in &ids {
                        verdicts.remove(&(*id, key.clone()));
                    }
                }
                verdicts.extend(round.kept);
            }
            None => {
                self.cache
                    .unfinished
                    .store(unfinished, std::sync::atomic::Ordering::Relaxed);
                // Only what this build judged or reused: objects and Constraints that
                // went away are forgotten.
                *verdicts = round.kept;
            }
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
        if self.whole && self.scope.is_none() {
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
        let fail = |e: String, failure: crate::FailurePolicy| Outcome {
            errors: vec![e],
            failed: Some(failure),
            ..Outcome::default()
        };
        let failure = match self.failure_policy(constraint) {
            Ok(failure) => failure,
            Err(e) => return fail(e, self.failure),
        };
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
        let mut deferred = 0;
        // The violations of the objects judged now; in a build of part of the store,
        // on top of the last builds' of every other object.
        let mut tally = self.others_tally(id);
        for (key, object) in objects {
            match matches(&constraint.spec, object) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => return fail(e, failure),
            }
            let slot = (id, key.clone());
            let held = self.held(&slot, object);
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
            if !messages.is_empty() {
                let listed = messages.iter().take(VIOLATIONS_MAX);
                let listed = listed.map(|m| violation(action, object, m)).collect();
                tally.insert(
                    (kind_order(key.kind), key.clone()),
                    (messages.len(), listed),
                );
            }
            enforce_messages(key, &name, messages, action, status, rejected);
            if self.whole {
                round.kept.insert(slot, held);
            }
        }
        let outcome = Outcome::of(&tally, deferred);
        if self.whole {
            round.tallies.insert(id, tally);
        }
        outcome
    }

    /// What the Constraint `id`'s slot holds of `object` from an earlier build: its
    /// messages, when judged on this very version of the object.
    fn held(&self, slot: &(u64, ObjectKey), object: &Object) -> Option<Held> {
        self.cache
            .verdicts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(slot)
            .filter(|held| held.object.ptr_eq(object))
            .cloned()
    }

    /// The failure policy of `constraint`: its annotation's, else the judge's; a dry
    /// run refuses nothing, not even what it cannot judge. An error when the annotation
    /// does not parse.
    fn failure_policy(&self, constraint: &Constraint) -> Result<crate::FailurePolicy, String> {
        let mut failure = self.failure;
        if let Some(text) = constraint
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(FAILURE_POLICY_ANNOTATION))
        {
            failure = crate::FailurePolicy::parse(text)
                .map_err(|e| format!("{FAILURE_POLICY_ANNOTATION}: {e}"))?;
        }
        if matches!(action(constraint), Ok(Action::DryRun)) {
            failure = crate::FailurePolicy::Ignore;
        }
        Ok(failure)
    }

    /// In a build of part of the store, the last builds' violations of constraint `id`
    /// for every object outside it; in a full build, none.
    fn others_tally(&self, id: u64) -> Tally {
        let Some(scope) = self.scope else {
            return Tally::new();
        };
        let mut tally = self
            .cache
            .tallies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
            .unwrap_or_default();
        for key in scope {
            tally.remove(&(kind_order(key.kind), key.clone()));
        }
        tally
    }
}

/// A constraint's messages on one object as `action` says: an error that rejects it, a
/// warning, or nothing (a dry run). Each reads as Gatekeeper's admission message: the
/// constraint's name, then the message.
fn enforce_messages(
    key: &ObjectKey,
    name: &str,
    messages: &[String],
    action: Action,
    status: &mut StatusReport,
    rejected: &mut BTreeSet<ObjectKey>,
) {
    for message in messages {
        let text = format!("[{name}] {message}");
        match action {
            Action::Deny => {
                status.error(key, ConditionType::PolicyError, Reason::PolicyDenied, text);
                rejected.insert(key.clone());
            }
            Action::Warn => {
                status.warning(key, ConditionType::PolicyError, Reason::PolicyWarning, text);
            }
            Action::DryRun => {}
        }
    }
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
