//! The user's kubeconfig, edited as kind edits it: `jobset up` merges one cluster, user and
//! context (all named after the cluster) into the file kubectl would write to, `jobset down`
//! removes them. Everything else in the file is kept as it was, unknown fields included.
//!
//! The document is our own minimal type rather than `kube::config::Kubeconfig`: kube's type
//! keeps unknown fields, `preferences` and `extensions`, but writing it back adds fields to other
//! entries (`provideClusterInfo: false` to every exec user, `config: {}` to auth providers,
//! `user: null` to contexts without one) and `read_from` rewrites relative paths to absolute
//! ones. Here only `name`s and `current-context` are interpreted.
//!
//! Writers take client-go's lock (`FILE.lock`, created exclusively, removed when done; kind and
//! kubectl take the same one), so that `jobset up`, kubectl and kind editing the file at once do
//! not lose each other's changes, and replace the file by renaming a temporary file written next
//! to it, so that a reader never sees half a file.

use std::ffi::OsStr;
use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// How long a writer waits for another to release the kubeconfig lock.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a waiting writer tries the lock again.
const LOCK_RETRY: Duration = Duration::from_millis(10);

/// A kubeconfig file (`apiVersion: v1`, `kind: Config`). Fields other than these, and every
/// field of the entries other than `name`, are kept as read.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kubeconfig {
    #[serde(rename = "apiVersion", default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub clusters: Vec<Named>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub contexts: Vec<Named>,
    #[serde(rename = "current-context", default, skip_serializing_if = "Option::is_none")]
    pub current_context: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub users: Vec<Named>,
    /// `preferences`, `extensions` and anything else.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// An entry of `clusters`, `users` or `contexts`: its name and the rest as read.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Named {
    pub name: String,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

fn null_as_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Named>, D::Error> {
    Ok(Option::<Vec<Named>>::deserialize(d)?.unwrap_or_default())
}

