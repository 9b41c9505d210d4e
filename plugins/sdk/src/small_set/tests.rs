use super::*;
use std::collections::BTreeSet;

#[test]
fn behaves_as_a_btreeset() {
    let mut set = SmallSet::new();
    let mut model = BTreeSet::new();
    for i in 0..500u32 {
        let v = (i * 37) % 61;
        if i % 3 == 0 {
            assert_eq!(set.remove(&v), model.remove(&v));
        } else {
            assert_eq!(set.insert(v), model.insert(v));
        }
        assert_eq!(set.contains(&v), model.contains(&v));
        assert!(set.iter().eq(model.iter()));
    }
    let mut from: SmallSet<u32> = [3, 1, 3, 2].into_iter().collect();
    assert!(from.iter().eq([1, 2, 3].iter()));
    from.extend([0, 2, 9]);
    assert!(from.iter().eq([0, 1, 2, 3, 9].iter()));
}

#[test]
fn holds_exactly_its_elements() {
    let mut set = SmallSet::new();
    set.insert("a".to_string());
    assert_eq!(set.0.capacity(), 1);
}
