//! Admission reviews as the runner answers them, against the objects it holds: a dry
//! build before and after the candidate's change over the objects linked to it, and the
//! admitted changes the store has not shown yet (see `crate::admission` for the rules).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use isobar_sdk::condition::ConditionStatus;
use isobar_sdk::{Object, ObjectKey, Objects, Reason, StatusReport};

use super::inbox::{Candidate, Operation, Verdict};
use super::pipeline::Pipeline;

/// How long an admitted change is assumed to be on its way to the store.
const PENDING_TTL: Duration = Duration::from_secs(30);

/// At most this many admitted changes are remembered (the oldest goes first), and at most
/// [`PENDING_PER_NAMESPACE`] of one namespace: a flood of admitted reviews (they need not
/// come from the API server) costs bounded memory and dry-build time, and one
/// namespace's flood does not push out another's.
pub const PENDING_MAX: usize = 1024;
pub const PENDING_PER_NAMESPACE: usize = 64;

struct Pending {
    /// The admitted object (`None`: an admitted delete).
    object: Option<Object>,
    /// What the store held for the key when the change was admitted; once it differs,
    /// the store has caught up.
    stored: Option<usize>,
    at: Instant,
}

/// The runner's side: admitted-but-unseen changes, and the reviews themselves.
#[derive(Default)]
pub struct Admissions {
    pending: BTreeMap<ObjectKey, Pending>,
}

/// Identifies the version of an object the store holds (its allocation).
fn stored(objects: &Objects, key: &ObjectKey) -> Option<usize> {
    objects.object(key).map(Object::address)
}

/// One thing that makes an object's change unacceptable, and whether it only names
/// something that does not exist (yet): that is a warning, it may be created next.
#[derive(Debug, Clone, PartialEq)]
struct Problem {
    message: String,
    unresolved: bool,
}

/// What makes an object's change unacceptable: its errors and its FQDN-sharing warnings
/// (Contour's shape), and in Gateway API's shape, a parent that does not accept it for
/// what it says (`UnsupportedValue`), rules left out (`PartiallyInvalid`) and backends
/// that cannot resolve (only a missing one, or a missing grant, is an unresolved
/// reference).
fn errors_of(status: &StatusReport, key: &ObjectKey) -> Vec<Problem> {
    let Some(s) = status.get(key) else {
        return Vec::new();
    };
    let shared = s
        .warnings
        .iter()
        .filter(|w| w.reason == Reason::DuplicateVhost);
    let mut out: Vec<Problem> = s
        .errors
        .iter()
        .chain(shared)
        .map(|e| Problem {
            message: e.message.clone(),
            unresolved: e.is_unresolved_reference(),
        })
        .collect();
    for parent in s.gateway.iter().flat_map(|g| &g.parents) {
        for c in &parent.conditions {
            let refused = match (c.type_.as_str(), c.status, c.reason.as_str()) {
                ("Accepted", ConditionStatus::False, "UnsupportedValue") => Some(false),
                ("PartiallyInvalid", ConditionStatus::True, _) => Some(false),
                ("ResolvedRefs", ConditionStatus::False, "BackendNotFound" | "RefNotPermitted") => {
                    Some(true)
                }
                ("ResolvedRefs", ConditionStatus::False, _) => Some(false),
                _ => None,
            };
            if let Some(unresolved) = refused {
                let problem = Problem {
                    message: c.message.clone(),
                    unresolved,
                };
                if !out.contains(&problem) {
                    out.push(problem);
                }
            }
        }
    }
    out
}

/// `objects` with only the routing objects in `keep`.
fn restricted(objects: &Objects, pipeline: &Pipeline, keep: &BTreeSet<ObjectKey>) -> Objects {
    let mut out = objects.clone();
    for kind in pipeline.routing_kinds() {
        out.retain(kind, |key| keep.contains(key));
    }
    out
}

fn put(objects: &mut Objects, key: &ObjectKey, object: Option<&Object>) {
    match object {
        Some(object) => {
            objects.apply(object.clone());
        }
        None => {
            objects.delete(key);
        }
    }
}

fn current(objects: &Objects, key: &ObjectKey) -> Option<Object> {
    objects.object(key).cloned()
}

/// What a review came to.
#[derive(Debug)]
pub enum Outcome {
    Answer(Verdict),
    /// The dry builds needed Secrets whose data the store dropped (unreferenced until
    /// now); ask again once they are fetched.
    NeedsSecrets(Vec<(String, String)>),
}

