//! Which API resource each kind is read from: the table's version, the one the server
//! serves (discovery), and the kinds of groups defined at run time.

use std::collections::BTreeSet;

use isobar_sdk::{Kind, ObjectKey};
use kube::api::ApiResource;

/// The API resource of a kind at the first version the table of kinds names.
pub fn api_resource(kind: Kind) -> ApiResource {
    let version = kind
        .info()
        .and_then(|i| i.versions.first().copied())
        .unwrap_or("v1");
    resource_at(kind, version)
}

/// The version of each kind the API server serves, for kinds the table reads at several
/// (TLSRoute `v1` and `v1alpha2`, ReferenceGrant `v1` and `v1beta1`): an older Gateway API
/// install serves only the older one. Found once, before the watches start; the status
/// writer writes at the version read.
#[derive(Debug, Default)]
pub struct ApiVersions(std::sync::RwLock<std::collections::BTreeMap<Kind, &'static str>>);

impl ApiVersions {
    /// The API resource of `kind` at the version the server serves (the table's first
    /// until found otherwise).
    pub fn resource(&self, kind: Kind) -> ApiResource {
        let found = self
            .0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&kind)
            .copied();
        match found {
            Some(version) => resource_at(kind, version),
            None => api_resource(kind),
        }
    }

    /// Asks the server which of each kind's versions it serves (API discovery, one
    /// request per group version): the first of the table's order that it serves is
    /// read. A kind served at none keeps the first (its watch finds it not served).
    pub async fn discover(&self, client: &kube::Client, kinds: &BTreeSet<Kind>) {
        let mut served: std::collections::HashMap<String, Option<Vec<String>>> =
            std::collections::HashMap::new();
        for kind in kinds {
            let Some(info) = kind.info().filter(|i| i.versions.len() > 1) else {
                continue;
            };
            for version in info.versions {
                let group_version = format!("{}/{version}", kind.group());
                if !served.contains_key(&group_version) {
                    let plurals = match client.list_api_group_resources(&group_version).await {
                        Ok(list) => Some(list.resources.into_iter().map(|r| r.name).collect()),
                        Err(error) => {
                            tracing::debug!(%group_version, %error, "API discovery");
                            None
                        }
                    };
                    served.insert(group_version.clone(), plurals);
                }
                let serves = served
                    .get(&group_version)
                    .and_then(Option::as_ref)
                    .is_some_and(|p: &Vec<String>| p.iter().any(|p| p == info.plural));
                if serves {
                    if Some(version) != info.versions.first() {
                        tracing::info!(
                            kind = kind.as_str(),
                            version,
                            "the API serves this kind at an older version; reading it there"
                        );
                    }
                    self.0
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(*kind, version);
                    break;
                }
            }
        }
    }
}

/// The API resource of `kind` at `version`.
fn resource_at(kind: Kind, version: &str) -> ApiResource {
    let plural = kind.info().map_or("", |i| i.plural);
    let group = kind.group();
    ApiResource {
        group: group.to_string(),
        version: version.to_string(),
        api_version: if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.as_str().to_string(),
        plural: plural.to_string(),
    }
}

/// The watch of one kind of a group defined at run time, declared by `object`; `None`
/// when it declares none.
pub(super) fn dynamic_resource(object: &isobar_sdk::Object) -> Option<(Kind, ApiResource)> {
    let group = isobar_sdk::DynamicKinds::all().find(|d| d.declared_by == object.kind())?;
    let (kind, plural) = (group.declares)(object)?;
    let version = group
        .kind
        .info()
        .and_then(|i| i.versions.first().copied())
        .unwrap_or("v1");
    Some((
        group.kind,
        ApiResource {
            group: group.group.to_string(),
            version: version.to_string(),
            api_version: format!("{}/{version}", group.group),
            kind,
            plural,
        },
    ))
}

/// The API resource of a stored object of a dynamic group (its namespace names its
/// kind; the plural is the kind in lower case, as Gatekeeper names it).
pub fn dynamic_resource_of(key: &ObjectKey) -> Option<ApiResource> {
    let group = isobar_sdk::DynamicKinds::stored_as(key.kind)?;
    let version = key
        .kind
        .info()
        .and_then(|i| i.versions.first().copied())
        .unwrap_or("v1");
    Some(ApiResource {
        group: group.group.to_string(),
        version: version.to_string(),
        api_version: format!("{}/{version}", group.group),
        kind: key.namespace.clone(),
        plural: key.namespace.to_ascii_lowercase(),
    })
}
