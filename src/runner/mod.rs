//! The pipeline runner: applies provider events to the object store, waits out the
//! hold-off, builds, translates, and publishes a snapshot when its content changed.
//! Nothing is published before the provider has synced, so Envoy never sees a partial
//! configuration.

mod apply;
mod build;
pub mod inbox;
pub mod leader;
pub mod links;
pub mod pipeline;
pub mod rejected;
pub mod review;
pub mod status;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use std::collections::{BTreeMap, BTreeSet};

use isobar_sdk::{ObjectKey, Objects, StatusReport};

use crate::metrics::Metrics;
use crate::provider::Event;
use crate::runner::links::Links;
use crate::runner::pipeline::Pipeline;
use crate::runner::rejected::Rejections;
use crate::runner::status::Desired;
use crate::xds::{Encoder, EnvoySettings, Snapshot};

pub struct Runner {
    pub pipeline: Pipeline,
    pub settings: EnvoySettings,
    pub holdoff: Duration,
    pub holdoff_max: Duration,
    pub metrics: Arc<Metrics>,
    pub snapshots: watch::Sender<Option<Arc<Snapshot>>>,
    /// Where each build's wanted statuses go (Kubernetes provider), with what decides
    /// `status.loadBalancer`.
    pub statuses: Option<StatusOutput>,
    /// Requests from the debug endpoint for the IR of the current objects.
    pub debug: Option<mpsc::Receiver<inbox::IrRequest>>,
    /// Reviews from the admission webhook, answered against the current objects.
    pub admission: Option<mpsc::Receiver<inbox::AdmissionRequest>>,
    /// Where to ask for Secrets whose data was dropped (a provider that can fetch them
    /// again); with it, unreferenced Secrets keep no data.
    pub hydrate: Option<mpsc::Sender<Vec<(String, String)>>>,
    /// Updates Envoy refused, from the xDS streams: traced to the objects that made
    /// them (see `rejected.rs`).
    pub rejections: Option<mpsc::UnboundedReceiver<crate::xds::Rejection>>,
    /// Resources the last builds withheld because Envoy would refuse them, for the
    /// runner to trace to the objects that made them.
    pub withheld: std::sync::Mutex<Vec<crate::xds::validate::Withheld>>,
    /// The HTTP listeners whose routes the last full build split into shards (a full
    /// build keeps them split down to half the threshold), with their shard counts.
    pub sharded: std::sync::Mutex<std::collections::BTreeMap<String, usize>>,
}

/// How long a build waits for dropped Secrets to be fetched before serving without them.
const HYDRATE_MAX: std::time::Duration = std::time::Duration::from_secs(5);
/// How soon a held build is retried when nothing arrives.
const HYDRATE_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// How long a review waits for dropped Secrets before it is judged without them (well
/// inside the webhook's `timeoutSeconds`).
const REVIEW_WAIT_MAX: Duration = Duration::from_secs(2);

/// A change that reaches more routing objects than this (or a quarter of them, if more)
/// is built in full rather than spliced in.
const SPLICE_MAX: usize = 256;
/// Endpoint updates of up to this many Services run on the runtime's worker: they take
/// microseconds, less than handing the worker over (`block_in_place`) would.
const ENDPOINTS_INLINE_MAX: usize = 64;

/// What changed since the last build.
#[derive(Default)]
struct Dirty {
    /// Something other than routing objects, Services (but Envoy's), Secrets and
    /// EndpointSlices, or no build yet: everything is rebuilt (and the sets below are
    /// not kept).
    full: bool,
    /// The HTTPProxies and Ingresses that changed, and those naming a Service that
    /// changed: rebuilt with what they reach.
    routing: BTreeSet<ObjectKey>,
    /// The Services (namespace, name) whose EndpointSlices changed.
    services: BTreeSet<(String, String)>,
    /// The Secrets (namespace, name) that changed.
    secrets: BTreeSet<(String, String)>,
}

