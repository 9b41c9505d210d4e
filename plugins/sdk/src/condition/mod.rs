//! Conditions: how every problem found in the pipeline reaches the user.
//!
//! A user's mistake never becomes an `Err`: it becomes a condition on the object that
//! caused it, in Contour's shape (a `Valid` condition with `errors` and `warnings`).

mod gateway;

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

pub use gateway::{
    Condition, ConditionStatus, GatewayStatus, ListenerStatus, ParentRef, ParentStatus,
    RouteGroupKind, WHILE_THEY_HOLD,
};

use crate::object::ObjectKey;

/// The sub-condition types, as Contour names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum ConditionType {
    VirtualHostError,
    RouteError,
    ServiceError,
    SpecError,
    IncludeError,
    Orphaned,
    RootNamespaceError,
    PrefixReplaceError,
    IPFilterError,
    CORSError,
    TLSError,
    TCPProxyError,
    TCPProxyIncludeError,
    /// An OPA policy denied the object (or warned about it).
    PolicyError,
    /// A WebAssembly processor failed or reported a problem.
    ProcessorError,
    /// External authorization (`authorization`, `globalExtAuth`) cannot be set up.
    AuthError,
    /// JWT verification (`jwtProviders`, `jwtVerificationPolicy`) cannot be set up.
    JWTVerificationError,
}

