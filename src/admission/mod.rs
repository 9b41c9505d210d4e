//! The validating admission webhook: `admission.k8s.io/v1` AdmissionReviews for the
//! kinds the enabled sources route (HTTPProxy and Ingress by default), answered by
//! running the pipeline, dry, on the objects the runner holds plus the candidate; other
//! kinds are allowed.
//!
//! - The candidate's errors reject it with the messages its status would carry; its
//!   warnings come back as warnings. Two kinds of error are only warnings: references
//!   to things that do not exist yet (they may be created next), and, on an update,
//!   errors the object already had (an invalid object must stay editable).
//! - A create or update that would make another, currently valid object invalid is
//!   rejected too, saying which and why; a delete never is (blocking deletes would trap
//!   namespace teardown), it gets those as warnings.
//! - A create or update that makes an FQDN shared between an HTTPProxy and an Ingress
//!   (which the controller merges, as Contour does, with a `DuplicateVhost` warning on
//!   both) is rejected with that warning's message.
//! - Both dry builds (before and after the change) cover only the objects linked to the
//!   candidate, by includes or shared hosts, so a review costs about the same at 10 or
//!   10,000 objects.
//! - Admitted candidates are remembered until the store shows the change (or 30 s pass;
//!   at most [`PENDING_PER_NAMESPACE`] per namespace and [`PENDING_MAX`] in all), and
//!   reviews are answered one at a time by the runner, so of two colliding creates
//!   racing each other the second is rejected. At most [`REVIEWS_PER_USER`] reviews of
//!   one user wait for the runner at a time.
//! - Nothing from a request is run or loaded: the object is decoded like any watched
//!   object, and `dryRun` requests leave no trace.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use isobar_sdk::condition::ConditionStatus;
use isobar_sdk::{Kind, Object, ObjectKey, Objects, Reason, StatusReport};

use crate::runner::pipeline::Pipeline;

/// How long an admitted change is assumed to be on its way to the store.
const PENDING_TTL: Duration = Duration::from_secs(30);

/// At most this many admitted changes are remembered (the oldest goes first), and at most
/// [`PENDING_PER_NAMESPACE`] of one namespace: a flood of admitted reviews (they need not
/// come from the API server) costs bounded memory and dry-build time, and one
/// namespace's flood does not push out another's.
pub const PENDING_MAX: usize = 1024;
pub const PENDING_PER_NAMESPACE: usize = 64;

/// In-flight reviews per user (the API request's `userInfo.username`): more wait for one
/// to finish, so one user's flood queues behind itself, not in front of everyone.
pub const REVIEWS_PER_USER: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

/// What is asked about: the object as it would be after the operation.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub operation: Operation,
    pub key: ObjectKey,
    /// The new object (create, update); `None` for a delete.
    pub object: Option<Object>,
    pub dry_run: bool,
}

/// The answer to one review.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verdict {
    pub allowed: bool,
    /// Why not, when not allowed.
    pub message: String,
    pub warnings: Vec<String>,
}

impl Verdict {
    pub fn allow(warnings: Vec<String>) -> Verdict {
        Verdict {
            allowed: true,
            message: String::new(),
            warnings,
        }
    }

    pub fn deny(message: String, warnings: Vec<String>) -> Verdict {
        Verdict {
            allowed: false,
            message,
            warnings,
        }
    }
}

/// A review the HTTP handler hands to the runner, which holds the objects.
pub struct Request {
    pub candidate: Candidate,
    pub reply: oneshot::Sender<Verdict>,
}

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

// ---- HTTP ----

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    request: Option<ReviewRequest>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewRequest {
    uid: String,
    kind: GroupVersionKind,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
    operation: Operation,
    #[serde(default)]
    object: Option<Value>,
    #[serde(default)]
    dry_run: Option<bool>,
    #[serde(default)]
    user_info: UserInfo,
}

#[derive(Deserialize, Default)]
struct UserInfo {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize)]
struct GroupVersionKind {
    #[serde(default)]
    group: String,
    version: String,
    kind: String,
}

/// Sends reviews to the runner, at most [`REVIEWS_PER_USER`] of one user at a time.
#[derive(Clone)]
pub struct Webhook {
    pub runner: mpsc::Sender<Request>,
    users: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Permits>>>,
}

type Permits = std::sync::Arc<tokio::sync::Semaphore>;

impl Webhook {
    pub fn new(runner: mpsc::Sender<Request>) -> Webhook {
        Webhook {
            runner,
            users: Default::default(),
        }
    }

    /// The permits of `user`'s reviews; users with none in flight are forgotten.
    fn permits(&self, user: &str) -> Permits {
        let Ok(mut users) = self.users.lock() else {
            return std::sync::Arc::new(tokio::sync::Semaphore::new(REVIEWS_PER_USER));
        };
        if users.len() > 256 {
            users.retain(|_, p| std::sync::Arc::strong_count(p) > 1);
        }
        users
            .entry(user.to_string())
            .or_insert_with(|| std::sync::Arc::new(tokio::sync::Semaphore::new(REVIEWS_PER_USER)))
            .clone()
    }
}

