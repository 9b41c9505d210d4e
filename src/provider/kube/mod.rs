//! The Kubernetes provider: one kube-rs watcher per kind the pipeline reads (and per
//! namespace with `--watch-namespaces`), merged into the provider events the runner takes.
//!
//! - Watches list, then watch from the list's resourceVersion; a broken watch resumes
//!   from the last resourceVersion seen, a 410 Gone relists, and errors back off (0.5 s
//!   doubling to 30 s). After a relist, objects that were known but not listed again are
//!   deleted; objects listed again with the same content change nothing, so a relist
//!   that finds nothing new builds nothing new.
//! - `Synced` is sent once every watcher has completed its first list: the runner builds
//!   nothing before, so a restarting replica never serves a partial configuration.
//! - Objects are read as untyped JSON and decoded one by one: an object that does not
//!   decode (a CRD version skew, a bad field) is skipped with a warning naming it, its last
//!   good version (if any) stays, and the watch goes on.
//! - `managedFields`, `resourceVersion` and the `status` of kinds whose status Isobar
//!   writes are dropped on arrival (a status write then changes nothing stored and
//!   rebuilds nothing); what else of an object is kept is its kind's to say (see
//!   `KindInfo::decode`). Secrets are listed with a field selector that leaves out Helm
//!   releases and service-account tokens.
//! - While a watch is failing, the last good objects stay served and `/readyz` reports
//!   not ready ([`WatchHealth`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use isobar_sdk::Kind;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;
use tokio::sync::mpsc;

use super::{Event, Provider};
use crate::metrics::Metrics;

mod client;
mod decode;
mod resources;
mod watch;

pub use client::{MAX_RATE_WINDOW, RequestRate, client, client_limited};
use decode::{decode, event_for, object_key, place};
use resources::dynamic_resource;
pub use resources::{ApiVersions, api_resource, dynamic_resource_of};
use watch::watch;

/// Secrets Isobar never needs: Helm release state and service-account tokens.
pub const SECRET_FIELD_SELECTOR: &str =
    "type!=helm.sh/release.v1,type!=kubernetes.io/service-account-token";

/// How many watchers are failing right now; `/readyz` is not ready while any is.
#[derive(Debug, Default)]
pub struct WatchHealth {
    failing: AtomicUsize,
}

impl WatchHealth {
    pub fn healthy(&self) -> bool {
        self.failing.load(Ordering::Relaxed) == 0
    }
}

pub struct KubeProvider {
    client: kube::Client,
    /// Empty: all namespaces.
    namespaces: Vec<String>,
    health: Arc<WatchHealth>,
    metrics: Arc<Metrics>,
    /// Requests to fetch Secrets again whose data the store dropped.
    hydrate: Option<mpsc::Receiver<Vec<(String, String)>>>,
    /// The version each kind is read at (shared with the status writer).
    versions: Arc<ApiVersions>,
    /// Kinds not watched (`--disable-feature`), by plural.
    disabled: Vec<String>,
}

impl KubeProvider {
    /// Serves requests to fetch Secrets again (one GET each), answered as `Apply` events.
    pub fn with_hydration(mut self, requests: mpsc::Receiver<Vec<(String, String)>>) -> Self {
        self.hydrate = Some(requests);
        self
    }

    pub fn new(
        client: kube::Client,
        namespaces: Vec<String>,
        health: Arc<WatchHealth>,
        metrics: Arc<Metrics>,
    ) -> KubeProvider {
        KubeProvider {
            client,
            namespaces,
            health,
            metrics,
            hydrate: None,
            versions: Arc::default(),
            disabled: Vec::new(),
        }
    }

    /// Watches none of the kinds of these plurals: they are taken as empty.
    pub fn without(mut self, plurals: &[String]) -> Self {
        self.disabled = plurals.to_vec();
        self
    }

    /// Reads each kind at the version `versions` finds served (and records it there).
    pub fn with_versions(mut self, versions: Arc<ApiVersions>) -> Self {
        self.versions = versions;
        self
    }
}

