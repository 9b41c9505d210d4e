//! The manifest directory walked and its files read: which files are manifests, at
//! most how big, and a directory loaded whole (`translate`).

use std::path::Path;

use super::*;

/// The largest manifest file read; a bigger one is reported and skipped.
pub(super) const MAX_MANIFEST_BYTES: u64 = 32 << 20;

/// `path`'s text, if it is a regular file of at most [`MAX_MANIFEST_BYTES`] (a FIFO
/// would block every later read, a device or a huge file exhaust memory).
pub(super) fn read_manifest(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    // Opened without blocking (a FIFO with no writer would block the open itself), then
    // looked at: one lookup of the path, not two.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file; skipped"));
    }
    if meta.len() > MAX_MANIFEST_BYTES {
        return Err(std::io::Error::other(format!(
            "{} bytes, over the {} MiB a manifest file may hold; skipped",
            meta.len(),
            MAX_MANIFEST_BYTES >> 20
        )));
    }
    let mut text = String::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.read_to_string(&mut text)?;
    Ok(text)
}

/// `key`'s definition in `path`, read again: the file did not change, but the later
/// file that defined `key` too went. `None` (with a warning) when it no longer reads.
pub(super) fn read_again(path: &Path, key: &ObjectKey) -> Option<Object> {
    let found = read_manifest(path)
        .map_err(|e| unreadable(path, &e))
        .and_then(|text| parse_file(path, &text))
        .map(|objects| objects.into_iter().rev().find(|o| o.key() == *key));
    match found {
        Ok(Some(object)) => Some(object),
        Ok(None) => None,
        Err(error) => {
            tracing::warn!(file = %error.path.display(), error = %error.message, object = %key, "the file that defines the object now does not read; the object goes until it does");
            None
        }
    }
}

pub(super) fn unreadable(path: &Path, e: &std::io::Error) -> ManifestError {
    ManifestError {
        path: path.to_path_buf(),
        line: None,
        message: e.to_string(),
    }
}

pub(super) fn is_manifest(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
}

/// What a walk of the directory found.
pub(super) struct Walk {
    /// Manifest files.
    pub(super) paths: BTreeSet<PathBuf>,
    /// Visible directories below the top one.
    pub(super) dirs: BTreeSet<PathBuf>,
    /// Whether any visible entry is a symbolic link.
    pub(super) links: bool,
    /// Whether a visible directory was reached through a symbolic link.
    pub(super) linked_dirs: bool,
}

/// Manifest files under `dir`, recursively, skipping hidden entries (editor swap files,
/// `..data` links of mounted ConfigMaps are followed through their visible names).
pub(super) fn manifest_paths(dir: &Path, errors: &mut Vec<ManifestError>) -> Walk {
    let mut out = BTreeSet::new();
    let mut dirs = BTreeSet::new();
    let mut links = false;
    let mut linked_dirs = false;
    // Each directory is read once, however many links lead to it: a link back up the
    // tree (`sub/parent -> ..`) would otherwise be walked until paths grow too long.
    let mut visited: BTreeSet<PathBuf> = dir.canonicalize().into_iter().collect();
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
            let kind = entry.file_type().ok();
            let link = kind.is_some_and(|t| t.is_symlink());
            links |= link;
            // The entry's own type, as the directory listing gives it (no look at the
            // file); a link's target is looked at.
            let is_dir = match kind {
                Some(kind) if !link => kind.is_dir(),
                _ => path.is_dir(),
            };
            if is_dir {
                linked_dirs |= link;
                match path.canonicalize() {
                    Ok(real) if !visited.insert(real.clone()) => {
                        errors.push(ManifestError {
                            path,
                            line: None,
                            message: format!(
                                "leads to {}, already read (a loop of links is read once)",
                                real.display()
                            ),
                        });
                    }
                    _ => {
                        dirs.insert(path.clone());
                        stack.push(path);
                    }
                }
            } else if is_manifest(&path) {
                out.insert(path);
            }
        }
    }
    Walk {
        paths: out,
        dirs,
        links,
        linked_dirs,
    }
}

/// Reads a directory once: its objects and the files that failed.
pub fn load_dir(dir: &Path) -> (Objects, Vec<ManifestError>) {
    let mut state = ManifestDir::default();
    let (events, errors) = state.rescan(dir);
    let mut objects = Objects::default();
    for event in events {
        if let Event::Apply(object) = event {
            objects.apply(object);
        }
    }
    (objects, errors)
}
