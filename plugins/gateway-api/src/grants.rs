//! ReferenceGrants: which references across namespaces are allowed.

use isobar_sdk::{BuildContext, Kind};

use crate::kinds::{ReferenceGrant, every};

/// The ReferenceGrants of a build.
pub struct Grants<'a> {
    ctx: &'a BuildContext<'a>,
}

impl<'a> Grants<'a> {
    pub fn new(ctx: &'a BuildContext<'a>) -> Grants<'a> {
        Grants { ctx }
    }

    /// Whether an object of `from_kind` in `from_namespace` may refer to the object of
    /// group `to_group`, kind `to_kind` and name `to_name` in `to_namespace`: a
    /// ReferenceGrant in `to_namespace` says so.
    pub fn permits(
        &self,
        from_namespace: &str,
        from_kind: Kind,
        to_namespace: &str,
        to_group: &str,
        to_kind: &str,
        to_name: &str,
    ) -> bool {
        every::<ReferenceGrant>(self.ctx)
            .filter(|(key, _)| key.namespace == to_namespace)
            .any(|(_, grant)| {
                let from = grant.spec.from.iter().any(|f| {
                    f.group == from_kind.group()
                        && f.kind == from_kind.as_str()
                        && f.namespace == from_namespace
                });
                let to = grant.spec.to.iter().any(|t| {
                    t.group == to_group
                        && t.kind == to_kind
                        && t.name.as_deref().is_none_or(|n| n == to_name)
                });
                from && to
            })
    }
}
