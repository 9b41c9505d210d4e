//! Incremental (delta) ADS: per stream and type, the resources Envoy holds (name →
//! digest of the bytes) are tracked, and a response carries only what changed and the
//! names that went away. A stream is delta or state of the world by the RPC Envoy opens
//! (`isobar bootstrap --xds-mode delta` asks for delta).
//!
//! The same rules as the state-of-the-world server apply: nothing before the first
//! build; one response in flight per type; a NACKed resource version is not sent again
//! until it changes; changes go out in CDS → EDS → SDS → LDS → RDS → VHDS order,
//! listeners, routes and vhosts only once clusters and endpoints are settled and
//! subscribed, and clusters are removed only once Envoy holds the routes and vhosts of the
//! current snapshot (make before break). VHDS (`xds-server.vhds`) is served on delta
//! streams only: Envoy takes it over ADS only when ADS is delta.
//! A resource's version is the hex digest of its bytes, so a reconnecting Envoy's
//! `initial_resource_versions` say exactly what it holds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use tonic::Status;

use crate::xds::resource::{Name, XdsType};
use crate::xds::snapshot::{LogPosition, Snapshot, hex};
use crate::xds::stream::{Ads, StreamCore, Transport};
use crate::xds::wire::{self, Named, Wire};

#[derive(Debug, Default)]
pub(in crate::xds) struct TypeState {
    requested: bool,
    wildcard: bool,
    names: BTreeSet<String>,
    /// What Envoy holds: name → digest.
    held: BTreeMap<Name, u64>,
    /// The response in flight: its nonce, and per name the digest sent (`None`: removed).
    in_flight: Option<(String, BTreeMap<Name, Option<u64>>)>,
    /// Versions Envoy rejected, not sent again until they change (or a retry below).
    rejected: BTreeMap<Name, u64>,
    /// Halves of refused responses, to be sent again apart: Envoy refuses a response as
    /// a whole, so one bad resource would otherwise keep every other one of its response
    /// (a first sync's 10,000 vhosts) from Envoy until each changes. Halving again on
    /// each refusal leaves only the bad ones rejected, in a few round trips.
    retry: Vec<Vec<Name>>,
    /// A point in the type's change log such that only names changed after it can need
    /// sending (everything else is held, rejected or not wanted): a new snapshot is
    /// compared by the names its log lists, not name by name. `None`: compare every
    /// name.
    synced: Option<LogPosition>,
    /// For the response in flight: the log position it brought this stream up to, which
    /// becomes `synced` when it is ACKed (`None`: it left removals for later).
    basis: Option<LogPosition>,
    /// EDS: sent again though Envoy holds them, for new or changed clusters that warm on
    /// them. Envoy does not subscribe again to a name it already watches (envoy#47302),
    /// so without this a new cluster on a Service's existing endpoint set waits out its
    /// 15-second fetch timeout.
    resend: BTreeSet<String>,
    /// The snapshot (`Snapshot::seq`) the response in flight was made from, whether it
    /// is a retry of part of a refused one, and the snapshot whose changes Envoy last
    /// took: a NACK of a first send blames the builds between the two.
    sent_seq: u64,
    retrying: bool,
    acked_seq: u64,
    /// Whether a response of this type went out on the stream: Envoy waits for the
    /// first answer to its wildcard request (up to its `initial_fetch_timeout`) even
    /// when there is nothing to send, so that one goes out empty.
    answered: bool,
}

impl TypeState {
    fn wants(&self, name: &str) -> bool {
        self.wildcard || self.names.contains(name)
    }

    /// Envoy refused the response in flight (`sent`): its versions are not sent again
    /// until they change, and a response of several resources is retried in halves.
    fn refused(
        &mut self,
        core: &StreamCore,
        t: XdsType,
        sent: BTreeMap<Name, Option<u64>>,
        message: &str,
    ) {
        self.synced = None;
        core.metrics.nack(t.short());
        tracing::error!(node = %core.node, xds_type = t.short(), error = %message, "envoy rejected a delta update (NACK)");
        if !self.retrying {
            // A retry's refusal says nothing new about which change did it.
            core.rejected(t, self.acked_seq, self.sent_seq, message);
        }
        let put: Vec<Name> = sent
            .iter()
            .filter(|(_, digest)| digest.is_some())
            .map(|(name, _)| name.clone())
            .collect();
        for (name, digest) in sent {
            if let Some(digest) = digest {
                self.rejected.insert(name, digest);
            }
        }
        if put.len() > 1 {
            let (first, second) = put.split_at(put.len() / 2);
            self.retry.push(second.to_vec());
            self.retry.push(first.to_vec());
        }
    }

