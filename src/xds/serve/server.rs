//! The ADS server: one task per Envoy stream, state of the world (`sotw.rs`) or
//! incremental (`delta.rs`), picked by the RPC Envoy opens; `grpc.rs` frames the
//! responses for tonic.

use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use crate::metrics::Metrics;
use crate::xds::delta::DeltaStream;
use crate::xds::request::SotwRequest;
use crate::xds::snapshot::Snapshot;
use crate::xds::sotw::AdsStream;
use crate::xds::stream::{Ads, Rejection, ResponseStream, StreamCore, Transport, run};
use crate::xds::wire::Wire;

pub use super::listen::{TlsConn, incoming, incoming_tls};

/// Serves the latest snapshot to every connected Envoy.
#[derive(Clone)]
pub struct AdsService {
    snapshots: watch::Receiver<Option<Arc<Snapshot>>>,
    metrics: Arc<Metrics>,
    /// Turns true on shutdown: every stream ends cleanly (Envoy reconnects elsewhere).
    closing: watch::Receiver<bool>,
    /// Where each stream reports what Envoy refused (the runner).
    rejections: Option<mpsc::UnboundedSender<Rejection>>,
}

impl AdsService {
    pub fn new(snapshots: watch::Receiver<Option<Arc<Snapshot>>>, metrics: Arc<Metrics>) -> Self {
        AdsService {
            snapshots,
            metrics,
            closing: watch::channel(false).1,
            rejections: None,
        }
    }

    /// Reports every update Envoy refuses to `rejections` (the runner traces it to the
    /// objects that caused it).
    pub fn reporting(mut self, rejections: mpsc::UnboundedSender<Rejection>) -> Self {
        self.rejections = Some(rejections);
        self
    }

    fn core(&self) -> StreamCore {
        let mut core = StreamCore::new(self.snapshots.clone(), self.metrics.clone());
        core.rejections = self.rejections.clone();
        core
    }

    /// Ends every stream once `closing` turns true.
    pub fn with_shutdown(mut self, closing: watch::Receiver<bool>) -> Self {
        self.closing = closing;
        self
    }
}

impl AdsService {
    /// Opens a state-of-the-world stream: its responses, while a task answers `requests`.
    pub(in crate::xds) fn sotw(&self, requests: Streaming<SotwRequest>) -> ResponseStream<Wire> {
        let (tx, rx) = mpsc::channel(16);
        let stream = AdsStream::new(self.core(), tx);
        self.spawn(stream, requests);
        Box::pin(ReceiverStream::new(rx))
    }

    /// Opens an incremental (delta) stream.
    pub(in crate::xds) fn delta(
        &self,
        requests: Streaming<DeltaDiscoveryRequest>,
    ) -> ResponseStream<Wire> {
        let (tx, rx) = mpsc::channel(16);
        let stream = DeltaStream::new(self.core(), tx);
        self.spawn(stream, requests);
        Box::pin(ReceiverStream::new(rx))
    }

    /// Runs one stream's session until Envoy hangs up or shutdown begins.
    fn spawn<T: Transport>(&self, stream: Ads<T>, requests: Streaming<T::Request>) {
        let mut closing = self.closing.clone();
        tokio::spawn(async move {
            let closed = async move {
                // No sender (no shutdown wired): never closes.
                if closing.wait_for(|c| *c).await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = run(stream, requests) => {}
                () = closed => {}
            }
        });
    }
}
