use super::*;

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
}

fn service(name: &str, port: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  ports: [{{port: {port}}}]\n---\n"
    )
}

/// What a consumer of the events holds: each object's last version, as text.
#[derive(Default)]
struct Held(BTreeMap<ObjectKey, String>);

impl Held {
    fn of(events: &[Event]) -> Held {
        let mut held = Held::default();
        held.take(events);
        held
    }

    fn take(&mut self, events: &[Event]) {
        for event in events {
            match event {
                Event::Apply(o) => {
                    self.0.insert(o.key(), format!("{o:?}"));
                }
                Event::Delete(key) => {
                    self.0.remove(key);
                }
                _ => {}
            }
        }
    }

    fn state(&self) -> Vec<String> {
        self.0.values().cloned().collect()
    }
}

/// A link back up the tree is read once, a FIFO named like a manifest is skipped:
/// neither stops the rest of the directory from being read, nor blocks the read.
#[test]
fn link_loops_and_fifos_are_reported_and_skipped() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path();
    std::fs::create_dir(dir.join("sub")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("sub/a.yaml"), service("a", 80)).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("..", dir.join("sub/parent")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("../sub", dir.join("sub/self")).unwrap_or_else(|e| panic!("{e}"));
    let made = std::process::Command::new("mkfifo")
        .arg(dir.join("pipe.yaml"))
        .status()
        .unwrap_or_else(|e| panic!("mkfifo: {e}"));
    assert!(made.success());
    let mut state = ManifestDir::default();
    let (events, errors) = state.rescan(dir);
    assert_eq!(events.len(), 1, "{events:?}");
    let said: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert!(
        said.iter()
            .any(|e| e.contains("pipe.yaml") && e.contains("not a regular file")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|e| e.contains("parent") && e.contains("already read")),
        "{said:?}"
    );
    assert!(state.linked_dirs);
}

/// Each step changes files and names them; the watched state must be what a fresh
/// read of the directory gives.
#[test]
fn refreshing_the_named_files_agrees_with_reading_everything() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path();
    let (a, b) = (dir.join("a.yaml"), dir.join("b.yaml"));
    write(&a, &service("x", 80));
    write(&b, &(service("x", 81) + &service("y", 82)));
    let mut live = ManifestDir::default();
    let mut held = Held::of(&live.rescan(dir).0);
    type Step<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let steps: Vec<Step> = vec![
        (
            "the later file's copy changes",
            Box::new(|| write(&b, &(service("x", 91) + &service("y", 82)))),
        ),
        (
            "the later file goes",
            Box::new(|| std::fs::remove_file(&b).unwrap_or_else(|e| panic!("{e}"))),
        ),
        (
            "it comes back broken",
            Box::new(|| write(&b, "kind: [unclosed")),
        ),
        ("it is fixed", Box::new(|| write(&b, &service("y", 83)))),
        (
            "the earlier file changes",
            Box::new(|| write(&a, &(service("x", 84) + &service("z", 85)))),
        ),
    ];
    for (what, change) in steps {
        change();
        let named = BTreeSet::from([a.clone(), b.clone()]);
        let (events, _) = live
            .refresh(dir, &named)
            .unwrap_or_else(|| panic!("{what}: files only, yet a whole rescan was asked for"));
        held.take(&events);
        let fresh = Held::of(&ManifestDir::default().rescan(dir).0);
        assert_eq!(held.state(), fresh.state(), "{what}");
        // A file that comes back broken changes nothing; every other step does.
        assert_eq!(
            events.is_empty(),
            what.contains("broken"),
            "{what}: {events:?}"
        );
    }
    // Broken again: the last good objects stay, as a rescan keeps them.
    write(&b, "kind: [unclosed");
    let (events, errors) = live
        .refresh(dir, &BTreeSet::from([b.clone()]))
        .unwrap_or_else(|| panic!("files only"));
    assert_eq!(errors.len(), 1);
    held.take(&events);
    assert!(
        held.state().iter().any(|o| o.contains("\"y\"")),
        "y was dropped"
    );
    // Written to a hidden file, then renamed over the manifest (as editors and the
    // benches do): both names are seen, neither asks for a rescan.
    let tmp = dir.join(".b.yaml.tmp");
    write(&tmp, &service("y", 86));
    std::fs::rename(&tmp, &b).unwrap_or_else(|e| panic!("{e}"));
    let (events, _) = live
        .refresh(dir, &BTreeSet::from([tmp.clone(), b.clone()]))
        .unwrap_or_else(|| panic!("a hidden temporary file asked for a whole rescan"));
    assert_eq!(events.len(), 1, "{events:?}");
    // So do other files that are not manifests, gone or not.
    assert!(
        live.refresh(dir, &BTreeSet::from([dir.join("4913")]))
            .is_some()
    );
    // A directory asks for a whole rescan, and so does one that went.
    let sub = dir.join("sub");
    std::fs::create_dir(&sub).unwrap_or_else(|e| panic!("{e}"));
    assert!(live.refresh(dir, &BTreeSet::from([sub.clone()])).is_none());
    live.rescan(dir);
    std::fs::remove_dir(&sub).unwrap_or_else(|e| panic!("{e}"));
    assert!(live.refresh(dir, &BTreeSet::from([sub])).is_none());
    assert!(
        live.refresh(dir, &BTreeSet::from([dir.to_path_buf()]))
            .is_none()
    );
}

