//! BackendTLSPolicy: Envoy speaks TLS to a Service's port, sending the policy's
//! `hostname` as SNI and checking the certificate against the CA certificates of
//! ConfigMaps (`ca.crt`; Secrets' `ca.crt` too, as Contour) and the policy's names.
//!
//! Per target (a Service, or one port of it by `sectionName`) the oldest policy (then
//! namespace/name) applies and later ones are `Conflicted`; a policy naming the port
//! beats one naming the whole Service. A policy that cannot be served (no valid CA
//! certificate, a bad hostname, well-known CAs) still takes its target: the share of
//! traffic sent there answers 500, never plain text. Status goes to `ancestors[]`, one
//! entry per Gateway (or ListenerSet) a route using the target is attached to.

use std::collections::{BTreeMap, BTreeSet};

use gateway_api::apis::standard::backendtlspolicies::BackendTlsPolicyValidationCaCertificateRefs as CaCertificateRef;
use isobar_sdk::condition::Condition;
use isobar_sdk::ir::UpstreamValidation;
use isobar_sdk::{BuildContext, ObjectKey, ParentRef, StatusReport};

use crate::kinds::{BackendTlsPolicy, CA_KEY, ConfigMap, GROUP, every};

/// A policy's target: namespace, Service and (optionally) its port's name.
type Target = (String, String, Option<String>);

/// What upstream TLS a policy asks for.
#[derive(Debug, Clone)]
pub struct Tls {
    pub hostname: String,
    pub validation: UpstreamValidation,
}

/// One policy's verdict.
#[derive(Debug)]
struct Judged {
    /// The TLS to use, or none when the policy cannot be served.
    tls: Option<Tls>,
    conditions: Vec<Condition>,
}

/// Every BackendTLSPolicy of the store, judged, by target.
#[derive(Debug, Default)]
pub struct BackendTls {
    winners: BTreeMap<Target, ObjectKey>,
    /// Every policy naming a Service (winners and losers), by namespace and Service.
    by_service: BTreeMap<(String, String), BTreeSet<ObjectKey>>,
    judged: BTreeMap<ObjectKey, Judged>,
}

/// What a backend's policy says: the TLS to speak, or that it cannot be served.
pub type Applied<'a> = (&'a ObjectKey, Option<&'a Tls>);

impl BackendTls {
    pub fn new(ctx: &BuildContext<'_>) -> BackendTls {
        let mut out = BackendTls::default();
        let mut policies: Vec<(ObjectKey, &BackendTlsPolicy)> = every(ctx).collect();
        if policies.is_empty() {
            return out;
        }
        policies.sort_by(|(ka, a), (kb, b)| {
            let created = |p: &BackendTlsPolicy| p.metadata.creation_timestamp.clone();
            created(a).cmp(&created(b)).then_with(|| ka.cmp(kb))
        });
        for (key, policy) in policies {
            let mut judged = judge(ctx, &key, policy);
            let mut lost = false;
            let mut targets = 0;
            for target in &policy.spec.target_refs {
                if !target.group.is_empty() || target.kind != "Service" {
                    continue;
                }
                targets += 1;
                let service = (key.namespace.clone(), target.name.clone());
                out.by_service
                    .entry(service.clone())
                    .or_default()
                    .insert(key.clone());
                let target = (service.0, service.1, target.section_name.clone());
                match out.winners.get(&target) {
                    Some(_) => lost = true,
                    None => {
                        out.winners.insert(target, key.clone());
                    }
                }
            }
            if targets == 0 {
                judged.conditions.insert(
                    0,
                    Condition::new(
                        "Accepted",
                        false,
                        "Invalid",
                        "no targetRef names a Service (group \"\", kind Service)",
                    ),
                );
            } else if lost {
                judged.conditions.insert(
                    0,
                    Condition::new(
                        "Accepted",
                        false,
                        "Conflicted",
                        "an older BackendTLSPolicy targets the same Service port",
                    ),
                );
            }
            out.judged.insert(key, judged);
        }
        out
    }

