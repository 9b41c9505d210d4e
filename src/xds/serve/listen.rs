//! The ADS server's connections: accepted over TCP with Nagle's algorithm off, or over
//! TLS once a client with a certificate of the CA completes its handshake.

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
