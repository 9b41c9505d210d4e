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

/// An xDS connection over TLS, as tonic takes it.
pub struct TlsConn(tokio_rustls::server::TlsStream<tokio::net::TcpStream>);

impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = ();

    fn connect_info(&self) {}
}

impl tokio::io::AsyncRead for TlsConn {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsConn {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

/// The connections accepted on `listener` that complete a TLS handshake with `config`
/// (mutual: a client without a certificate of the CA gets no stream) within ten
/// seconds; handshakes run off the accept loop.
pub fn incoming_tls(
    listener: tokio::net::TcpListener,
    config: tokio_rustls::rustls::ServerConfig,
) -> impl tokio_stream::Stream<Item = std::io::Result<TlsConn>> {
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::debug!(error = %e, "accepting an xds connection");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "cannot turn Nagle's algorithm off on an xds connection");
            }
            let (acceptor, sender) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                let handshake = acceptor.accept(tcp);
                match tokio::time::timeout(std::time::Duration::from_secs(10), handshake).await {
                    Ok(Ok(tls)) => {
                        let _ = sender.send(Ok(TlsConn(tls))).await;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(%peer, error = %e, "xds TLS handshake refused: no configuration for this client");
                    }
                    Err(_) => tracing::debug!(%peer, "xds TLS handshake timed out"),
                }
            });
            if tx.is_closed() {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