/// Why a condition was raised; Contour's reason names where Contour has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Reason {
    /// A root HTTPProxy without `virtualhost.fqdn`.
    FQDNNotSpecified,
    /// Several objects claim the same FQDN.
    DuplicateVhost,
    /// A proxy with neither routes nor includes.
    NothingDefined,
    /// A Service (or its port) that does not exist.
    ServiceUnresolvedReference,
    /// A service port outside 1-65535.
    ServicePortInvalid,
    /// A path condition that Envoy could not use.
    PathMatchConditionsNotValid,
    /// A route with no backend.
    RouteNotValid,
    /// A field Isobar read but does not act on.
    IgnoredField,
    /// A non-root HTTPProxy that no root includes.
    Orphaned,
    /// A host Envoy cannot match.
    HostNotValid,
    /// A header condition that is malformed or contradicts another.
    HeaderMatchConditionsNotValid,
    /// A query parameter condition that is malformed.
    QueryParameterMatchConditionsNotValid,
    /// Two includes of one proxy with identical conditions.
    DuplicateMatchConditions,
    /// An include chain that returns to a proxy already on it.
    IncludeCreatesCycle,
    /// An include naming a proxy that does not exist.
    IncludeNotFound,
    /// An include naming another root proxy.
    RootIncludesRoot,
    /// An include chain longer than Isobar follows (`MAX_INCLUDE_DEPTH` proxies).
    IncludeTooDeep,
    /// A root HTTPProxy outside the configured root namespaces.
    RootProxyNotAllowedInNamespace,
    /// A request headers policy Envoy could not apply.
    RequestHeadersPolicyInvalid,
    /// A response headers policy Envoy could not apply.
    ResponseHeadersPolicyInvalid,
    /// A timeout that does not parse.
    TimeoutPolicyNotValid,
    /// A retry policy with an unknown condition or count.
    RetryPolicyNotValid,
    /// A redirect with a bad scheme, port, status or path.
    RequestRedirectPolicyNotValid,
    /// A direct response with a bad status code.
    DirectResponsePolicyNotValid,
    /// A route with not exactly one of services, redirect or direct response.
    RouteActionCountNotValid,
    /// More than one mirror service on a route.
    OnlyOneMirror,
    /// A prefix rewrite on a route without a prefix condition.
    MustHavePrefix,
    /// Two prefix replacements for the same prefix.
    DuplicateReplacement,
    /// An IP allow/deny policy with a bad CIDR or source, or both kinds at once.
    IPFilterPolicyNotValid,
    /// A health check policy with a bad path, host, count or status range.
    HealthCheckPolicyNotValid,
    /// A service protocol this version cannot speak.
    UnsupportedProtocol,
    /// A CORS policy with a bad origin, method or max age.
    CORSPolicyNotValid,
    /// A rate limit policy with a bad count, unit or status.
    RateLimitPolicyNotValid,
    /// An internal redirect policy with a bad code or scheme setting.
    InternalRedirectPolicyNotValid,
    /// A slow start policy that does not parse or cannot apply to the balancing strategy.
    SlowStartInvalid,
    /// A cookie rewrite with a bad name, path, domain or SameSite value.
    CookieRewritePolicyNotValid,
    /// The API server returned a version of the object Isobar could not read (a CRD
    /// version skew, a field of the wrong type).
    ObjectNotReadable,
    /// Envoy refused the configuration built from the object's latest version (a NACK).
    EnvoyRejected,
    /// A secret that is missing, of the wrong type, or whose PEM Envoy could not load.
    SecretNotValid,
    /// A secret in another namespace with no TLSCertificateDelegation naming this one.
    DelegationNotPermitted,
    /// TLS versions or settings that do not make sense together.
    TLSConfigNotValid,
    /// TLS features that cannot be combined (passthrough with a certificate, …).
    TLSIncompatibleFeatures,
    /// A `tcpproxy` on a vhost without TLS.
    TLSMustBeConfigured,
    /// A `tcpproxy` with neither services nor an include, or with both.
    NoServicesAndIncludes,
    /// `enableFallbackCertificate` without `tls.fallback-certificate` configured.
    FallbackNotPresent,
    /// The fallback certificate is not delegated to the proxy's namespace.
    FallbackNotDelegated,
    /// An OPA policy's `deny` rule produced a message for the object.
    PolicyDenied,
    /// An OPA policy's `warn` rule produced a message (or, with `enforcement: warn`, a
    /// `deny` rule did).
    PolicyWarning,
    /// A policy could not be evaluated for the object (a run-time error or time limit).
    PolicyNotEvaluated,
    /// A WebAssembly processor trapped, ran out of fuel or memory, or returned output the
    /// host could not use; its changes were dropped.
    ProcessorFailed,
    /// A WebAssembly processor reported a problem with an object it looked at.
    ProcessorReported,
    /// An ExtensionService's CA Secret in another namespace is not delegated to it.
    CACertificateNotDelegated,
    /// An ExtensionService's `validation` cannot be used (its CA Secret, its subject names).
    TLSUpstreamValidation,
    /// Settings that contradict each other (`validation` with `protocol: h2c`).
    InconsistentProtocol,
    /// A Service of a type that cannot be used here (ExternalName).
    UnsupportedServiceType,
    /// `authorization.extensionRef` on a vhost that does not terminate TLS.
    AuthNotPermitted,
    /// An `extensionRef` of an apiVersion other than `projectcontour.io/v1alpha1`.
    AuthBadResourceVersion,
    /// A header matcher of `httpSettings` without exactly one of its kinds.
    AuthBadAllowedHeader,
    /// A context for an HTTP authorization server (gRPC only).
    AuthContextForHTTP,
    /// `serviceType` other than `grpc` or `http`, or `httpSettings` for a gRPC server.
    AuthServiceTypeInvalid,
    /// An ExtensionService that does not exist or is not valid.
    ExtensionServiceNotFound,
    /// An authorization `responseTimeout` that is not a duration.
    AuthResponseTimeoutInvalid,
    /// `jwtProviders` on a vhost that does not terminate TLS.
    JWTVerificationNotPermitted,
    /// Two JWT providers of one vhost with the same name.
    DuplicateProviderName,
    /// More than one JWT provider marked `default`.
    MultipleDefaultProvidersSpecified,
    /// A JWKS URI that does not parse.
    RemoteJWKSURIInvalid,
    /// A JWKS URI neither http nor https.
    RemoteJWKSSchemeInvalid,
    /// A provider's keys from a Secret (`localJWKS`, Contour's main) that cannot be used:
    /// no such Secret, not `Opaque`, no such key, or not a JWKS.
    LocalJWKSInvalid,
    /// A provider with both `remoteJWKS` and `localJWKS` (Contour's main).
    JWKSSourceConflict,
    /// A provider with neither `remoteJWKS` nor `localJWKS` (Contour's main).
    JWKSSourceMissing,
    /// A JWKS `validation` that cannot be used.
    RemoteJWKSUpstreamValidationInvalid,
    /// A JWKS CA Secret in another namespace, not delegated.
    RemoteJWKSCACertificateNotDelegated,
    /// A JWKS `timeout` that is not a duration.
    RemoteJWKSTimeoutInvalid,
    /// A JWKS `cacheDuration` that is not a duration.
    RemoteJWKSCacheDurationInvalid,
    /// A JWKS `dnsLookupFamily` other than auto, v4, v6, all.
    RemoteJWKSDNSLookupFamilyInvalid,
    /// A route's `jwtVerificationPolicy` with both `require` and `disabled`.
    InvalidJWTVerificationPolicy,
    /// A route requiring a JWT provider its vhost does not define.
    JWTProviderNotDefined,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::FQDNNotSpecified => "FQDNNotSpecified",
            Reason::DuplicateVhost => "DuplicateVhost",
            Reason::NothingDefined => "NothingDefined",
            Reason::ServiceUnresolvedReference => "ServiceUnresolvedReference",
            Reason::ServicePortInvalid => "ServicePortInvalid",
            Reason::PathMatchConditionsNotValid => "PathMatchConditionsNotValid",
            Reason::RouteNotValid => "RouteNotValid",
            Reason::IgnoredField => "IgnoredField",
            Reason::Orphaned => "Orphaned",
            Reason::HostNotValid => "HostNotValid",
            Reason::HeaderMatchConditionsNotValid => "HeaderMatchConditionsNotValid",
            Reason::QueryParameterMatchConditionsNotValid => {
                "QueryParameterMatchConditionsNotValid"
            }
            Reason::DuplicateMatchConditions => "DuplicateMatchConditions",
            Reason::IncludeCreatesCycle => "IncludeCreatesCycle",
            Reason::IncludeNotFound => "IncludeNotFound",
            Reason::IncludeTooDeep => "IncludeTooDeep",
            Reason::RootIncludesRoot => "RootIncludesRoot",
            Reason::RootProxyNotAllowedInNamespace => "RootProxyNotAllowedInNamespace",
            Reason::RequestHeadersPolicyInvalid => "RequestHeadersPolicyInvalid",
            Reason::ResponseHeadersPolicyInvalid => "ResponseHeadersPolicyInvalid",
            Reason::TimeoutPolicyNotValid => "TimeoutPolicyNotValid",
            Reason::RetryPolicyNotValid => "RetryPolicyNotValid",
            Reason::RequestRedirectPolicyNotValid => "RequestRedirectPolicyNotValid",
            Reason::DirectResponsePolicyNotValid => "DirectResponsePolicyNotValid",
            Reason::RouteActionCountNotValid => "RouteActionCountNotValid",
            Reason::OnlyOneMirror => "OnlyOneMirror",
            Reason::MustHavePrefix => "MustHavePrefix",
            Reason::DuplicateReplacement => "DuplicateReplacement",
            Reason::IPFilterPolicyNotValid => "IPFilterPolicyNotValid",
            Reason::HealthCheckPolicyNotValid => "HealthCheckPolicyNotValid",
            Reason::UnsupportedProtocol => "UnsupportedProtocol",
            Reason::CORSPolicyNotValid => "CORSPolicyNotValid",
            Reason::RateLimitPolicyNotValid => "RateLimitPolicyNotValid",
            Reason::InternalRedirectPolicyNotValid => "InternalRedirectPolicyNotValid",
            Reason::SlowStartInvalid => "SlowStartInvalid",
            Reason::CookieRewritePolicyNotValid => "CookieRewritePolicyNotValid",
            Reason::ObjectNotReadable => "ObjectNotReadable",
            Reason::EnvoyRejected => "EnvoyRejected",
            Reason::SecretNotValid => "SecretNotValid",
            Reason::DelegationNotPermitted => "DelegationNotPermitted",
            Reason::TLSConfigNotValid => "TLSConfigNotValid",
            Reason::TLSIncompatibleFeatures => "TLSIncompatibleFeatures",
            Reason::TLSMustBeConfigured => "TLSMustBeConfigured",
            Reason::NoServicesAndIncludes => "NoServicesAndIncludes",
            Reason::FallbackNotPresent => "FallbackNotPresent",
            Reason::FallbackNotDelegated => "FallbackNotDelegated",
            Reason::PolicyDenied => "PolicyDenied",
            Reason::PolicyWarning => "PolicyWarning",
            Reason::PolicyNotEvaluated => "PolicyNotEvaluated",
            Reason::ProcessorFailed => "ProcessorFailed",
            Reason::ProcessorReported => "ProcessorReported",
            Reason::CACertificateNotDelegated => "CACertificateNotDelegated",
            Reason::TLSUpstreamValidation => "TLSUpstreamValidation",
            Reason::InconsistentProtocol => "InconsistentProtocol",
            Reason::UnsupportedServiceType => "UnsupportedServiceType",
            Reason::AuthNotPermitted => "AuthNotPermitted",
            Reason::AuthBadResourceVersion => "AuthBadResourceVersion",
            Reason::AuthBadAllowedHeader => "AuthBadAllowedHeader",
            Reason::AuthContextForHTTP => "AuthContextForHTTP",
            Reason::AuthServiceTypeInvalid => "AuthServiceTypeInvalid",
            Reason::ExtensionServiceNotFound => "ExtensionServiceNotFound",
            Reason::AuthResponseTimeoutInvalid => "AuthResponseTimeoutInvalid",
            Reason::JWTVerificationNotPermitted => "JWTVerificationNotPermitted",
            Reason::DuplicateProviderName => "DuplicateProviderName",
            Reason::MultipleDefaultProvidersSpecified => "MultipleDefaultProvidersSpecified",
            Reason::RemoteJWKSURIInvalid => "RemoteJWKSURIInvalid",
            Reason::RemoteJWKSSchemeInvalid => "RemoteJWKSSchemeInvalid",
            Reason::LocalJWKSInvalid => "LocalJWKSInvalid",
            Reason::JWKSSourceConflict => "JWKSSourceConflict",
            Reason::JWKSSourceMissing => "JWKSSourceMissing",
            Reason::RemoteJWKSUpstreamValidationInvalid => "RemoteJWKSUpstreamValidationInvalid",
            Reason::RemoteJWKSCACertificateNotDelegated => "RemoteJWKSCACertificateNotDelegated",
            Reason::RemoteJWKSTimeoutInvalid => "RemoteJWKSTimeoutInvalid",
            Reason::RemoteJWKSCacheDurationInvalid => "RemoteJWKSCacheDurationInvalid",
            Reason::RemoteJWKSDNSLookupFamilyInvalid => "RemoteJWKSDNSLookupFamilyInvalid",
            Reason::InvalidJWTVerificationPolicy => "InvalidJWTVerificationPolicy",
            Reason::JWTProviderNotDefined => "JWTProviderNotDefined",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One error or warning on an object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SubCondition {
    pub type_: ConditionType,
    pub reason: Reason,
    pub message: String,
}