impl Dirty {
    /// Whether the pipeline must run (not only EDS be updated): something changed that
    /// the last build read. A Secret no build asked for cannot change any output.
    fn pipeline(&self, built: Option<&Built>) -> bool {
        self.full || !self.routing.is_empty() || self.secrets_matter(built)
    }

    /// Whether a changed Secret is one the last build (or a change spliced since) asked
    /// for, so that everything must be rebuilt.
    fn secrets_matter(&self, built: Option<&Built>) -> bool {
        match built {
            Some(Built {
                secrets_used: Some(used),
                ..
            }) => self.secrets.iter().any(|s| used.contains(s)),
            Some(_) => !self.secrets.is_empty(),
            None => !self.secrets.is_empty(),
        }
    }
}

/// What the last build keeps for the next: its encoded vhosts and the links between
/// routing objects.
struct Built {
    encoder: Encoder,
    links: Links,
    /// Every Secret a build asked for (found or not) since the last full build: only a
    /// change to one of these can change the output. Only kept when every plugin is
    /// local (a policy reading the whole inventory could read any Secret).
    secrets_used: Option<BTreeSet<(String, String)>>,
}

/// A review being answered, and since when.
struct Waiting {
    review: inbox::AdmissionRequest,
    started: Instant,
}

pub struct StatusOutput {
    pub desired: watch::Sender<Option<Arc<Desired>>>,
    /// `ingress-status-address`.
    pub fixed_address: String,
    /// The Envoy Service (namespace, name).
    pub envoy_service: (String, String),
}

/// What the runner's loop keeps between events: the objects, what is pending and the
/// last build.
struct State {
    objects: Objects,
    /// Objects whose latest version did not decode, with why.
    unreadable: BTreeMap<ObjectKey, String>,
    /// What Envoy refused, and what each published snapshot changed.
    refusals: Rejections,
    admissions: review::Admissions,
    synced: bool,
    /// When the first unbuilt change arrived, and the latest one.
    pending: Option<(Instant, Instant)>,
    /// When the last build ran and the last change arrived: a change after a quiet
    /// moment (no change and no build for a quarter of the hold-off, or no build for
    /// the max hold-off, Contour's rule) is built at once; one during a burst waits.
    last_build: Option<Instant>,
    last_change: Option<Instant>,
    /// The pending changes started after a quiet moment: build them now.
    due_now: bool,
    /// The last build's report.
    status: StatusReport,
    /// While a build waits for elided Secrets to be fetched again: since when.
    holding: Option<Instant>,
    /// What changed since the last build.
    dirty: Dirty,
    /// What the last build keeps for the next.
    built: Option<Built>,
    /// Reviews waiting for dropped Secrets to be fetched again.
    waiting_reviews: Vec<Waiting>,
}

impl State {
    fn new() -> State {
        State {
            objects: Objects::default(),
            unreadable: BTreeMap::new(),
            refusals: Rejections::default(),
            admissions: review::Admissions::default(),
            synced: false,
            pending: None,
            last_build: None,
            last_change: None,
            due_now: false,
            status: StatusReport::default(),
            holding: None,
            // The first build is a full one: what each listed object reaches is not
            // recorded.
            dirty: Dirty {
                full: true,
                ..Dirty::default()
            },
            built: None,
            waiting_reviews: Vec::new(),
        }
    }

    /// A change to build at once, without the hold-off.
    fn build_now(&mut self) {
        let at = Instant::now();
        self.due_now = true;
        self.pending = Some(self.pending.map_or((at, at), |(first, _)| (first, at)));
    }
}

