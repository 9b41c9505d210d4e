//! JWT verification's providers: each issuer and where its keys are (fetched from a
//! JWKS URI through a cluster of its own, or held in the configuration).

use std::time::Duration;

use serde::Serialize;

/// A JWT issuer and where its keys are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JwtProvider {
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub issuer: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub audiences: Vec<String>,
    pub keys: Jwks,
    /// Pass the token on upstream.
    pub forward: bool,
}

/// Where a JWT provider's keys are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Jwks {
    /// Fetched from a JWKS URI.
    Remote {
        uri: String,
        /// The cluster the keys are fetched through (`dnsname/<scheme>/<host>`).
        cluster: String,
        timeout: Duration,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_duration: Option<Duration>,
    },
    /// Held in the configuration: a checked JWKS, compact JSON (from a Secret).
    Local { jwks: String },
}

impl JwtProvider {
    /// The cluster its keys are fetched through, if they are fetched.
    pub fn cluster(&self) -> Option<&str> {
        match &self.keys {
            Jwks::Remote { cluster, .. } => Some(cluster),
            Jwks::Local { .. } => None,
        }
    }
}
