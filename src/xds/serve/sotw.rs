//! A state-of-the-world ADS stream (the incremental one is `delta.rs`).
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
use std::sync::Arc;

use tonic::Status;

use crate::xds::request::{NamesDigest, SotwRequest};
use crate::xds::resource::{Encoded, Name, XdsType};
use crate::xds::snapshot::{LogPosition, ResourceMap, Snapshot, TypeSnapshot, digest, version_of};
use crate::xds::stream::{Ads, Transport, eds_name};
use crate::xds::wire::{self, Wire};

#[derive(Debug, Default)]
pub(in crate::xds) struct TypeState {
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
    /// The snapshot (`Snapshot::seq`) the last response was made from, and the one
    /// whose content Envoy last took: a NACK blames the builds between the two.
    sent_seq: u64,
    acked_seq: u64,
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

/// A state-of-the-world stream.
pub(in crate::xds) type AdsStream = Ads<TypeState>;

impl Transport for TypeState {
    type Request = SotwRequest;

    fn on_request(stream: &mut AdsStream, request: SotwRequest) {
        stream.on_request(request);
    }

    fn push(stream: &mut AdsStream) -> impl std::future::Future<Output = Result<(), ()>> + Send {
        stream.push()
    }
}

impl AdsStream {
    fn on_request(&mut self, SotwRequest { mut request, names }: SotwRequest) {
        self.meet(request.node.as_ref(), "state-of-the-world");
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
                    self.core
                        .rejected(t, state.acked_seq, state.sent_seq, &error.message);
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
                    state.acked_seq = state.sent_seq;
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

        let nonce = self.next_nonce();
        let state = self.types.get_mut(&t)?;
        state.nonce = Some(nonce.clone());
        state.in_flight = true;
        state.sent_version = Some(version.clone());
        state.sent_seq = snapshot.seq;
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
        if let Some(fast) = Self::partial_since_basis(state, current, snapshot.seq) {
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
        Self::answer(state, current, version, changed, snapshot.seq)
    }

    /// The resources of `changed`, now in flight; with none, the stream is caught up.
    fn answer(
        state: &mut TypeState,
        current: &TypeSnapshot,
        version: String,
        changed: BTreeMap<Name, u64>,
        seq: u64,
    ) -> Option<(String, ResourceMap<Encoded>)> {
        if changed.is_empty() {
            state.sent_version = Some(version.clone());
            state.acked_version = Some(version);
            (state.sent_seq, state.acked_seq) = (seq, seq);
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
        seq: u64,
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
        Some(Self::answer(state, current, version, changed, seq))
    }
}
