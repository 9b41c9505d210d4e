//! The Gateway API kinds this plugin reads, as the `gateway-api` crate models them
//! (Gateway API v1.5), each wrapped so that it can be an Isobar [`Resource`], plus the
//! core `Namespace` (for `allowedRoutes.namespaces.selector`).

use gateway_api::apis::experimental::{
    gateways, grpcroutes, httproutes, tcproutes, tlsroutes, udproutes, xbackendtrafficpolicies,
};
use gateway_api::apis::standard::{
    backendtlspolicies, gatewayclasses, listenersets, referencegrants,
};
use isobar_sdk::api::ObjectMeta;
use isobar_sdk::kind::decode_object;
use isobar_sdk::{BuildContext, Kind, KindId, KindInfo, ObjectKey, Resource};
use serde::{Deserialize, Serialize};

/// Gateway API's group.
pub const GROUP: &str = "gateway.networking.k8s.io";
/// Gateway API's group of experimental kinds not yet in [`GROUP`].
pub const X_GROUP: &str = "gateway.networking.x-k8s.io";

const GATEWAY_CLASS_ID: KindId = KindId::new(GROUP, "GatewayClass");
const GATEWAY_ID: KindId = KindId::new(GROUP, "Gateway");
const HTTP_ROUTE_ID: KindId = KindId::new(GROUP, "HTTPRoute");
const REFERENCE_GRANT_ID: KindId = KindId::new(GROUP, "ReferenceGrant");
const GRPC_ROUTE_ID: KindId = KindId::new(GROUP, "GRPCRoute");
const TLS_ROUTE_ID: KindId = KindId::new(GROUP, "TLSRoute");
const TCP_ROUTE_ID: KindId = KindId::new(GROUP, "TCPRoute");
const UDP_ROUTE_ID: KindId = KindId::new(GROUP, "UDPRoute");
const NAMESPACE_ID: KindId = KindId::new("", "Namespace");
const BACKEND_TLS_POLICY_ID: KindId = KindId::new(GROUP, "BackendTLSPolicy");
const CONFIG_MAP_ID: KindId = KindId::new("", "ConfigMap");
const LISTENER_SET_ID: KindId = KindId::new(GROUP, "ListenerSet");
const BACKEND_TRAFFIC_POLICY_ID: KindId = KindId::new(X_GROUP, "XBackendTrafficPolicy");

pub const GATEWAY_CLASS: Kind = Kind::new(&GATEWAY_CLASS_ID);
pub const GATEWAY: Kind = Kind::new(&GATEWAY_ID);
pub const HTTP_ROUTE: Kind = Kind::new(&HTTP_ROUTE_ID);
pub const REFERENCE_GRANT: Kind = Kind::new(&REFERENCE_GRANT_ID);
pub const GRPC_ROUTE: Kind = Kind::new(&GRPC_ROUTE_ID);
pub const TLS_ROUTE: Kind = Kind::new(&TLS_ROUTE_ID);
pub const TCP_ROUTE: Kind = Kind::new(&TCP_ROUTE_ID);
pub const UDP_ROUTE: Kind = Kind::new(&UDP_ROUTE_ID);
pub const NAMESPACE: Kind = Kind::new(&NAMESPACE_ID);
pub const BACKEND_TLS_POLICY: Kind = Kind::new(&BACKEND_TLS_POLICY_ID);
pub const CONFIG_MAP: Kind = Kind::new(&CONFIG_MAP_ID);
pub const LISTENER_SET: Kind = Kind::new(&LISTENER_SET_ID);
pub const BACKEND_TRAFFIC_POLICY: Kind = Kind::new(&BACKEND_TRAFFIC_POLICY_ID);

macro_rules! wrapped {
    ($(#[$doc:meta])* $name:ident, $inner:ty, $kind:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl Resource for $name {
            const KIND: Kind = $kind;

            fn metadata(&self) -> &ObjectMeta {
                &self.0.metadata
            }
        }

        impl std::ops::Deref for $name {
            type Target = $inner;

            fn deref(&self) -> &$inner {
                &self.0
            }
        }
    };
}

