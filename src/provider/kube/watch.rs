//! One watcher driven: its events forwarded, its failures backed off and counted.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use isobar_sdk::Kind;
use kube::api::DynamicObject;
use kube::runtime::watcher;
use tokio::sync::mpsc;

use super::WatchHealth;
use crate::metrics::Metrics;

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
pub(super) async fn watch(
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