    /// The policy for port `port` of Service `namespace/service`: the one naming the
    /// port by name, else the one naming the whole Service.
    pub fn lookup(
        &self,
        namespace: &str,
        service: &str,
        port: Option<&str>,
    ) -> Option<Applied<'_>> {
        if self.winners.is_empty() {
            return None;
        }
        let with = |section: Option<&str>| {
            let target = (
                namespace.to_string(),
                service.to_string(),
                section.map(str::to_string),
            );
            self.winners.get(&target)
        };
        let key = port.and_then(|p| with(Some(p))).or_else(|| with(None))?;
        let tls = self.judged.get(key).and_then(|j| j.tls.as_ref());
        Some((key, tls))
    }

    /// The policies naming Service `namespace/service`, winners or not.
    pub fn naming(&self, namespace: &str, service: &str) -> impl Iterator<Item = &ObjectKey> {
        self.by_service
            .get(&(namespace.to_string(), service.to_string()))
            .into_iter()
            .flatten()
    }

    pub fn is_empty(&self) -> bool {
        self.judged.is_empty()
    }

    /// Writes each policy's conditions under each Gateway (`ancestors`) that routes using
    /// its targets are attached to.
    pub fn report(
        &self,
        ancestors: &BTreeMap<ObjectKey, BTreeSet<ObjectKey>>,
        status: &mut StatusReport,
    ) {
        for (key, judged) in &self.judged {
            report_ancestors(key, &judged.conditions, ancestors, status);
        }
    }
}

/// Writes policy `key`'s `conditions` (the first of each type counts) under each Gateway
/// `ancestors` gives it.
pub fn report_ancestors(
    key: &ObjectKey,
    conditions: &[Condition],
    ancestors: &BTreeMap<ObjectKey, BTreeSet<ObjectKey>>,
    status: &mut StatusReport,
) {
    let gw = status.gateway(key);
    for gateway in ancestors.get(key).into_iter().flatten() {
        let ancestor = ParentRef {
            group: Some(GROUP.to_string()),
            kind: Some(gateway.kind.as_str().to_string()),
            namespace: Some(gateway.namespace.clone()),
            name: gateway.name.clone(),
            section_name: None,
            port: None,
        };
        let mut seen = Vec::new();
        for condition in conditions {
            if !seen.contains(&condition.type_) {
                seen.push(condition.type_.clone());
                gw.set_parent(&ancestor, condition.clone());
            }
        }
    }
}

/// A policy's TLS and conditions, targets aside.
fn judge(ctx: &BuildContext<'_>, key: &ObjectKey, policy: &BackendTlsPolicy) -> Judged {
    let v = &policy.spec.validation;
    let invalid = |message: String| Judged {
        tls: None,
        conditions: vec![
            Condition::new("Accepted", false, "Invalid", message),
            Condition::new("ResolvedRefs", true, "ResolvedRefs", ""),
        ],
    };
    let hostname = v.hostname.to_ascii_lowercase();
    if hostname.starts_with("*.") || !crate::hosts::valid(&hostname) {
        return invalid(format!(
            "hostname {:?} is not a host name (no wildcard)",
            v.hostname
        ));
    }
    if let Some(known) = &v.well_known_ca_certificates {
        return invalid(format!(
            "wellKnownCACertificates {known:?} is not supported: name a ConfigMap in caCertificateRefs"
        ));
    }
    let mut dns = Vec::new();
    let mut uris = Vec::new();
    for san in v.subject_alt_names.iter().flatten() {
        use gateway_api::apis::standard::backendtlspolicies::BackendTlsPolicyValidationSubjectAltNamesType as San;
        match (&san.r#type, &san.hostname, &san.uri) {
            (San::Hostname, Some(h), _) if crate::hosts::valid(&h.to_ascii_lowercase()) => {
                dns.push(h.to_ascii_lowercase());
            }
            (San::Uri, _, Some(u))
                if u.contains(':') && isobar_sdk::headers::is_header_value(u) =>
            {
                uris.push(u.clone());
            }
            _ => return invalid(format!("subjectAltName {san:?} is not valid")),
        }
    }
    if dns.is_empty() && uris.is_empty() {
        dns.push(hostname.clone());
    }
    let Bundle {
        pem,
        fingerprints,
        unresolved,
    } = ca_certificates(ctx, key, v.ca_certificate_refs.iter().flatten());
    let resolved = match &unresolved {
        None => Condition::new("ResolvedRefs", true, "ResolvedRefs", ""),
        Some((reason, message)) => Condition::new("ResolvedRefs", false, reason, message.clone()),
    };
    if pem.is_empty() {
        let message = unresolved.map_or_else(
            || "caCertificateRefs names no ConfigMap".to_string(),
            |(_, m)| m,
        );
        return Judged {
            tls: None,
            conditions: vec![
                Condition::new("Accepted", false, "NoValidCACertificate", message),
                resolved,
            ],
        };
    }
    Judged {
        tls: Some(Tls {
            hostname,
            validation: UpstreamValidation {
                ca: isobar_sdk::ir::PemBundle {
                    pem,
                    fingerprint: isobar_sdk::secret::fingerprint(fingerprints.concat().as_bytes()),
                },
                subject_names: dns,
                subject_uris: uris,
            },
        }),
        conditions: vec![Condition::new("Accepted", true, "Accepted", ""), resolved],
    }
}

