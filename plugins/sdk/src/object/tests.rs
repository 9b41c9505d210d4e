use super::*;
use summary::SERVICE_NAME_LABEL;

/// A slice is found under the Service its label names, through endpoint changes and
/// a move to another Service.
#[test]
fn slices_are_found_by_the_service_they_name() {
    let slice = |service: &str, address: &str| {
        let mut slice = EndpointSlice::default();
        slice.metadata.namespace = Some("ns".to_string());
        slice.metadata.name = Some("s1".to_string());
        slice.metadata.labels = Some(BTreeMap::from([(
            SERVICE_NAME_LABEL.to_string(),
            service.to_string(),
        )]));
        slice.address_type = "IPv4".to_string();
        slice.endpoints = vec![k8s_openapi::api::discovery::v1::Endpoint {
            addresses: vec![address.to_string()],
            ..Default::default()
        }];
        Object::new(Arc::new(slice))
    };
    let ready = |objects: &Objects, service: &str| -> Vec<String> {
        objects
            .slices_for_service("ns", service)
            .flat_map(|s| s.ready.iter().map(|a| a.to_string()))
            .collect()
    };
    let mut objects = Objects::default();
    assert!(objects.apply(slice("a", "10.0.0.1")));
    assert!(objects.apply(slice("a", "10.0.0.2")));
    assert_eq!(ready(&objects, "a"), ["10.0.0.2"]);
    assert!(objects.apply(slice("b", "10.0.0.2")));
    assert!(ready(&objects, "a").is_empty());
    assert_eq!(ready(&objects, "b"), ["10.0.0.2"]);
    assert!(objects.delete(&ObjectKey::new(Kind::EndpointSlice, "ns", "s1")));
    assert!(ready(&objects, "b").is_empty());
}