    /// Takes in what a request subscribes to and unsubscribes from (`first`: the
    /// stream's first request of type `t`, with what a reconnecting Envoy holds).
    fn subscribe(&mut self, t: XdsType, first: bool, request: &mut DeltaDiscoveryRequest) {
        if first {
            // What a reconnecting Envoy already holds, by our versions (digests in hex).
            for (name, v) in &request.initial_resource_versions {
                if let Ok(digest) = u64::from_str_radix(v, 16) {
                    self.held.insert(name.as_str().into(), digest);
                }
            }
            if t.is_wildcard() && request.resource_names_subscribe.is_empty() {
                self.wildcard = true;
            }
        }
        for name in std::mem::take(&mut request.resource_names_subscribe) {
            if name == "*" {
                // A new VHDS subscription on the same stream (Envoy re-created its route
                // configuration's) holds nothing yet: its first response must carry every
                // vhost, or it never finishes warming.
                if !first && t == XdsType::VirtualHost {
                    self.held.clear();
                    self.synced = None;
                }
                self.wildcard = true;
            } else {
                // Subscribing again asks for the resource again (a re-warming cluster),
                // but not one a reconnecting Envoy just said it holds.
                if !(first && request.initial_resource_versions.contains_key(&name)) {
                    self.held.remove(name.as_str());
                }
                self.names.insert(name);
            }
        }
        for name in std::mem::take(&mut request.resource_names_unsubscribe) {
            if name == "*" {
                self.wildcard = false;
            } else {
                self.names.remove(&name);
            }
            self.held.remove(name.as_str());
        }
    }
}

/// A delta stream.
pub(in crate::xds) type DeltaStream = Ads<TypeState>;

impl Transport for TypeState {
    type Request = DeltaDiscoveryRequest;

    fn on_request(stream: &mut DeltaStream, request: DeltaDiscoveryRequest) {
        stream.on_request(request);
    }

    fn push(stream: &mut DeltaStream) -> impl std::future::Future<Output = Result<(), ()>> + Send {
        stream.push()
    }
}

impl DeltaStream {
    fn on_request(&mut self, mut request: DeltaDiscoveryRequest) {
        self.meet(request.node.as_ref(), "delta");
        let Some(t) = XdsType::from_type_url(&request.type_url) else {
            tracing::debug!(type_url = %request.type_url, "delta request for a type isobar does not serve");
            return;
        };
        let state = self.types.entry(t).or_default();
        let first = !state.requested;
        state.requested = true;
        if first
            || !request.resource_names_subscribe.is_empty()
            || !request.resource_names_unsubscribe.is_empty()
        {
            // What Envoy holds or wants changed other than by an ACK: compare every
            // name next time.
            state.synced = None;
            state.basis = None;
            if t == XdsType::Endpoint {
                self.core.endpoints_subscribed = None;
            }
        }
        state.subscribe(t, first, &mut request);
        let current = state
            .in_flight
            .as_ref()
            .is_some_and(|(nonce, _)| *nonce == request.response_nonce);
        if !current {
            return;
        }
        let Some((_, sent)) = state.in_flight.take() else {
            return;
        };
        let basis = state.basis.take();
        match &request.error_detail {
            Some(error) => state.refused(&self.core, t, sent, &error.message),
            None => {
                if !state.retrying {
                    state.acked_seq = state.sent_seq;
                }
                let mut new_routes = false;
                for (name, digest) in sent {
                    match digest {
                        Some(digest) if state.wants(&name) => {
                            new_routes |= state.held.insert(name, digest).is_none();
                        }
                        _ => {
                            state.held.remove(&*name);
                        }
                    }
                }
                // (Kept otherwise: holding more of what was sent never adds work; it was
                // cleared if subscriptions changed meanwhile.)
                if basis.is_some() {
                    state.synced = basis;
                }
                // A RouteConfiguration Envoy now holds may take vhosts held back for it.
                if t == XdsType::Route
                    && new_routes
                    && let Some(vhds) = self.types.get_mut(&XdsType::VirtualHost)
                {
                    vhds.synced = None;
                }
            }
        }
    }

