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

impl Runner {
    pub async fn run(mut self, mut events: mpsc::Receiver<Event>) {
        let mut debug = self.debug.take();
        let mut admission = self.admission.take();
        let mut rejections = self.rejections.take();
        // What Envoy refused, and what each published snapshot changed.
        let mut refusals = Rejections::default();
        let mut admissions = review::Admissions::default();
        let mut objects = Objects::default();
        let mut synced = false;
        // When the first unbuilt change arrived, and the latest one.
        let mut pending: Option<(Instant, Instant)> = None;
        // When the last build ran and the last change arrived: a change after a quiet
        // moment (no change and no build for a quarter of the hold-off, or no build for
        // the max hold-off, Contour's rule) is built at once; one during a burst waits.
        let mut last_build: Option<Instant> = None;
        let mut last_change: Option<Instant> = None;
        // The pending changes started after a quiet moment: build them now.
        let mut due_now = false;
        let mut last_status = StatusReport::default();
        // While a build waits for elided Secrets to be fetched again: since when.
        let mut holding: Option<Instant> = None;
        // Objects whose latest version did not decode, with why.
        let mut unreadable: BTreeMap<ObjectKey, String> = BTreeMap::new();
        // What changed since the last build, and that build's clusters.
        // The first build is a full one: what each listed object reaches is not recorded.
        let mut dirty = Dirty {
            full: true,
            ..Dirty::default()
        };
        let mut built: Option<Built> = None;
        // Reviews waiting for dropped Secrets to be fetched again.
        let mut waiting_reviews: Vec<Waiting> = Vec::new();
        loop {
            let review_deadline = waiting_reviews
                .iter()
                .map(|w| w.started + REVIEW_WAIT_MAX)
                .min();
            let deadline = pending.filter(|_| synced).map(|(first, last)| {
                if due_now {
                    first
                } else {
                    let at = |from: Instant, after| from.checked_add(after).unwrap_or(from);
                    at(last, self.holdoff).min(at(first, self.holdoff_max))
                }
            });
            let event = tokio::select! {
                event = events.recv() => event,
                () = until(deadline), if deadline.is_some() => {
                    let since = pending.take().map(|(first, _)| first);
                    due_now = false;
                    let changed = std::mem::take(&mut dirty);
                    // On the worker: a change spliced in takes well under a millisecond,
                    // less than handing the worker over would; a full build hands it over.
                    let before = self.published_seq();
                    let held = self.rebuild(&mut objects, &unreadable, &refusals.refused, &mut last_status, since, &mut holding, &mut built, &changed);
                    if let Some(seq) = self.published_seq().filter(|s| Some(*s) != before) {
                        refusals.published(seq, true);
                    }
                    let withheld = self.withheld.lock().map(|mut w| std::mem::take(&mut *w)).unwrap_or_default();
                    if !withheld.is_empty() && self.trace_withheld(&mut objects, &mut unreadable, &mut refusals, &withheld, before, &mut synced, &mut dirty) {
                        // Built again at once, without them.
                        let now = Instant::now();
                        due_now = true;
                        pending = Some((now, now));
                    }
                    self.metrics.envoy_rejected_objects.set(i64::try_from(refusals.refused.len()).unwrap_or(i64::MAX));
                    last_build = Some(Instant::now());
                    if held {
                        dirty.full = true;
                        // Try again shortly even if nothing arrives (the fetch may fail).
                        let at = Instant::now() + HYDRATE_RETRY;
                        pending = Some((at, at.checked_sub(self.holdoff).unwrap_or(at)));
                    } else if pending.is_none() && self.pipeline.unfinished() {
                        // Objects a policy had no time to judge: judged by the next build,
                        // after the hold-off, whether or not anything changes.
                        dirty.full = true;
                        let now = Instant::now();
                        pending = Some((now, now));
                    }
                    continue;
                }
                Some(reply) = async { debug.as_mut()?.recv().await }, if debug.is_some() => {
                    // The debug endpoint: the IR of the current objects, built on demand.
                    let ir = tokio::task::block_in_place(|| self.pipeline.build(&objects).ir);
                    let _ = reply.send(Arc::new(ir));
                    continue;
                }
                Some(rejection) = async { rejections.as_mut()?.recv().await }, if rejections.is_some() => {
                    if self.trace_rejection(&mut objects, &mut unreadable, &mut refusals, &rejection, &mut synced, &mut dirty, built.as_ref()) {
                        // Put back now: until then the Envoy takes no update of the type.
                        let now = Instant::now();
                        due_now = true;
                        pending = Some(pending.map_or((now, now), |(first, _)| (first, now)));
                    }
                    continue;
                }
                Some(review) = async { admission.as_mut()?.recv().await }, if admission.is_some() => {
                    if let Some(message) = review.candidate.object.as_ref().and_then(|o| refusals.refused_shape(o)) {
                        let _ = review.reply.send(inbox::Verdict::deny(
                            format!("Envoy rejected the configuration built from an object of this shape before: {message}"),
                            Vec::new(),
                        ));
                    } else if synced {
                        let waiting = Waiting { review, started: Instant::now() };
                        self.judge(&mut admissions, &objects, waiting, &mut waiting_reviews);
                    } else {
                        let _ = review.reply.send(inbox::Verdict::deny(
                            "isobar is not ready to review objects (still reading the cluster)".to_string(),
                            Vec::new(),
                        ));
                    }
                    continue;
                }
                () = tokio::time::sleep_until(review_deadline.unwrap_or_else(Instant::now).into()), if review_deadline.is_some() => {
                    // Secrets asked for did not arrive in time: judge without them.
                    for waiting in std::mem::take(&mut waiting_reviews) {
                        self.judge(&mut admissions, &objects, waiting, &mut Vec::new());
                    }
                    continue;
                }
            };
            let Some(event) = event else { return };
            let arrived = Instant::now();
            let links = built.as_ref().map(|b| &b.links);
            let mut changed = self.apply(
                &mut objects,
                &mut unreadable,
                &mut refusals,
                event,
                &mut synced,
                &mut dirty,
                links,
            );
            while let Ok(event) = events.try_recv() {
                changed |= self.apply(
                    &mut objects,
                    &mut unreadable,
                    &mut refusals,
                    event,
                    &mut synced,
                    &mut dirty,
                    links,
                );
            }
            // Reviews waiting for Secrets are judged again as soon as anything arrives.
            for waiting in std::mem::take(&mut waiting_reviews) {
                self.judge(&mut admissions, &objects, waiting, &mut waiting_reviews);
            }
            // Only endpoints changed, and nothing else waits to be built: the pipeline's
            // output cannot change, so only EDS is updated, now (no hold-off: it costs
            // microseconds per Service).
            if changed
                && synced
                && pending.is_none()
                && holding.is_none()
                && !dirty.pipeline(built.as_ref())
                && let Some(built) = &built
            {
                let services = std::mem::take(&mut dirty.services);
                let secrets = std::mem::take(&mut dirty.secrets);
                if !secrets.is_empty() {
                    tracing::debug!(
                        secrets = secrets.len(),
                        "changed secrets no build uses; nothing to build"
                    );
                }
                let before = self.published_seq();
                if services.len() > ENDPOINTS_INLINE_MAX {
                    tokio::task::block_in_place(|| {
                        self.publish_endpoints(&built.encoder, &objects, &services, arrived);
                    });
                } else if !services.is_empty() {
                    self.publish_endpoints(&built.encoder, &objects, &services, arrived);
                }
                if let Some(seq) = self.published_seq().filter(|s| Some(*s) != before) {
                    refusals.published(seq, false);
                }
                continue;
            }
            if changed {
                let now = Instant::now();
                let gap = self.holdoff / 4;
                let since = |at: Option<Instant>, d: Duration| {
                    at.is_none_or(|at| now.duration_since(at) >= d)
                };
                let quiet = (since(last_change, gap) && since(last_build, gap))
                    || since(last_build, self.holdoff_max);
                last_change = Some(now);
                if pending.is_none() && quiet && synced {
                    due_now = true;
                }
                pending = Some(pending.map_or((now, now), |(first, _)| (first, now)));
            }
        }
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
