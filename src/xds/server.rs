//! The ADS server, one task per Envoy stream: state of the world here, incremental
//! (delta) in `delta.rs`; Envoy picks by the RPC it opens.
//!
//! Per stream and type it tracks what was sent, under which nonce, and whether Envoy
//! ACKed or NACKed it (xDS spec rules X1–X12 in `reference/reliability.md`):
//! - nothing is sent before the first complete build;
//! - a request whose nonce is not the latest sent is stale and ignored;
//! - a NACKed version is logged, counted, and not sent again until the content changes;
//! - a change is pushed in CDS → EDS → SDS → LDS → RDS order, listeners and routes only
//!   once the clusters and endpoints before them are ACKed, and clusters a stream may still
//!   route to are kept in CDS until the new routes are ACKed (make before break);
//! - LDS and CDS responses are complete (the spec requires it); EDS, SDS and RDS carry
//!   only the subscribed resources whose bytes the stream does not hold (the spec allows
//!   it, and Envoy keeps what a response leaves out), so a certificate rotation sends one
//!   secret.

use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use tokio::sync::{mpsc, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use prost::Message;

use super::grpc::{NamesDigest, SotwRequest};
use super::resource::{Encoded, Name, XdsType};
use super::snapshot::{LogPosition, ResourceMap, Snapshot, TypeSnapshot, digest, version_of};
use super::wire::{self, Wire};
use crate::metrics::Metrics;

/// The longest LDS/RDS wait for Envoy to subscribe to new endpoints before sending anyway.
const HOLD_MAX: Duration = Duration::from_secs(5);

pub(super) type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Serves the latest snapshot to every connected Envoy.
#[derive(Clone)]
pub struct AdsService {
    snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
    metrics: Arc<Metrics>,
    /// Turns true on shutdown: every stream ends cleanly (Envoy reconnects elsewhere).
    closing: watch::Receiver<bool>,
    /// `xds-server.vhds`: the routes served need delta xDS, so state-of-the-world
    /// streams are refused.
    delta_only: bool,
}

impl AdsService {
    pub fn new(snapshots: watch::Receiver<Option<Arc<Snapshot>>>, metrics: Arc<Metrics>) -> Self {
        AdsService {
            snapshots,
            metrics,
            closing: watch::channel(false).1,
            delta_only: false,
        }
    }

    /// Refuses state-of-the-world streams (with `FAILED_PRECONDITION`): for
    /// `xds-server.vhds`, whose `ingress_http` Envoy accepts only over delta ADS.
    pub fn delta_only(mut self, delta_only: bool) -> Self {
        self.delta_only = delta_only;
        self
    }

    /// Ends every stream once `closing` turns true.
    pub fn with_shutdown(mut self, closing: watch::Receiver<bool>) -> Self {
        self.closing = closing;
        self
    }

    /// The service for tonic's router (see `grpc.rs` for how responses are framed).
    pub fn into_server(self) -> super::grpc::AdsServer {
        super::grpc::AdsServer::new(self)
    }
}

impl AdsService {
    /// Opens a state-of-the-world stream: its responses, while a task answers `requests`.
    pub(super) fn sotw(&self, requests: Streaming<SotwRequest>) -> ResponseStream<Wire> {
        if self.delta_only {
            let status = Status::failed_precondition(
                "xds-server.vhds is on: this Envoy must use delta xDS (isobar bootstrap --xds-mode delta)",
            );
            tracing::error!(
                reason = status.message(),
                "refused a state-of-the-world xDS stream"
            );
            return Box::pin(tokio_stream::once(Err(status)));
        }
        let (tx, rx) = mpsc::channel(16);
        let stream = AdsStream::new(self.snapshots.clone(), self.metrics.clone(), tx);
        self.spawn(stream, requests);
        Box::pin(ReceiverStream::new(rx))
    }

    /// Opens an incremental (delta) stream.
    pub(super) fn delta(&self, requests: Streaming<DeltaDiscoveryRequest>) -> ResponseStream<Wire> {
        let (tx, rx) = mpsc::channel(16);
        let stream =
            super::delta::DeltaStream::new(self.snapshots.clone(), self.metrics.clone(), tx);
        self.spawn(stream, requests);
        Box::pin(ReceiverStream::new(rx))
    }

    /// Runs one stream's session until Envoy hangs up or shutdown begins.
    fn spawn<S: Session + Send + 'static>(&self, session: S, requests: Streaming<S::Request>)
    where
        S::Request: Send,
    {
        let mut closing = self.closing.clone();
        tokio::spawn(async move {
            let closed = async move {
                // No sender (no shutdown wired): never closes.
                if closing.wait_for(|c| *c).await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = run(session, requests) => {}
                () = closed => {}
            }
        });
    }
}

/// One Envoy stream, state of the world or delta: what the shared loop drives.
pub(super) trait Session {
    type Request: 'static;
    fn core(&mut self) -> &mut StreamCore;
    fn on_request(&mut self, request: Self::Request);
    /// Sends every type that has news; `Err` when the stream is gone.
    fn push(&mut self) -> impl std::future::Future<Output = Result<(), ()>> + Send;
}

/// What every stream keeps besides its per-type state.
pub(super) struct StreamCore {
    pub snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
    pub metrics: Arc<Metrics>,
    pub node: String,
    /// Since when LDS/RDS have been held back waiting for EDS subscriptions.
    pub holding_since: Option<Instant>,
    /// Where the EDS log stood when Envoy had subscribed to every endpoint set;
    /// cleared when an EDS subscription changes.
    pub endpoints_subscribed: Option<LogPosition>,
    pub connected: std::time::Instant,
}

impl StreamCore {
    pub fn new(snapshots: watch::Receiver<Option<Arc<Snapshot>>>, metrics: Arc<Metrics>) -> Self {
        StreamCore {
            snapshots,
            metrics,
            node: String::new(),
            holding_since: None,
            endpoints_subscribed: None,
            connected: std::time::Instant::now(),
        }
    }

    /// Routes must not reach Envoy before the endpoints of the clusters they use: a
    /// cluster is only usable once its ClusterLoadAssignment arrived. Holds LDS/RDS
    /// while Envoy has not subscribed to every current EDS name (`subscribed`; it does
    /// so after taking a CDS update), for at most `HOLD_MAX`.
    pub fn hold_for_endpoints(
        &mut self,
        snapshot: &Snapshot,
        subscribed: impl Fn(&str) -> bool,
    ) -> bool {
        let current = snapshot.get(XdsType::Endpoint);
        // Checked before, and since then only these names changed (and no EDS
        // subscription went away).
        let checked = self
            .endpoints_subscribed
            .and_then(|at| current.changed_since(at))
            .is_some_and(|names| {
                names
                    .into_iter()
                    .all(|name| !current.digests.contains_key(name) || subscribed(name))
            });
        if checked || current.digests.keys().all(|name| subscribed(name)) {
            self.endpoints_subscribed = Some(current.position());
            self.holding_since = None;
            return false;
        }
        let since = *self.holding_since.get_or_insert_with(Instant::now);
        if since.elapsed() < HOLD_MAX {
            return true;
        }
        tracing::warn!(node = %self.node, "envoy has not subscribed to every endpoint set; sending routes anyway");
        false
    }

    /// Hands a response to the connection and counts it, with the change latency when
    /// the change happened while this stream was up (a new Envoy's first sync is not an
    /// event's latency). `Err` once the stream is gone, or when the response could not
    /// be encoded (the stream then ends with that status).
    pub async fn send(
        &self,
        tx: &mpsc::Sender<Result<Wire, Status>>,
        response: Result<Wire, Status>,
        t: XdsType,
        snapshot: &Snapshot,
    ) -> Result<(), ()> {
        let counts = response.as_ref().ok().map(|w| (w.message_len, w.resources));
        tx.send(response).await.map_err(|_| ())?;
        let (bytes, resources) = counts.ok_or(())?;
        let since = snapshot
            .changed_at
            .filter(|at| *at >= self.connected)
            .map(|at| at.elapsed());
        self.metrics.response(t.short(), bytes, resources, since);
        Ok(())
    }
}

/// The loop every stream runs: requests, snapshot changes and the hold deadline each
/// lead to a push.
async fn run<S: Session>(mut session: S, mut requests: Streaming<S::Request>) {
    session.core().metrics.xds_streams.inc();
    loop {
        let core = session.core();
        let hold_deadline = core.holding_since.map(|since| since + HOLD_MAX);
        tokio::select! {
            () = tokio::time::sleep_until(hold_deadline.unwrap_or_else(Instant::now)), if hold_deadline.is_some() => {}
            request = requests.message() => match request {
                Ok(Some(request)) => session.on_request(request),
                Ok(None) => break,
                Err(status) => {
                    tracing::debug!(node = %session.core().node, error = %status, "xds stream ended");
                    break;
                }
            },
            changed = core.snapshots.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
        if session.push().await.is_err() {
            break;
        }
    }
    session.core().metrics.xds_streams.dec();
}

#[derive(Debug, Default)]
struct TypeState {
    /// Envoy has asked for this type at least once.
    requested: bool,
    wildcard: bool,
    names: BTreeSet<String>,
    /// The nonce of the last response; only a request carrying it is current.
    nonce: Option<String>,
    in_flight: bool,
    sent_version: Option<String>,
    acked_version: Option<String>,
    rejected_version: Option<String>,
    /// Clusters last sent (CDS only), to keep removed ones until routes move off them.
    sent_resources: ResourceMap<Encoded>,
    /// EDS, SDS, RDS: the digest of each resource Envoy has taken (ACKed), and of those in
    /// the response in flight. These types may be answered in part (xDS spec: a resource
    /// left out of a response keeps its last value), so only changed ones are sent.
    held: BTreeMap<Name, u64>,
    pending: BTreeMap<Name, u64>,
    /// Send these again even if unchanged (EDS after new or changed clusters: see
    /// `response_for`); `resend_all` when the names are not known.
    resend: BTreeSet<String>,
    resend_all: bool,
    /// The names as Envoy last listed them, and the hash of their bytes (`None`: not
    /// known, see [`SotwRequest`]).
    asked: Vec<String>,
    names_digest: Option<NamesDigest>,
    /// EDS, SDS, RDS: where the snapshot's change log stood when every name Envoy asks
    /// for was last compared, if it asks for every resource of the type; from there only
    /// names logged since need comparing.
    basis: Option<LogPosition>,
}

struct AdsStream {
    core: StreamCore,
    tx: mpsc::Sender<Result<Wire, Status>>,
    types: BTreeMap<XdsType, TypeState>,
    nonce: u64,
}

impl AdsStream {
    fn new(
        snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
        metrics: Arc<Metrics>,
        tx: mpsc::Sender<Result<Wire, Status>>,
    ) -> Self {
        AdsStream {
            core: StreamCore::new(snapshots, metrics),
            tx,
            types: XdsType::ORDER
                .into_iter()
                .map(|t| (t, TypeState::default()))
                .collect(),
            nonce: 0,
        }
    }
}

impl Session for AdsStream {
    type Request = SotwRequest;

    fn core(&mut self) -> &mut StreamCore {
        &mut self.core
    }

    fn on_request(&mut self, request: SotwRequest) {
        AdsStream::on_request(self, request);
    }

    async fn push(&mut self) -> Result<(), ()> {
        AdsStream::push(self).await
    }
}

impl AdsStream {
    fn on_request(&mut self, SotwRequest { mut request, names }: SotwRequest) {
        if let Some(node) = &request.node
            && self.core.node.is_empty()
        {
            self.core.node = node.id.clone();
            tracing::info!(node = %self.core.node, cluster = %node.cluster, "envoy connected");
        }
        let Some(t) = XdsType::from_type_url(&request.type_url) else {
            tracing::debug!(type_url = %request.type_url, "request for a type isobar does not serve");
            return;
        };
        let state = self.types.entry(t).or_default();
        if !request.response_nonce.is_empty()
            && state.nonce.as_deref() != Some(&request.response_nonce)
        {
            // Stale: a newer response is on its way and Envoy will answer that one.
            return;
        }
        tracing::debug!(
            node = %self.core.node,
            xds_type = t.short(),
            version = %request.version_info,
            nonce = %request.response_nonce,
            names_bytes = names.as_ref().map_or(0, |n| n.digest.0),
            nack = request.error_detail.is_some(),
            "request"
        );
        if !request.response_nonce.is_empty() {
            state.in_flight = false;
            match &request.error_detail {
                Some(error) => {
                    state.rejected_version = state.sent_version.clone();
                    state.basis = None;
                    self.core.metrics.nack(t.short());
                    tracing::error!(
                        node = %self.core.node,
                        xds_type = t.short(),
                        version = state.sent_version.as_deref().unwrap_or_default(),
                        error = %error.message,
                        "envoy rejected an update (NACK)"
                    );
                }
                None => {
                    state.acked_version = state.sent_version.clone();
                    let pending = std::mem::take(&mut state.pending);
                    state.held.extend(pending);
                }
            }
            state.pending.clear();
        }
        state.requested = true;
        // Envoy repeats its names with every request: when their bytes are the ones
        // taken last, there is nothing to compare (nor to decode).
        let digest = names.as_ref().map(|n| n.digest);
        if digest.is_some() && digest == state.names_digest {
            return;
        }
        if let Some(names) = names {
            match names.decode() {
                Ok(names) => request.resource_names = names,
                Err(error) => {
                    tracing::warn!(node = %self.core.node, xds_type = t.short(), %error, "a request's resource names do not decode; they are not taken");
                    return;
                }
            }
        }
        state.names_digest = digest;
        if t.is_wildcard() && (request.resource_names.is_empty() || state.wildcard) {
            // An empty first LDS/CDS request is a wildcard, and a stream never leaves it.
            state.wildcard = true;
        } else {
            // Compared as sent (when the decoder could not set the names apart, or
            // their bytes changed but not the list).
            if request.resource_names != state.asked {
                let names: BTreeSet<String> = request.resource_names.iter().cloned().collect();
                if names != state.names {
                    if t == XdsType::Endpoint {
                        self.core.endpoints_subscribed = None;
                    }
                    state.basis = None;
                }
                state.names = names;
                state.asked = request.resource_names;
                // A name Envoy dropped is forgotten there: if it comes back, send it again.
                let names = &state.names;
                state.held.retain(|name, _| names.contains(&**name));
            }
        }
    }

    /// Sends every type that has news, in warming order. Clusters and endpoints go out
    /// whenever they change: Envoy asks for a new cluster's endpoints *before* it ACKs the
    /// CDS update that added it (the cluster warms on them), so EDS must never wait for
    /// that ACK. Listeners and routes wait until Envoy has ACKed (or NACKed) the clusters
    /// and endpoints in flight, and has subscribed to every current endpoint set: a
    /// route never reaches Envoy before the clusters it names (make before break).
    async fn push(&mut self) -> Result<(), ()> {
        let Some(snapshot) = self.core.snapshots.borrow().clone() else {
            return Ok(());
        };
        for t in XdsType::ORDER {
            if t.is_downstream() {
                let upstream_in_flight = [XdsType::Cluster, XdsType::Endpoint]
                    .iter()
                    .any(|d| self.types.get(d).is_some_and(|s| s.in_flight));
                let eds = &self.types[&XdsType::Endpoint].names;
                if upstream_in_flight
                    || self
                        .core
                        .hold_for_endpoints(&snapshot, |name| eds.contains(name))
                {
                    return Ok(());
                }
            }
            if let Some(response) = self.response_for(t, &snapshot) {
                self.core.send(&self.tx, response, t, &snapshot).await?;
            }
        }
        Ok(())
    }

    fn caught_up(&self, t: XdsType, snapshot: &Snapshot) -> bool {
        let state = &self.types[&t];
        let current = Some(&snapshot.get(t).version);
        !state.requested
            || (!state.wildcard && state.names.is_empty())
            || state.acked_version.as_ref() == current
            || state.rejected_version.as_ref() == current
    }

    fn response_for(&mut self, t: XdsType, snapshot: &Snapshot) -> Option<Result<Wire, Status>> {
        let state = self.types.get(&t)?;
        if !state.requested || state.in_flight {
            return None;
        }
        let (version, resources) = if state.wildcard {
            self.whole_response(t, snapshot)?
        } else {
            self.partial_response(t, snapshot)?
        };

        self.nonce += 1;
        let nonce = self.nonce.to_string();
        let state = self.types.get_mut(&t)?;
        state.nonce = Some(nonce.clone());
        state.in_flight = true;
        state.sent_version = Some(version.clone());
        let mut changed_clusters = Vec::new();
        if t == XdsType::Cluster {
            changed_clusters = resources
                .iter()
                .filter(|(name, any)| state.sent_resources.get(*name) != Some(any))
                .map(|(_, any)| any)
                .collect();
        }
        if !changed_clusters.is_empty()
            && let Some(eds) = self.types.get_mut(&XdsType::Endpoint)
            && eds.requested
        {
            // A new or changed cluster warms on an EDS response, even when its endpoint
            // set is one Envoy already holds (a cluster with other options, same Service):
            // Envoy asks again after taking the CDS update, and must get an answer.
            for any in &changed_clusters {
                match eds_name(any) {
                    Some(name) => {
                        eds.resend.insert(name);
                    }
                    None => eds.resend_all = true,
                }
            }
        }
        if t == XdsType::Cluster {
            let state = self.types.get_mut(&t)?;
            state.sent_resources = resources.clone();
        }
        tracing::debug!(node = %self.core.node, xds_type = t.short(), %version, %nonce, resources = resources.len(), "sending");
        let current = snapshot.get(t);
        // The same names as the snapshot's (a subset of it, or it and kept clusters).
        let part = if resources.len() == current.resources.len() {
            current.all(t, false)
        } else {
            Arc::new(wire::sotw_resources(t.type_url(), resources.values()))
        };
        Some(wire::sotw(&version, t.type_url(), &nonce, part))
    }

    /// LDS and CDS: every resource, every time (the xDS spec requires it).
    fn whole_response(
        &self,
        t: XdsType,
        snapshot: &Snapshot,
    ) -> Option<(String, ResourceMap<Encoded>)> {
        let state = &self.types[&t];
        let current = snapshot.get(t);
        // What was sent is what is current (the version hashes every name and digest):
        // nothing was kept back, nothing to send. Checked first, as the scan for kept
        // clusters below visits every cluster sent.
        if [&state.sent_version, &state.rejected_version]
            .iter()
            .any(|v| v.as_ref() == Some(&current.version))
        {
            return None;
        }
        let routes_caught_up =
            self.caught_up(XdsType::Listener, snapshot) && self.caught_up(XdsType::Route, snapshot);
        // Removed clusters the routes Envoy holds may still use (make before break).
        let kept: Vec<(&Name, &Encoded)> = if t == XdsType::Cluster && !routes_caught_up {
            state
                .sent_resources
                .iter()
                .filter(|(name, _)| !current.resources.contains_key(*name))
                .collect()
        } else {
            Vec::new()
        };
        // A version hashes every name and digest, so equal versions mean equal content.
        let version = if kept.is_empty() {
            current.version.clone()
        } else {
            let mut digests = current.digests.clone();
            digests.extend(
                kept.iter()
                    .map(|(name, value)| ((*name).clone(), digest(value))),
            );
            format!("{}-{}", current.version, version_of(&digests))
        };
        if state.sent_version.as_ref() == Some(&version)
            || state.rejected_version.as_ref() == Some(&version)
        {
            return None;
        }
        let mut resources = current.resources.clone();
        resources.extend(
            kept.into_iter()
                .map(|(name, any)| (name.clone(), any.clone())),
        );
        Some((version, resources))
    }

    /// EDS, SDS and RDS: only the subscribed resources whose bytes Envoy does not hold.
    /// A resource Envoy asks for that does not exist is left out (its removal is implied
    /// by its parent going away). When Envoy already holds everything it asked for, the
    /// stream is marked caught up without sending anything.
    fn partial_response(
        &mut self,
        t: XdsType,
        snapshot: &Snapshot,
    ) -> Option<(String, ResourceMap<Encoded>)> {
        let current = snapshot.get(t);
        let state = self.types.get_mut(&t)?;
        if let Some(fast) = Self::partial_since_basis(state, current) {
            return fast;
        }
        let requested: Vec<(&Name, &u64)> = state
            .names
            .iter()
            .filter_map(|name| current.digests.get_key_value(name.as_str()))
            .collect();
        if requested.is_empty() {
            return None;
        }
        let version = if requested.len() == current.digests.len() {
            current.version.clone()
        } else {
            version_of(requested.iter().copied())
        };
        if state.rejected_version.as_ref() == Some(&version) {
            return None;
        }
        // Every resource is asked for: later responses may look at changed names only.
        state.basis = (requested.len() == current.digests.len()).then(|| current.position());
        let changed: BTreeMap<Name, u64> = requested
            .iter()
            .filter(|(name, digest)| {
                state.resend_all
                    || state.resend.contains(&***name)
                    || state.held.get(*name) != Some(digest)
            })
            .map(|(name, digest)| ((*name).clone(), **digest))
            .collect();
        state.resend_all = false;
        state.resend.clear();
        Self::answer(state, current, version, changed)
    }

    /// The resources of `changed`, now in flight; with none, the stream is caught up.
    fn answer(
        state: &mut TypeState,
        current: &TypeSnapshot,
        version: String,
        changed: BTreeMap<Name, u64>,
    ) -> Option<(String, ResourceMap<Encoded>)> {
        if changed.is_empty() {
            state.sent_version = Some(version.clone());
            state.acked_version = Some(version);
            return None;
        }
        let resources = changed
            .keys()
            .filter_map(|name| current.resources.get_key_value(name))
            .map(|(name, any)| (name.clone(), any.clone()))
            .collect();
        state.pending = changed;
        Some((version, resources))
    }

    /// [`Self::partial_response`] from the basis: only the names logged since are
    /// compared. `None` when there is no basis or it no longer holds (a new resource
    /// Envoy does not ask for yet, a resend of unknown names).
    #[allow(clippy::option_option)]
    fn partial_since_basis(
        state: &mut TypeState,
        current: &TypeSnapshot,
    ) -> Option<Option<(String, ResourceMap<Encoded>)>> {
        if state.resend_all {
            return None;
        }
        let logged = current.changed_since(state.basis?)?;
        if logged
            .iter()
            .any(|name| current.digests.contains_key(*name) && !state.names.contains(&***name))
        {
            return None;
        }
        let version = current.version.clone();
        if current.digests.is_empty() || state.rejected_version.as_ref() == Some(&version) {
            return Some(None);
        }
        // What changed since, and what must go again though Envoy holds it.
        let changed = logged
            .into_iter()
            .filter_map(|name| current.digests.get_key_value(&**name))
            .filter(|(name, digest)| state.held.get(*name) != Some(digest));
        let resent = state
            .resend
            .iter()
            .filter(|name| state.names.contains(*name))
            .filter_map(|name| current.digests.get_key_value(name.as_str()));
        let changed: BTreeMap<Name, u64> = changed
            .chain(resent)
            .map(|(name, digest)| (name.clone(), *digest))
            .collect();
        state.resend.clear();
        state.basis = Some(current.position());
        Some(Self::answer(state, current, version, changed))
    }
}

/// The endpoint set (EDS name) an encoded Cluster warms on, if it uses EDS.
pub(super) fn eds_name(cluster: &[u8]) -> Option<String> {
    let cluster = Cluster::decode(cluster).ok()?;
    let eds = cluster.eds_cluster_config?;
    Some(if eds.service_name.is_empty() {
        cluster.name
    } else {
        eds.service_name
    })
    .filter(|name| !name.is_empty())
}

/// The connections accepted on `listener`, with Nagle's algorithm off: a small response
/// written after a large one must not wait for the peer's delayed ACK (up to 40 ms).
pub fn incoming(
    listener: tokio::net::TcpListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|accepted| {
        let stream = accepted?;
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot turn Nagle's algorithm off on an xds connection");
        }
        Ok(stream)
    })
}
