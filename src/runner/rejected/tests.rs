use super::*;
use crate::xds::XdsType;

fn proxy(name: &str, prefix: &str) -> Object {
    let yaml = format!(
        "apiVersion: projectcontour.io/v1\nkind: HTTPProxy\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  virtualhost: {{fqdn: {name}.example.com}}\n  routes: [{{conditions: [{{prefix: {prefix}}}], services: [{{name: s, port: 80}}]}}]\n"
    );
    crate::provider::manifest::parse_file(std::path::Path::new("p.yaml"), &yaml)
        .unwrap_or_else(|e| panic!("{e}"))
        .remove(0)
}

fn refused(after: u64, upto: u64) -> Rejection {
    Rejection {
        xds_type: XdsType::Route,
        after,
        upto,
        message: "no".to_string(),
    }
}

fn keys(blame: Blame) -> Vec<(String, bool)> {
    match blame {
        Blame::Objects(o) => o
            .into_iter()
            .map(|(k, old)| (k.name, old.is_some()))
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// The builds between the snapshot an Envoy took and the one it refused are
/// blamed, with the version each object had before the first of them; nothing
/// when the Envoy took nothing yet, when a build's changes were too many to
/// record, or when a blamed change is already known.
#[test]
fn a_refusal_blames_the_changes_between_what_was_taken_and_what_was_refused() {
    let mut objects = Objects::default();
    let mut r = Rejections::default();
    let (a1, a2, b) = (proxy("a", "/"), proxy("a", "/x"), proxy("b", "/"));
    objects.apply(a1.clone());
    r.published(10, true);
    r.before_change(&objects, &a2.key());
    objects.apply(a2.clone());
    r.published(11, true);
    r.before_change(&objects, &b.key());
    objects.apply(b.clone());
    r.published(12, true);

    assert_eq!(
        keys(r.blame(&refused(11, 12), &objects)),
        [("b".into(), false)]
    );
    assert_eq!(
        keys(r.blame(&refused(10, 12), &objects)),
        [("a".into(), true), ("b".into(), false)]
    );
    assert!(matches!(r.blame(&refused(0, 12), &objects), Blame::Unknown));
    r.refuse(b.clone(), "no", false);
    assert!(matches!(r.blame(&refused(10, 12), &objects), Blame::Known));
    assert!(r.is_refused_version(&b));
    assert!(!r.is_refused_version(&proxy("b", "/y")));
    // Same spec under another name: the same shape.
    let mut copy = b.to_json();
    copy["metadata"]["name"] = "c".into();
    let copy = crate::provider::manifest::decode(b.kind(), copy).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.refused_shape(&copy), Some("no"));

    for i in 0..=CAPTURE_MAX {
        let p = proxy(&format!("n{i}"), "/");
        r.before_change(&objects, &p.key());
        objects.apply(p);
    }
    r.published(13, true);
    assert!(matches!(
        r.blame(&refused(12, 13), &objects),
        Blame::Unknown
    ));
}
