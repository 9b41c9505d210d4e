//! Providers fill the object store. Each hands the same typed events to the pipeline
//! runner, so nothing downstream knows which one ran.

pub mod files;
pub mod kube;
pub mod manifest;

use std::collections::BTreeSet;

use isobar_sdk::{Kind, Object, ObjectKey};
use tokio::sync::mpsc;

/// One change to the watched objects.
#[derive(Debug)]
pub enum Event {
    /// An object was added or changed.
    Apply(Object),
    /// An object went away.
    Delete(ObjectKey),
    /// A complete list of one kind (in one namespace, or all): stored objects of that
    /// kind and scope that are not in `keys` are gone.
    Listed {
        kind: Kind,
        namespace: Option<String>,
        keys: BTreeSet<(String, String)>,
    },
    /// The latest version of an object could not be decoded; its last good version (if
    /// any) stays.
    Unreadable(ObjectKey, String),
    /// An object read again on request (a Secret whose data the store had dropped).
    Fetched(Object),
    /// Everything that existed at start-up has been delivered: building is now safe.
    Synced,
    /// Input that could not be read; the objects it last gave are kept.
    Problem(String),
}

/// A source of objects.
#[async_trait::async_trait]
pub trait Provider: Send {
    /// Delivers every object of `kinds`, then `Synced`, then changes until the receiver
    /// goes away.
    async fn run(
        self: Box<Self>,
        kinds: BTreeSet<Kind>,
        events: mpsc::Sender<Event>,
    ) -> anyhow::Result<()>;
}