/// How a `SecretNotValid` message about a Secret that does not exist ends.
pub const SECRET_NOT_FOUND: &str = "not found";

impl SubCondition {
    /// Whether this says that something the object names does not exist (yet): a
    /// Service or its port, an included HTTPProxy, a Secret. Such an object becomes valid
    /// when what it names is created, without changing it.
    pub fn is_unresolved_reference(&self) -> bool {
        match self.reason {
            Reason::ServiceUnresolvedReference | Reason::IncludeNotFound => true,
            Reason::SecretNotValid => self.message.ends_with(SECRET_NOT_FOUND),
            _ => false,
        }
    }
}

/// Contour's shape: `{type, status: "True", reason, message}`.
impl Serialize for SubCondition {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = s.serialize_struct("SubCondition", 4)?;
        out.serialize_field("type", &self.type_)?;
        out.serialize_field("status", "True")?;
        out.serialize_field("reason", &self.reason)?;
        out.serialize_field("message", &self.message)?;
        out.end()
    }
}

/// Contour's `currentStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CurrentStatus {
    #[default]
    Valid,
    Invalid,
    Orphaned,
}

/// Everything the pipeline says about one object: Contour's `Valid` model (errors,
/// warnings, orphaned) and, for kinds of Gateway API's shape, its conditions per object,
/// parent and listener.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ObjectStatus {
    pub errors: Vec<SubCondition>,
    pub warnings: Vec<SubCondition>,
    pub orphaned: bool,
    /// Boxed: most objects are Contour's kinds and have none.
    pub gateway: Option<Box<GatewayStatus>>,
    /// Top-level status fields set as they are ([`crate::status::Fields`]).
    pub fields: Option<Box<serde_json::Map<String, serde_json::Value>>>,
}

