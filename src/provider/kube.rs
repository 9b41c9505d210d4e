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

use std::time::Duration;

use futures::StreamExt;
use isobar_sdk::{Kind, ObjectKey, StatusStyle};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher;
use tokio::sync::mpsc;

use super::{Event, Provider, manifest};
use crate::metrics::Metrics;

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

/// The API resource of a kind at the first version the table of kinds names.
pub fn api_resource(kind: Kind) -> ApiResource {
    let version = kind
        .info()
        .and_then(|i| i.versions.first().copied())
        .unwrap_or("v1");
    resource_at(kind, version)
}

/// The version of each kind the API server serves, for kinds the table reads at several
/// (TLSRoute `v1` and `v1alpha2`, ReferenceGrant `v1` and `v1beta1`): an older Gateway API
/// install serves only the older one. Found once, before the watches start; the status
/// writer writes at the version read.
#[derive(Debug, Default)]
pub struct ApiVersions(std::sync::RwLock<std::collections::BTreeMap<Kind, &'static str>>);

impl ApiVersions {
    /// The API resource of `kind` at the version the server serves (the table's first
    /// until found otherwise).
    pub fn resource(&self, kind: Kind) -> ApiResource {
        let found = self
            .0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&kind)
            .copied();
        match found {
            Some(version) => resource_at(kind, version),
            None => api_resource(kind),
        }
    }

    /// Asks the server which of each kind's versions it serves (API discovery, one
    /// request per group version): the first of the table's order that it serves is
    /// read. A kind served at none keeps the first (its watch finds it not served).
    pub async fn discover(&self, client: &kube::Client, kinds: &BTreeSet<Kind>) {
        let mut served: std::collections::HashMap<String, Option<Vec<String>>> =
            std::collections::HashMap::new();
        for kind in kinds {
            let Some(info) = kind.info().filter(|i| i.versions.len() > 1) else {
                continue;
            };
            for version in info.versions {
                let group_version = format!("{}/{version}", kind.group());
                if !served.contains_key(&group_version) {
                    let plurals = match client.list_api_group_resources(&group_version).await {
                        Ok(list) => Some(list.resources.into_iter().map(|r| r.name).collect()),
                        Err(error) => {
                            tracing::debug!(%group_version, %error, "API discovery");
                            None
                        }
                    };
                    served.insert(group_version.clone(), plurals);
                }
                let serves = served
                    .get(&group_version)
                    .and_then(Option::as_ref)
                    .is_some_and(|p: &Vec<String>| p.iter().any(|p| p == info.plural));
                if serves {
                    if Some(version) != info.versions.first() {
                        tracing::info!(
                            kind = kind.as_str(),
                            version,
                            "the API serves this kind at an older version; reading it there"
                        );
                    }
                    self.0
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(*kind, version);
                    break;
                }
            }
        }
    }
}