    /// VHDS: whether Envoy holds the RouteConfiguration a vhost belongs to (its name up
    /// to the last `/`). Envoy files a vhost only under a RouteConfiguration it holds:
    /// one sent before (the listener and its routes arriving in the same change) is
    /// dropped, and never asked for again.
    fn vhost_placeable(&self, name: &str) -> bool {
        let routes = name.rsplit_once('/').map_or("", |(routes, _)| routes);
        self.types
            .get(&XdsType::Route)
            .is_some_and(|r| r.held.contains_key(routes))
    }

    /// Sends every type that has news, in warming order (see the module comment).
    async fn push(&mut self) -> Result<(), ()> {
        let Some(snapshot) = self.core.snapshots.borrow().clone() else {
            return Ok(());
        };
        for t in XdsType::ORDER {
            if t.is_downstream() {
                let upstream_busy = [XdsType::Cluster, XdsType::Endpoint]
                    .iter()
                    .any(|d| self.types.get(d).is_some_and(|s| s.in_flight.is_some()));
                let eds = &self.types[&XdsType::Endpoint];
                if upstream_busy
                    || self
                        .core
                        .hold_for_endpoints(&snapshot, |name| eds.wants(name))
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

    /// Whether Envoy holds every listener, route and vhost of `snapshot` it asked for.
    fn routes_settled(&self, snapshot: &Snapshot) -> bool {
        [XdsType::Listener, XdsType::Route, XdsType::VirtualHost]
            .iter()
            .all(|t| {
                let state = &self.types[t];
                let of = snapshot.for_delta(*t);
                !state.requested
                    || (state.in_flight.is_none() && state.synced == Some(of.position()))
                    || (state.in_flight.is_none()
                        && of.digests.iter().filter(|(name, _)| state.wants(name)).all(
                            |(name, d)| {
                                state.held.get(name) == Some(d)
                                    || state.rejected.get(name) == Some(d)
                            },
                        ))
            })
    }

    fn response_for(&mut self, t: XdsType, snapshot: &Snapshot) -> Option<Result<Wire, Status>> {
        let state = self.types.get_mut(&t)?;
        if !state.requested || state.in_flight.is_some() {
            return None;
        }
        let current = snapshot.for_delta(t);
        // Part of a refused response first, alone: what is still as it was refused.
        while let Some(group) = state.retry.pop() {
            let again: Vec<(&Name, u64)> = group
                .iter()
                .filter_map(|name| {
                    let (name, d) = current.digests.get_key_value(name)?;
                    (state.wants(name) && state.rejected.get(name) == Some(d)).then_some((name, *d))
                })
                .collect();
            if again.is_empty() {
                continue;
            }
            for (name, _) in &again {
                state.rejected.remove(*name);
            }
            return self.respond(t, snapshot, &again, &[], None, true);
        }
        let resend = std::mem::take(&mut state.resend);
        let state = &self.types[&t];
        let placeable = |name: &Name| t != XdsType::VirtualHost || self.vhost_placeable(name);
        // A vhost held back (its RouteConfiguration is not Envoy's yet) leaves this
        // stream out of step: no basis, so it is compared again.
        let held_back = std::cell::Cell::new(false);
        let needs = |name: &Name, d: &u64| {
            let wanted = state.wants(name)
                && state.held.get(name) != Some(d)
                && state.rejected.get(name) != Some(d);
            if wanted && !placeable(name) {
                held_back.set(true);
                return false;
            }
            wanted
        };
        let since = state.synced.and_then(|at| current.changed_since(at));
        let (changed, gone): (Vec<(&Name, u64)>, Vec<Name>) = match since {
            // Only the names changed since this stream was in step.
            Some(names) => {
                let (mut changed, mut gone) = (Vec::new(), Vec::new());
                for name in names {
                    match current.digests.get_key_value(name) {
                        Some((name, d)) => {
                            if needs(name, d) {
                                changed.push((name, *d));
                            }
                        }
                        None => {
                            if state.held.contains_key(name) {
                                gone.push(name.clone());
                            }
                        }
                    }
                }
                (changed, gone)
            }
            None => (
                current
                    .digests
                    .iter()
                    .filter(|(name, d)| needs(name, d))
                    .map(|(name, d)| (name, *d))
                    .collect(),
                state
                    .held
                    .keys()
                    .filter(|name| !current.digests.contains_key(*name))
                    .cloned()
                    .collect(),
            ),
        };
        let mut changed = changed;
        if !resend.is_empty() {
            let have: BTreeSet<&Name> = changed.iter().map(|(name, _)| *name).collect();
            let again: Vec<(&Name, u64)> = resend
                .iter()
                .filter_map(|name| current.digests.get_key_value(name.as_str()))
                .filter(|(name, d)| {
                    state.wants(name)
                        && state.rejected.get(*name) != Some(*d)
                        && !have.contains(name)
                })
                .map(|(name, d)| (name, *d))
                .collect();
            changed.extend(again);
        }
        // Clusters (and their endpoints) go only once no route Envoy holds can still
        // use them (asked only when some go: it may compare every route).
        let settled = gone.is_empty()
            || !matches!(t, XdsType::Cluster | XdsType::Endpoint)
            || self.routes_settled(snapshot);
        let deferred = !settled && !gone.is_empty();
        let removed = if settled { gone } else { Vec::new() };
        let basis = (!deferred && !held_back.get()).then(|| current.position());
        if changed.is_empty() && removed.is_empty() && (state.answered || !state.wildcard) {
            let state = self.types.get_mut(&t)?;
            if basis.is_some() {
                state.synced = basis;
                state.acked_seq = snapshot.seq;
            }
            return None;
        }
        self.respond(t, snapshot, &changed, &removed, basis, false)
    }

    /// Sends `changed` and `removed` of type `t` (`basis`: see [`TypeState::basis`]).
    fn respond(
        &mut self,
        t: XdsType,
        snapshot: &Snapshot,
        changed: &[(&Name, u64)],
        removed: &[Name],
        basis: Option<LogPosition>,
        retrying: bool,
    ) -> Option<Result<Wire, Status>> {
        let current = snapshot.for_delta(t);
        // Distinct names of the snapshot: as many as it has means all of them.
        let part = if changed.len() == current.resources.len() {
            current.all(t, true)
        } else {
            let named = changed.iter().filter_map(|(name, d)| {
                Some(Named {
                    name,
                    version: hex(*d),
                    resource: current.resources.get(*name)?,
                })
            });
            Arc::new(wire::delta_resources(t.type_url(), named))
        };
        let mut sent: BTreeMap<Name, Option<u64>> = changed
            .iter()
            .map(|(name, d)| ((*name).clone(), Some(*d)))
            .collect();
        sent.extend(removed.iter().map(|name| (name.clone(), None)));
        if t == XdsType::Cluster
            && let Some(eds) = self.types.get_mut(&XdsType::Endpoint)
            && !eds.held.is_empty()
        {
            // Each new or changed cluster warms on its endpoint set: sent after it.
            let warm_on = changed.iter().filter_map(|(name, _)| {
                crate::xds::stream::eds_name(current.resources.get(*name)?)
            });
            eds.resend.extend(warm_on);
        }
        let nonce = self.next_nonce();
        let state = self.types.get_mut(&t)?;
        state.in_flight = Some((nonce.clone(), sent));
        state.answered = true;
        state.basis = basis;
        (state.sent_seq, state.retrying) = (snapshot.seq, retrying);
        tracing::debug!(node = %self.core.node, xds_type = t.short(), %nonce, resources = changed.len(), removed = removed.len(), "sending delta");
        Some(wire::delta(
            &current.version,
            t.type_url(),
            &nonce,
            part,
            removed,
        ))
    }
}
