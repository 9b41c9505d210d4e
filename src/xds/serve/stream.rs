//! What every ADS stream shares, state of the world (`sotw.rs`) or delta (`delta.rs`):
//! the loop that turns requests, snapshot changes and the hold deadline into pushes,
//! holding routes until Envoy has subscribed to the endpoints they use, and counting
//! what is sent.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::Node;
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::Stream;
use tonic::{Status, Streaming};

use crate::metrics::Metrics;
use crate::xds::resource::XdsType;
use crate::xds::snapshot::{LogPosition, Snapshot};
use crate::xds::wire::Wire;

/// The longest LDS/RDS wait for Envoy to subscribe to new endpoints before sending anyway.
pub(in crate::xds) const HOLD_MAX: Duration = Duration::from_secs(5);

pub(in crate::xds) type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// What a transport (state of the world, delta) brings to the shared loop: the state it
/// keeps per xDS type, how it takes Envoy's requests and what it pushes.
pub(in crate::xds) trait Transport: Default + Send + Sized + 'static {
    type Request: Send + 'static;
    fn on_request(stream: &mut Ads<Self>, request: Self::Request);
    /// Sends every type that has news; `Err` when the stream is gone.
    fn push(stream: &mut Ads<Self>) -> impl std::future::Future<Output = Result<(), ()>> + Send;
}

/// One Envoy's ADS stream: what every stream keeps, and its transport's state per type.
pub(in crate::xds) struct Ads<T> {
    pub core: StreamCore,
    pub tx: mpsc::Sender<Result<Wire, Status>>,
    pub types: BTreeMap<XdsType, T>,
    nonce: u64,
}

impl<T: Transport> Ads<T> {
    pub fn new(core: StreamCore, tx: mpsc::Sender<Result<Wire, Status>>) -> Self {
        Ads {
            core,
            tx,
            types: XdsType::ORDER
                .into_iter()
                .map(|t| (t, T::default()))
                .collect(),
            nonce: 0,
        }
    }

    /// The nonce of the next response.
    pub fn next_nonce(&mut self) -> String {
        self.nonce += 1;
        self.nonce.to_string()
    }

    /// Records the Envoy a request names, the first time one does.
    pub fn meet(&mut self, node: Option<&Node>, transport: &str) {
        if let Some(node) = node
            && self.core.node.is_empty()
        {
            self.core.node = node.id.clone();
            tracing::info!(node = %self.core.node, cluster = %node.cluster, transport = %transport, "envoy connected");
        }
    }
}

/// What every stream keeps besides its per-type state.
pub(in crate::xds) struct StreamCore {
    pub snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
    pub metrics: Arc<Metrics>,
    pub node: String,
    /// Since when LDS/RDS have been held back waiting for EDS subscriptions.
    pub holding_since: Option<Instant>,
    /// Where the EDS log stood when Envoy had subscribed to every endpoint set;
    /// cleared when an EDS subscription changes.
    pub endpoints_subscribed: Option<LogPosition>,
    pub connected: std::time::Instant,
    /// Where refusals go (the runner), to be traced to the objects that caused them.
    pub rejections: Option<mpsc::UnboundedSender<Rejection>>,
}

/// Envoy refused an update of one type: made from snapshot `upto` (its `seq`), when it
/// last took that type's content from snapshot `after` (0: none yet). The changes built
/// between the two are what it refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub xds_type: XdsType,
    pub after: u64,
    pub upto: u64,
    /// Envoy's error message.
    pub message: String,
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
            rejections: None,
        }
    }

    /// Reports a refusal (see [`Rejection`]).
    pub fn rejected(&self, t: XdsType, after: u64, upto: u64, message: &str) {
        if let Some(tx) = &self.rejections {
            let _ = tx.send(Rejection {
                xds_type: t,
                after,
                upto,
                message: message.to_string(),
            });
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
pub(in crate::xds) async fn run<T: Transport>(
    mut stream: Ads<T>,
    mut requests: Streaming<T::Request>,
) {
    stream.core.metrics.xds_streams.inc();
    loop {
        let core = &mut stream.core;
        let hold_deadline = core.holding_since.map(|since| since + HOLD_MAX);
        tokio::select! {
            () = tokio::time::sleep_until(hold_deadline.unwrap_or_else(Instant::now)), if hold_deadline.is_some() => {}
            request = requests.message() => match request {
                Ok(Some(request)) => T::on_request(&mut stream, request),
                Ok(None) => break,
                Err(status) => {
                    tracing::debug!(node = %stream.core.node, error = %status, "xds stream ended");
                    break;
                }
            },
            changed = core.snapshots.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
        if T::push(&mut stream).await.is_err() {
            break;
        }
    }
    stream.core.metrics.xds_streams.dec();
}

/// The endpoint set (EDS name) an encoded Cluster warms on, if it uses EDS.
pub(in crate::xds) fn eds_name(cluster: &[u8]) -> Option<String> {
    let cluster = Cluster::decode(cluster).ok()?;
    let eds = cluster.eds_cluster_config?;
    Some(if eds.service_name.is_empty() {
        cluster.name
    } else {
        eds.service_name
    })
    .filter(|name| !name.is_empty())
}