/// Where one watcher is: which namespace it covers, and during a relist the objects
/// listed so far. What it delivered before is the store's to know.
#[derive(Default)]
struct WatchState {
    namespace: Option<String>,
    /// The apiVersion its objects are read at.
    api_version: String,
    /// The keys of a list that may replace objects this watch already delivered: what
    /// is not listed again went away.
    relisting: Option<BTreeSet<(String, String)>>,
    /// Whether this watch has delivered any object. Its first list can replace nothing,
    /// so it records no keys (tens of thousands of names, held until the list ends).
    delivered: bool,
    synced: bool,
    /// For a kind of a group defined at run time (`DynamicKinds`): its name. Its objects
    /// are stored as the group's kind, in the namespace of that name.
    dynamic: Option<String>,
    /// Whether the first build waits for this watch (it started before every watch had
    /// listed once).
    gates_sync: bool,
}

#[async_trait::async_trait]
impl Provider for KubeProvider {
    async fn run(
        mut self: Box<Self>,
        kinds: BTreeSet<Kind>,
        events: mpsc::Sender<Event>,
    ) -> anyhow::Result<()> {
        let mut hydrate = self.hydrate.take();
        let (kinds, dynamic) = self.watched(kinds);
        let mut declared: BTreeSet<String> = BTreeSet::new();
        self.versions.discover(&self.client, &kinds).await;
        let (watch_tx, mut watch_rx) = mpsc::channel(1024);
        let mut states = Vec::new();
        let mut tasks = tokio::task::JoinSet::new();
        self.start_watches(&kinds, &watch_tx, &mut states, &mut tasks);
        let mut unsynced = states.len();
        if unsynced == 0 {
            let _ = events.send(Event::Synced).await;
        }
        tracing::info!(
            kinds = ?kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            namespaces = ?self.namespaces,
            "watching the Kubernetes API"
        );
        loop {
            let (id, kind, event) = tokio::select! {
                next = watch_rx.recv() => match next {
                    Some(next) => next,
                    None => break,
                },
                Some(wanted) = async { hydrate.as_mut()?.recv().await }, if hydrate.is_some() => {
                    for (namespace, name) in wanted {
                        if let Some(event) = self.fetch_secret(&namespace, &name).await
                            && events.send(event).await.is_err()
                        {
                            return Ok(());
                        }
                    }
                    continue;
                }
            };
            let out = states[id].events(kind, event, &mut unsynced, &self.metrics);
            // An object declaring a kind of a dynamic group (as decoded for the store):
            // watch that kind from now on.
            let declares = out.iter().filter_map(|event| match event {
                Event::Apply(object) if dynamic.iter().any(|d| d.declared_by == kind) => {
                    dynamic_resource(object)
                }
                _ => None,
            });
            let declares: Vec<_> = declares.collect();
            for (stored, resource) in declares {
                if !dynamic.iter().any(|d| d.kind == stored)
                    || !declared.insert(resource.kind.clone())
                {
                    continue;
                }
                tracing::info!(kind = %resource.kind, group = %resource.group, "watching a kind declared at run time");
                let gates_sync = unsynced > 0;
                unsynced += usize::from(gates_sync);
                states.push(WatchState {
                    namespace: Some(resource.kind.clone()),
                    api_version: resource.api_version.clone(),
                    dynamic: Some(resource.kind.clone()),
                    gates_sync,
                    ..Default::default()
                });
                tasks.spawn(watch(
                    states.len() - 1,
                    stored,
                    watcher(
                        Api::all_with(self.client.clone(), &resource),
                        watcher::Config::default(),
                    )
                    .boxed(),
                    watch_tx.clone(),
                    self.health.clone(),
                    self.metrics.clone(),
                ));
            }
            for event in out {
                if events.send(event).await.is_err() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

/// What one watcher sends: its index, its kind and the event.
type WatchSender = mpsc::Sender<(usize, Kind, watcher::Event<DynamicObject>)>;

impl KubeProvider {
    /// The kinds to watch, but those `--disable-feature` turns off, and apart the groups
    /// of kinds defined at run time (watched kind by kind, as declared).
    fn watched(
        &self,
        kinds: BTreeSet<Kind>,
    ) -> (BTreeSet<Kind>, Vec<&'static isobar_sdk::DynamicKinds>) {
        let kinds: BTreeSet<Kind> = kinds
            .into_iter()
            .filter(|k| {
                let off = k
                    .info()
                    .is_some_and(|i| self.disabled.iter().any(|d| d == i.plural));
                if off {
                    tracing::info!(kind = k.as_str(), "not watched (--disable-feature)");
                }
                !off
            })
            .collect();
        let dynamic: Vec<&'static isobar_sdk::DynamicKinds> = isobar_sdk::DynamicKinds::all()
            .filter(|d| kinds.contains(&d.kind))
            .collect();
        let kinds = kinds
            .into_iter()
            .filter(|k| !dynamic.iter().any(|d| d.kind == *k))
            .collect();
        (kinds, dynamic)
    }

    /// One watcher per kind and namespace watched (one for a cluster-scoped kind).
    fn start_watches(
        &self,
        kinds: &BTreeSet<Kind>,
        watch_tx: &WatchSender,
        states: &mut Vec<WatchState>,
        tasks: &mut tokio::task::JoinSet<()>,
    ) {
        let scopes: Vec<Option<String>> = if self.namespaces.is_empty() {
            vec![None]
        } else {
            self.namespaces.iter().cloned().map(Some).collect()
        };
        for kind in kinds {
            let resource = self.versions.resource(*kind);
            // Cluster-scoped kinds are watched once, whatever the namespaces.
            let cluster_wide = [None];
            let kind_scopes = if kind.namespaced() {
                &scopes[..]
            } else {
                &cluster_wide[..]
            };
            for scope in kind_scopes {
                let api: Api<DynamicObject> = match scope {
                    None => Api::all_with(self.client.clone(), &resource),
                    Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
                };
                let mut config = watcher::Config::default();
                if *kind == Kind::Secret {
                    config = config.fields(SECRET_FIELD_SELECTOR);
                }
                states.push(WatchState {
                    namespace: scope.clone(),
                    api_version: resource.api_version.clone(),
                    gates_sync: true,
                    ..Default::default()
                });
                tasks.spawn(watch(
                    states.len() - 1,
                    *kind,
                    watcher(api, config).boxed(),
                    watch_tx.clone(),
                    self.health.clone(),
                    self.metrics.clone(),
                ));
            }
        }
    }
}

impl WatchState {
    /// One watcher event as the events the store takes; `unsynced` counts the watches
    /// the first build still waits for.
    fn events(
        &mut self,
        kind: Kind,
        event: watcher::Event<DynamicObject>,
        unsynced: &mut usize,
        metrics: &Metrics,
    ) -> Vec<Event> {
        let mut out = Vec::new();
        let (event, dynamic_kind) = match &self.dynamic {
            Some(name) => (place(event, name), Some(name.as_str())),
            None => (event, None),
        };
        match event {
            watcher::Event::Init => {
                self.relisting = self.delivered.then(BTreeSet::new);
            }
            watcher::Event::InitApply(object) => {
                self.delivered = true;
                let key = object_key(kind, &object);
                if let Some(listed) = &mut self.relisting {
                    listed.insert((key.namespace, key.name));
                }
                out.extend(event_for(
                    kind,
                    &self.api_version,
                    dynamic_kind,
                    object,
                    metrics,
                ));
            }
            watcher::Event::InitDone => {
                // Whatever was stored but not listed again went away during the gap.
                if let Some(keys) = self.relisting.take() {
                    out.push(Event::Listed {
                        kind,
                        namespace: self.namespace.clone(),
                        keys,
                    });
                }
                if !self.synced && self.gates_sync {
                    self.synced = true;
                    *unsynced -= 1;
                    if *unsynced == 0 {
                        tracing::info!("every watch has listed its objects");
                        out.push(Event::Synced);
                    }
                }
            }
            watcher::Event::Apply(object) => {
                self.delivered = true;
                out.extend(event_for(
                    kind,
                    &self.api_version,
                    dynamic_kind,
                    object,
                    metrics,
                ));
            }
            watcher::Event::Delete(object) => {
                out.push(Event::Delete(object_key(kind, &object)));
            }
        }
        out
    }
}

impl KubeProvider {
    /// One Secret read again in full (the store dropped its data while unreferenced).
    async fn fetch_secret(&self, namespace: &str, name: &str) -> Option<Event> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &api_resource(Kind::Secret));
        match api.get_opt(name).await {
            Ok(Some(object)) => decode(Kind::Secret, "v1", object, &self.metrics)
                .ok()
                .map(Event::Fetched),
            Ok(None) => None,
            Err(error) => {
                tracing::warn!(%namespace, %name, %error, "fetching a secret failed");
                None
            }
        }
    }
}