wrapped!(
    /// A `GatewayClass` (cluster-scoped).
    GatewayClass,
    gatewayclasses::GatewayClass,
    GATEWAY_CLASS
);
wrapped!(
    /// A `Gateway`.
    Gateway,
    gateways::Gateway,
    GATEWAY
);
wrapped!(
    /// An `HTTPRoute`.
    HttpRoute,
    httproutes::HttpRoute,
    HTTP_ROUTE
);
wrapped!(
    /// A `GRPCRoute`.
    GrpcRoute,
    grpcroutes::GrpcRoute,
    GRPC_ROUTE
);
wrapped!(
    /// A `TLSRoute` (`v1`; `v1alpha2`, as Contour's users have it, read the same way).
    TlsRoute,
    tlsroutes::TlsRoute,
    TLS_ROUTE
);
wrapped!(
    /// A `TCPRoute` (`v1`; `v1alpha2`, as Contour's users have it, read the same way).
    TcpRoute,
    tcproutes::TcpRoute,
    TCP_ROUTE
);
wrapped!(
    /// A `UDPRoute` (`v1`; `v1alpha2` read the same way).
    UdpRoute,
    udproutes::UdpRoute,
    UDP_ROUTE
);
wrapped!(
    /// A `ReferenceGrant`.
    ReferenceGrant,
    referencegrants::ReferenceGrant,
    REFERENCE_GRANT
);
wrapped!(
    /// A `ListenerSet`.
    ListenerSet,
    listenersets::ListenerSet,
    LISTENER_SET
);
wrapped!(
    /// A `BackendTLSPolicy`.
    BackendTlsPolicy,
    backendtlspolicies::BackendTlsPolicy,
    BACKEND_TLS_POLICY
);
wrapped!(
    /// An `XBackendTrafficPolicy`.
    BackendTrafficPolicy,
    xbackendtrafficpolicies::XBackendTrafficPolicy,
    BACKEND_TRAFFIC_POLICY
);
wrapped!(
    /// A `ConfigMap`: only its `ca.crt` is kept (BackendTLSPolicy's CA certificates).
    ConfigMap,
    k8s_openapi::api::core::v1::ConfigMap,
    CONFIG_MAP
);
wrapped!(
    /// A `Namespace`: only its labels are read.
    Namespace,
    k8s_openapi::api::core::v1::Namespace,
    NAMESPACE
);

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: GATEWAY_CLASS,
        versions: &["v1", "v1beta1"],
        plural: "gatewayclasses",
        namespaced: false,
        decode: decode_object::<GatewayClass>,
        status: &isobar_sdk::status::Gateway,
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: GATEWAY,
        versions: &["v1", "v1beta1"],
        plural: "gateways",
        namespaced: true,
        decode: decode_object::<Gateway>,
        status: &isobar_sdk::status::Gateway,
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: HTTP_ROUTE,
        versions: &["v1", "v1beta1"],
        plural: "httproutes",
        namespaced: true,
        decode: decode_object::<HttpRoute>,
        status: &isobar_sdk::status::Route,
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: GRPC_ROUTE,
        versions: &["v1"],
        plural: "grpcroutes",
        namespaced: true,
        decode: decode_grpc_route,
        status: &isobar_sdk::status::Route,
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: TLS_ROUTE,
        versions: &["v1", "v1alpha2"],
        plural: "tlsroutes",
        namespaced: true,
        decode: decode_tls_route,
        status: &isobar_sdk::status::Route,
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: TCP_ROUTE,
        versions: &["v1", "v1alpha2"],
        plural: "tcproutes",
        namespaced: true,
        decode: decode_object::<TcpRoute>,
        status: &isobar_sdk::status::Route,
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: UDP_ROUTE,
        versions: &["v1", "v1alpha2"],
        plural: "udproutes",
        namespaced: true,
        decode: decode_object::<UdpRoute>,
        status: &isobar_sdk::status::Route,
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: REFERENCE_GRANT,
        versions: &["v1", "v1beta1"],
        plural: "referencegrants",
        namespaced: true,
        decode: decode_object::<ReferenceGrant>,
        status: &isobar_sdk::status::NoStatus,
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: NAMESPACE,
        versions: &["v1"],
        plural: "namespaces",
        namespaced: false,
        decode: decode_namespace,
        status: &isobar_sdk::status::NoStatus,
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: LISTENER_SET,
        versions: &["v1"],
        plural: "listenersets",
        namespaced: true,
        decode: decode_object::<ListenerSet>,
        status: &isobar_sdk::status::Gateway,
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: BACKEND_TLS_POLICY,
        versions: &["v1"],
        plural: "backendtlspolicies",
        namespaced: true,
        decode: decode_object::<BackendTlsPolicy>,
        status: &isobar_sdk::status::Policy,
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: BACKEND_TRAFFIC_POLICY,
        versions: &["v1alpha1"],
        plural: "xbackendtrafficpolicies",
        namespaced: true,
        decode: decode_object::<BackendTrafficPolicy>,
        status: &isobar_sdk::status::Policy,
    }
}