impl Kubeconfig {
    /// Parses a kubeconfig; an empty file (or one of comments only) is an empty kubeconfig, as
    /// for kubectl.
    pub fn parse(text: &str) -> Result<Kubeconfig, String> {
        match serde_saphyr::from_str::<Option<Kubeconfig>>(text) {
            Ok(config) => Ok(config.unwrap_or_default()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The YAML text.
    pub fn to_yaml(&self) -> String {
        let mut options = serde_saphyr::SerializerOptions::default();
        // Keep long base64 values plain one-line scalars, as kubectl writes them.
        options.prefer_block_scalars = false;
        serde_saphyr::to_string_with_options(self, options).expect("serializing JSON-like values to YAML cannot fail")
    }
}

/// One cluster's entries, all named after it, as `jobset up` merges them.
#[derive(Debug, Clone, PartialEq)]
pub struct Entries {
    pub cluster: Named,
    pub user: Named,
    pub context: Named,
}

impl Entries {
    /// The current context of a standalone kubeconfig (the one `jobset up` writes) with its
    /// cluster and user, all three renamed `name` (the context referring to the renamed ones).
    pub fn from_standalone(config: &Kubeconfig, name: &str) -> Result<Entries, String> {
        let context = match &config.current_context {
            Some(current) => config.contexts.iter().find(|c| &c.name == current),
            None => config.contexts.first(),
        }
        .ok_or("has no current context")?;
        let refers = |field: &str| {
            context.rest.get("context").and_then(|c| c.get(field)).and_then(Value::as_str).map(str::to_string)
        };
        let find = |list: &[Named], field: &str| {
            let wanted = refers(field).ok_or_else(|| format!("context {:?} names no {field}", context.name))?;
            list.iter()
                .find(|n| n.name == wanted)
                .map(|n| Named { name: name.to_string(), rest: n.rest.clone() })
                .ok_or_else(|| format!("context {:?} names {field} {wanted:?}, which it does not define", context.name))
        };
        let cluster = find(&config.clusters, "cluster")?;
        let user = find(&config.users, "user")?;
        let mut context = Named { name: name.to_string(), rest: context.rest.clone() };
        if let Some(Value::Object(c)) = context.rest.get_mut("context") {
            c.insert("cluster".into(), Value::String(name.to_string()));
            c.insert("user".into(), Value::String(name.to_string()));
        }
        Ok(Entries { cluster, user, context })
    }
}

/// Replaces the entries named like `entry` (or appends it when there is none).
fn upsert(list: &mut Vec<Named>, entry: &Named) {
    let mut found = false;
    for existing in list.iter_mut().filter(|e| e.name == entry.name) {
        *existing = entry.clone();
        found = true;
    }
    if !found {
        list.push(entry.clone());
    }
}

/// Merges `entries` into `config`, as kind does: entries of the same names are replaced, others
/// kept; `current-context` becomes ours when `switch`. A file without `apiVersion`/`kind` gets
/// `v1`/`Config`, which some clients require.
pub fn merge(config: &mut Kubeconfig, entries: &Entries, switch: bool) {
    upsert(&mut config.clusters, &entries.cluster);
    upsert(&mut config.users, &entries.user);
    upsert(&mut config.contexts, &entries.context);
    if switch {
        config.current_context = Some(entries.context.name.clone());
    }
    config.api_version.get_or_insert_with(|| "v1".to_string());
    config.kind.get_or_insert_with(|| "Config".to_string());
}

/// Removes the cluster, user and context named `name`, as kind does: `current-context` is unset
/// (left empty, as kubectl writes it) when it was `name`. Whether anything changed.
pub fn remove(config: &mut Kubeconfig, name: &str) -> bool {
    let before = (config.clusters.len(), config.users.len(), config.contexts.len());
    config.clusters.retain(|e| e.name != name);
    config.users.retain(|e| e.name != name);
    config.contexts.retain(|e| e.name != name);
    let mut changed = before != (config.clusters.len(), config.users.len(), config.contexts.len());
    if config.current_context.as_deref() == Some(name) {
        config.current_context = Some(String::new());
        changed = true;
    }
    changed
}

/// The kubeconfig files kubectl reads, as kind finds them: `$KUBECONFIG`'s list (empty and
/// repeated entries dropped), else `HOME/.kube/config`. Empty when neither is set.
pub fn paths(kubeconfig_env: Option<&OsStr>, home: Option<&OsStr>) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = Vec::new();
    for p in kubeconfig_env.map(std::env::split_paths).into_iter().flatten() {
        if !p.as_os_str().is_empty() && !paths.contains(&p) {
            paths.push(p);
        }
    }
    if paths.is_empty()
        && let Some(home) = home.filter(|h| !h.is_empty())
    {
        paths.push(Path::new(home).join(".kube").join("config"));
    }
    paths
}

/// The file a new entry goes to, as kubectl and kind choose it: the first of `paths` that
/// exists, else the last.
pub fn path_for_merge(paths: &[PathBuf], exists: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    paths.iter().find(|p| exists(p)).or(paths.last()).cloned()
}

/// [`paths`] of this process's environment.
pub fn user_paths() -> anyhow::Result<Vec<PathBuf>> {
    let paths = paths(std::env::var_os("KUBECONFIG").as_deref(), std::env::var_os("HOME").as_deref());
    if paths.is_empty() {
        bail!("cannot find the kubeconfig: neither KUBECONFIG nor HOME is set (or pass --kubeconfig)");
    }
    Ok(paths)
}

/// [`path_for_merge`] of this process's environment.
pub fn user_path_for_merge() -> anyhow::Result<PathBuf> {
    let paths = user_paths()?;
    Ok(path_for_merge(&paths, |p| p.is_file()).expect("user_paths is never empty"))
}

/// Holds client-go's lock on a kubeconfig (`FILE.lock`) until dropped.
struct Lock(PathBuf);

impl Lock {
    fn acquire(path: &Path, timeout: Duration) -> anyhow::Result<Lock> {
        let mut name = path.as_os_str().to_owned();
        name.push(".lock");
        let lock = PathBuf::from(name);
        let deadline = Instant::now() + timeout;
        loop {
            match fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&lock) {
                Ok(_) => return Ok(Lock(lock)),
                Err(e) if e.kind() == ErrorKind::AlreadyExists && Instant::now() < deadline => {
                    std::thread::sleep(LOCK_RETRY)
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => bail!(
                    "{} is locked by another program editing it (the lock {} is {timeout:?} old at least; \
                     remove it if no such program runs)",
                    path.display(),
                    lock.display()
                ),
                Err(e) => return Err(e).with_context(|| format!("creating the lock {}", lock.display())),
            }
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// Edits the kubeconfig at `path` under its lock: reads it (missing: empty), lets `change`
/// edit it, and when `change` says it changed anything, replaces the file atomically with
/// mode 0600 (its directory created with mode 0700 when missing). A file that does not parse
/// is left alone: the error names it. A symbolic link is followed, so the file it points to
/// is edited. Whether the file changed.
pub fn edit(path: &Path, lock_timeout: Duration, change: impl FnOnce(&mut Kubeconfig) -> bool) -> anyhow::Result<bool> {
    let path = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    let _lock = Lock::acquire(&path, lock_timeout)?;
    let mut config = match fs::read_to_string(&path) {
        Ok(text) => Kubeconfig::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
        Err(e) if e.kind() == ErrorKind::NotFound => Kubeconfig::default(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    if !change(&mut config) {
        return Ok(false);
    }
    jobset_apiserver::tls::write_kubeconfig(&path, &config.to_yaml()).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(true)
}

/// Merges the current context of the standalone kubeconfig at `standalone` into the user's
/// kubeconfig as `name` ([`merge`]). The file merged into.
pub fn merge_standalone(standalone: &Path, name: &str, switch: bool) -> anyhow::Result<PathBuf> {
    let text = fs::read_to_string(standalone).with_context(|| format!("reading {}", standalone.display()))?;
    let ours = Kubeconfig::parse(&text)
        .and_then(|c| Entries::from_standalone(&c, name))
        .map_err(|e| anyhow::anyhow!("{}: {e}", standalone.display()))?;
    let path = user_path_for_merge()?;
    edit(&path, LOCK_TIMEOUT, |config| {
        merge(config, &ours, switch);
        true
    })?;
    Ok(path)
}

/// Removes `name`'s entries from every kubeconfig file of the user's that exists ([`remove`]).
/// The files changed.
pub fn remove_from_user(name: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut changed = Vec::new();
    for path in user_paths()?.into_iter().filter(|p| p.is_file()) {
        if edit(&path, LOCK_TIMEOUT, |config| remove(config, name))? {
            changed.push(path);
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn config(yaml: &str) -> Kubeconfig {
        Kubeconfig::parse(yaml).unwrap()
    }

    const STANDALONE: &str = r#"apiVersion: v1
kind: Config
clusters:
- name: jobset
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: Q0E=
users:
- name: jobset
  user:
    token: secret
contexts:
- name: jobset
  context:
    cluster: jobset
    user: jobset
    namespace: default
current-context: jobset
"#;

    /// Another tool's file: entries and fields this module does not know about.
    const OTHER: &str = r#"apiVersion: v1
kind: Config
preferences:
  colors: true
  extensions:
  - name: x
    extension: {a: 1}
clusters:
- name: prod
  cluster:
    server: https://prod:443
    proxy-url: http://proxy:3128
    extensions:
    - name: y
      extension: {b: [1, 2]}
users:
- name: prod
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./get-token
      interactiveMode: Never
contexts:
- name: prod
  context:
    cluster: prod
    user: prod
    future-field: 7
current-context: prod
some-new-top-level-field: kept
"#;

    fn entries(name: &str) -> Entries {
        Entries::from_standalone(&config(STANDALONE), name).unwrap()
    }

    fn names(list: &[Named]) -> Vec<&str> {
        list.iter().map(|n| n.name.as_str()).collect()
    }

    #[test]
    fn entries_are_renamed_and_refer_to_each_other() {
        let e = entries("jobset-dev");
        assert_eq!(
            (e.cluster.name.as_str(), e.user.name.as_str(), e.context.name.as_str()),
            ("jobset-dev", "jobset-dev", "jobset-dev")
        );
        assert_eq!(
            e.context.rest["context"],
            serde_json::json!({"cluster": "jobset-dev", "user": "jobset-dev", "namespace": "default"})
        );
        assert_eq!(e.cluster.rest["cluster"]["server"], "https://127.0.0.1:6443");
        assert_eq!(e.user.rest["user"]["token"], "secret");
    }

    #[test]
    fn entries_of_a_standalone_file_without_its_cluster_is_an_error() {
        let broken = STANDALONE.replace("- name: jobset\n  cluster:", "- name: other\n  cluster:");
        let err = Entries::from_standalone(&config(&broken), "x").unwrap_err();
        assert_eq!(err, r#"context "jobset" names cluster "jobset", which it does not define"#);
    }

    #[test]
    fn merge_cases() {
        struct Case {
            name: &'static str,
            existing: &'static str,
            switch: bool,
            clusters: &'static [&'static str],
            current: Option<&'static str>,
        }
        let stale = STANDALONE.replace("6443", "1111").replace("secret", "old");
        let stale: &'static str = Box::leak(stale.into_boxed_str());
        let cases = [
            Case {
                name: "into an empty file",
                existing: "",
                switch: true,
                clusters: &["jobset"],
                current: Some("jobset"),
            },
            Case {
                name: "into another tool's file",
                existing: OTHER,
                switch: true,
                clusters: &["prod", "jobset"],
                current: Some("jobset"),
            },
            Case {
                name: "no switch keeps current-context",
                existing: OTHER,
                switch: false,
                clusters: &["prod", "jobset"],
                current: Some("prod"),
            },
            Case {
                name: "replaces our stale entry in place",
                existing: stale,
                switch: true,
                clusters: &["jobset"],
                current: Some("jobset"),
            },
        ];
        for case in cases {
            let mut c = config(case.existing);
            merge(&mut c, &entries("jobset"), case.switch);
            assert_eq!(names(&c.clusters), case.clusters, "{}", case.name);
            assert_eq!(names(&c.users), case.clusters, "{}", case.name);
            assert_eq!(names(&c.contexts), case.clusters, "{}", case.name);
            assert_eq!(c.current_context.as_deref(), case.current, "{}", case.name);
            assert_eq!((c.api_version.as_deref(), c.kind.as_deref()), (Some("v1"), Some("Config")), "{}", case.name);
            let ours = c.clusters.iter().find(|n| n.name == "jobset").unwrap();
            assert_eq!(ours.rest["cluster"]["server"], "https://127.0.0.1:6443", "{}", case.name);
            let user = c.users.iter().find(|n| n.name == "jobset").unwrap();
            assert_eq!(user.rest["user"]["token"], "secret", "{}", case.name);
        }
    }

    #[test]
    fn merge_then_remove_keeps_every_other_field_as_read() {
        let original = config(OTHER);
        let mut c = original.clone();
        merge(&mut c, &entries("jobset"), false);
        // Through the YAML text, as the file is written and read back.
        let mut c = config(&c.to_yaml());
        assert!(remove(&mut c, "jobset"));
        assert_eq!(c, original);
        assert_eq!(c.other["some-new-top-level-field"], "kept");
        assert_eq!(c.other["preferences"]["extensions"][0]["extension"]["a"], 1);
        assert_eq!(
            c.users[0].rest["user"]["exec"],
            serde_json::json!({
                "apiVersion": "client.authentication.k8s.io/v1", "command": "./get-token", "interactiveMode": "Never"
            })
        );
        assert_eq!(c.contexts[0].rest["context"]["future-field"], 7);
    }

    #[test]
    fn remove_cases() {
        struct Case {
            name: &'static str,
            current: &'static str,
            removed: &'static str,
            changed: bool,
            left: &'static [&'static str],
            current_after: &'static str,
        }
        let cases = [
            Case {
                name: "ours, current",
                current: "jobset",
                removed: "jobset",
                changed: true,
                left: &["prod"],
                current_after: "",
            },
            Case {
                name: "ours, another current",
                current: "prod",
                removed: "jobset",
                changed: true,
                left: &["prod"],
                current_after: "prod",
            },
            Case {
                name: "absent",
                current: "prod",
                removed: "jobset-x",
                changed: false,
                left: &["prod", "jobset"],
                current_after: "prod",
            },
        ];
        for case in cases {
            let mut c = config(OTHER);
            merge(&mut c, &entries("jobset"), false);
            c.current_context = Some(case.current.to_string());
            assert_eq!(remove(&mut c, case.removed), case.changed, "{}", case.name);
            assert_eq!(names(&c.clusters), case.left, "{}", case.name);
            assert_eq!(names(&c.users), case.left, "{}", case.name);
            assert_eq!(names(&c.contexts), case.left, "{}", case.name);
            assert_eq!(c.current_context.as_deref(), Some(case.current_after), "{}", case.name);
        }
    }

    #[test]
    fn paths_cases() {
        let cases: [(Option<&str>, Option<&str>, &[&str]); 6] = [
            (None, Some("/home/u"), &["/home/u/.kube/config"]),
            (Some(""), Some("/home/u"), &["/home/u/.kube/config"]),
            (Some("/a:/b"), Some("/home/u"), &["/a", "/b"]),
            (Some("/a::/b:/a"), None, &["/a", "/b"]),
            (None, None, &[]),
            (None, Some(""), &[]),
        ];
        for (env, home, want) in cases {
            let got = paths(env.map(OsStr::new), home.map(OsStr::new));
            let want: Vec<PathBuf> = want.iter().map(PathBuf::from).collect();
            assert_eq!(got, want, "KUBECONFIG={env:?} HOME={home:?}");
        }
    }

    #[test]
    fn merge_goes_to_the_first_existing_file_else_the_last() {
        let list = [PathBuf::from("/a"), PathBuf::from("/b"), PathBuf::from("/c")];
        assert_eq!(path_for_merge(&list, |p| p == Path::new("/b") || p == Path::new("/c")), Some("/b".into()));
        assert_eq!(path_for_merge(&list, |_| false), Some("/c".into()));
        assert_eq!(path_for_merge(&[], |_| true), None);
    }

    #[test]
    fn edit_creates_a_private_directory_and_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("home/.kube/config");
        assert!(
            edit(&path, LOCK_TIMEOUT, |c| {
                merge(c, &entries("jobset"), true);
                true
            })
            .unwrap()
        );
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(config(&fs::read_to_string(&path).unwrap()).current_context.as_deref(), Some("jobset"));
        // The lock is gone and no temporary file is left.
        let left: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["config"]);
    }

    #[test]
    fn edit_leaves_a_file_that_does_not_parse_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("config");
        fs::write(&path, "clusters: [unclosed\n").unwrap();
        let err = edit(&path, LOCK_TIMEOUT, |_| true).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}: ", path.display())), "{err}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "clusters: [unclosed\n");
    }

    #[test]
    fn edit_waits_for_the_lock_then_names_it() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("config");
        fs::write(tmp.path().join("config.lock"), "").unwrap();
        let err = edit(&path, Duration::from_millis(50), |_| true).unwrap_err().to_string();
        assert!(err.contains("config.lock"), "{err}");
        assert!(!path.exists());
    }

    #[test]
    fn concurrent_merges_all_end_up_in_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("config");
        fs::write(&path, OTHER).unwrap();
        let ours: Vec<String> = (0..16).map(|i| format!("jobset-{i}")).collect();
        std::thread::scope(|s| {
            for name in &ours {
                let path = &path;
                s.spawn(move || {
                    edit(path, Duration::from_secs(30), |c| {
                        merge(c, &entries(name), true);
                        true
                    })
                    .unwrap()
                });
            }
        });
        let c = config(&fs::read_to_string(&path).unwrap());
        let mut got: Vec<&str> = names(&c.contexts);
        got.sort();
        let mut want: Vec<&str> = ours.iter().map(String::as_str).chain(["prod"]).collect();
        want.sort();
        assert_eq!(got, want);
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
