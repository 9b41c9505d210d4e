use super::*;

fn any(text: &str) -> Encoded {
    Encoded::from(text.repeat(100).into_bytes())
}

#[test]
fn every_resource_is_encoded_once_while_streams_send_it() {
    let map = ["b", "a", "c"]
        .into_iter()
        .map(|n| (n.to_string(), any(n)))
        .collect();
    let t = TypeSnapshot::of(map);
    let sotw = t.all(XdsType::Cluster, false);
    assert!(
        Arc::ptr_eq(&sotw, &t.all(XdsType::Cluster, false)),
        "shared while held"
    );
    let type_url = XdsType::Cluster.type_url();
    assert_eq!(
        sotw.bytes(),
        wire::sotw_resources(type_url, t.resources.values()).bytes()
    );
    let named = t.resources.iter().map(|(name, value)| Named {
        name,
        version: hex(digest(value)),
        resource: value,
    });
    assert_eq!(
        t.all(XdsType::Cluster, true).bytes(),
        wire::delta_resources(type_url, named).bytes()
    );
    // A copy of the snapshot shares it; a changed one encodes its own.
    let mut changed = t.clone();
    assert!(Arc::ptr_eq(&sotw, &changed.all(XdsType::Cluster, false)));
    changed.change([("a".to_string(), Some(any("z")))]);
    assert!(!Arc::ptr_eq(&sotw, &changed.all(XdsType::Cluster, false)));
    // Not kept once no stream holds it.
    let weak = Arc::downgrade(&sotw);
    drop(sotw);
    assert!(weak.upgrade().is_none());
}
