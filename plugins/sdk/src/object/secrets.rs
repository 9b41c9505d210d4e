//! The Secrets the store holds before a full build checks or drops them, in one shared
//! buffer, and the digests dropped ones are remembered by.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;

use crate::secret::{OtherValue, SecretCheck};

type NsName = (String, String);

/// The Secrets stored whole, until a full build checks or drops them: of each, what its
/// check reads (its type, the data keys Isobar reads, [`crate::secret::READ_KEYS`], and
/// of an `Opaque` one the other keys as [`OtherValue`]s),
/// end to end in one shared buffer. A re-delivery is compared by those bytes (a change
/// to anything else, a label say, changes nothing Isobar serves); a dropped Secret is
/// remembered by their SHA-256.
///
/// At start-up every listed Secret waits here for the first build (30,000 at the 10k
/// profile, 20,000 of which no build asks for). Kept as decoded objects they were tens
/// of thousands of small blocks among the long-lived ones allocated at the same time;
/// once dropped, they left those pages part-empty and resident (≈ 15 MiB at 10k). One
/// buffer is handed back whole.
#[derive(Debug, Default, Clone)]
pub(super) struct Unchecked {
    at: BTreeMap<NsName, Stored>,
    /// Shared with copies of the store (dry builds) until either side adds a Secret.
    bytes: Arc<Vec<u8>>,
    /// Bytes of Secrets no longer stored (reclaimed when they are most of the buffer).
    garbage: usize,
}

#[derive(Debug, Clone)]
struct Stored {
    bytes: std::ops::Range<usize>,
}

/// What a dropped Secret is remembered by: the first half of a SHA-256 of what was kept
/// of it (128 bits: no two versions of a Secret are found equal by chance).
pub(super) type Digest = [u8; 16];

fn digest(kept: &[u8]) -> Digest {
    use sha2::Digest;
    let full: [u8; 32] = sha2::Sha256::digest(kept).into();
    let mut half = [0; 16];
    half.copy_from_slice(&full[..16]);
    half
}

/// Secrets whose data was dropped, each by `namespace/name` (neither holds a `/`) and a
/// [`Digest`]: 30,000 of them at the 10k profile, so one block each for the name, not a
/// pair of strings.
#[derive(Debug, Default, Clone)]
pub(super) struct Dropped(BTreeMap<Box<str>, Digest>);

impl Dropped {
    fn key((namespace, name): &NsName) -> Box<str> {
        format!("{namespace}/{name}").into()
    }

    pub(super) fn get(&self, id: &NsName) -> Option<Digest> {
        self.0.get(&Self::key(id)).copied()
    }

    pub(super) fn contains(&self, id: &NsName) -> bool {
        self.0.contains_key(&Self::key(id))
    }

    pub(super) fn insert(&mut self, id: &NsName, digest: Digest) {
        self.0.insert(Self::key(id), digest);
    }

    pub(super) fn remove(&mut self, id: &NsName) -> Option<Digest> {
        self.0.remove(&Self::key(id))
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn ids(&self) -> impl Iterator<Item = NsName> + '_ {
        self.0.keys().filter_map(|key| {
            let (namespace, name) = key.split_once('/')?;
            Some((namespace.to_string(), name.to_string()))
        })
    }
}

/// Below this size the buffer is not compacted.
const COMPACT_MIN: usize = 1 << 16;

/// How a Secret's type is written when it has none.
const NO_TYPE: u32 = u32::MAX;