/// The largest AdmissionReview taken: an object and its old version, each at most the
/// 1.5 MiB the API server stores, with room; a bigger body is refused (413).
pub const MAX_REVIEW_BYTES: usize = 4 << 20;

/// How long a review may wait for the runner: under the webhook's 5 s `timeoutSeconds`,
/// so the API server always gets Isobar's answer (a denial saying so) rather than a
/// timeout.
pub const REVIEW_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(4);

pub fn routes() -> Router<Webhook> {
    Router::new()
        .route("/validate", post(validate))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_REVIEW_BYTES))
}

fn bad_request(message: String) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    (
        StatusCode::BAD_REQUEST,
        [("content-type", "text/plain; charset=utf-8")],
        message + "\n",
    )
}

type Reply = (StatusCode, [(&'static str, &'static str); 1], String);

async fn validate(State(webhook): State<Webhook>, body: Bytes) -> Reply {
    let review: Review = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(format!("not an AdmissionReview: {e}")),
    };
    let Some(request) = review.request else {
        return bad_request("the AdmissionReview has no request".to_string());
    };
    let uid = request.uid.clone();
    let user = request.user_info.username.clone();
    let verdict = match candidate(request) {
        Ok(None) => Verdict::allow(Vec::new()),
        Ok(Some(candidate)) => tokio::time::timeout(REVIEW_TIMEOUT, async {
            let permits = webhook.permits(&user);
            let _permit = permits.acquire().await;
            ask(&webhook, candidate).await
        })
        .await
        .unwrap_or_else(|_| {
            Verdict::deny(
                format!(
                    "isobar could not review the object within {} s",
                    REVIEW_TIMEOUT.as_secs()
                ),
                Vec::new(),
            )
        }),
        Err(message) => Verdict::deny(message, Vec::new()),
    };
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        response(&uid, &verdict).to_string(),
    )
}

async fn ask(webhook: &Webhook, candidate: Candidate) -> Verdict {
    let (reply, answer) = oneshot::channel();
    let unavailable = || {
        Verdict::deny(
            "isobar is not ready to review objects (still reading the cluster)".to_string(),
            Vec::new(),
        )
    };
    if webhook
        .runner
        .send(Request { candidate, reply })
        .await
        .is_err()
    {
        return unavailable();
    }
    answer.await.unwrap_or_else(|_| unavailable())
}

/// The candidate a request asks about; `None` for kinds and operations Isobar does not
/// judge (they are allowed).
fn candidate(request: ReviewRequest) -> Result<Option<Candidate>, String> {
    let api_version = if request.kind.group.is_empty() {
        request.kind.version.clone()
    } else {
        format!("{}/{}", request.kind.group, request.kind.version)
    };
    // Any kind Isobar reads is decoded; the runner allows those no source routes.
    let Some(kind) = Kind::from_type(&api_version, &request.kind.kind) else {
        return Ok(None);
    };
    let namespace = request
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let dry_run = request.dry_run.unwrap_or(false);
    match request.operation {
        Operation::Connect => Ok(None),
        Operation::Delete => {
            let name = request.name.clone().unwrap_or_default();
            Ok(Some(Candidate {
                operation: Operation::Delete,
                key: ObjectKey::new(kind, namespace, name),
                object: None,
                dry_run,
            }))
        }
        operation @ (Operation::Create | Operation::Update) => {
            let mut value = request
                .object
                .ok_or_else(|| format!("{operation:?} request without an object"))?;
            // The API server fills these in before storing; fill them the same way.
            if let Some(meta) = value
                .as_object_mut()
                .and_then(|o| o.get_mut("metadata"))
                .and_then(Value::as_object_mut)
            {
                meta.entry("namespace")
                    .or_insert_with(|| namespace.clone().into());
                if let Some(name) = &request.name
                    && !name.is_empty()
                {
                    meta.entry("name").or_insert_with(|| name.clone().into());
                }
            }
            let object = crate::provider::manifest::decode(kind, value)
                .map_err(|e| format!("this object could not be read ({e}) and is not served"))?;
            Ok(Some(Candidate {
                operation,
                key: object.key(),
                object: Some(object),
                dry_run,
            }))
        }
    }
}

/// The AdmissionReview sent back.
pub fn response(uid: &str, verdict: &Verdict) -> Value {
    let mut response = json!({ "uid": uid, "allowed": verdict.allowed });
    if !verdict.allowed {
        response["status"] = json!({
            "code": 403,
            "reason": "Forbidden",
            "message": verdict.message,
        });
    }
    if !verdict.warnings.is_empty() {
        response["warnings"] = json!(verdict.warnings);
    }
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    })
}

// ---- HTTPS ----

mod tls;

pub use tls::{check_certificate, serve, serve_https};