impl Runner {
    pub async fn run(mut self, mut events: mpsc::Receiver<Event>) {
        let mut debug = self.debug.take();
        let mut admission = self.admission.take();
        let mut rejections = self.rejections.take();
        let mut s = State::new();
        loop {
            let review_deadline = s
                .waiting_reviews
                .iter()
                .map(|w| w.started + REVIEW_WAIT_MAX)
                .min();
            let deadline = s.pending.filter(|_| s.synced).map(|(first, last)| {
                if s.due_now {
                    first
                } else {
                    let at = |from: Instant, after| from.checked_add(after).unwrap_or(from);
                    at(last, self.holdoff).min(at(first, self.holdoff_max))
                }
            });
            let event = tokio::select! {
                event = events.recv() => event,
                () = until(deadline), if deadline.is_some() => {
                    self.on_deadline(&mut s);
                    continue;
                }
                Some(reply) = async { debug.as_mut()?.recv().await }, if debug.is_some() => {
                    // The debug endpoint: the IR of the current objects, built on demand.
                    let ir = tokio::task::block_in_place(|| self.pipeline.build(&s.objects).ir);
                    let _ = reply.send(Arc::new(ir));
                    continue;
                }
                Some(rejection) = async { rejections.as_mut()?.recv().await }, if rejections.is_some() => {
                    if self.trace_rejection(&mut s.objects, &mut s.unreadable, &mut s.refusals, &rejection, &mut s.synced, &mut s.dirty, s.built.as_ref()) {
                        // Put back now: until then the Envoy takes no update of the type.
                        s.build_now();
                    }
                    continue;
                }
                Some(review) = async { admission.as_mut()?.recv().await }, if admission.is_some() => {
                    self.on_review(&mut s, review);
                    continue;
                }
                () = tokio::time::sleep_until(review_deadline.unwrap_or_else(Instant::now).into()), if review_deadline.is_some() => {
                    // Secrets asked for did not arrive in time: judge without them.
                    for waiting in std::mem::take(&mut s.waiting_reviews) {
                        self.judge(&mut s.admissions, &s.objects, waiting, &mut Vec::new());
                    }
                    continue;
                }
            };
            let Some(event) = event else { return };
            self.on_events(&mut s, event, &mut events);
        }
    }

    /// The hold-off is over: build what is pending.
    fn on_deadline(&self, s: &mut State) {
        let since = s.pending.take().map(|(first, _)| first);
        s.due_now = false;
        let changed = std::mem::take(&mut s.dirty);
        // On the worker: a change spliced in takes well under a millisecond, less than
        // handing the worker over would; a full build hands it over.
        let before = self.published_seq();
        let held = self.rebuild(s, since, &changed);
        if let Some(seq) = self.published_seq().filter(|seq| Some(*seq) != before) {
            s.refusals.published(seq, true);
        }
        let withheld = self
            .withheld
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default();
        if !withheld.is_empty()
            && self.trace_withheld(
                &mut s.objects,
                &mut s.unreadable,
                &mut s.refusals,
                &withheld,
                before,
                &mut s.synced,
                &mut s.dirty,
            )
        {
            // Built again at once, without them.
            let now = Instant::now();
            s.due_now = true;
            s.pending = Some((now, now));
        }
        let refused = i64::try_from(s.refusals.refused.len()).unwrap_or(i64::MAX);
        self.metrics.envoy_rejected_objects.set(refused);
        s.last_build = Some(Instant::now());
        if held {
            s.dirty.full = true;
            // Try again shortly even if nothing arrives (the fetch may fail).
            let at = Instant::now() + HYDRATE_RETRY;
            s.pending = Some((at, at.checked_sub(self.holdoff).unwrap_or(at)));
        } else if s.pending.is_none() && self.pipeline.unfinished() {
            // Objects a policy had no time to judge: judged by the next build, after the
            // hold-off, whether or not anything changes.
            s.dirty.full = true;
            let now = Instant::now();
            s.pending = Some((now, now));
        }
    }