isobar_sdk::inventory::submit! {
    KindInfo {
        kind: CONFIG_MAP,
        versions: &["v1"],
        plural: "configmaps",
        namespaced: true,
        decode: decode_config_map,
        status: &isobar_sdk::status::NoStatus,
    }
}

/// The key of a ConfigMap holding CA certificates (Gateway API's).
pub const CA_KEY: &str = "ca.crt";

/// A ConfigMap with nothing but its name, namespace and `ca.crt`: an edit of anything
/// else changes nothing stored, so it builds nothing.
fn decode_config_map(mut value: serde_json::Value) -> Result<isobar_sdk::Object, String> {
    if let Some(o) = value.as_object_mut() {
        o.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "data"));
        if let Some(data) = o.get_mut("data").and_then(|d| d.as_object_mut()) {
            data.retain(|k, _| k == CA_KEY);
        }
    }
    if let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.retain(|k, _| matches!(k.as_str(), "name" | "namespace"));
    }
    decode_object::<ConfigMap>(value)
}

/// A TLSRoute of `v1` or `v1alpha2`: `v1alpha2` lets `hostnames` and a rule's
/// `backendRefs` be left out, `v1` requires them; both read as empty.
fn decode_tls_route(mut value: serde_json::Value) -> Result<isobar_sdk::Object, String> {
    if let Some(spec) = value.get_mut("spec").and_then(|s| s.as_object_mut()) {
        spec.entry("hostnames").or_insert(serde_json::json!([]));
        let rules = spec.entry("rules").or_insert(serde_json::json!([]));
        for rule in rules.as_array_mut().into_iter().flatten() {
            if let Some(rule) = rule.as_object_mut() {
                rule.entry("backendRefs").or_insert(serde_json::json!([]));
            }
        }
    }
    decode_object::<TlsRoute>(value)
}

/// A GRPCRoute whose matches an API server would accept (see [`crate::grpc::as_http`]).
fn decode_grpc_route(value: serde_json::Value) -> Result<isobar_sdk::Object, String> {
    let object = decode_object::<GrpcRoute>(value)?;
    if let Some(route) = object.get::<GrpcRoute>() {
        crate::grpc::as_http(&route.spec)?;
    }
    Ok(object)
}

/// A Namespace with nothing but its name and labels.
fn decode_namespace(mut value: serde_json::Value) -> Result<isobar_sdk::Object, String> {
    if let Some(o) = value.as_object_mut() {
        o.remove("spec");
        o.remove("status");
    }
    if let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.retain(|k, _| matches!(k.as_str(), "name" | "labels" | "resourceVersion"));
    }
    decode_object::<Namespace>(value)
}

/// Every admitted `T` of the store, in a build of part of it too, spliced or dry
/// (Gateways, classes and grants are read whole whatever routes a build covers).
pub fn every<'a, 'c, T: Resource>(
    ctx: &'c BuildContext<'a>,
) -> impl Iterator<Item = (ObjectKey, &'a T)> + use<'a, 'c, T> {
    let objects: &'a isobar_sdk::Objects = ctx.store();
    objects.all::<T>().filter_map(move |((ns, name), o)| {
        let key = ObjectKey::new(T::KIND, ns, name);
        ctx.admitted(&key).then_some((key, o))
    })
}
