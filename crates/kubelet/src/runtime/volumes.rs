//! Pod volumes for the process runtime: where each volume's data lives on the host, and what a
//! container's `volumeMounts` bind where. Planning is pure (tested without processes);
//! [`prepare`] creates the directories and writes the files.
//!
//! | volume                  | where its data lives                             | lifetime                  |
//! |-------------------------|--------------------------------------------------|---------------------------|
//! | `emptyDir`              | `<sandbox>/volumes/<name>` (mode 0777)           | the pod                   |
//! | `configMap`,            | `<sandbox>/volumes/<name>` (files written from   | the pod; mounted read-only|
//! | `downwardAPI`           | the pod's [`PodResources`])                      |                           |
//! | `secret`, `projected`, the service account token | a tmpfs of the container's own mount namespace ([`Prepare::Memory`]), never the host's disk | the container run; mounted read-only |
//! | `hostPath`              | the path itself (created for `*OrCreate` types)  | the host                  |
//! | `persistentVolumeClaim` | `<state_dir>/pvc/<namespace>/<claimName>`        | the state directory       |
//!
//! With the pod's `fsGroup`, the volumes whose content the runtime makes (emptyDir, configMap,
//! secret, projected, downwardAPI) belong to that group, as kubelet's `SetVolumeOwnership` does:
//! directories get the setgid bit, and group read (and write, for emptyDir) is added
//! ([`owned_mode`]).
//!
//! Other volume types fail the start of a container that mounts them.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, KeyToPath, Pod, Volume};

use super::PodResources;
use super::process::expand;

/// Where a pod's volumes live.
#[derive(Debug, Clone, Copy)]
pub struct Dirs<'a> {
    /// The pod's sandbox directory (`<state_dir>/pods/<uid>`).
    pub sandbox: &'a Path,
    /// The runtime's state directory (for claims).
    pub state_dir: &'a Path,
}

/// What [`prepare`] does for a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepare {
    /// Creates the directory, writable by every user (emptyDir).
    EmptyDir,
    /// Creates the directory (persistentVolumeClaim).
    Dir,
    /// Creates the directory and (re)writes these files in it (configMap, downwardAPI).
    Files(Vec<VolumeFile>),
    /// Nothing on the host: the container's child writes these files on a tmpfs of its own
    /// mount namespace (secret, projected; see [`super::sandbox`]). The volume's `source` is
    /// only a name for messages.
    Memory(Vec<VolumeFile>),
    /// Checks (and for `DirectoryOrCreate`/`FileOrCreate` creates) a hostPath by its `type`.
    HostPath(String),
}

/// One file of a configMap, secret, projected or downwardAPI volume.
#[derive(Clone, PartialEq, Eq)]
pub struct VolumeFile {
    /// Relative to the volume's directory.
    pub path: String,
    pub data: Vec<u8>,
    pub mode: u32,
}

/// Without the data: a secret's bytes never reach a log through a `{:?}`.
impl std::fmt::Debug for VolumeFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeFile")
            .field("path", &self.path)
            .field("bytes", &self.data.len())
            .field("mode", &format_args!("{:o}", self.mode))
            .finish()
    }
}

/// A volume of the pod, resolved to a host path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumePlan {
    pub name: String,
    pub source: PathBuf,
    pub prepare: Prepare,
    /// Mounted read-only whatever the volumeMount says (configMap, secret, read-only claims).
    pub read_only: bool,
}

/// One bind mount of a container: `source` (a host path) at `target` (the container's path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub volume: String,
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
    /// `subPath` (or the expanded `subPathExpr`): the source is this sub-path of the volume,
    /// created when missing.
    pub sub_path: Option<PathBuf>,
}

const DEFAULT_MODE: u32 = 0o644;

/// The mode of an emptyDir's directory (kubelet's): every user may write.
pub const EMPTY_DIR_MODE: u32 = 0o777;

/// The mode a volume's file or directory gets with the pod's `fsGroup` (kubelet's
/// `SetVolumeOwnership`): group read (and write unless the volume is read-only) added, and for
/// directories group search and the setgid bit, so that new files inherit the group. Without
/// `fsGroup` the mode is unchanged.
pub fn owned_mode(mode: u32, fs_group: Option<u32>, dir: bool, read_only: bool) -> u32 {
    if fs_group.is_none() {
        return mode;
    }
    let mut add = if read_only { 0o440 } else { 0o660 };
    if dir {
        add |= 0o110 | 0o2000;
    }
    mode | add
}

fn mode(m: Option<i32>, default: u32) -> u32 {
    m.map(|m| m as u32 & 0o7777).unwrap_or(default)
}

/// A relative path with no `..`: item paths and subPaths must stay inside their volume.
fn check_relative(path: &str, what: &str) -> Result<(), String> {
    let p = Path::new(path);
    if path.is_empty() || p.is_absolute() || p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(format!("{what} {path:?} must be a relative path without '..'"));
    }
    Ok(())
}

