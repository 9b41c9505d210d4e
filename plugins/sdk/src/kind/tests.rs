use super::*;

/// The built-in kinds are found by their manifests' type, sort in their fixed order,
/// and a kind defined elsewhere sorts after them and equals another copy of itself.
#[test]
fn kinds_are_found_by_type_and_ordered() {
    assert_eq!(
        Kind::from_type("networking.k8s.io/v1", "Ingress"),
        Some(Kind::Ingress)
    );
    assert_eq!(Kind::from_type("v1", "Service"), Some(Kind::Service));
    assert_eq!(Kind::from_type("networking.k8s.io/v2", "Ingress"), None);
    assert_eq!(Kind::from_type("apps/v1", "Deployment"), None);
    assert!(Kind::Secret < Kind::Ingress);
    const A: KindId = KindId::new("example.com", "Thing");
    const B: KindId = KindId::new("example.com", "Thing");
    const RANKED: KindId = KindId::ranked(9, "example.com", "Ranked");
    assert!(Kind::Ingress < Kind::new(&RANKED));
    assert!(Kind::new(&RANKED) < Kind::new(&A));
    assert_eq!(Kind::new(&A), Kind::new(&B));
    assert_eq!(
        Kind::Ingress.info().map(KindInfo::api_version),
        Some("networking.k8s.io/v1".to_string())
    );
    assert_eq!(
        Kind::Secret.info().map(KindInfo::api_version),
        Some("v1".to_string())
    );
}
