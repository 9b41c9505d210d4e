//! What the runner is asked, and by whom: admission reviews from the webhook
//! ([`AdmissionRequest`], answered with a [`Verdict`]) and the IR from the debug endpoint
//! ([`IrRequest`]). The runner owns these messages; `admission` and `cli` send them.

use std::sync::Arc;

use serde::Deserialize;
use tokio::sync::oneshot;

use isobar_sdk::{Ir, Object, ObjectKey};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

/// What is asked about: the object as it would be after the operation.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub operation: Operation,
    pub key: ObjectKey,
    /// The new object (create, update); `None` for a delete.
    pub object: Option<Object>,
    pub dry_run: bool,
}

/// The answer to one review.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verdict {
    pub allowed: bool,
    /// Why not, when not allowed.
    pub message: String,
    pub warnings: Vec<String>,
}

impl Verdict {
    pub fn allow(warnings: Vec<String>) -> Verdict {
        Verdict {
            allowed: true,
            message: String::new(),
            warnings,
        }
    }

    pub fn deny(message: String, warnings: Vec<String>) -> Verdict {
        Verdict {
            allowed: false,
            message,
            warnings,
        }
    }
}

/// A review the webhook hands to the runner, which holds the objects.
pub struct AdmissionRequest {
    pub candidate: Candidate,
    pub reply: oneshot::Sender<Verdict>,
}

/// A request to the runner for the IR of its current objects.
pub type IrRequest = oneshot::Sender<Arc<Ir>>;