/// A configMap or secret volume source, as kubelet's `configmap` and `secret` volume plugins see
/// it: which object, which keys, whether it may be missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    ConfigMap,
    Secret,
}

impl Source {
    /// kubelet's error for a missing object (its ConfigMap and Secret managers' `NotFound`, group
    /// resource `configmap` / `secret`).
    fn not_found(self, name: &str) -> String {
        match self {
            Source::ConfigMap => format!("configmap {name:?} not found"),
            Source::Secret => format!("secret {name:?} not found"),
        }
    }

    /// kubelet's error for an `items[].key` the object lacks (`MakePayload`).
    fn missing_key(self, key: &str) -> String {
        match self {
            Source::ConfigMap => format!("configmap references non-existent config key: {key}"),
            Source::Secret => format!("references non-existent secret key: {key}"),
        }
    }
}

/// Why a configMap or secret source cannot be set up (kubelet's `SetUpAt`): the object is missing,
/// or an `items[].key` is, unless the source is `optional` (then the volume is empty, or the
/// missing items are left out). Pure.
fn source_error(
    kind: Source,
    name: &str,
    data: Option<&BTreeMap<String, Vec<u8>>>,
    items: Option<&Vec<KeyToPath>>,
    optional: bool,
) -> Option<String> {
    if optional {
        return None;
    }
    let Some(data) = data else { return Some(kind.not_found(name)) };
    let missing = items.into_iter().flatten().find(|i| !data.contains_key(&i.key));
    missing.map(|i| kind.missing_key(&i.key))
}

/// The files of a configMap or secret source: every key, or the `items` mapping.
fn key_files(
    kind: Source,
    name: &str,
    data: Option<&BTreeMap<String, Vec<u8>>>,
    items: Option<&Vec<KeyToPath>>,
    optional: bool,
    default_mode: u32,
) -> Result<Vec<VolumeFile>, String> {
    if let Some(e) = source_error(kind, name, data, items, optional) {
        return Err(e);
    }
    let Some(data) = data else { return Ok(Vec::new()) };
    match items.filter(|i| !i.is_empty()) {
        None => {
            Ok(data.iter().map(|(k, v)| VolumeFile { path: k.clone(), data: v.clone(), mode: default_mode }).collect())
        }
        Some(items) => {
            let mut out = Vec::new();
            for item in items {
                check_relative(&item.path, "item path")?;
                // A key missing here is one of an optional source's (see `source_error`): skipped.
                if let Some(v) = data.get(&item.key) {
                    out.push(VolumeFile {
                        path: item.path.clone(),
                        data: v.clone(),
                        mode: mode(item.mode, default_mode),
                    });
                }
            }
            Ok(out)
        }
    }
}

/// kubelet's Warning event reason when a volume cannot be mounted (`FailedMountVolume`).
pub const FAILED_MOUNT: &str = "FailedMount";

/// A volume of the pod that cannot be set up for want of the ConfigMaps or Secrets it projects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountError {
    /// The volume's name.
    pub volume: String,
    /// kubelet's `SetUpAt` error.
    pub message: String,
}

impl MountError {
    /// The message of kubelet's [`FAILED_MOUNT`] event (its operation generator's
    /// `GenerateError("MountVolume.SetUp failed", err)`).
    pub fn event_message(&self) -> String {
        format!("MountVolume.SetUp failed for volume {:?} : {}", self.volume, self.message)
    }
}

/// Why the volumes of `pod` that some container mounts cannot be set up from `res`, one error per
/// volume, in the pod's order: kubelet's volume manager mounts every such volume before it starts
/// any container, and a configMap, secret or projected volume whose (non-optional) object or
/// listed key is missing fails (a projected volume with several such sources reports them all,
/// as kubelet's aggregate error). Empty: every source is there. Pure.
pub fn mount_errors(pod: &Pod, res: &PodResources) -> Vec<MountError> {
    let Some(spec) = &pod.spec else { return Vec::new() };
    let containers = spec.init_containers.iter().flatten().chain(&spec.containers);
    let used: std::collections::BTreeSet<&str> = containers
        .flat_map(|c| {
            let mounts = c.volume_mounts.iter().flatten().map(|m| m.name.as_str());
            mounts.chain(c.volume_devices.iter().flatten().map(|d| d.name.as_str()))
        })
        .collect();
    let mut out = Vec::new();
    for vol in spec.volumes.iter().flatten().filter(|v| used.contains(v.name.as_str())) {
        let mut errors: Vec<String> = Vec::new();
        if let Some(cm) = &vol.config_map {
            let data = res.config_maps.get(&cm.name);
            errors.extend(source_error(
                Source::ConfigMap,
                &cm.name,
                data,
                cm.items.as_ref(),
                cm.optional == Some(true),
            ));
        }
        if let Some(s) = &vol.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let data = res.secrets.get(&name);
            errors.extend(source_error(Source::Secret, &name, data, s.items.as_ref(), s.optional == Some(true)));
        }
        for src in vol.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(cm) = &src.config_map {
                let (data, optional) = (res.config_maps.get(&cm.name), cm.optional == Some(true));
                errors.extend(source_error(Source::ConfigMap, &cm.name, data, cm.items.as_ref(), optional));
            }
            if let Some(s) = &src.secret {
                let (data, optional) = (res.secrets.get(&s.name), s.optional == Some(true));
                errors.extend(source_error(Source::Secret, &s.name, data, s.items.as_ref(), optional));
            }
        }
        // utilerrors.NewAggregate: one error as is, several as `[a, b]`, duplicates once.
        let mut seen = std::collections::BTreeSet::new();
        errors.retain(|e| seen.insert(e.clone()));
        let message = match errors.len() {
            0 => continue,
            1 => errors.remove(0),
            _ => format!("[{}]", errors.join(", ")),
        };
        out.push(MountError { volume: vol.name.clone(), message });
    }
    out
}