    /// An admission review: refused at once when an object of its shape was refused by
    /// Envoy before or the objects are not read yet, else judged (or left to wait for
    /// Secrets).
    fn on_review(&self, s: &mut State, review: inbox::AdmissionRequest) {
        let candidate = review.candidate.object.as_ref();
        if let Some(message) = candidate.and_then(|o| s.refusals.refused_shape(o)) {
            let _ = review.reply.send(inbox::Verdict::deny(
                format!("Envoy rejected the configuration built from an object of this shape before: {message}"),
                Vec::new(),
            ));
        } else if s.synced {
            let waiting = Waiting {
                review,
                started: Instant::now(),
            };
            self.judge(
                &mut s.admissions,
                &s.objects,
                waiting,
                &mut s.waiting_reviews,
            );
        } else {
            let _ = review.reply.send(inbox::Verdict::deny(
                "isobar is not ready to review objects (still reading the cluster)".to_string(),
                Vec::new(),
            ));
        }
    }

    /// `event` and every event already queued behind it: applied, then either the
    /// endpoints published at once or a build scheduled.
    fn on_events(&self, s: &mut State, event: Event, events: &mut mpsc::Receiver<Event>) {
        let arrived = Instant::now();
        let links = s.built.as_ref().map(|b| &b.links);
        let mut changed = false;
        let mut next = Some(event);
        while let Some(event) = next.take().or_else(|| events.try_recv().ok()) {
            changed |= self.apply(
                &mut s.objects,
                &mut s.unreadable,
                &mut s.refusals,
                event,
                &mut s.synced,
                &mut s.dirty,
                links,
            );
        }
        // Reviews waiting for Secrets are judged again as soon as anything arrives.
        for waiting in std::mem::take(&mut s.waiting_reviews) {
            self.judge(
                &mut s.admissions,
                &s.objects,
                waiting,
                &mut s.waiting_reviews,
            );
        }
        if !changed {
            return;
        }
        // Only endpoints changed, and nothing else waits to be built: the pipeline's
        // output cannot change, so only EDS is updated, now (no hold-off: it costs
        // microseconds per Service).
        if s.synced
            && s.pending.is_none()
            && s.holding.is_none()
            && !s.dirty.pipeline(s.built.as_ref())
            && let Some(built) = &s.built
        {
            let services = std::mem::take(&mut s.dirty.services);
            let secrets = std::mem::take(&mut s.dirty.secrets);
            if !secrets.is_empty() {
                tracing::debug!(
                    secrets = secrets.len(),
                    "changed secrets no build uses; nothing to build"
                );
            }
            let before = self.published_seq();
            if services.len() > ENDPOINTS_INLINE_MAX {
                tokio::task::block_in_place(|| {
                    self.publish_endpoints(&built.encoder, &s.objects, &services, arrived);
                });
            } else if !services.is_empty() {
                self.publish_endpoints(&built.encoder, &s.objects, &services, arrived);
            }
            if let Some(seq) = self.published_seq().filter(|seq| Some(*seq) != before) {
                s.refusals.published(seq, false);
            }
            return;
        }
        let now = Instant::now();
        let gap = self.holdoff / 4;
        let since =
            |at: Option<Instant>, d: Duration| at.is_none_or(|at| now.duration_since(at) >= d);
        let quiet = (since(s.last_change, gap) && since(s.last_build, gap))
            || since(s.last_build, self.holdoff_max);
        s.last_change = Some(now);
        if s.pending.is_none() && quiet && s.synced {
            s.due_now = true;
        }
        s.pending = Some(s.pending.map_or((now, now), |(first, _)| (first, now)));
    }

    /// The `seq` of the snapshot published last.
    fn published_seq(&self) -> Option<u64> {
        self.snapshots.borrow().as_ref().map(|s| s.seq)
    }
}

/// Resolves at `deadline`; at once when it has passed (a timer would add up to a
/// millisecond of its own resolution to every change with the hold-off at zero).
async fn until(deadline: Option<Instant>) {
    if let Some(at) = deadline.filter(|at| *at > Instant::now()) {
        tokio::time::sleep_until(at.into()).await;
    }
}
