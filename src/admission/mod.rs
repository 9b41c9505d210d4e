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
//!   at most [`PENDING_PER_NAMESPACE`](crate::runner::review::PENDING_PER_NAMESPACE) per namespace and [`PENDING_MAX`](crate::runner::review::PENDING_MAX) in all), and
//!   reviews are answered one at a time by the runner, so of two colliding creates
//!   racing each other the second is rejected. At most [`REVIEWS_PER_USER`] reviews of
//!   one user wait for the runner at a time.
//! - Nothing from a request is run or loaded: the object is decoded like any watched
//!   object, and `dryRun` requests leave no trace.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use isobar_sdk::{Kind, ObjectKey};

use crate::runner::inbox::{AdmissionRequest, Candidate, Operation, Verdict};

/// In-flight reviews per user (the API request's `userInfo.username`): more wait for one
/// to finish, so one user's flood queues behind itself, not in front of everyone.
pub const REVIEWS_PER_USER: usize = 4;

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
    pub runner: mpsc::Sender<AdmissionRequest>,
    users: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Permits>>>,
}

type Permits = std::sync::Arc<tokio::sync::Semaphore>;

impl Webhook {
    pub fn new(runner: mpsc::Sender<AdmissionRequest>) -> Webhook {
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
        .send(AdmissionRequest { candidate, reply })
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