/// Resolves one volume of the pod. `field` resolves a downward API `fieldRef` path.
pub fn plan_volume(
    pod: &Pod,
    vol: &Volume,
    res: &PodResources,
    dirs: Dirs<'_>,
    field: &dyn Fn(&str) -> Result<String, String>,
) -> Result<VolumePlan, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let own = dirs.sandbox.join("volumes").join(&vol.name);
    let plan = |source: PathBuf, prepare: Prepare, read_only: bool| VolumePlan {
        name: vol.name.clone(),
        source,
        prepare,
        read_only,
    };
    if vol.empty_dir.is_some() {
        return Ok(plan(own, Prepare::EmptyDir, false));
    }
    if let Some(cm) = &vol.config_map {
        let files = key_files(
            Source::ConfigMap,
            &cm.name,
            res.config_maps.get(&cm.name),
            cm.items.as_ref(),
            cm.optional == Some(true),
            mode(cm.default_mode, DEFAULT_MODE),
        )?;
        return Ok(plan(own, Prepare::Files(files), true));
    }
    if let Some(s) = &vol.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let files = key_files(
            Source::Secret,
            &name,
            res.secrets.get(&name),
            s.items.as_ref(),
            s.optional == Some(true),
            mode(s.default_mode, DEFAULT_MODE),
        )?;
        return Ok(plan(own, Prepare::Memory(files), true));
    }
    if let Some(p) = &vol.projected {
        let default_mode = mode(p.default_mode, DEFAULT_MODE);
        let mut files = Vec::new();
        for src in p.sources.iter().flatten() {
            if let Some(cm) = &src.config_map {
                let data = res.config_maps.get(&cm.name);
                let optional = cm.optional == Some(true);
                files.extend(key_files(Source::ConfigMap, &cm.name, data, cm.items.as_ref(), optional, default_mode)?);
            }
            if let Some(s) = &src.secret {
                let data = res.secrets.get(&s.name);
                let optional = s.optional == Some(true);
                files.extend(key_files(Source::Secret, &s.name, data, s.items.as_ref(), optional, default_mode)?);
            }
            if let Some(d) = &src.downward_api {
                files.extend(downward_files(d.items.iter().flatten(), default_mode, field)?);
            }
        }
        // As kubelet, on memory: a projected volume carries tokens and secrets.
        return Ok(plan(own, Prepare::Memory(files), true));
    }
    if let Some(d) = &vol.downward_api {
        let files = downward_files(d.items.iter().flatten(), mode(d.default_mode, DEFAULT_MODE), field)?;
        return Ok(plan(own, Prepare::Files(files), true));
    }
    if let Some(h) = &vol.host_path {
        if !Path::new(&h.path).is_absolute() {
            return Err(format!("hostPath {:?} must be absolute", h.path));
        }
        return Ok(plan(PathBuf::from(&h.path), Prepare::HostPath(h.type_.clone().unwrap_or_default()), false));
    }
    if let Some(c) = &vol.persistent_volume_claim {
        check_relative(&c.claim_name, "claimName")?;
        let dir = dirs.state_dir.join("pvc").join(ns).join(&c.claim_name);
        return Ok(plan(dir, Prepare::Dir, c.read_only == Some(true)));
    }
    Err("unsupported volume type in the process runtime (supported: emptyDir, configMap, secret, projected, \
         downwardAPI, hostPath, persistentVolumeClaim)"
        .into())
}

