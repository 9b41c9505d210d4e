//! The files provider: every YAML/JSON manifest under a directory, watched for changes.
//!
//! Each file is parsed on its own. A file that fails to parse is reported with its line
//! and keeps contributing the objects it last parsed to; other files are unaffected.
//! When two files define the same object, the later path (in byte order) wins.
//!
//! The objects themselves are not kept here: the store downstream keeps what routing
//! reads of them (of a Service or an EndpointSlice, a summary a tenth of its size). Each
//! file is remembered by a digest of its text and the keys it defines; an object is read
//! again from its file only when the definition that wins moves to a file that did not
//! change (the later of two files defining it went away).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use isobar_sdk::{Kind, Object, ObjectKey, Objects};

use super::manifest::{ManifestError, parse_file};
use super::{Event, Provider};

mod walk;

pub use walk::load_dir;
use walk::{Walk, is_manifest, manifest_paths, read_again, read_manifest, unreadable};

/// How long to wait after a file event for the rest of an editor's writes.
const SETTLE: Duration = Duration::from_millis(10);
/// How often to rescan when the OS cannot watch the directory.
const POLL: Duration = Duration::from_secs(1);

pub struct FilesProvider {
    dir: PathBuf,
    /// `--watch-namespaces`: only objects of these namespaces (and cluster-scoped ones)
    /// are read, as the Kubernetes provider watches only them. Empty: all.
    namespaces: Vec<String>,
}

impl FilesProvider {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FilesProvider {
            dir: dir.into(),
            namespaces: Vec::new(),
        }
    }

    /// Reads only the objects of `namespaces` (and cluster-scoped ones); empty: all.
    pub fn watching(mut self, namespaces: Vec<String>) -> Self {
        self.namespaces = namespaces;
        self
    }

    /// Whether an object of `namespace` (`""`: cluster-scoped) is read.
    fn watches(&self, namespace: &str) -> bool {
        namespace.is_empty()
            || self.namespaces.is_empty()
            || self.namespaces.iter().any(|n| n == namespace)
    }
}

struct FileState {
    /// A digest of the file's text (the text itself is not kept: 6 MB at 10,000 files).
    digest: blake3::Hash,
    /// The keys of the objects it defines, in its order.
    keys: Box<[ObjectKey]>,
}

/// The files defining one object.
struct Defined {
    /// In path order: the last one wins.
    by: Vec<Arc<Path>>,
    /// The file whose definition was last sent.
    sent: Option<Arc<Path>>,
}

/// The parsed state of a directory, rescanned in place.
#[derive(Default)]
pub struct ManifestDir {
    files: BTreeMap<Arc<Path>, FileState>,
    /// Every object some file defines.
    defined: HashMap<ObjectKey, Defined>,
    /// The error last reported for each failing path, so a rescan that finds the same
    /// broken file again stays quiet.
    reported: BTreeMap<PathBuf, String>,
    /// The visible directories the last rescan walked.
    dirs: BTreeSet<PathBuf>,
    /// Whether a visible entry was a symbolic link at the last rescan: only then can a
    /// hidden entry (a mounted ConfigMap's `..data`) change what a visible name reads.
    links: bool,
    /// Whether a visible directory was reached through a symbolic link: the watcher does
    /// not follow links (a link back up the tree would have it walk forever), so such a
    /// tree is also read again every [`POLL`].
    linked_dirs: bool,
}

/// A file read again: its digest and objects, or `None` when it went.
type Reread = (PathBuf, Option<(blake3::Hash, Vec<Object>)>);

/// How many files a rescan reads before a second thread helps.
const PARALLEL_FROM: usize = 256;

/// One file as a rescan found it.
enum Read {
    Unreadable(ManifestError),
    /// As the last rescan read it.
    Same,
    Decoded(blake3::Hash, Result<Vec<Object>, ManifestError>),
}