/// The API resource of `kind` at `version`.
fn resource_at(kind: Kind, version: &str) -> ApiResource {
    let plural = kind.info().map_or("", |i| i.plural);
    let group = kind.group();
    ApiResource {
        group: group.to_string(),
        version: version.to_string(),
        api_version: if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.as_str().to_string(),
        plural: plural.to_string(),
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

/// The watch of one kind of a group defined at run time, declared by `object`; `None`
/// when it declares none.
fn dynamic_resource(object: &isobar_sdk::Object) -> Option<(Kind, ApiResource)> {
    let group = isobar_sdk::DynamicKinds::all().find(|d| d.declared_by == object.kind())?;
    let (kind, plural) = (group.declares)(object)?;
    let version = group
        .kind
        .info()
        .and_then(|i| i.versions.first().copied())
        .unwrap_or("v1");
    Some((
        group.kind,
        ApiResource {
            group: group.group.to_string(),
            version: version.to_string(),
            api_version: format!("{}/{version}", group.group),
            kind,
            plural,
        },
    ))
}

/// The API resource of a stored object of a dynamic group (its namespace names its
/// kind; the plural is the kind in lower case, as Gatekeeper names it).
pub fn dynamic_resource_of(key: &ObjectKey) -> Option<ApiResource> {
    let group = isobar_sdk::DynamicKinds::stored_as(key.kind)?;
    let version = key
        .kind
        .info()
        .and_then(|i| i.versions.first().copied())
        .unwrap_or("v1");
    Some(ApiResource {
        group: group.group.to_string(),
        version: version.to_string(),
        api_version: format!("{}/{version}", group.group),
        kind: key.namespace.clone(),
        plural: key.namespace.to_ascii_lowercase(),
    })
}

#[async_trait::async_trait]
impl Provider for KubeProvider {
    async fn run(
        mut self: Box<Self>,
        kinds: BTreeSet<Kind>,
        events: mpsc::Sender<Event>,
    ) -> anyhow::Result<()> {
        let mut hydrate = self.hydrate.take();
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
        // A group of kinds defined at run time is watched kind by kind, as declared.
        let dynamic: Vec<&'static isobar_sdk::DynamicKinds> = isobar_sdk::DynamicKinds::all()
            .filter(|d| kinds.contains(&d.kind))
            .collect();
        let kinds: BTreeSet<Kind> = kinds
            .into_iter()
            .filter(|k| !dynamic.iter().any(|d| d.kind == *k))
            .collect();
        let mut declared: BTreeSet<String> = BTreeSet::new();
        self.versions.discover(&self.client, &kinds).await;
        let scopes: Vec<Option<String>> = if self.namespaces.is_empty() {
            vec![None]
        } else {
            self.namespaces.iter().cloned().map(Some).collect()
        };
        let (watch_tx, mut watch_rx) = mpsc::channel(1024);
        let mut states = Vec::new();
        let mut tasks = tokio::task::JoinSet::new();
        for kind in &kinds {
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
            let state = &mut states[id];
            let mut out = Vec::new();
            let (event, dynamic_kind) = match &state.dynamic {
                Some(name) => (place(event, name), Some(name.as_str())),
                None => (event, None),
            };
            match event {
                watcher::Event::Init => {
                    state.relisting = state.delivered.then(BTreeSet::new);
                }
                watcher::Event::InitApply(object) => {
                    state.delivered = true;
                    let key = object_key(kind, &object);
                    if let Some(listed) = &mut state.relisting {
                        listed.insert((key.namespace, key.name));
                    }
                    out.extend(event_for(
                        kind,
                        &state.api_version,
                        dynamic_kind,
                        object,
                        &self.metrics,
                    ));
                }
                watcher::Event::InitDone => {
                    // Whatever was stored but not listed again went away during the gap.
                    if let Some(keys) = state.relisting.take() {
                        out.push(Event::Listed {
                            kind,
                            namespace: state.namespace.clone(),
                            keys,
                        });
                    }
                    if !state.synced && state.gates_sync {
                        state.synced = true;
                        unsynced -= 1;
                        if unsynced == 0 {
                            tracing::info!("every watch has listed its objects");
                            out.push(Event::Synced);
                        }
                    }
                }
                watcher::Event::Apply(object) => {
                    state.delivered = true;
                    out.extend(event_for(
                        kind,
                        &state.api_version,
                        dynamic_kind,
                        object,
                        &self.metrics,
                    ));
                }
                watcher::Event::Delete(object) => {
                    out.push(Event::Delete(object_key(kind, &object)));
                }
            }
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

/// Whether a watch failed because the API has no such resource (404 on the list).
fn not_served(error: &watcher::Error) -> bool {
    matches!(
        error,
        watcher::Error::InitialListFailed(kube::Error::Api(status)) if status.code == 404
    )
}

/// How long a retried watch must run without failing to count as recovered: a watch that
/// reconnects to an idle API server yields no event to say so.
const RECOVERED_AFTER: Duration = Duration::from_secs(2);
const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

type WatchStream =
    futures::stream::BoxStream<'static, Result<watcher::Event<DynamicObject>, watcher::Error>>;

/// Drives one watcher: forwards its events, and on errors backs off (0.5 s doubling to
/// 30 s), counts them, and holds `/readyz` not ready until a retry has held for
/// [`RECOVERED_AFTER`] or delivered an event.
async fn watch(
    id: usize,
    kind: Kind,
    mut stream: WatchStream,
    out: mpsc::Sender<(usize, Kind, watcher::Event<DynamicObject>)>,
    health: Arc<WatchHealth>,
    metrics: Arc<Metrics>,
) {
    let mut failing = false;
    let mut backoff = BACKOFF_MIN;
    // Whether the kind has been listed once (or found not served, and taken as empty).
    let mut listed = false;
    let recovered = |failing: &mut bool, backoff: &mut Duration| {
        if std::mem::take(failing) {
            health.failing.fetch_sub(1, Ordering::Relaxed);
            tracing::info!(kind = kind.as_str(), "watch recovered");
        }
        *backoff = BACKOFF_MIN;
    };
    loop {
        // `next` is cancel-safe: the watcher keeps its request in flight between polls.
        let item = if failing {
            match tokio::time::timeout(RECOVERED_AFTER, stream.next()).await {
                Ok(item) => item,
                Err(_) => {
                    recovered(&mut failing, &mut backoff);
                    continue;
                }
            }
        } else {
            stream.next().await
        };
        match item {
            None => return,
            Some(Ok(event)) => {
                recovered(&mut failing, &mut backoff);
                listed |= matches!(event, watcher::Event::InitDone);
                if out.send((id, kind, event)).await.is_err() {
                    return;
                }
            }
            // The API does not serve the kind (its CRD is not installed: an older Gateway
            // API, no experimental channel): it has no objects, which must not hold the
            // first build back; the list is tried again, and objects come when it is.
            Some(Err(error)) if not_served(&error) => {
                if !listed {
                    listed = true;
                    tracing::warn!(
                        kind = kind.as_str(),
                        "the API does not serve this kind (CRD not installed?): none are read until it does"
                    );
                    if out
                        .send((id, kind, watcher::Event::InitDone))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                tokio::time::sleep(BACKOFF_MAX).await;
            }
            Some(Err(error)) => {
                if !failing {
                    failing = true;
                    health.failing.fetch_add(1, Ordering::Relaxed);
                }
                metrics.watch_restart(kind.as_str());
                tracing::warn!(kind = kind.as_str(), %error, retry_in = ?backoff, "watch failed; the last good objects stay served");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
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

/// An object of a kind of a dynamic group, placed in the namespace its kind names (see
/// `DynamicKinds`).
fn place(event: watcher::Event<DynamicObject>, kind: &str) -> watcher::Event<DynamicObject> {
    let placed = |mut object: DynamicObject| {
        object.metadata.namespace = Some(kind.to_string());
        object
    };
    match event {
        watcher::Event::InitApply(o) => watcher::Event::InitApply(placed(o)),
        watcher::Event::Apply(o) => watcher::Event::Apply(placed(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(placed(o)),
        other => other,
    }
}

fn object_key(kind: Kind, object: &DynamicObject) -> ObjectKey {
    ObjectKey::new(
        kind,
        kind.namespace_of(object.metadata.namespace.as_deref()),
        object.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// The event for a watched object: `Apply`, or `Unreadable` (with a warning naming it)
/// when it does not decode.
fn event_for(
    kind: Kind,
    api_version: &str,
    dynamic_kind: Option<&str>,
    object: DynamicObject,
    metrics: &Metrics,
) -> Option<Event> {
    let key = object_key(kind, &object);
    let decoded = match dynamic_kind {
        Some(name) => decode_as(kind, name, api_version, object, metrics),
        None => decode(kind, api_version, object, metrics),
    };
    match decoded {
        Ok(object) => Some(Event::Apply(object)),
        Err(Some(error)) => Some(Event::Unreadable(key, error)),
        Err(None) => None,
    }
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The typed object; `Err(Some(why))` when it does not decode (logged with its name).
fn decode(
    kind: Kind,
    api_version: &str,
    object: DynamicObject,
    metrics: &Metrics,
) -> Result<isobar_sdk::Object, Option<String>> {
    decode_as(kind, kind.as_str(), api_version, object, metrics)
}

/// [`decode`], for an object whose `kind` reads `name` (a kind of a dynamic group,
/// stored as `kind`).
fn decode_as(
    kind: Kind,
    name: &str,
    api_version: &str,
    mut object: DynamicObject,
    metrics: &Metrics,
) -> Result<isobar_sdk::Object, Option<String>> {
    object.metadata.managed_fields = None;
    // `kubectl apply`'s copy of the whole object as last applied: never read.
    if let Some(annotations) = object.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
    // Neither moves routing: without them, Isobar's own status writes (which change
    // both) leave the stored object equal, and so rebuild nothing.
    object.metadata.resource_version = None;
    // A cluster-scoped object has no namespace, whatever a response says.
    if !kind.namespaced() {
        object.metadata.namespace = None;
    }
    // A kind whose status Isobar writes is read without it: Isobar's own writes then
    // leave the stored object equal, and rebuild nothing.
    if kind.info().is_some_and(|i| i.status != StatusStyle::None)
        && let Some(fields) = object.data.as_object_mut()
    {
        fields.remove("status");
    }
    // The object's fields move into the value handed to the decoder (no copy of a
    // Secret's data); only the metadata is serialised.
    let metadata = match serde_json::to_value(&object.metadata) {
        Ok(value) => value,
        Err(error) => {
            tracing::warn!(kind = kind.as_str(), %error, "an object could not be read");
            return Err(None);
        }
    };
    let mut fields = match std::mem::take(&mut object.data) {
        serde_json::Value::Object(fields) => fields,
        _ => serde_json::Map::new(),
    };
    fields.insert("metadata".into(), metadata);
    // List items carry no apiVersion/kind; the watch says what they are.
    fields.insert("apiVersion".into(), api_version.into());
    fields.insert("kind".into(), name.into());
    let value = serde_json::Value::Object(fields);
    match manifest::decode(kind, value) {
        Ok(object) => Ok(object),
        Err(error) => {
            metrics.decode_error(kind.as_str());
            tracing::warn!(
                kind = kind.as_str(),
                namespace = object.metadata.namespace.as_deref().unwrap_or_default(),
                name = object.metadata.name.as_deref().unwrap_or_default(),
                %error,
                "skipping an object that does not decode; its last good version (if any) stays"
            );
            Err(Some(error))
        }
    }
}

/// Builds the client from `--kubeconfig PATH` or, with `--incluster`, the pod's service
/// account.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    client_limited(kubeconfig, RequestRate::default()).await
}

/// How many requests per second the Kubernetes client makes (Contour's
/// `kubernetesClientQPS` and `kubernetesClientBurst`, client-go's QPS and burst);
/// unset: no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RequestRate {
    pub qps: Option<f32>,
    pub burst: Option<u32>,
}

/// The longest window a rate may spread its burst over: a rate slower than a burst a
/// day would leave the controller unable to read anything for days.
pub const MAX_RATE_WINDOW: Duration = Duration::from_secs(86_400);

impl RequestRate {
    /// The burst and the window it may be spent in (`None`: no limit); an error for a
    /// rate too slow to serve (see [`MAX_RATE_WINDOW`]).
    pub fn window(&self) -> anyhow::Result<Option<(u32, Duration)>> {
        let Some(qps) = self.qps.filter(|q| q.is_finite() && *q > 0.0) else {
            return Ok(None);
        };
        let burst = self.burst.filter(|b| *b > 0).unwrap_or_else(|| {
            // Saturating: a QPS past u32::MAX is a burst of u32::MAX.
            qps.ceil().max(1.0) as u32
        });
        let seconds = f64::from(burst) / f64::from(qps);
        match Duration::try_from_secs_f64(seconds) {
            // A rate so fast its window rounds to nothing: a nanosecond (a rate limiter
            // needs a window), no limit to speak of.
            Ok(window) if window <= MAX_RATE_WINDOW => {
                Ok(Some((burst, window.max(Duration::from_nanos(1)))))
            }
            _ => Err(anyhow::anyhow!(
                "kubernetesClientQPS: {qps:e} with a burst of {burst} allows {burst} request(s) every {seconds:.1e} s; the slowest rate allowed is {burst} per {} s",
                MAX_RATE_WINDOW.as_secs()
            )),
        }
    }
}

/// [`client`], its requests limited to `rate`: at most `burst` requests (default
/// `qps`, at least 1) in any `burst / qps` seconds, so `qps` on average.
pub async fn client_limited(
    kubeconfig: Option<&std::path::Path>,
    rate: RequestRate,
) -> anyhow::Result<kube::Client> {
    let mut config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| anyhow::anyhow!("reading kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| anyhow::anyhow!("kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::incluster()
            .map_err(|e| anyhow::anyhow!("in-cluster configuration: {e}"))?,
    };
    // The watchers retry with their own backoff and report each failure (readiness, the
    // watch error metric); the client's own retries of 429/503 (up to 15, for minutes)
    // would hide an unavailable API server behind a request that never returns.
    config.default_retry = false;
    let Some((burst, window)) = rate.window()? else {
        return kube::Client::try_from(config)
            .map_err(|e| anyhow::anyhow!("Kubernetes client: {e}"));
    };
    let builder = kube::client::ClientBuilder::try_from(config)
        .map_err(|e| anyhow::anyhow!("Kubernetes client: {e}"))?;
    Ok(builder
        .with_layer(&tower::limit::RateLimitLayer::new(u64::from(burst), window))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any finite positive rate is either a window a rate limiter takes (never zero, never
    /// past a day) or an error naming the key; none panics.
    #[test]
    fn request_rates_make_usable_windows_or_errors() {
        let window = |qps: f32, burst: Option<u32>| {
            RequestRate {
                qps: Some(qps),
                burst,
            }
            .window()
        };
        for (qps, burst) in [(1e20, None), (1e10, Some(1)), (f32::MAX, None), (5.0, None)] {
            let (b, w) = window(qps, burst)
                .ok()
                .flatten()
                .unwrap_or_else(|| panic!("{qps} {burst:?}"));
            assert!(
                b >= 1 && !w.is_zero() && w <= MAX_RATE_WINDOW,
                "{qps}: {b} per {w:?}"
            );
        }
        let slow = window(1e-30, None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(slow.contains("kubernetesClientQPS"), "{slow}");
        assert!(matches!(window(0.0, None), Ok(None)));
    }
}
