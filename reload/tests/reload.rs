//! The reloader against real files and inotify: what makes it read the file,
//! and what each kind of update yields.

use std::io::Write;
use std::path::Path;
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use oooi_reload::{Outcome, Reloader, Settings, StartError, Watch};

/// A config of one line `value=N`.
fn load(text: &str) -> Result<u32, String> {
    let v = text
        .trim()
        .strip_prefix("value=")
        .ok_or_else(|| format!("`{}` does not start with value=", text.trim()))?;
    v.parse()
        .map_err(|_| format!("value: `{v}` is not a number"))
}

const SETTINGS: Settings = Settings {
    debounce: Duration::from_millis(100),
    max_write: Duration::from_secs(5),
};

fn start(path: &Path) -> (u32, Watch, Receiver<Outcome<u32>>) {
    let (first, r) = Reloader::start(path, SETTINGS, load).expect("start");
    let (tx, rx) = channel();
    let w = r.spawn(move |o| {
        let _ = tx.send(o);
    });
    (first, w, rx)
}

fn next(rx: &Receiver<Outcome<u32>>) -> Outcome<u32> {
    rx.recv_timeout(Duration::from_secs(5)).expect("an outcome")
}

fn quiet(rx: &Receiver<Outcome<u32>>) {
    if let Ok(o) = rx.recv_timeout(Duration::from_millis(600)) {
        panic!("unexpected outcome {o:?}");
    }
}

#[test]
fn reading_the_file_never_makes_the_watcher_read_it() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("config");
    std::fs::write(&path, "value=1").unwrap();
    let (first, w, rx) = start(&path);
    assert_eq!(first, 1);
    for _ in 0..50 {
        assert_eq!(std::fs::read(&path).unwrap(), b"value=1");
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(w.reads(), 0, "reads of the file fed back into the watcher");
    quiet(&rx);
    // A real change is still applied, with one read.
    std::fs::write(&path, "value=2").unwrap();
    assert_eq!(next(&rx), Outcome::Accepted(2));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(w.reads(), 1);
}

#[test]
fn a_change_beside_the_config_does_not_make_the_watcher_read_or_reapply() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("config.yaml");
    std::fs::write(&path, "value=1").unwrap();
    let (_, w, rx) = start(&path);
    std::fs::write(d.path().join("other"), "x").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        w.reads(),
        0,
        "a change of another file made the watcher read"
    );
    quiet(&rx);
    std::fs::write(&path, "value=3").unwrap();
    assert_eq!(next(&rx), Outcome::Accepted(3));
}

#[test]
fn a_half_written_in_place_write_is_not_rejected() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("config");
    std::fs::write(&path, "value=1").unwrap();
    let (_, w, rx) = start(&path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    f.write_all(b"val").unwrap();
    f.flush().unwrap();
    // Several debounce periods with the file half written and still open.
    std::thread::sleep(Duration::from_millis(500));
    f.write_all(b"ue=42\n").unwrap();
    drop(f);
    assert_eq!(next(&rx), Outcome::Accepted(42));
    quiet(&rx);
    assert_eq!(w.reads(), 1);
}

#[test]
fn a_burst_of_writes_is_read_once() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("config");
    std::fs::write(&path, "value=1").unwrap();
    let (_, w, rx) = start(&path);
    for i in 2..20 {
        std::fs::write(&path, format!("value={i}")).unwrap();
    }
    assert_eq!(next(&rx), Outcome::Accepted(19));
    quiet(&rx);
    assert_eq!(w.reads(), 1);
}

#[test]
fn an_invalid_file_is_rejected_once_and_a_valid_one_follows() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("config");
    std::fs::write(&path, "value=1").unwrap();
    let (_, _w, rx) = start(&path);
    std::fs::write(&path, "value=x").unwrap();
    assert_eq!(
        next(&rx),
        Outcome::Rejected("value: `x` is not a number".to_string())
    );
    // The same bytes again are not judged again.
    std::fs::write(&path, "value=x").unwrap();
    quiet(&rx);
    std::fs::write(&path, "value=5").unwrap();
    assert_eq!(next(&rx), Outcome::Accepted(5));
}

#[test]
fn a_file_renamed_into_place_is_loaded() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("config");
    std::fs::write(&path, "value=1").unwrap();
    let (_, _w, rx) = start(&path);
    let tmp = d.path().join(".config.tmp");
    std::fs::write(&tmp, "value=7").unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    assert_eq!(next(&rx), Outcome::Accepted(7));
}

/// The layout kubelet gives a ConfigMap mount, and its update: a new
/// timestamped directory, then a rename of `..data_tmp` over `..data`.
#[test]
fn a_configmap_data_swap_is_loaded() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let v1 = root.join("..2026_12_04_10_00_00.1");
    std::fs::create_dir(&v1).unwrap();
    std::fs::write(v1.join("config.yaml"), "value=1").unwrap();
    std::os::unix::fs::symlink("..2026_12_04_10_00_00.1", root.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/config.yaml", root.join("config.yaml")).unwrap();
    let path = root.join("config.yaml");
    let (first, w, rx) = start(&path);
    assert_eq!(first, 1);
    let v2 = root.join("..2026_12_04_10_05_00.2");
    std::fs::create_dir(&v2).unwrap();
    std::fs::write(v2.join("config.yaml"), "value=2").unwrap();
    std::os::unix::fs::symlink("..2026_12_04_10_05_00.2", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    std::fs::remove_dir_all(&v1).unwrap();
    assert_eq!(next(&rx), Outcome::Accepted(2));
    quiet(&rx);
    assert_eq!(w.reads(), 1);
}

#[test]
fn start_names_the_file_and_the_reason() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("config");
    std::fs::write(&path, "nope").unwrap();
    let err = match Reloader::start(&path, SETTINGS, load) {
        Err(e) => e,
        Ok(_) => panic!("an invalid file started"),
    };
    assert!(matches!(err, StartError::Invalid { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("`nope` does not start with value="), "{text}");
    let missing = d.path().join("missing");
    let err = Reloader::start(&missing, SETTINGS, load)
        .err()
        .expect("missing file");
    assert!(matches!(err, StartError::Read { .. }), "{err:?}");
}