impl ManifestDir {
    /// Re-reads the directory. Returns what changed, and errors for files that newly
    /// failed or fail differently (those keep their last good objects).
    pub fn rescan(&mut self, dir: &Path) -> (Vec<Event>, Vec<ManifestError>) {
        let mut errors = Vec::new();
        let Walk {
            paths,
            dirs,
            links,
            linked_dirs,
        } = manifest_paths(dir, &mut errors);
        self.dirs = dirs;
        self.links = links;
        self.linked_dirs = linked_dirs;
        let paths: Vec<PathBuf> = paths.into_iter().collect();
        // Each file read, hashed and (unless unchanged) decoded on its own: on two
        // threads when there are many (a start with thousands of files).
        let read = |part: &[PathBuf]| -> Vec<Read> {
            part.iter()
                .map(|path| {
                    let text = match read_manifest(path) {
                        Ok(text) => text,
                        Err(e) => return Read::Unreadable(unreadable(path, &e)),
                    };
                    let digest = blake3::hash(text.as_bytes());
                    if self
                        .files
                        .get(path.as_path())
                        .is_some_and(|f| f.digest == digest)
                    {
                        return Read::Same;
                    }
                    Read::Decoded(digest, parse_file(path, &text))
                })
                .collect()
        };
        let results = crate::parallel::in_halves(&paths, PARALLEL_FROM, read);
        let mut reread: Vec<Reread> = Vec::new();
        // `paths` is sorted (it came from a set).
        for path in self.files.keys() {
            if paths.binary_search_by(|p| p.as_path().cmp(path)).is_err() {
                reread.push((path.to_path_buf(), None));
            }
        }
        for (path, result) in paths.iter().zip(results) {
            match result {
                Read::Unreadable(e) | Read::Decoded(_, Err(e)) => errors.push(e),
                Read::Same => {}
                Read::Decoded(digest, Ok(objects)) => {
                    reread.push((path.clone(), Some((digest, objects))));
                }
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
        (self.update(reread), fresh)
    }

    /// Re-reads only `paths` (what the watcher saw change), as [`ManifestDir::rescan`]
    /// would find them; `None` when one of them needs a whole rescan (a directory, a
    /// hidden entry such as a mounted ConfigMap's `..data`).
    pub fn refresh(
        &mut self,
        dir: &Path,
        paths: &BTreeSet<PathBuf>,
    ) -> Option<(Vec<Event>, Vec<ManifestError>)> {
        let mut errors = Vec::new();
        let mut reread: Vec<Reread> = Vec::new();
        for path in paths {
            let Ok(relative) = path.strip_prefix(dir) else {
                tracing::debug!(path = %path.display(), "a change outside the manifest directory");
                return None;
            };
            let hidden = relative
                .components()
                .any(|c| c.as_os_str().to_string_lossy().starts_with('.'));
            if hidden {
                // Editors' and tools' temporary files (written, then renamed over the
                // manifest) are never read; they matter only when a visible link may
                // lead into them.
                if self.links {
                    return None;
                }
                continue;
            }
            // A directory (or one that went) holds unnamed files; a new link may lead
            // anywhere.
            let link = path
                .symlink_metadata()
                .is_ok_and(|m| m.file_type().is_symlink());
            if link || path.is_dir() || self.dirs.contains(path) {
                return None;
            }
            if !is_manifest(path) {
                continue;
            }
            let text = match read_manifest(path) {
                Ok(text) => Some(text),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => {
                    errors.push(unreadable(path, &e));
                    continue;
                }
            };
            let old = self.files.get(path.as_path());
            let digest = text.as_ref().map(|t| blake3::hash(t.as_bytes()));
            if old.map(|f| f.digest) == digest {
                self.reported.remove(path);
                continue;
            }
            let parsed = match text.zip(digest) {
                Some((text, digest)) => match parse_file(path, &text) {
                    Ok(objects) => Some((digest, objects)),
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                },
                None => None,
            };
            self.reported.remove(path);
            reread.push((path.clone(), parsed));
        }
        let mut fresh = Vec::new();
        for error in errors {
            let message = error.to_string();
            if self.reported.get(&error.path) != Some(&message) {
                fresh.push(error.clone());
            }
            self.reported.insert(error.path, message);
        }
        Some((self.update(reread), fresh))
    }

    /// The files that may have changed since `since` (made, changed or gone): what a
    /// watcher started only after a read would have missed. `None`: everything (links
    /// may change what a name reads without its time changing).
    fn changed_since(&self, dir: &Path, since: std::time::SystemTime) -> Option<BTreeSet<PathBuf>> {
        let walk = manifest_paths(dir, &mut Vec::new());
        if walk.links || walk.dirs != self.dirs {
            return None;
        }
        // File times move in the kernel's coarse clock ticks: a second of slack.
        let since = since - Duration::from_secs(1);
        let mut changed: BTreeSet<PathBuf> = self
            .files
            .keys()
            .filter(|path| !walk.paths.contains(&***path))
            .map(|path| path.to_path_buf())
            .collect();
        for path in walk.paths {
            let recent = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .map_or(true, |modified| modified >= since);
            if recent || !self.files.contains_key(path.as_path()) {
                changed.insert(path);
            }
        }
        Some(changed)
    }

    /// Takes in files read again (or gone): what each defines now, and an event for
    /// every object whose winning definition changed.
    fn update(&mut self, reread: Vec<Reread>) -> Vec<Event> {
        let mut affected: Vec<ObjectKey> = Vec::new();
        // By the address of the path's `Arc` (the one `files` and `defined` share): hashing
        // a path walks its components, 100,000 times at a start with as many files.
        let mut parsed: HashMap<*const Path, Vec<Object>> = HashMap::new();
        for (path, now) in reread {
            let (path, old) = match self.files.remove_entry(path.as_path()) {
                Some((path, old)) => (path, Some(old)),
                None => (Arc::from(path), None),
            };
            for key in old.iter().flat_map(|f| f.keys.iter()) {
                if let Some(defined) = self.defined.get_mut(key) {
                    defined.by.retain(|p| *p != path);
                }
                affected.push(key.clone());
            }
            let Some((digest, objects)) = now else {
                continue;
            };
            let keys: Box<[ObjectKey]> = objects.iter().map(Object::key).collect();
            for key in &keys {
                let defined = self.defined.entry(key.clone()).or_insert(Defined {
                    by: Vec::new(),
                    sent: None,
                });
                if let Err(at) = defined.by.binary_search(&path) {
                    defined.by.insert(at, path.clone());
                }
                affected.push(key.clone());
            }
            parsed.insert(Arc::as_ptr(&path), objects);
            self.files.insert(path, FileState { digest, keys });
        }
        // In key order, each once.
        affected.sort_unstable();
        affected.dedup();
        let mut events = Vec::new();
        for key in affected {
            let Some(defined) = self.defined.get_mut(&key) else {
                continue;
            };
            let Some(winner) = defined.by.last().cloned() else {
                let sent = self.defined.remove(&key).and_then(|d| d.sent);
                if sent.is_some() {
                    events.push(Event::Delete(key));
                }
                continue;
            };
            let object = match parsed.get(&Arc::as_ptr(&winner)) {
                Some(objects) => objects.iter().rev().find(|o| o.is(&key)).cloned(),
                None if defined.sent.as_ref() == Some(&winner) => continue,
                // The definition that wins now is in a file that did not change.
                None => read_again(&winner, &key),
            };
            match object {
                Some(object) => {
                    defined.sent = Some(winner);
                    events.push(Event::Apply(object));
                }
                None => {
                    if defined.sent.take().is_some() {
                        events.push(Event::Delete(key));
                    }
                }
            }
        }
        events
    }
}

#[async_trait::async_trait]
impl Provider for FilesProvider {
    async fn run(
        self: Box<Self>,
        kinds: BTreeSet<Kind>,
        events: mpsc::Sender<Event>,
    ) -> anyhow::Result<()> {
        // Absolute, as the watcher names what changed (else every change is a rescan).
        let dir = std::path::absolute(&self.dir).unwrap_or_else(|_| self.dir.clone());
        if !dir.is_dir() {
            anyhow::bail!("manifest directory {} does not exist", dir.display());
        }
        let (wake_tx, mut wake_rx) = mpsc::channel::<()>(1);
        // The paths the watcher saw change since the last look; `None`: look at everything.
        let seen: Seen = Arc::default();
        let handler = recorder(seen.clone(), wake_tx);
        // Watching starts once the first read is done (see below).
        let mut handler = Some(handler);
        // Kept for as long as the provider runs: dropped, it stops watching.
        let mut _watching: Option<notify::RecommendedWatcher> = None;
        let mut polling = false;
        let first_read_at = std::time::SystemTime::now();

        let mut state = ManifestDir::default();
        let mut first = true;
        loop {
            // Only the files the watcher named, when it named them all.
            let named = match seen.lock() {
                Ok(mut seen) => seen.replace(BTreeSet::new()),
                Err(_) => None,
            };
            let looked = match named.filter(|_| !first && !polling) {
                Some(paths) => state.refresh(&dir, &paths),
                None => None,
            };
            if looked.is_none() && !first {
                tracing::debug!(dir = %dir.display(), "reading the whole manifest directory again");
            }
            let started = std::time::Instant::now();
            let (changes, errors) = looked.unwrap_or_else(|| state.rescan(&dir));
            if first {
                tracing::info!(dir = %dir.display(), files = state.files.len(), objects = changes.len(), millis = started.elapsed().as_secs_f64() * 1e3, "read the manifest directory");
            }
            for error in errors {
                tracing::warn!(file = %error.path.display(), line = error.line, error = %error.message, "manifest not loaded; keeping its last good objects");
                send(&events, Event::Problem(error.to_string())).await?;
            }
            for change in changes {
                let relevant = match &change {
                    Event::Apply(o) => kinds.contains(&o.kind()) && self.watches(o.namespace()),
                    Event::Delete(k) => kinds.contains(&k.kind) && self.watches(&k.namespace),
                    _ => true,
                };
                if relevant {
                    send(&events, change).await?;
                }
            }
            if first {
                send(&events, Event::Synced).await?;
                first = false;
                // Watched only now: each of the first read's own opens would have been an
                // event for the watcher to take in (100,000 at a start with as many
                // files). What changed while that read ran is looked at at once instead.
                // Links are not followed: one back up the tree would be walked forever.
                let made = handler.take().map(|handler| {
                    notify::RecommendedWatcher::new(
                        handler,
                        notify::Config::default().with_follow_symlinks(false),
                    )
                    .and_then(|mut w| w.watch(&dir, RecursiveMode::Recursive).map(|()| w))
                });
                match made {
                    Some(Ok(made)) => _watching = Some(made),
                    Some(Err(e)) => {
                        tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the manifest directory; polling it");
                        polling = true;
                    }
                    None => {}
                }
                let missed = state.changed_since(&dir, first_read_at);
                if let Ok(mut seen) = seen.lock() {
                    match (seen.as_mut(), missed) {
                        (Some(set), Some(missed)) => set.extend(missed),
                        _ => *seen = None,
                    }
                }
                continue;
            }
            if !wait(polling, state.linked_dirs, &mut wake_rx, &seen).await {
                return Ok(());
            }
        }
    }
}

/// The paths a watcher saw change since they were last looked at; `None`: look at
/// everything.
type Seen = Arc<std::sync::Mutex<Option<BTreeSet<PathBuf>>>>;

/// A watcher's handler: records in `seen` what each event names and wakes the reader.
fn recorder(
    seen: Seen,
    wake: mpsc::Sender<()>,
) -> impl FnMut(notify::Result<notify::Event>) + Send + 'static {
    move |event: notify::Result<notify::Event>| {
        // Opening and reading (Isobar's own reads among them) change nothing: waking
        // on them would read the files again, and again.
        if let Ok(e) = &event
            && let EventKind::Access(access) = e.kind
            && access != AccessKind::Close(AccessMode::Write)
        {
            return;
        }
        if let Ok(mut seen) = seen.lock() {
            match event {
                Ok(e) if !e.paths.is_empty() && !e.need_rescan() => {
                    if let Some(set) = seen.as_mut() {
                        set.extend(e.paths);
                    }
                }
                _ => *seen = None,
            }
        }
        let _ = wake.try_send(());
    }
}

/// Waits for the next look: a poll interval when nothing watches, else the watcher's
/// wake-up (at most a poll interval when directories behind links are not watched),
/// then a moment for a burst of writes to settle. False once the watcher is gone.
async fn wait(
    polling: bool,
    linked_dirs: bool,
    wake: &mut mpsc::Receiver<()>,
    seen: &Seen,
) -> bool {
    if polling {
        tokio::time::sleep(POLL).await;
        return true;
    }
    if linked_dirs {
        if let Ok(None) = tokio::time::timeout(POLL, wake.recv()).await {
            return false;
        }
        if let Ok(mut seen) = seen.lock() {
            *seen = None;
        }
    } else if wake.recv().await.is_none() {
        return false;
    }
    tokio::time::sleep(SETTLE).await;
    while wake.try_recv().is_ok() {}
    true
}

async fn send(events: &mpsc::Sender<Event>, event: Event) -> anyhow::Result<()> {
    events
        .send(event)
        .await
        .map_err(|_| anyhow::anyhow!("the pipeline stopped"))
}

#[cfg(test)]
mod tests;
