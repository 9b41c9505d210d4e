//! The Kubernetes client: from a kubeconfig or the pod's service account, its requests
//! limited to Contour's `kubernetesClientQPS` and `kubernetesClientBurst`.

use std::time::Duration;

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
mod tests;