impl Unchecked {
    pub(super) fn len(&self) -> usize {
        self.at.len()
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &NsName> {
        self.at.keys()
    }

    /// Stores `secret` (replacing any stored version), unless what is kept of it equals the
    /// version stored, or has the digest `dropped` (of the version whose data was
    /// dropped): returns whether it was stored. Digests are made only to compare with a
    /// dropped version and when a version is dropped, not for every Secret that arrives.
    pub(super) fn insert(&mut self, id: NsName, secret: &Secret, dropped: Option<Digest>) -> bool {
        // `data` merged with `stringData`, as the API server does on write.
        let field = |key: &str| {
            let string = secret.string_data.as_ref().and_then(|d| d.get(key));
            let data = || secret.data.as_ref().and_then(|d| d.get(key));
            string
                .map(String::as_bytes)
                .or_else(|| data().map(|v| v.0.as_slice()))
        };
        let bytes = Arc::make_mut(&mut self.bytes);
        let start = bytes.len();
        // A field too long to write (4 GiB) reads back as absent.
        let fits = |f: &&[u8]| u32::try_from(f.len()).is_ok_and(|n| n != NO_TYPE);
        let mut put = |field: Option<&[u8]>| match field.filter(fits) {
            Some(field) => {
                bytes.extend_from_slice(&u32::try_from(field.len()).unwrap_or(0).to_le_bytes());
                bytes.extend_from_slice(field);
            }
            None => bytes.extend_from_slice(&NO_TYPE.to_le_bytes()),
        };
        put(secret.type_.as_deref().map(str::as_bytes));
        for key in crate::secret::READ_KEYS {
            put(field(key));
        }
        // The other keys of an `Opaque` Secret, each whole only when it may be a JWKS
        // (see [`OtherValue`]): an application's passwords cost their names.
        let opaque = secret.type_.as_deref().is_none_or(|t| t == "Opaque");
        let mut other = BTreeMap::new();
        if opaque {
            let data = secret
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k, v.0.as_slice()));
            let strings = secret.string_data.iter().flatten();
            for (key, value) in data.chain(strings.map(|(k, v)| (k, v.as_bytes()))) {
                if !crate::secret::READ_KEYS.contains(&key.as_str()) {
                    other.insert(key.as_str(), OtherValue::of(value));
                }
            }
        }
        put(Some(&u32::try_from(other.len()).unwrap_or(0).to_le_bytes()));
        for (key, value) in &other {
            put(Some(key.as_bytes()));
            match value {
                OtherValue::Text(text) => put(Some(text)),
                OtherValue::NotAnObject => put(None),
            }
        }
        let new = start..bytes.len();
        let same = match self.at.get(&id) {
            Some(old) => bytes.get(old.bytes.clone()) == bytes.get(new.clone()),
            None => dropped.is_some_and(|d| d == digest(&bytes[new.clone()])),
        };
        if same {
            bytes.truncate(start);
            return false;
        }
        if let Some(old) = self.at.insert(id, Stored { bytes: new }) {
            self.garbage += old.bytes.len();
            self.reclaim();
        }
        true
    }

    /// Drops a stored Secret; returns the digest it is remembered by.
    pub(super) fn remove(&mut self, id: &NsName) -> Option<Digest> {
        let old = self.at.remove(id)?;
        let digest = digest(self.bytes.get(old.bytes.clone()).unwrap_or_default());
        self.garbage += old.bytes.len();
        self.reclaim();
        Some(digest)
    }

    /// Frees the buffer when nothing is stored, and compacts it when dead bytes (of
    /// replaced or removed Secrets) are most of it.
    fn reclaim(&mut self) {
        if self.at.is_empty() {
            self.bytes = Arc::default();
            self.garbage = 0;
        } else if self.garbage > self.bytes.len() / 2 && self.bytes.len() > COMPACT_MIN {
            self.compact();
        }
    }

    /// Copies the stored Secrets' bytes into a buffer of their own.
    fn compact(&mut self) {
        let mut bytes = Vec::with_capacity(self.bytes.len() - self.garbage);
        for stored in self.at.values_mut() {
            let start = bytes.len();
            bytes.extend_from_slice(&self.bytes[stored.bytes.clone()]);
            stored.bytes = start..bytes.len();
        }
        self.bytes = Arc::new(bytes);
        self.garbage = 0;
    }

    /// The stored Secret's check.
    pub(super) fn check(&self, id: &NsName) -> Option<SecretCheck> {
        let mut rest = self.bytes.get(self.at.get(id)?.bytes.clone())?;
        let mut take = || -> Option<Option<&[u8]>> {
            let (len, tail) = rest.split_first_chunk::<4>()?;
            let len = u32::from_le_bytes(*len);
            if len == NO_TYPE {
                rest = tail;
                return Some(None);
            }
            let (field, tail) = tail.split_at_checked(usize::try_from(len).ok()?)?;
            rest = tail;
            Some(Some(field))
        };
        let type_ = take()?.map(|t| String::from_utf8_lossy(t).into_owned());
        let mut data = BTreeMap::new();
        for key in crate::secret::READ_KEYS {
            if let Some(value) = take()? {
                data.insert(key.to_string(), value.to_vec());
            }
        }
        let count = u32::from_le_bytes(*take()??.first_chunk::<4>()?);
        let mut other = BTreeMap::new();
        for _ in 0..count {
            let key = String::from_utf8_lossy(take()??).into_owned();
            let value = match take()? {
                Some(text) => OtherValue::Text(text.to_vec()),
                None => OtherValue::NotAnObject,
            };
            other.insert(key, value);
        }
        let sds_name = crate::secret::sds_name(&id.0, &id.1);
        Some(SecretCheck::of_data(
            &sds_name,
            type_.as_deref(),
            &data,
            &other,
        ))
    }
}

#[cfg(test)]
mod tests;