impl Admissions {
    /// Answers one review against `objects` (what the runner holds). With
    /// `wait_for_secrets`, a review that needs dropped Secrets says so instead of
    /// judging without them (they would read as missing).
    pub fn review(
        &mut self,
        pipeline: &Pipeline,
        objects: &Objects,
        candidate: &Candidate,
        wait_for_secrets: bool,
    ) -> Outcome {
        if !pipeline.routes(candidate.key.kind) {
            // Not a kind any enabled source routes: nothing to judge it by.
            return Outcome::Answer(Verdict::allow(Vec::new()));
        }
        let now = Instant::now();
        self.pending.retain(|key, p| {
            now.duration_since(p.at) < PENDING_TTL && stored(objects, key) == p.stored
        });
        let key = &candidate.key;
        // The store as it will be once what was admitted lands, before and after this
        // change; both dry builds cover only the objects linked to the candidate.
        let mut view = objects.clone();
        view.detach_requests();
        for (k, p) in &self.pending {
            put(&mut view, k, p.object.as_ref());
        }
        let old = current(&view, key);
        let mut links = crate::runner::links::Links::of(&view, pipeline);
        let mut scope = links.linked(key).objects;
        put(&mut view, key, candidate.object.as_ref());
        let changed = BTreeSet::from([key.clone()]);
        scope.extend(links.update(&view, pipeline, &changed).objects);
        let mut part = restricted(&view, pipeline, &scope);
        let after = pipeline.build_dry(&part, &view, key).status;
        put(&mut part, key, old.as_ref());
        let before = pipeline.build_dry(&part, &view, key).status;
        let missing = objects.elided_among(&view.take_requested());
        if wait_for_secrets && !missing.is_empty() {
            return Outcome::NeedsSecrets(missing);
        }

        let mut warnings: Vec<String> = after
            .get(key)
            .map(|s| {
                let plain = s
                    .warnings
                    .iter()
                    .filter(|w| w.reason != Reason::DuplicateVhost);
                plain.map(|w| w.message.clone()).collect()
            })
            .unwrap_or_default();
        if after
            .get(key)
            .is_some_and(|s| s.orphaned && s.errors.is_empty())
        {
            warnings.push(
                "this HTTPProxy is not part of a delegation chain from a root HTTPProxy (yet)"
                    .to_string(),
            );
        }
        let mut problems = Vec::new();
        if candidate.object.is_some() {
            // An update is judged on what it changes: a problem the object already had
            // (say, caused by another object) does not block removing a finalizer.
            let had = match candidate.operation {
                Operation::Update => errors_of(&before, key),
                _ => Vec::new(),
            };
            for error in errors_of(&after, key) {
                if error.unresolved || had.contains(&error) {
                    warnings.push(error.message);
                } else {
                    problems.push(error.message);
                }
            }
        }
        // Objects this change would break.
        for other in after.objects.keys() {
            if other == key {
                continue;
            }
            let had = errors_of(&before, other);
            for error in errors_of(&after, other) {
                if had.contains(&error) {
                    continue;
                }
                let line = format!(
                    "{} {}/{}: {}",
                    other.kind, other.namespace, other.name, error.message
                );
                if candidate.operation == Operation::Delete || error.unresolved {
                    warnings.push(line);
                } else {
                    problems.push(line);
                }
            }
        }
        if !problems.is_empty() {
            return Outcome::Answer(Verdict::deny(problems.join("; "), warnings));
        }
        if !candidate.dry_run {
            self.pending.insert(
                key.clone(),
                Pending {
                    object: candidate.object.clone(),
                    stored: stored(objects, key),
                    at: now,
                },
            );
            self.bound(&key.namespace);
        }
        Outcome::Answer(Verdict::allow(warnings))
    }

    /// Forgets the oldest admitted changes past [`PENDING_PER_NAMESPACE`] in `namespace`
    /// and past [`PENDING_MAX`] in all.
    fn bound(&mut self, namespace: &str) {
        let oldest = |pending: &BTreeMap<ObjectKey, Pending>, ns: Option<&str>| {
            pending
                .iter()
                .filter(|(k, _)| ns.is_none_or(|ns| k.namespace == ns))
                .min_by_key(|(_, p)| p.at)
                .map(|(k, _)| k.clone())
        };
        while self
            .pending
            .keys()
            .filter(|k| k.namespace == namespace)
            .count()
            > PENDING_PER_NAMESPACE
        {
            let Some(key) = oldest(&self.pending, Some(namespace)) else {
                break;
            };
            self.pending.remove(&key);
        }
        while self.pending.len() > PENDING_MAX {
            let Some(key) = oldest(&self.pending, None) else {
                break;
            };
            self.pending.remove(&key);
        }
    }

    /// How many admitted changes are remembered.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

use super::{REVIEW_WAIT_MAX, Runner, Waiting};

impl Runner {
    /// Answers a review, or, when it needs Secrets whose data was dropped and there is
    /// time, asks for them and puts it in `waiting`.
    pub(super) fn judge(
        &self,
        admissions: &mut Admissions,
        objects: &Objects,
        review: Waiting,
        waiting: &mut Vec<Waiting>,
    ) {
        let can_wait = self.hydrate.is_some() && review.started.elapsed() < REVIEW_WAIT_MAX;
        let outcome = tokio::task::block_in_place(|| {
            admissions.review(&self.pipeline, objects, &review.review.candidate, can_wait)
        });
        match outcome {
            Outcome::Answer(verdict) => {
                self.metrics
                    .admission(verdict.allowed, review.started.elapsed());
                let _ = review.review.reply.send(verdict);
            }
            Outcome::NeedsSecrets(secrets) => {
                tracing::debug!(
                    secrets = secrets.len(),
                    "a review needs secrets whose data was dropped; fetching them first"
                );
                if let Some(hydrate) = &self.hydrate {
                    let _ = hydrate.try_send(secrets);
                }
                waiting.push(review);
            }
        }
    }
}
