//! Leader election with a `coordination.k8s.io/v1` Lease, as client-go does it (and
//! Contour through controller-runtime): only the leader writes status; every replica
//! serves xDS whatever happens here.
//!
//! Every `retry-period` a replica reads the Lease. The holder renews it (an update with
//! the read resourceVersion, so a concurrent writer gets 409 and loses). Another replica
//! takes it once the holder's record has not changed for `lease-duration` by its own
//! clock (no clock comparison between machines), or when it is free. A leader that could
//! not renew for `renew-deadline` steps down before anyone else may take over. On shutdown
//! the leader releases the Lease (empty holder), so a successor takes over at once.
//!
//! As client-go warns, this is not fencing: a partitioned leader may write for up to
//! `renew-deadline` while a successor starts. Status writes are idempotent, so two
//! writers briefly overlapping is harmless.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::LeaderElection;

pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    lease: Duration,
    renew_deadline: Duration,
    retry: Duration,
}

/// What this replica last saw of the Lease, by its own clock.
struct Observed {
    holder: String,
    renew_time: Option<MicroTime>,
    since: Instant,
}

impl Elector {
    pub fn new(client: kube::Client, config: &LeaderElection, identity: String) -> Elector {
        Elector {
            api: Api::namespaced(client, &config.resource_namespace),
            name: config.resource_name.clone(),
            identity,
            lease: config.lease_duration.0,
            renew_deadline: config.renew_deadline.0,
            retry: config.retry_period.0,
        }
    }

    /// Runs until `stop` turns true, publishing whether this replica leads; releases the
    /// Lease on the way out if it held it.
    pub async fn run(self, leader: watch::Sender<bool>, mut stop: watch::Receiver<bool>) {
        let mut observed: Option<Observed> = None;
        let mut renewed: Option<Instant> = None;
        loop {
            let leading = match self.try_acquire_or_renew(&mut observed).await {
                Ok(true) => {
                    renewed = Some(Instant::now());
                    true
                }
                Ok(false) => {
                    renewed = None;
                    false
                }
                Err(error) => {
                    tracing::warn!(lease = %self.name, %error, "lease update failed");
                    // Keep leading only while the last renewal is within the deadline.
                    renewed.is_some_and(|at| at.elapsed() < self.renew_deadline)
                }
            };
            if !leading {
                renewed = None;
            }
            leader.send_if_modified(|current| {
                if *current == leading {
                    return false;
                }
                *current = leading;
                tracing::info!(lease = %self.name, identity = %self.identity, leading, "leadership changed");
                true
            });
            tokio::select! {
                () = tokio::time::sleep(self.retry) => {}
                _ = stop.wait_for(|stop| *stop) => break,
            }
        }
        if *leader.borrow() {
            leader.send_replace(false);
            match self.release().await {
                Ok(()) => tracing::info!(lease = %self.name, "lease released"),
                Err(error) => {
                    tracing::warn!(lease = %self.name, %error, "could not release the lease")
                }
            }
        }
    }

    /// One round: Ok(true) when this replica holds the Lease afterwards.
    async fn try_acquire_or_renew(&self, observed: &mut Option<Observed>) -> kube::Result<bool> {
        let now = MicroTime(Timestamp::now());
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(now.clone(), now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let changed = observed
            .as_ref()
            .is_none_or(|o| o.holder != holder || o.renew_time != spec.renew_time);
        if changed {
            *observed = Some(Observed {
                holder: holder.clone(),
                renew_time: spec.renew_time.clone(),
                since: Instant::now(),
            });
        }
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.lease, Duration::from_secs);
        let expired = observed
            .as_ref()
            .is_some_and(|o| o.since.elapsed() >= duration);
        let transitions = spec.lease_transitions.unwrap_or(0);
        let new_spec = if holder == self.identity {
            LeaseSpec {
                renew_time: Some(now),
                lease_duration_seconds: Some(self.lease_seconds()),
                ..spec
            }
        } else if holder.is_empty() || expired {
            self.spec(now.clone(), now, transitions + 1)
        } else {
            return Ok(false);
        };
        lease.spec = Some(new_spec);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                let spec = written.spec.unwrap_or_default();
                *observed = Some(Observed {
                    holder: spec.holder_identity.unwrap_or_default(),
                    renew_time: spec.renew_time,
                    since: Instant::now(),
                });
                Ok(true)
            }
            // Someone else wrote it first: re-read next round.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn release(&self) -> kube::Result<()> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..spec
        });
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    fn spec(&self, acquired: MicroTime, renewed: MicroTime, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.lease_seconds()),
            acquire_time: Some(acquired),
            renew_time: Some(renewed),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }
}

/// This replica's identity in the Lease: the pod name when Kubernetes sets it
/// (`HOSTNAME`), the process id and a counter, so no two electors ever share one.
pub fn identity() -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "isobar".to_string());
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{host}_{}_{n}", std::process::id())
}