impl ObjectStatus {
    pub fn current(&self) -> CurrentStatus {
        if !self.errors.is_empty() {
            CurrentStatus::Invalid
        } else if self.orphaned {
            CurrentStatus::Orphaned
        } else {
            CurrentStatus::Valid
        }
    }

    pub fn is_valid(&self) -> bool {
        self.errors.is_empty() && !self.orphaned
    }
}

/// Conditions for every object the pipeline looked at.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StatusReport {
    pub objects: BTreeMap<ObjectKey, ObjectStatus>,
}

impl StatusReport {
    /// Marks an object as seen, so it reports `Valid` even without conditions.
    pub fn touch(&mut self, key: &ObjectKey) -> &mut ObjectStatus {
        if !self.objects.contains_key(key) {
            self.objects.insert(key.clone(), ObjectStatus::default());
        }
        self.objects
            .get_mut(key)
            .unwrap_or_else(|| unreachable!("inserted above"))
    }

    pub fn error(
        &mut self,
        key: &ObjectKey,
        type_: ConditionType,
        reason: Reason,
        message: impl Into<String>,
    ) {
        push_unique(&mut self.touch(key).errors, type_, reason, message.into());
    }

    pub fn warning(
        &mut self,
        key: &ObjectKey,
        type_: ConditionType,
        reason: Reason,
        message: impl Into<String>,
    ) {
        push_unique(&mut self.touch(key).warnings, type_, reason, message.into());
    }