/// The CA certificates a policy names, and why the first one that cannot be used
/// cannot (a reason and a message).
struct Bundle {
    pem: String,
    fingerprints: Vec<String>,
    unresolved: Option<(&'static str, String)>,
}

/// The CA certificates of `refs` (ConfigMaps' `ca.crt`, or Secrets') in `key`'s
/// namespace.
fn ca_certificates<'r>(
    ctx: &BuildContext<'_>,
    key: &ObjectKey,
    refs: impl Iterator<Item = &'r CaCertificateRef>,
) -> Bundle {
    let mut pem = String::new();
    let mut fingerprints = Vec::new();
    let mut unresolved: Option<(&'static str, String)> = None;
    for reference in refs {
        // A Secret's `ca.crt` too (implementation-specific; Contour reads Secrets).
        if reference.group.is_empty() && reference.kind == "Secret" {
            match ctx.ca_bundle(&key.namespace, &reference.name) {
                Ok(b) => {
                    pem.push_str(&b.pem);
                    fingerprints.push(b.fingerprint);
                }
                Err((_, message)) => {
                    unresolved.get_or_insert(("InvalidCACertificateRef", message));
                }
            }
            continue;
        }
        if !reference.group.is_empty() || reference.kind != "ConfigMap" {
            unresolved.get_or_insert((
                "InvalidKind",
                format!(
                    "caCertificateRef {} of group {:?} is not a ConfigMap",
                    reference.kind, reference.group
                ),
            ));
            continue;
        }
        let found = ctx
            .store()
            .get::<ConfigMap>(&key.namespace, &reference.name)
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(CA_KEY));
        let bundle = match found {
            None => Err(format!("no {CA_KEY} in it (or no such ConfigMap)")),
            Some(text) => isobar_sdk::secret::ca_bundle_of(CA_KEY, text),
        };
        match bundle {
            Ok(b) => {
                pem.push_str(&b.pem);
                fingerprints.push(b.fingerprint);
            }
            Err(e) => {
                unresolved.get_or_insert((
                    "InvalidCACertificateRef",
                    format!("ConfigMap {}/{}: {e}", key.namespace, reference.name),
                ));
            }
        }
    }
    Bundle {
        pem,
        fingerprints,
        unresolved,
    }
}

/// The policies of a route's backends: how they are spoken to over TLS (the
/// BackendTLSPolicies, and the certificate Envoy presents to them, its Gateway's
/// `tls.backend`) and how traffic to them is shaped (XBackendTrafficPolicies).
pub struct Upstream<'a> {
    pub policies: &'a BackendTls,
    pub client_certificate: Option<&'a str>,
    /// The XBackendTrafficPolicies (HTTP and gRPC routes' backends).
    pub traffic: Option<&'a crate::backend_traffic::BackendTraffic>,
}

impl std::ops::Deref for Upstream<'_> {
    type Target = BackendTls;

    fn deref(&self) -> &BackendTls {
        self.policies
    }
}
