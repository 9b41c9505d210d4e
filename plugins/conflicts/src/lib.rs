//! The `conflicts` processor: root HTTPProxies claiming the same FQDN (compared
//! case-insensitively, trailing dot ignored).
//!
//! - `mode: contour` (the default, Contour's behaviour): every claimant is invalid with
//!   `DuplicateVhost` and the FQDN is not served at all.
//! - `mode: oldest-wins`: the claimant created first (then by namespace/name, as Gateway
//!   API settles conflicts) keeps serving; only the newcomers are invalid. A team adding
//!   a colliding proxy cannot take an existing site down.
//!
//! An HTTPProxy and an Ingress on the same FQDN are merged into one vhost, as Contour
//! does, but no longer silently: both get a `DuplicateVhost` warning naming the other,
//! and the admission webhook rejects a change that creates such a pair (one team's
//! routes landing in another's site is rarely intended). Ingresses may share hosts with
//! each other as Kubernetes intends.
//!
//! Losers are turned away before the sources run, so the proxies they include are
//! orphaned unless another root reaches them.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use isobar_contour::api::HTTPProxy;
use isobar_sdk::api::Ingress;
use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::host::parse_host;
use isobar_sdk::plugin::{ConfigError, Factory, PluginRegistration, parse_config};
use isobar_sdk::{BuildContext, ObjectKey, Processor, StatusReport};

pub const NAME: &str = "conflicts";

#[derive(
    Debug,
    Default,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    isobar_sdk::schemars::JsonSchema,
)]
#[schemars(crate = "isobar_sdk::schemars")]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Every claimant of a duplicate FQDN is invalid.
    #[default]
    Contour,
    /// The oldest claimant keeps the FQDN.
    OldestWins,
}

/// The `plugins.conflicts` section of `contour.yaml`.
#[derive(
    Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize, isobar_sdk::schemars::JsonSchema,
)]
#[schemars(crate = "isobar_sdk::schemars")]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ConflictsConfig {
    #[serde(default)]
    pub mode: Mode,
}

#[derive(Debug)]
pub struct Conflicts {
    mode: Mode,
}

fn build(config: &serde_json::Value) -> Result<Box<dyn Processor>, ConfigError> {
    let config: ConflictsConfig = parse_config(config)?;
    Ok(Box::new(Conflicts { mode: config.mode }))
}

isobar_sdk::inventory::submit! {
    PluginRegistration {
        name: NAME,
        summary: "Settles root HTTPProxies claiming the same FQDN (Contour: all invalid; or oldest wins)",
        factory: Factory::Processor(build),
        settings: Some(isobar_sdk::plugin::Settings::of::<ConflictsConfig>()),
    }
}

/// Who claims an FQDN: creation time (RFC 3339, absent sorts last), then the key.
type Claimant = (Option<String>, ObjectKey);

impl Processor for Conflicts {
    fn local(&self) -> bool {
        true
    }

    fn reject(&self, ctx: &BuildContext<'_>, status: &mut StatusReport) -> BTreeSet<ObjectKey> {
        let mut claims: BTreeMap<String, Vec<Claimant>> = BTreeMap::new();
        for (key, proxy) in ctx.all::<HTTPProxy>() {
            let Some(vhost) = &proxy.spec.virtualhost else {
                continue;
            };
            // Hosts that do not parse are the source's to report.
            if let Ok(host) = parse_host(&vhost.fqdn)
                && !vhost.fqdn.is_empty()
            {
                let created = proxy
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string());
                claims.entry(host.fqdn).or_default().push((created, key));
            }
        }
        let mut ingress_hosts: BTreeMap<String, Vec<ObjectKey>> = BTreeMap::new();
        for (key, ingress) in ctx.all::<Ingress>() {
            let rules = ingress.spec.as_ref().and_then(|s| s.rules.as_ref());
            for host in rules
                .into_iter()
                .flatten()
                .filter_map(|r| r.host.as_deref())
            {
                if let Ok(host) = parse_host(host) {
                    let list = ingress_hosts.entry(host.fqdn).or_default();
                    if !list.contains(&key) {
                        list.push(key.clone());
                    }
                }
            }
        }
        for (fqdn, claimants) in &claims {
            let Some(ingresses) = ingress_hosts.get(fqdn) else {
                continue;
            };
            let list = |keys: &mut dyn Iterator<Item = &ObjectKey>| {
                keys.map(|k| format!("{}/{}", k.namespace, k.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let proxies = list(&mut claimants.iter().map(|(_, k)| k));
            let users = list(&mut ingresses.iter());
            for (_, key) in claimants {
                status.warning(
                    key,
                    ConditionType::VirtualHostError,
                    Reason::DuplicateVhost,
                    format!("fqdn {fqdn:?} is also used by Ingress {users}; their routes are merged into one vhost"),
                );
            }
            for key in ingresses {
                status.warning(
                    key,
                    ConditionType::VirtualHostError,
                    Reason::DuplicateVhost,
                    format!("host {fqdn:?} is also used by HTTPProxy {proxies}; their routes are merged into one vhost"),
                );
            }
        }
        let mut rejected = BTreeSet::new();
        for (fqdn, mut claimants) in claims {
            if claimants.len() < 2 {
                continue;
            }
            let names = |list: &[Claimant]| {
                list.iter()
                    .map(|(_, k)| format!("{}/{}", k.namespace, k.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            match self.mode {
                Mode::Contour => {
                    let all = names(&claimants);
                    for (_, key) in claimants {
                        status.error(
                            &key,
                            ConditionType::VirtualHostError,
                            Reason::DuplicateVhost,
                            format!("fqdn {fqdn:?} is used in multiple HTTPProxies: {all}"),
                        );
                        rejected.insert(key);
                    }
                }
                Mode::OldestWins => {
                    claimants.sort_by(|(a_time, a), (b_time, b)| {
                        (a_time.is_none(), a_time, a).cmp(&(b_time.is_none(), b_time, b))
                    });
                    let (_, winner) = claimants.remove(0);
                    for (_, key) in claimants {
                        status.error(
                            &key,
                            ConditionType::VirtualHostError,
                            Reason::DuplicateVhost,
                            format!(
                                "fqdn {fqdn:?} is already served by {}/{}, which claimed it first",
                                winner.namespace, winner.name
                            ),
                        );
                        rejected.insert(key);
                    }
                }
            }
        }
        rejected
    }
}