    /// The object's status in Gateway API's shape, to set conditions on.
    pub fn gateway(&mut self, key: &ObjectKey) -> &mut GatewayStatus {
        self.touch(key).gateway.get_or_insert_default()
    }

    /// Sets one top-level status field of an object of [`crate::status::Fields`].
    pub fn field(&mut self, key: &ObjectKey, name: &str, value: serde_json::Value) {
        self.touch(key)
            .fields
            .get_or_insert_default()
            .insert(name.to_string(), value);
    }

    pub fn orphan(&mut self, key: &ObjectKey) {
        self.touch(key).orphaned = true;
    }

    pub fn get(&self, key: &ObjectKey) -> Option<&ObjectStatus> {
        self.objects.get(key)
    }

    pub fn is_valid(&self, key: &ObjectKey) -> bool {
        self.objects.get(key).is_none_or(ObjectStatus::is_valid)
    }

    /// The user-facing status of one object, in Contour's layout.
    pub fn render(&self, key: &ObjectKey) -> RenderedStatus {
        let status = self.objects.get(key).cloned().unwrap_or_default();
        let current = status.current();
        let noun = key.kind.as_str();
        let (cond_status, reason, message, description) = match current {
            CurrentStatus::Valid => (
                "True",
                "Valid",
                format!("Valid {noun}"),
                format!("Valid {noun}"),
            ),
            CurrentStatus::Invalid => (
                "False",
                "ErrorPresent",
                "At least one error present, see Errors for details".to_string(),
                status
                    .errors
                    .first()
                    .map(|e| e.message.clone())
                    .unwrap_or_default(),
            ),
            CurrentStatus::Orphaned => (
                "False",
                "Orphaned",
                "this HTTPProxy is not part of a delegation chain from a root HTTPProxy"
                    .to_string(),
                "this HTTPProxy is not part of a delegation chain from a root HTTPProxy"
                    .to_string(),
            ),
        };
        RenderedStatus {
            current_status: current,
            description,
            conditions: vec![RenderedCondition {
                type_: "Valid",
                status: cond_status,
                reason,
                message,
                errors: status.errors,
                warnings: status.warnings,
            }],
        }
    }
}

fn push_unique(
    list: &mut Vec<SubCondition>,
    type_: ConditionType,
    reason: Reason,
    message: String,
) {
    let cond = SubCondition {
        type_,
        reason,
        message,
    };
    if !list.contains(&cond) {
        list.push(cond);
    }
}

/// An object's status as written to its `status` field.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedStatus {
    pub current_status: CurrentStatus,
    pub description: String,
    pub conditions: Vec<RenderedCondition>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RenderedCondition {
    #[serde(rename = "type")]
    pub type_: &'static str,
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<SubCondition>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<SubCondition>,
}