fn downward_files<'a>(
    items: impl Iterator<Item = &'a k8s_openapi::api::core::v1::DownwardAPIVolumeFile>,
    default_mode: u32,
    field: &dyn Fn(&str) -> Result<String, String>,
) -> Result<Vec<VolumeFile>, String> {
    let mut out = Vec::new();
    for item in items {
        check_relative(&item.path, "item path")?;
        let Some(f) = &item.field_ref else {
            return Err(format!("downwardAPI item {:?}: only fieldRef is supported", item.path));
        };
        let value = field(&f.field_path)?;
        out.push(VolumeFile { path: item.path.clone(), data: value.into_bytes(), mode: mode(item.mode, default_mode) });
    }
    Ok(out)
}

/// The volumes `container` mounts and its bind mounts, in mount order (shallow targets first).
/// `env` expands `subPathExpr`.
pub fn plan_mounts(
    pod: &Pod,
    container: &Container,
    res: &PodResources,
    dirs: Dirs<'_>,
    env: &BTreeMap<String, String>,
    field: &dyn Fn(&str) -> Result<String, String>,
) -> Result<(Vec<VolumePlan>, Vec<Mount>), String> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    let mut planned: Vec<VolumePlan> = Vec::new();
    let mut mounts = Vec::new();
    for vm in container.volume_mounts.iter().flatten() {
        let target = PathBuf::from(&vm.mount_path);
        if !target.is_absolute() {
            return Err(format!("volumeMount {:?}: mountPath {:?} must be absolute", vm.name, vm.mount_path));
        }
        let vol = match planned.iter().find(|v| v.name == vm.name) {
            Some(v) => v.clone(),
            None => {
                let Some(spec) = volumes.and_then(|v| v.iter().find(|v| v.name == vm.name)) else {
                    return Err(format!("volumeMount {:?}: the pod has no volume {:?}", vm.name, vm.name));
                };
                let v = plan_volume(pod, spec, res, dirs, field).map_err(|e| format!("volume {:?}: {e}", vm.name))?;
                planned.push(v.clone());
                v
            }
        };
        let sub = match (vm.sub_path.as_deref().filter(|s| !s.is_empty()), vm.sub_path_expr.as_deref()) {
            (Some(s), _) => Some(s.to_string()),
            (None, Some(e)) if !e.is_empty() => Some(expand(e, env)),
            _ => None,
        };
        if let Some(s) = &sub {
            check_relative(s, "subPath").map_err(|e| format!("volumeMount {:?}: {e}", vm.name))?;
        }
        mounts.push(Mount {
            volume: vm.name.clone(),
            source: sub.as_ref().map_or_else(|| vol.source.clone(), |s| vol.source.join(s)),
            target,
            read_only: vol.read_only || vm.read_only == Some(true),
            sub_path: sub.map(PathBuf::from),
        });
    }
    mounts.sort_by_key(|m| m.target.components().count());
    Ok((planned, mounts))
}

