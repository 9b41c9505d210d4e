//! Assembling a listener's table (an HTTP listener's RouteConfiguration, an HTTPS
//! listener's filter chains) from its vhosts' shares: fresh bytes for the vhosts a build
//! replaced, every other vhost's copied from the table as published.

use std::collections::BTreeMap;
use std::ops::Range;

use prost::bytes::BufMut;

use crate::xds::proto::append_field;
use crate::xds::proto::field_len;
use crate::xds::resource::{Encoded, XdsType};
use crate::xds::snapshot::Snapshot;

use super::{Parts, Stale};

/// What is remembered of an encoded share: its length (where it sits in an assembled
/// table) and a digest of its bytes (whether it changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Share {
    pub(super) len: usize,
    pub(super) digest: u64,
}

impl Share {
    pub(super) fn of(bytes: &[u8]) -> Share {
        Share {
            len: bytes.len(),
            digest: crate::xds::snapshot::digest(bytes),
        }
    }

    /// Its length as a field of an assembled table: tag, length, bytes.
    fn field_len(self, tag: u32) -> usize {
        field_len(tag, self.len)
    }
}

/// The fresh vhosts' bytes of one build, end to end in one buffer until the tables are
/// assembled. A full build of 10,000 TLS vhosts holds about 16 MB here: as one large
/// block the allocator hands it back whole when the build is done, where 20,000 small
/// ones would leave holes in pages that also hold long-lived data (so the resident size
/// would stay at the build's peak).
#[derive(Default)]
pub(super) struct Arena(Vec<u8>);

impl Arena {
    /// Appends what `write` writes; returns where it sits.
    pub(super) fn push(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> Range<usize> {
        let start = self.0.len();
        write(&mut self.0);
        start..self.0.len()
    }

    pub(super) fn get(&self, at: Option<&Range<usize>>) -> Option<&[u8]> {
        at.and_then(|r| self.0.get(r.clone()))
    }
}

/// A vhost's freshly encoded bytes on one listener, until they are assembled: where
/// they sit in the build's [`Arena`], and a secure vhost's own RouteConfiguration.
pub(super) struct FreshEntry {
    pub(super) listener: usize,
    pub(super) bytes: Range<usize>,
    pub(super) rds: Option<Encoded>,
}

/// Where a vhost's [`FreshEntry`]s are in the build's list of them.
pub(super) struct Fresh(pub(super) Range<usize>);

impl Fresh {
    fn on<'e>(&self, entries: &'e [FreshEntry], listener: usize) -> Option<&'e Range<usize>> {
        let mine = entries.get(self.0.clone()).unwrap_or_default();
        mine.iter()
            .find(|e| e.listener == listener)
            .map(|e| &e.bytes)
    }
}

/// A table being assembled: a shell, then one field per vhost in name order.
pub(super) struct Table<'a> {
    /// The vhosts now.
    pub(super) vhosts: &'a BTreeMap<String, Parts>,
    /// The vhosts replaced or removed, as they were.
    pub(super) olds: &'a BTreeMap<&'a String, Parts>,
    /// The bytes of the vhosts replaced or added.
    pub(super) fresh: &'a BTreeMap<&'a String, Fresh>,
    pub(super) entries: &'a [FreshEntry],
    /// Where the fresh bytes are.
    pub(super) arena: &'a Arena,
    pub(super) published: Option<&'a Snapshot>,
}