/// A mounted ConfigMap: visible names are links through `..data` to a hidden
/// directory that is swapped whole. The swap must be seen.
#[cfg(unix)]
#[test]
fn a_swapped_configmap_mount_is_read_again() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path();
    let run = |args: &[&str]| {
        let ok = std::process::Command::new(args[0])
            .args(&args[1..])
            .current_dir(dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "{args:?}");
    };
    let (one, two) = (dir.join("..v1"), dir.join("..v2"));
    std::fs::create_dir(&one).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(one.join("a.yaml"), service("x", 80)).unwrap_or_else(|e| panic!("{e}"));
    run(&["ln", "-s", "..v1", "..data"]);
    run(&["ln", "-s", "..data/a.yaml", "a.yaml"]);
    let mut live = ManifestDir::default();
    let mut held = Held::of(&live.rescan(dir).0);
    std::fs::create_dir(&two).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(two.join("a.yaml"), service("x", 81)).unwrap_or_else(|e| panic!("{e}"));
    run(&["ln", "-sfn", "..v2", "..data"]);
    let named = BTreeSet::from([dir.join("..data"), two.join("a.yaml")]);
    assert!(live.refresh(dir, &named).is_none(), "the swap went unseen");
    held.take(&live.rescan(dir).0);
    assert!(
        held.state().iter().any(|o| o.contains("81")),
        "{:?}",
        held.state()
    );
}

/// Two files define `x`; the later one wins. When it goes, `x` is read again from
/// the earlier file, which did not change; if that file no longer reads, `x` goes
/// (as a fresh read of the directory would not have it either).
#[test]
fn an_object_whose_later_definition_goes_is_read_again_from_the_earlier_file() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path();
    let (a, b) = (dir.join("a.yaml"), dir.join("b.yaml"));
    write(&a, &service("x", 80));
    write(&b, &service("x", 81));
    let mut live = ManifestDir::default();
    let mut held = Held::of(&live.rescan(dir).0);
    assert!(held.state()[0].contains("81"), "{:?}", held.state());
    std::fs::remove_file(&b).unwrap_or_else(|e| panic!("{e}"));
    let (events, _) = live
        .refresh(dir, &BTreeSet::from([b.clone()]))
        .unwrap_or_else(|| panic!("files only"));
    held.take(&events);
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(held.state()[0].contains("80"), "{:?}", held.state());
    // Again, with the earlier file broken meanwhile: nothing changes while the later
    // file wins, and `x` goes with it.
    write(&b, &service("x", 82));
    held.take(
        &live
            .refresh(dir, &BTreeSet::from([b.clone()]))
            .unwrap_or_default()
            .0,
    );
    write(&a, "kind: [unclosed");
    let (events, errors) = live
        .refresh(dir, &BTreeSet::from([a.clone()]))
        .unwrap_or_else(|| panic!("files only"));
    assert!(
        events.is_empty() && errors.len() == 1,
        "{events:?} {errors:?}"
    );
    std::fs::remove_file(&b).unwrap_or_else(|e| panic!("{e}"));
    let (events, _) = live
        .refresh(dir, &BTreeSet::from([b.clone()]))
        .unwrap_or_else(|| panic!("files only"));
    held.take(&events);
    assert!(held.state().is_empty(), "{events:?}");
    let fresh = Held::of(&ManifestDir::default().rescan(dir).0);
    assert_eq!(held.state(), fresh.state());
}

/// Past [`PARALLEL_FROM`] files a rescan reads on two threads: every file's objects
/// arrive, in the directory's order (the later file's copy of a key wins), a broken
/// file is reported by name, and a second rescan of the same files changes nothing.
#[test]
fn many_files_read_on_two_threads_read_as_on_one() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path();
    let n = PARALLEL_FROM * 2 + 1;
    for i in 0..n {
        // Every file also holds its own copy of `shared`: the last in order wins.
        let text = service(&format!("s{i:04}"), 80) + &service("shared", 1000 + i as u16);
        std::fs::write(dir.join(format!("f{i:04}.yaml")), text).unwrap_or_else(|e| panic!("{e}"));
    }
    std::fs::write(dir.join("f0100.yaml"), "kind: [unclosed").unwrap_or_else(|e| panic!("{e}"));
    let mut state = ManifestDir::default();
    let (events, errors) = state.rescan(dir);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].path.ends_with("f0100.yaml"), "{errors:?}");
    assert_eq!(
        events.len(),
        n,
        "one per object: {} services and `shared`",
        n - 1
    );
    let key = ObjectKey::new(Kind::Service, "default", "shared");
    let shared = Held::of(&events).0.get(&key).cloned().unwrap_or_default();
    assert!(shared.contains(&format!("{}", 1000 + n - 1)), "{shared}");
    let (events, errors) = state.rescan(dir);
    assert!(
        events.is_empty() && errors.is_empty(),
        "{events:?} {errors:?}"
    );
}