/// Creates `dir` and its missing parents with `mode` (only those it creates: an existing directory
/// keeps its mode), whatever the process's umask.
fn create_dirs(dir: &Path, mode: u32) -> std::io::Result<()> {
    let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
    for d in missing.into_iter().rev() {
        match std::fs::create_dir(d) {
            Ok(()) => std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode))?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Creates a volume's directory or host path and writes its files; with `fs_group`, the
/// volume's directories and files belong to that group ([`owned_mode`]). In-memory volumes
/// ([`Prepare::Memory`]) have nothing on the host.
pub fn prepare(v: &VolumePlan, fs_group: Option<u32>) -> Result<(), String> {
    let io = |what: &str, p: &Path, e: std::io::Error| format!("volume {:?}: {what} {}: {e}", v.name, p.display());
    // Group and mode of one path of the volume, as `owned_mode` says.
    let own = |p: &Path, mode: u32, dir: bool| -> Result<(), String> {
        if let Some(gid) = fs_group {
            std::os::unix::fs::chown(p, None, Some(gid)).map_err(|e| io("changing the group of", p, e))?;
        }
        let mode = owned_mode(mode, fs_group, dir, v.read_only);
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).map_err(|e| io("setting the mode of", p, e))
    };
    match &v.prepare {
        Prepare::Memory(_) => Ok(()),
        // A claim's directory is writable by any user, as local-path-provisioner's (`mkdir -m 0777`).
        Prepare::Dir => create_dirs(&v.source, 0o777).map_err(|e| io("creating", &v.source, e)),
        Prepare::EmptyDir => {
            std::fs::create_dir_all(&v.source).map_err(|e| io("creating", &v.source, e))?;
            own(&v.source, EMPTY_DIR_MODE, true)
        }
        Prepare::Files(files) => {
            std::fs::create_dir_all(&v.source).map_err(|e| io("creating", &v.source, e))?;
            own(&v.source, 0o755, true)?;
            for f in files {
                let path = v.source.join(&f.path);
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
                    // Directories of item paths (`dir/file`) inside the volume.
                    for d in dir.ancestors().take_while(|d| d.starts_with(&v.source) && *d != v.source) {
                        own(d, 0o755, true)?;
                    }
                }
                // Written beside and renamed: a container reading the volume never sees half a file.
                let tmp = path.with_file_name(format!(
                    ".{}.tmp",
                    path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()
                ));
                std::fs::write(&tmp, &f.data).map_err(|e| io("writing", &tmp, e))?;
                own(&tmp, f.mode, false)?;
                std::fs::rename(&tmp, &path).map_err(|e| io("writing", &path, e))?;
            }
            Ok(())
        }
        Prepare::HostPath(kind) => {
            let p = &v.source;
            let meta = std::fs::metadata(p);
            let fail = |what: &str| {
                Err(format!("volume {:?}: hostPath type check failed: {} is not {what}", v.name, p.display()))
            };
            match kind.as_str() {
                "" => Ok(()),
                // kubelet's modes (MkdirAll 0755, OpenFile 0644), whatever `jobset up`'s umask.
                "DirectoryOrCreate" => create_dirs(p, 0o755).map_err(|e| io("creating", p, e)),
                "FileOrCreate" => {
                    if meta.is_err() {
                        if let Some(dir) = p.parent() {
                            create_dirs(dir, 0o755).map_err(|e| io("creating", dir, e))?;
                        }
                        let f = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(p)
                            .map_err(|e| io("creating", p, e))?;
                        f.set_permissions(std::fs::Permissions::from_mode(0o644))
                            .map_err(|e| io("setting the mode of", p, e))?;
                    }
                    Ok(())
                }
                "Directory" if meta.as_ref().is_ok_and(|m| m.is_dir()) => Ok(()),
                "Directory" => fail("a directory"),
                "File" if meta.as_ref().is_ok_and(|m| m.is_file()) => Ok(()),
                "File" => fail("a file"),
                "Socket" if meta.as_ref().is_ok_and(|m| m.file_type().is_socket()) => Ok(()),
                "Socket" => fail("a socket"),
                "CharDevice" if meta.as_ref().is_ok_and(|m| m.file_type().is_char_device()) => Ok(()),
                "CharDevice" => fail("a character device"),
                "BlockDevice" if meta.as_ref().is_ok_and(|m| m.file_type().is_block_device()) => Ok(()),
                "BlockDevice" => fail("a block device"),
                other => Err(format!("volume {:?}: unknown hostPath type {other:?}", v.name)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(volumes: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"containers": [], "volumes": volumes}
        }))
        .unwrap()
    }

    fn container(mounts: serde_json::Value) -> Container {
        serde_json::from_value(json!({"name": "m", "volumeMounts": mounts})).unwrap()
    }

    fn resources() -> PodResources {
        let mut r = PodResources::default();
        r.config_maps.insert("cfg".into(), [("a".to_string(), b"A".to_vec()), ("b".into(), b"B".to_vec())].into());
        r.secrets.insert("sec".into(), [("token".to_string(), b"t0k".to_vec())].into());
        r
    }

    fn no_field(path: &str) -> Result<String, String> {
        Ok(format!("<{path}>"))
    }

    fn plan(volumes: serde_json::Value, mounts: serde_json::Value) -> Result<(Vec<VolumePlan>, Vec<Mount>), String> {
        let dirs = Dirs { sandbox: Path::new("/s/pods/u1"), state_dir: Path::new("/s") };
        let env = BTreeMap::from([("IDX".to_string(), "3".to_string())]);
        plan_mounts(&pod(volumes), &container(mounts), &resources(), dirs, &env, &no_field)
    }

    #[test]
    fn volumes_resolve_to_host_paths() {
        let (vols, mounts) = plan(
            json!([
                {"name": "scratch", "emptyDir": {}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "claim"}},
                {"name": "host", "hostPath": {"path": "/var/x", "type": "DirectoryOrCreate"}},
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "unused", "nfs": {"server": "s", "path": "/"}},
            ]),
            json!([
                {"name": "scratch", "mountPath": "/scratch/deep/er"},
                {"name": "data", "mountPath": "/data", "readOnly": true},
                {"name": "host", "mountPath": "/host", "subPath": "sub/dir"},
                {"name": "cfg", "mountPath": "/etc/cfg"},
                {"name": "scratch", "mountPath": "/w", "subPathExpr": "idx-$(IDX)"},
            ]),
        )
        .unwrap();
        let by = |n: &str| vols.iter().find(|v| v.name == n).unwrap();
        assert_eq!(vols.len(), 4, "each mounted volume once, unmounted ones not planned");
        assert_eq!(
            (by("scratch").source.to_str(), &by("scratch").prepare),
            (Some("/s/pods/u1/volumes/scratch"), &Prepare::EmptyDir)
        );
        assert_eq!(by("data").source, Path::new("/s/pvc/ns/claim"));
        assert_eq!(by("host").prepare, Prepare::HostPath("DirectoryOrCreate".into()));
        assert!(by("cfg").read_only);
        let m: Vec<(&str, &str, bool)> =
            mounts.iter().map(|m| (m.source.to_str().unwrap(), m.target.to_str().unwrap(), m.read_only)).collect();
        assert_eq!(
            m,
            [
                ("/s/pvc/ns/claim", "/data", true),
                ("/var/x/sub/dir", "/host", false),
                ("/s/pods/u1/volumes/scratch/idx-3", "/w", false),
                ("/s/pods/u1/volumes/cfg", "/etc/cfg", true),
                ("/s/pods/u1/volumes/scratch", "/scratch/deep/er", false),
            ],
            "shallow targets first, in spec order otherwise"
        );
    }

    #[test]
    fn config_map_and_secret_files() {
        let (vols, _) = plan(
            json!([
                {"name": "cfg", "configMap": {"name": "cfg", "items": [{"key": "b", "path": "dir/bee", "mode": 0o600}], "defaultMode": 0o640}},
                {"name": "sec", "secret": {"secretName": "sec", "defaultMode": 0o400}},
                {"name": "proj", "projected": {"sources": [
                    {"configMap": {"name": "cfg", "items": [{"key": "a", "path": "a.txt"}]}},
                    {"secret": {"name": "gone", "optional": true}},
                    {"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
                ]}},
            ]),
            json!([{"name": "cfg", "mountPath": "/c"}, {"name": "sec", "mountPath": "/s"}, {"name": "proj", "mountPath": "/p"}]),
        )
        .unwrap();
        let files = |i: usize| match &vols[i].prepare {
            Prepare::Files(f) | Prepare::Memory(f) => {
                f.iter().map(|f| (f.path.clone(), f.data.clone(), f.mode)).collect::<Vec<_>>()
            }
            p => panic!("{p:?}"),
        };
        assert!(matches!(vols[0].prepare, Prepare::Files(_)), "a configMap is written on disk");
        assert!(matches!(vols[1].prepare, Prepare::Memory(_)), "a secret never is");
        assert!(matches!(vols[2].prepare, Prepare::Memory(_)), "nor a projected volume");
        assert_eq!(files(0), [("dir/bee".to_string(), b"B".to_vec(), 0o600)]);
        assert_eq!(files(1), [("token".to_string(), b"t0k".to_vec(), 0o400)]);
        assert_eq!(
            files(2),
            [("a.txt".to_string(), b"A".to_vec(), 0o644), ("name".to_string(), b"<metadata.name>".to_vec(), 0o644)]
        );
    }

    #[test]
    fn mounting_waits_for_missing_sources_with_kubelets_messages() {
        // (case, volumes, kubelet's SetUpAt error per volume)
        type Case = (&'static str, serde_json::Value, Vec<(&'static str, &'static str)>);
        let table: Vec<Case> = vec![
            ("every source there", json!([{"name": "v", "configMap": {"name": "cfg"}}]), vec![]),
            (
                "a missing ConfigMap",
                json!([{"name": "v", "configMap": {"name": "c"}}]),
                vec![("v", "configmap \"c\" not found")],
            ),
            (
                "a missing Secret",
                json!([{"name": "v", "secret": {"secretName": "s"}}]),
                vec![("v", "secret \"s\" not found")],
            ),
            (
                "a missing ConfigMap key",
                json!([{"name": "v", "configMap": {"name": "cfg", "items": [{"key": "a", "path": "a"}, {"key": "k", "path": "k"}]}}]),
                vec![("v", "configmap references non-existent config key: k")],
            ),
            (
                "a missing Secret key",
                json!([{"name": "v", "secret": {"secretName": "sec", "items": [{"key": "k", "path": "k"}]}}]),
                vec![("v", "references non-existent secret key: k")],
            ),
            (
                "an optional missing ConfigMap",
                json!([{"name": "v", "configMap": {"name": "c", "optional": true}}]),
                vec![],
            ),
            (
                "an optional source's missing key",
                json!([{"name": "v", "secret": {"secretName": "sec", "optional": true, "items": [{"key": "k", "path": "k"}]}}]),
                vec![],
            ),
            (
                "a projected volume: one error as is",
                json!([{"name": "v", "projected": {"sources": [{"configMap": {"name": "cfg"}}, {"secret": {"name": "s"}}]}}]),
                vec![("v", "secret \"s\" not found")],
            ),
            (
                "a projected volume: several errors aggregated",
                json!([{"name": "v", "projected": {"sources": [
                    {"configMap": {"name": "c"}}, {"secret": {"name": "s"}}, {"secret": {"name": "gone", "optional": true}}
                ]}}]),
                vec![("v", "[configmap \"c\" not found, secret \"s\" not found]")],
            ),
            (
                "one error per volume, in the pod's order",
                json!([{"name": "b", "secret": {"secretName": "s"}}, {"name": "a", "configMap": {"name": "c"}}]),
                vec![("b", "secret \"s\" not found"), ("a", "configmap \"c\" not found")],
            ),
            (
                "a volume no container mounts is not mounted",
                json!([{"name": "v", "configMap": {"name": "cfg"}}, {"name": "unused", "configMap": {"name": "c"}}]),
                vec![],
            ),
        ];
        for (case, volumes, want) in table {
            let names: Vec<&str> = volumes.as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
            let mounts: Vec<_> = names
                .iter()
                .filter(|n| **n != "unused")
                .map(|n| json!({"name": n, "mountPath": format!("/{n}")}))
                .collect();
            // The mounts are split over an init and a regular container: kubelet mounts for all.
            let (first, rest) = mounts.split_at(mounts.len().min(1));
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": "ns"},
                "spec": {"initContainers": [{"name": "i", "volumeMounts": first}],
                    "containers": [{"name": "m", "volumeMounts": rest}], "volumes": volumes}
            }))
            .unwrap();
            let got = mount_errors(&pod, &resources());
            let got: Vec<(&str, &str)> = got.iter().map(|e| (e.volume.as_str(), e.message.as_str())).collect();
            assert_eq!(got, want, "{case}");
        }
        let e = MountError { volume: "cfg".into(), message: "configmap \"c\" not found".into() };
        assert_eq!(e.event_message(), "MountVolume.SetUp failed for volume \"cfg\" : configmap \"c\" not found");
    }

    #[test]
    fn an_optional_source_leaves_out_what_is_missing() {
        let (vols, _) = plan(
            json!([
                {"name": "c", "configMap": {"name": "nope", "optional": true}},
                {"name": "s", "secret": {"secretName": "sec", "optional": true,
                    "items": [{"key": "token", "path": "t"}, {"key": "k", "path": "k"}]}},
            ]),
            json!([{"name": "c", "mountPath": "/c"}, {"name": "s", "mountPath": "/s"}]),
        )
        .unwrap();
        assert_eq!(vols[0].prepare, Prepare::Files(vec![]), "an empty volume");
        let Prepare::Memory(files) = &vols[1].prepare else { panic!("{:?}", vols[1].prepare) };
        assert_eq!(files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["t"]);
    }

    #[test]
    fn errors_name_what_is_missing() {
        for (volumes, mounts, want) in [
            (
                json!([{"name": "c", "configMap": {"name": "nope"}}]),
                json!([{"name": "c", "mountPath": "/c"}]),
                "volume \"c\": configmap \"nope\" not found",
            ),
            (
                json!([{"name": "s", "secret": {"secretName": "nope"}}]),
                json!([{"name": "s", "mountPath": "/c"}]),
                "secret \"nope\" not found",
            ),
            (
                json!([{"name": "c", "configMap": {"name": "cfg", "items": [{"key": "zz", "path": "z"}]}}]),
                json!([{"name": "c", "mountPath": "/c"}]),
                "volume \"c\": configmap references non-existent config key: zz",
            ),
            (json!([]), json!([{"name": "x", "mountPath": "/x"}]), "the pod has no volume \"x\""),
            (json!([{"name": "e", "emptyDir": {}}]), json!([{"name": "e", "mountPath": "rel"}]), "must be absolute"),
            (
                json!([{"name": "e", "emptyDir": {}}]),
                json!([{"name": "e", "mountPath": "/e", "subPath": "../up"}]),
                "without '..'",
            ),
            (
                json!([{"name": "n", "nfs": {"server": "s", "path": "/"}}]),
                json!([{"name": "n", "mountPath": "/n"}]),
                "unsupported volume type",
            ),
        ] {
            let err = plan(volumes, mounts).unwrap_err();
            assert!(err.contains(want), "{err}");
        }
        // Optional and missing: an empty volume.
        let (vols, _) = plan(
            json!([{"name": "c", "configMap": {"name": "nope", "optional": true}}]),
            json!([{"name": "c", "mountPath": "/c"}]),
        )
        .unwrap();
        assert_eq!(vols[0].prepare, Prepare::Files(vec![]));
    }

    #[test]
    fn sub_paths_are_kept_relative_to_their_volume() {
        let (_, mounts) = plan(
            json!([{"name": "sec", "secret": {"secretName": "sec"}}]),
            json!([{"name": "sec", "mountPath": "/t", "subPath": "token"}, {"name": "sec", "mountPath": "/all"}]),
        )
        .unwrap();
        let subs: Vec<Option<&str>> = mounts.iter().map(|m| m.sub_path.as_deref().and_then(Path::to_str)).collect();
        assert_eq!(subs, [Some("token"), None]);
    }

    #[test]
    fn an_fs_group_adds_group_access_and_setgid_directories() {
        // (mode, fsGroup, directory, read-only volume) -> mode
        for (mode, fs_group, dir, read_only, want) in [
            (0o644, None, false, true, 0o644),
            (0o777, None, true, false, 0o777),
            (0o400, Some(2000), false, true, 0o440),
            (0o600, Some(2000), false, false, 0o660),
            (0o755, Some(2000), true, true, 0o2755),
            (0o777, Some(2000), true, false, 0o2777),
            (0o700, Some(2000), true, false, 0o2770),
        ] {
            assert_eq!(
                owned_mode(mode, fs_group, dir, read_only),
                want,
                "{mode:o} {fs_group:?} dir={dir} ro={read_only}"
            );
        }
    }

    #[test]
    fn prepared_volumes_belong_to_the_fs_group() {
        let dir = tempfile::tempdir().unwrap();
        // Our own group: a group we may give files to without privileges.
        // SAFETY: getegid(2) cannot fail.
        let gid = unsafe { nix::libc::getegid() };
        let empty =
            VolumePlan { name: "e".into(), source: dir.path().join("e"), prepare: Prepare::EmptyDir, read_only: false };
        prepare(&empty, Some(gid)).unwrap();
        let meta = std::fs::metadata(dir.path().join("e")).unwrap();
        assert_eq!((meta.permissions().mode() & 0o7777, std::os::unix::fs::MetadataExt::gid(&meta)), (0o2777, gid));
        prepare(&empty, None).unwrap();
        assert_eq!(
            std::fs::metadata(dir.path().join("e")).unwrap().permissions().mode() & 0o7777,
            0o777,
            "0777 without fsGroup"
        );
        let files = VolumePlan {
            name: "c".into(),
            source: dir.path().join("c"),
            prepare: Prepare::Files(vec![VolumeFile { path: "d/f".into(), data: b"x".to_vec(), mode: 0o400 }]),
            read_only: true,
        };
        prepare(&files, Some(gid)).unwrap();
        let mode = |p: &str| std::fs::metadata(dir.path().join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!((mode("c"), mode("c/d"), mode("c/d/f")), (0o2755, 0o2755, 0o440));
        let memory = VolumePlan {
            name: "s".into(),
            source: dir.path().join("s"),
            prepare: Prepare::Memory(vec![VolumeFile { path: "k".into(), data: b"x".to_vec(), mode: 0o400 }]),
            read_only: true,
        };
        prepare(&memory, None).unwrap();
        assert!(!dir.path().join("s").exists(), "nothing of an in-memory volume on disk");
        assert!(!format!("{memory:?}").contains("[120]"), "no data in debug output: {memory:?}");
    }

    #[test]
    fn prepare_writes_files_and_checks_host_paths() {
        let dir = tempfile::tempdir().unwrap();
        let v = VolumePlan {
            name: "c".into(),
            source: dir.path().join("c"),
            prepare: Prepare::Files(vec![VolumeFile { path: "d/f".into(), data: b"x".to_vec(), mode: 0o600 }]),
            read_only: true,
        };
        prepare(&v, None).unwrap();
        prepare(&v, None).unwrap();
        let f = dir.path().join("c/d/f");
        assert_eq!(std::fs::read(&f).unwrap(), b"x");
        assert_eq!(std::fs::metadata(&f).unwrap().permissions().mode() & 0o777, 0o600);
        let host = |path: PathBuf, t: &str| VolumePlan {
            name: "h".into(),
            source: path,
            prepare: Prepare::HostPath(t.into()),
            read_only: false,
        };
        assert!(
            prepare(&host(dir.path().join("missing"), "Directory"), None).unwrap_err().contains("is not a directory")
        );
        prepare(&host(dir.path().join("made"), "DirectoryOrCreate"), None).unwrap();
        assert!(dir.path().join("made").is_dir());
        prepare(&host(dir.path().join("made/file"), "FileOrCreate"), None).unwrap();
        prepare(&host(dir.path().join("made/file"), "File"), None).unwrap();
    }

    #[test]
    fn created_claim_and_host_path_directories_get_their_modes_and_existing_ones_keep_theirs() {
        let dir = tempfile::tempdir().unwrap();
        let mode = |p: &str| std::fs::metadata(dir.path().join(p)).unwrap().permissions().mode() & 0o7777;
        std::fs::create_dir(dir.path().join("kept")).unwrap();
        std::fs::set_permissions(dir.path().join("kept"), std::fs::Permissions::from_mode(0o700)).unwrap();
        let claim = VolumePlan {
            name: "c".into(),
            source: dir.path().join("kept/ns/claim"),
            prepare: Prepare::Dir,
            read_only: false,
        };
        prepare(&claim, None).unwrap();
        let host = VolumePlan {
            name: "h".into(),
            source: dir.path().join("kept/host/file"),
            prepare: Prepare::HostPath("FileOrCreate".into()),
            read_only: false,
        };
        prepare(&host, None).unwrap();
        assert_eq!(
            (mode("kept"), mode("kept/ns"), mode("kept/ns/claim"), mode("kept/host"), mode("kept/host/file")),
            (0o700, 0o777, 0o777, 0o755, 0o644)
        );
    }
}