impl Table<'_> {
    /// `shell`, then each vhost's `tag` field on listener `listener`: a fresh vhost's new
    /// bytes, every other one's copied from the table as published (`resource`), where
    /// the same vhosts sat in the same order with the lengths their shares recorded,
    /// between the removed and replaced ones; then `tail` as one more `tag` field, if any
    /// (what the published table has after its vhosts is not copied). The bytes are
    /// written straight into the block the snapshot keeps, made at their exact size: no
    /// copy of a 12 MB listener, and no spare capacity kept with it. With `member`, only
    /// the vhosts it takes (a shard's): those of `members` when given (in name order, so
    /// that assembling many shards does not walk every vhost for each).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn splice(
        &self,
        shell: &[u8],
        resource: (XdsType, &str),
        tag: u32,
        listener: usize,
        tail: Option<&[u8]>,
        member: Option<&dyn Fn(&Parts) -> bool>,
        members: Option<&[(&String, &Parts)]>,
    ) -> Result<Encoded, Stale> {
        let taken = |parts: &Parts| member.is_none_or(|m| m(parts));
        let share = |parts: &Parts| parts.on(listener).filter(|_| taken(parts)).map(|p| p.share);
        let vhosts = || -> Box<dyn Iterator<Item = (&String, &Parts)> + '_> {
            match members {
                Some(members) => Box::new(members.iter().copied()),
                None => Box::new(self.vhosts.iter()),
            }
        };
        let len = shell.len()
            + tail.map_or(0, |t| field_len(tag, t.len()))
            + vhosts()
                .filter(|(_, parts)| taken(parts))
                .map(|(fqdn, parts)| match self.fresh.get(fqdn) {
                    Some(new) => self
                        .arena
                        .get(new.on(self.entries, listener))
                        .map_or(0, |b| field_len(tag, b.len())),
                    None => share(parts).map_or(0, |s| s.field_len(tag)),
                })
                .sum::<usize>();
        let mut table: Encoded = std::iter::repeat_n(0, len).collect();
        // A block just made has no other owner.
        let mut bytes: &mut [u8] = Encoded::get_mut(&mut table).ok_or(Stale)?;
        let (t, name) = resource;
        let old = self
            .published
            .and_then(|s| s.get(t).resources.get(name))
            .map_or(&[][..], |value| &value[..]);
        let shell_len = shell.len();
        put(&mut bytes, shell)?;
        let mut cursor = shell_len;
        let mut shell_checked = false;
        // What each copied field must start with: its tag and remembered length.
        let mut header = Vec::with_capacity(16);
        let mut gone = self
            .olds
            .iter()
            .filter(|(fqdn, _)| !self.vhosts.contains_key(**fqdn))
            .peekable();
        let was = |parts: Option<&Parts>| parts.and_then(share).map_or(0, |s| s.field_len(tag));
        for (fqdn, parts) in vhosts() {
            while let Some((_, old)) = gone.next_if(|(g, _)| **g < fqdn) {
                cursor += was(Some(old));
            }
            if !taken(parts) {
                continue;
            }
            if let Some(new) = self.fresh.get(fqdn) {
                if let Some(b) = self.arena.get(new.on(self.entries, listener)) {
                    put_field(&mut bytes, tag, b)?;
                }
                cursor += was(self.olds.get(fqdn));
                continue;
            }
            let Some(kept) = share(parts) else {
                continue;
            };
            if !shell_checked {
                // Settings shape the shell; a different one means a different encoder.
                if old.get(..shell_len) != Some(shell) {
                    return Err(Stale);
                }
                shell_checked = true;
            }
            let end = cursor + kept.field_len(tag);
            let field = old.get(cursor..end).ok_or(Stale)?;
            header.clear();
            prost::encoding::encode_key(
                tag,
                prost::encoding::WireType::LengthDelimited,
                &mut header,
            );
            prost::encoding::encode_varint(kept.len as u64, &mut header);
            if !field.starts_with(&header) {
                return Err(Stale);
            }
            put(&mut bytes, field)?;
            cursor = end;
        }
        if let Some(tail) = tail {
            put_field(&mut bytes, tag, tail)?;
        }
        // Counted exactly, or rebuilt whole: neither written past nor left part-zero.
        if !bytes.is_empty() {
            return Err(Stale);
        }
        Ok(table)
    }
}

/// Writes `value` into `out` and moves past it, when it fits (see [`Table::splice`]).
fn put(out: &mut &mut [u8], value: &[u8]) -> Result<(), Stale> {
    if value.len() > out.len() {
        return Err(Stale);
    }
    out.put_slice(value);
    Ok(())
}

/// Writes `value` into `out` as a `tag` field, when it fits.
fn put_field(out: &mut &mut [u8], tag: u32, value: &[u8]) -> Result<(), Stale> {
    if field_len(tag, value.len()) > out.len() {
        return Err(Stale);
    }
    append_field(out, tag, value);
    Ok(())
}
