//! The files provider: every YAML/JSON manifest under a directory, watched for changes.
//!
//! Each file is parsed on its own. A file that fails to parse is reported with its line
//! and keeps contributing the objects it last parsed to; other files are unaffected.
//! When two files define the same object, the later path (in byte order) wins.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use isobar_sdk::{Kind, Object, ObjectKey, Objects};

use super::manifest::{ManifestError, parse_file};
use super::{Event, Provider};

/// How long to wait after a file event for the rest of an editor's writes.
const SETTLE: Duration = Duration::from_millis(30);
/// How often to rescan when the OS cannot watch the directory.
const POLL: Duration = Duration::from_secs(1);

pub struct FilesProvider {
    dir: PathBuf,
}

impl FilesProvider {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FilesProvider { dir: dir.into() }
    }
}

struct FileState {
    text: String,
    objects: Vec<Object>,
}

/// The parsed state of a directory, rescanned in place.
#[derive(Default)]
pub struct ManifestDir {
    files: BTreeMap<PathBuf, FileState>,
    /// The winning definition of every object.
    merged: BTreeMap<ObjectKey, Object>,
    /// The error last reported for each failing path, so a rescan that finds the same
    /// broken file again stays quiet.
    reported: BTreeMap<PathBuf, String>,
}

impl ManifestDir {
    /// Re-reads the directory. Returns what changed, and errors for files that newly
    /// failed or fail differently (those keep their last good objects).
    pub fn rescan(&mut self, dir: &Path) -> (Vec<Event>, Vec<ManifestError>) {
        let mut errors = Vec::new();
        let paths = manifest_paths(dir, &mut errors);
        self.files.retain(|path, _| paths.contains(path));
        for path in paths {
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(e) => {
                    errors.push(ManifestError {
                        path: path.clone(),
                        line: None,
                        message: e.to_string(),
                    });
                    continue;
                }
            };
            if self.files.get(&path).is_some_and(|f| f.text == text) {
                continue;
            }
            match parse_file(&path, &text) {
                Ok(objects) => {
                    self.files.insert(path, FileState { text, objects });
                }
                Err(e) => errors.push(e),
            }
        }
        let mut reported = BTreeMap::new();
        let mut fresh = Vec::new();
        for error in errors {
            let message = error.to_string();
            if self.reported.get(&error.path) != Some(&message) {
                fresh.push(error.clone());
            }
            reported.insert(error.path, message);
        }
        self.reported = reported;
        (self.merge(), fresh)
    }

    fn merge(&mut self) -> Vec<Event> {
        let mut merged = BTreeMap::new();
        for file in self.files.values() {
            for object in &file.objects {
                merged.insert(object.key(), object.clone());
            }
        }
        let mut events = Vec::new();
        for key in self.merged.keys() {
            if !merged.contains_key(key) {
                events.push(Event::Delete(key.clone()));
            }
        }
        for (key, object) in &merged {
            let same = self
                .merged
                .get(key)
                .is_some_and(|old| same_object(old, object));
            if !same {
                events.push(Event::Apply(object.clone()));
            }
        }
        self.merged = merged;
        events
    }

    /// The current objects as a store.
    pub fn objects(&self) -> Objects {
        let mut objects = Objects::default();
        for object in self.merged.values() {
            objects.apply(object.clone());
        }
        objects
    }
}

fn same_object(a: &Object, b: &Object) -> bool {
    match (a, b) {
        (Object::Service(x), Object::Service(y)) => Arc::ptr_eq(x, y),
        (Object::EndpointSlice(x), Object::EndpointSlice(y)) => Arc::ptr_eq(x, y),
        (Object::Secret(x), Object::Secret(y)) => Arc::ptr_eq(x, y),
        (Object::Ingress(x), Object::Ingress(y)) => Arc::ptr_eq(x, y),
        (Object::HTTPProxy(x), Object::HTTPProxy(y)) => Arc::ptr_eq(x, y),
        (Object::TLSCertificateDelegation(x), Object::TLSCertificateDelegation(y)) => {
            Arc::ptr_eq(x, y)
        }
        _ => false,
    }
}

fn is_manifest(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
}

/// Manifest files under `dir`, recursively, skipping hidden entries (editor swap files,
/// `..data` links of mounted ConfigMaps are followed through their visible names).
fn manifest_paths(dir: &Path, errors: &mut Vec<ManifestError>) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        let entries = match std::fs::read_dir(&current) {
            Ok(entries) => entries,
            Err(e) => {
                errors.push(ManifestError {
                    path: current,
                    line: None,
                    message: e.to_string(),
                });
                continue;
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if is_manifest(&path) {
                out.insert(path);
            }
        }
    }
    out
}

/// Reads a directory once: its objects and the files that failed.
pub fn load_dir(dir: &Path) -> (Objects, Vec<ManifestError>) {
    let mut state = ManifestDir::default();
    let (_, errors) = state.rescan(dir);
    (state.objects(), errors)
}

#[async_trait::async_trait]
impl Provider for FilesProvider {
    async fn run(
        self: Box<Self>,
        kinds: BTreeSet<Kind>,
        events: mpsc::Sender<Event>,
    ) -> anyhow::Result<()> {
        let dir = self.dir;
        if !dir.is_dir() {
            anyhow::bail!("manifest directory {} does not exist", dir.display());
        }
        let (wake_tx, mut wake_rx) = mpsc::channel::<()>(1);
        let watcher = notify::recommended_watcher(move |_event: notify::Result<notify::Event>| {
            let _ = wake_tx.try_send(());
        })
        .and_then(|mut w| w.watch(&dir, RecursiveMode::Recursive).map(|()| w));
        let polling = match &watcher {
            Ok(_) => false,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the manifest directory; polling it");
                true
            }
        };

        let mut state = ManifestDir::default();
        let mut first = true;
        loop {
            let (changes, errors) = state.rescan(&dir);
            for error in errors {
                tracing::warn!(file = %error.path.display(), line = error.line, error = %error.message, "manifest not loaded; keeping its last good objects");
                send(&events, Event::Problem(error.to_string())).await?;
            }
            for change in changes {
                let relevant = match &change {
                    Event::Apply(o) => kinds.contains(&o.kind()),
                    Event::Delete(k) => kinds.contains(&k.kind),
                    _ => true,
                };
                if relevant {
                    send(&events, change).await?;
                }
            }
            if first {
                send(&events, Event::Synced).await?;
                first = false;
            }
            if polling {
                tokio::time::sleep(POLL).await;
            } else {
                if wake_rx.recv().await.is_none() {
                    return Ok(());
                }
                tokio::time::sleep(SETTLE).await;
                while wake_rx.try_recv().is_ok() {}
            }
        }
    }
}

async fn send(events: &mpsc::Sender<Event>, event: Event) -> anyhow::Result<()> {
    events
        .send(event)
        .await
        .map_err(|_| anyhow::anyhow!("the pipeline stopped"))
}
