//! Namespaces for the process runtime: what a container's forked child does before `exec`, and
//! how a command joins a running container ([`exec_command`]).
//!
//! # Process tree of a container (with PID namespaces)
//!
//! ```text
//! agent (spawner thread)
//!  └─ S  the container's supervisor (`super::shim`): this executable run again; forks C, holds
//!     │  the log pipe, records the exit status; stays in the host's namespaces
//!     └─ C  intermediate, host pid = process group id; all signals blocked; waits for I and
//!        │  exits with its code. Holds the container's mount + UTS namespaces (unshared before
//!        │  the fork).
//!        └─ I  pid 1 of a new PID namespace; never execs; all signals blocked; reaps orphans and
//!           │  exits with W's code (128 + signal when W was killed). Parent-death signal: SIGKILL.
//!           └─ W  pid 2: unblocks signals and execs the container's command.
//! ```
//!
//! Signals to the group (the agent's SIGTERM) reach W like any process (a namespace's pid 1
//! would ignore SIGTERM without a handler), so `sleep` ends with 143 and `trap` handlers run.
//! When W ends, I exits and the kernel kills everything left in the PID namespace, including
//! descendants that left the process group. When S dies, C gets SIGKILL (parent-death signal),
//! then I (its parent-death signal), which takes the namespace down; S itself dies with the
//! agent unless containers outlive it (see [`super::process`]).
//!
//! W's pid as seen from the host is the pid in the container's ID (`process://<pid>-<n>`): the
//! process whose mount namespace, environment and working directory an exec joins.
//!
//! Without PID namespaces (not permitted, or isolation off) the child execs itself: C = W.
//!
//! What C does in its new mount namespace, in order: opens the sources of the host binds
//! (`O_PATH`), mounts a tmpfs on the staging directory and writes the in-memory volumes there
//! ([`MemoryVolume`]: secret, projected), opens their sources, covers the hidden directories
//! (the runtime's state, the API server's data) with an empty read-only tmpfs, binds everything
//! from `/proc/self/fd/<n>` (so covered sources still bind), then makes the read-only ones
//! read-only (once every mount point exists), creates the working directory and, with
//! `readOnlyRootFilesystem`, remounts `/` read-only. W then mounts a procfs of its PID namespace
//! on `/proc` (after reporting its host pid, read from the host's), masks [`MASKED_PATHS`] and
//! makes [`READ_ONLY_PATHS`] read-only (unless `privileged`), drops the capabilities the
//! container does not keep from the bounding set, sets the user and groups (`setgroups`,
//! `setgid`, `setuid`), limits its effective and permitted capabilities (root keeps the kept
//! ones across `setuid` to root; another user has none left, as without ambient capabilities),
//! sets `no_new_privs` if asked and enters its working directory as that user.
//!
//! C, I and W are forks of S, a small process, never of the agent. Everything the child does
//! happens after `fork` (S runs a tokio runtime, so it may have threads): no allocation, only
//! system calls on paths prepared as `CString`s before the spawn.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::errno::Errno;
use nix::libc;

/// Which namespaces this process may create.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Namespaces {
    /// Mount namespaces (with `/` made private): private `/tmp`, volumes, `/etc/hosts`.
    pub mount: bool,
    /// UTS namespaces: the pod's hostname.
    pub uts: bool,
    /// PID namespaces: no descendant outlives the container.
    pub pid: bool,
}

fn cvt(r: libc::c_int) -> Result<libc::c_int, Errno> {
    if r == -1 { Err(Errno::last()) } else { Ok(r) }
}

/// Finds out once, in a short-lived child, which namespaces can be created here.
pub fn probe() -> Namespaces {
    static PROBED: OnceLock<Namespaces> = OnceLock::new();
    *PROBED.get_or_init(|| {
        // SAFETY: the child only makes system calls and leaves with `_exit`.
        unsafe {
            let pid = libc::fork();
            if pid == 0 {
                let mut bits = 0;
                if libc::unshare(libc::CLONE_NEWNS) == 0
                    && libc::mount(
                        std::ptr::null(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) == 0
                {
                    bits |= 1;
                }
                if libc::unshare(libc::CLONE_NEWUTS) == 0 {
                    bits |= 2;
                }
                if libc::unshare(libc::CLONE_NEWPID) == 0 {
                    let c = libc::fork();
                    if c == 0 {
                        libc::_exit(0);
                    }
                    let mut st = 0;
                    if c > 0 && libc::waitpid(c, &mut st, 0) == c && libc::WIFEXITED(st) {
                        bits |= 4;
                    }
                }
                libc::_exit(bits);
            }
            if pid < 0 {
                return Namespaces::default();
            }
            let mut st = 0;
            loop {
                let r = libc::waitpid(pid, &mut st, 0);
                if r == pid {
                    break;
                }
                if r == -1 && Errno::last() != Errno::EINTR {
                    return Namespaces::default();
                }
            }
            let bits = if libc::WIFEXITED(st) { libc::WEXITSTATUS(st) } else { 0 };
            Namespaces { mount: bits & 1 != 0, uts: bits & 2 != 0, pid: bits & 4 != 0 }
        }
    })
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path has a NUL byte"))
}

/// The directories to create for `path` to exist, outermost first (`/a`, `/a/b`).
fn ancestors(path: &Path, include_self: bool) -> io::Result<Vec<CString>> {
    let mut out: Vec<&Path> = path.ancestors().filter(|a| a.parent().is_some()).collect();
    if !include_self && !out.is_empty() {
        out.remove(0);
    }
    out.reverse();
    out.into_iter().map(cstring).collect()
}

/// One bind mount, ready for the child.
#[derive(Debug)]
pub struct BindMount {
    /// For error messages.
    pub what: String,
    mkdirs: Vec<CString>,
    /// The target is a file: created empty when missing.
    touch: Option<CString>,
    source: CString,
    /// The source opened (`O_PATH`) in the child's namespace before any mount, so that mounts
    /// on `/tmp` or elsewhere cannot hide it: the child binds `/proc/self/fd/<n>`.
    source_fd: AtomicI32,
    /// The mount, once bound (read-only mounts): what [`BindMount::seal`] remounts.
    target_fd: AtomicI32,
    target: CString,
    read_only: bool,
    /// The source is in the staged in-memory volumes: opened once they are written.
    staged: bool,
}

impl BindMount {
    /// `source` must exist (a file source gets a file mount point).
    pub fn new(what: String, source: &Path, target: &Path, read_only: bool) -> io::Result<BindMount> {
        let file = std::fs::metadata(source).map(|m| !m.is_dir())?;
        Self::with_kind(what, source, target, read_only, file, false)
    }

    fn with_kind(
        what: String,
        source: &Path,
        target: &Path,
        read_only: bool,
        file: bool,
        staged: bool,
    ) -> io::Result<BindMount> {
        Ok(BindMount {
            what,
            mkdirs: ancestors(target, !file)?,
            touch: if file { Some(cstring(target)?) } else { None },
            source: cstring(source)?,
            source_fd: AtomicI32::new(-1),
            target_fd: AtomicI32::new(-1),
            target: cstring(target)?,
            read_only,
            staged,
        })
    }

    /// Step 1 in the child: opens the source.
    unsafe fn open_source(&self) -> Result<(), Errno> {
        // SAFETY: open(2) of a NUL-terminated path.
        let fd = cvt(unsafe { libc::open(self.source.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) })?;
        self.source_fd.store(fd, Ordering::Relaxed);
        Ok(())
    }

    /// Step 2 in the child: creates the mount point and binds the source on it.
    unsafe fn apply(&self) -> Result<(), Errno> {
        unsafe {
            for d in &self.mkdirs {
                if libc::mkdir(d.as_ptr(), 0o755) == -1 && Errno::last() != Errno::EEXIST {
                    return Err(Errno::last());
                }
            }
            if let Some(f) = &self.touch {
                let fd = libc::open(f.as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC, 0o644);
                if fd == -1 && Errno::last() != Errno::EEXIST {
                    return Err(Errno::last());
                }
                if fd >= 0 {
                    libc::close(fd);
                }
            }
            let fd = self.source_fd.load(Ordering::Relaxed);
            let path = fd_path(fd);
            let null = std::ptr::null();
            let bound = cvt(libc::mount(
                path.as_ptr().cast(),
                self.target.as_ptr(),
                null,
                libc::MS_BIND | libc::MS_REC,
                null.cast(),
            ));
            libc::close(fd);
            bound?;
            if self.read_only {
                // Made read-only once every mount is in place ([`BindMount::seal`]): mount points
                // of later mounts may still have to be created in it. The mount itself, opened
                // now: a later mount on the same path must not be the one made read-only.
                let t = cvt(libc::open(self.target.as_ptr(), libc::O_PATH | libc::O_CLOEXEC))?;
                self.target_fd.store(t, Ordering::Relaxed);
            }
            Ok(())
        }
    }

    /// Step 3 in the child: a read-only mount becomes read-only (this mount only).
    unsafe fn seal(&self) -> Result<(), Errno> {
        let fd = self.target_fd.load(Ordering::Relaxed);
        if !self.read_only || fd < 0 {
            return Ok(());
        }
        let path = fd_path(fd);
        let null = std::ptr::null();
        let flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;
        // SAFETY: mount(2) on a NUL-terminated stack buffer, close(2) of our descriptor.
        unsafe {
            let sealed = cvt(libc::mount(null, path.as_ptr().cast(), null, flags, null.cast()));
            libc::close(fd);
            sealed.map(drop)
        }
    }
}

/// "/proc/self/fd/<fd>\0" in a stack buffer.
fn fd_path(fd: RawFd) -> [u8; 40] {
    let mut path = [0u8; 40];
    let prefix = b"/proc/self/fd/";
    path[..prefix.len()].copy_from_slice(prefix);
    let n = write_decimal(&mut path[prefix.len()..prefix.len() + 12], fd.max(0) as u64);
    path[prefix.len() + n] = 0;
    path
}

/// Where a bind mount's source is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum BindSource {
    /// A path of the host (it must exist).
    Host(PathBuf),
    /// `path` (relative; empty for the whole volume) in in-memory volume `volume`
    /// ([`SandboxPlan::memory`]); `file` when it names one of its files.
    Memory { volume: usize, path: PathBuf, file: bool },
}

/// One bind mount as the agent plans it: plain data, sent to the container's supervisor
/// ([`super::shim`]), which turns it into a [`BindMount`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bind {
    /// For error messages.
    pub what: String,
    pub source: BindSource,
    pub target: PathBuf,
    pub read_only: bool,
}

/// The user and groups a container's command runs as (`setgroups`, `setgid`, `setuid`, in that
/// order, just before `exec`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (exactly these).
    pub groups: Vec<u32>,
}

/// A volume whose files exist only on a tmpfs in the container's mount namespace (secret,
/// projected): the child writes them there, the host's disk never holds them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemoryVolume {
    pub name: String,
    /// Paths relative to the volume, with their final modes.
    pub files: Vec<MemoryFile>,
    /// The mode of the volume's directories.
    pub dir_mode: u32,
    /// The group of every directory and file (the pod's `fsGroup`).
    pub gid: Option<u32>,
    /// Directories to create besides the files' (relative; subPaths that name no file).
    pub dirs: Vec<PathBuf>,
}

/// One file of a [`MemoryVolume`].
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemoryFile {
    pub path: PathBuf,
    pub data: Vec<u8>,
    pub mode: u32,
}

/// Without the data (a secret's bytes).
impl std::fmt::Debug for MemoryFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemoryFile({}, {} bytes, {:o})", self.path.display(), self.data.len(), self.mode)
    }
}

/// What a container's sandbox needs (namespaces, mounts, hostname, working directory, user), as
/// plain data: the agent prepares the directories and files, the supervisor builds the
/// [`ChildSetup`] from it ([`SandboxPlan::child_setup`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SandboxPlan {
    pub mount_ns: bool,
    /// Set with `mount_ns` and UTS namespaces only.
    pub hostname: Option<String>,
    pub binds: Vec<Bind>,
    pub pid_ns: bool,
    pub working_dir: Option<PathBuf>,
    /// Host directories covered by an empty read-only tmpfs once the binds' sources are open:
    /// the runtime's state directory (other pods' sandboxes) and whatever else the runtime
    /// hides (the API server's data).
    pub hide: Vec<PathBuf>,
    /// An existing host directory, itself hidden (covered by the pod's `/tmp` or in `hide`),
    /// where a private tmpfs takes the in-memory volumes; needed when `memory` is not empty.
    pub stage: Option<PathBuf>,
    pub memory: Vec<MemoryVolume>,
    /// Remount `/` read-only after the binds (`readOnlyRootFilesystem`).
    pub read_only_root: bool,
    /// Change user and groups before `exec`; `None` keeps the supervisor's.
    pub identity: Option<Identity>,
    /// The capabilities the command keeps (bit `n` is capability `n`): the bounding set, and the
    /// effective and permitted sets when it runs as root; `None` keeps them all (`privileged`,
    /// or a runtime that is not root and has none to drop).
    #[serde(default)]
    pub capabilities: Option<u64>,
    /// `PR_SET_NO_NEW_PRIVS` before `exec` (`allowPrivilegeEscalation: false`).
    #[serde(default)]
    pub no_new_privs: bool,
    /// Mask [`MASKED_PATHS`] and make [`READ_ONLY_PATHS`] read-only (with `mount_ns`): as
    /// containerd's default spec, for a container that is not `privileged` (nor `procMount:
    /// Unmasked`).
    #[serde(default)]
    pub mask_paths: bool,
}

/// containerd's default `MaskedPaths` (`oci.populateDefaultUnixSpec`): a file is covered by
/// `/dev/null`, a directory by an empty read-only tmpfs; what does not exist is skipped.
pub const MASKED_PATHS: [&str; 11] = [
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
    "/proc/scsi",
];

/// containerd's default `ReadonlyPaths`: bound on themselves read-only; what does not exist is
/// skipped.
pub const READ_ONLY_PATHS: [&str; 5] = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];

impl SandboxPlan {
    /// The setup of a child of process `parent`; an error names what could not be prepared.
    pub fn child_setup(&self, parent: libc::pid_t) -> Result<ChildSetup, String> {
        let stage = match (&self.stage, self.memory.is_empty()) {
            (_, true) => None,
            (None, false) => return Err("in-memory volumes without a staging directory".into()),
            (Some(dir), false) => Some(Stage::new(dir, &self.memory).map_err(|e| format!("in-memory volumes: {e}"))?),
        };
        let mut mounts = Vec::with_capacity(self.binds.len());
        for b in &self.binds {
            let m = match (&b.source, &self.stage) {
                (BindSource::Host(source), _) => BindMount::new(b.what.clone(), source, &b.target, b.read_only)
                    .map_err(|e| format!("{} (from {}): {e}", b.what, source.display()))?,
                (BindSource::Memory { volume, path, file }, Some(dir)) if *volume < self.memory.len() => {
                    let source = Stage::volume_dir(dir, *volume).join(path);
                    BindMount::with_kind(b.what.clone(), &source, &b.target, b.read_only, *file, true)
                        .map_err(|e| format!("{}: {e}", b.what))?
                }
                (BindSource::Memory { volume, .. }, _) => {
                    return Err(format!("{}: no in-memory volume {volume}", b.what));
                }
            };
            mounts.push(m);
        }
        let workdir = match &self.working_dir {
            Some(d) => Some(ChildSetup::workdir(d).map_err(|e| format!("working directory {}: {e}", d.display()))?),
            None => None,
        };
        let hide = self.hide.iter().map(|p| cstring(p)).collect::<io::Result<Vec<_>>>().map_err(|e| e.to_string())?;
        let paths = |list: &[&str]| -> Vec<CString> {
            if self.mount_ns && self.mask_paths {
                list.iter().filter_map(|p| CString::new(*p).ok()).collect()
            } else {
                Vec::new()
            }
        };
        Ok(ChildSetup {
            agent: parent,
            mount_ns: self.mount_ns,
            hostname: if self.mount_ns { self.hostname.as_deref().and_then(hostname) } else { None },
            mounts,
            pid_ns: self.pid_ns,
            workdir,
            stage: if self.mount_ns { stage } else { None },
            hide: if self.mount_ns { hide } else { Vec::new() },
            read_only_root: self.mount_ns && self.read_only_root,
            identity: self.identity.as_ref().map(|i| PreparedIdentity {
                groups: i.groups.iter().map(|&g| g as libc::gid_t).collect(),
                gid: i.gid as libc::gid_t,
                uid: i.uid as libc::uid_t,
            }),
            private_proc: self.mount_ns && self.pid_ns,
            capabilities: self.capabilities,
            no_new_privs: self.no_new_privs,
            masked: paths(&MASKED_PATHS),
            read_only: paths(&READ_ONLY_PATHS),
        })
    }
}

/// The in-memory volumes, ready for the child: a tmpfs on `dir`, volume `i` in `<dir>/<i>`.
#[derive(Debug)]
pub struct Stage {
    dir: CString,
    /// Directories to create, outermost first, with mode and group.
    dirs: Vec<(CString, libc::mode_t, Option<libc::gid_t>)>,
    files: Vec<StagedFile>,
}

struct StagedFile {
    path: CString,
    data: Vec<u8>,
    mode: libc::mode_t,
    gid: Option<libc::gid_t>,
}

impl std::fmt::Debug for StagedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StagedFile({:?}, {} bytes)", self.path, self.data.len())
    }
}

impl Stage {
    fn volume_dir(dir: &Path, i: usize) -> PathBuf {
        dir.join(i.to_string())
    }

    fn new(dir: &Path, volumes: &[MemoryVolume]) -> io::Result<Stage> {
        let mut dirs: Vec<(CString, libc::mode_t, Option<libc::gid_t>)> = Vec::new();
        let mut files = Vec::new();
        for (i, v) in volumes.iter().enumerate() {
            let root = Self::volume_dir(dir, i);
            let gid = v.gid.map(|g| g as libc::gid_t);
            let mut add_dir = |rel: &Path| -> io::Result<()> {
                check_inside(rel)?;
                // `rel` and each of its parents inside the volume, outermost first.
                let mut chain: Vec<&Path> = rel.ancestors().collect();
                chain.reverse();
                for d in chain {
                    let c = cstring(&if d.as_os_str().is_empty() { root.clone() } else { root.join(d) })?;
                    if !dirs.iter().any(|(x, _, _)| *x == c) {
                        dirs.push((c, v.dir_mode as libc::mode_t, gid));
                    }
                }
                Ok(())
            };
            add_dir(Path::new(""))?;
            for d in &v.dirs {
                add_dir(d)?;
            }
            for f in &v.files {
                check_inside(&f.path)?;
                add_dir(f.path.parent().unwrap_or(Path::new("")))?;
                files.push(StagedFile {
                    path: cstring(&root.join(&f.path))?,
                    data: f.data.clone(),
                    mode: f.mode as libc::mode_t,
                    gid,
                });
            }
        }
        Ok(Stage { dir: cstring(dir)?, dirs, files })
    }

    /// In the child: mounts the tmpfs and writes the volumes.
    unsafe fn write(&self) -> Result<(), Errno> {
        unsafe {
            let flags = libc::MS_NOSUID | libc::MS_NODEV;
            cvt(libc::mount(
                c"tmpfs".as_ptr(),
                self.dir.as_ptr(),
                c"tmpfs".as_ptr(),
                flags,
                c"mode=0700".as_ptr().cast(),
            ))?;
            for (d, mode, gid) in &self.dirs {
                if libc::mkdir(d.as_ptr(), 0o700) == -1 && Errno::last() != Errno::EEXIST {
                    return Err(Errno::last());
                }
                if let Some(g) = gid {
                    cvt(libc::chown(d.as_ptr(), u32::MAX, *g))?;
                }
                cvt(libc::chmod(d.as_ptr(), *mode))?;
            }
            for f in &self.files {
                let fd = cvt(libc::open(
                    f.path.as_ptr(),
                    libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                    0o600,
                ))?;
                let written = write_all(fd, &f.data)
                    .and_then(|()| match f.gid {
                        Some(g) => cvt(libc::fchown(fd, u32::MAX, g)).map(drop),
                        None => Ok(()),
                    })
                    // After the chown, which may clear mode bits; and whatever the umask.
                    .and_then(|()| cvt(libc::fchmod(fd, f.mode)).map(drop));
                libc::close(fd);
                written?;
            }
            Ok(())
        }
    }
}

/// A relative path without `..`, so that a volume's files stay inside it.
fn check_inside(p: &Path) -> io::Result<()> {
    use std::path::Component;
    if p.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir)) {
        Ok(())
    } else {
        Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} leaves its volume", p.display())))
    }
}

/// write(2) until all of `data` is written.
unsafe fn write_all(fd: RawFd, mut data: &[u8]) -> Result<(), Errno> {
    while !data.is_empty() {
        // SAFETY: write(2) from a live slice.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if n < 0 {
            if Errno::last() == Errno::EINTR {
                continue;
            }
            return Err(Errno::last());
        }
        data = &data[n as usize..];
    }
    Ok(())
}

/// [`Identity`] as the child applies it.
#[derive(Debug)]
pub struct PreparedIdentity {
    groups: Vec<libc::gid_t>,
    gid: libc::gid_t,
    uid: libc::uid_t,
}

impl PreparedIdentity {
    /// setgroups, setgid, setuid; keeps a parent-death signal armed (changing credentials clears
    /// it) and checks that the parent `parent` did not die meanwhile.
    unsafe fn apply(&self, parent: libc::pid_t) -> Result<(), Errno> {
        unsafe {
            let mut death: libc::c_int = 0;
            libc::prctl(libc::PR_GET_PDEATHSIG, &mut death as *mut libc::c_int, 0, 0, 0);
            cvt(libc::setgroups(self.groups.len(), self.groups.as_ptr()))?;
            cvt(libc::setgid(self.gid))?;
            cvt(libc::setuid(self.uid))?;
            if death != 0 {
                cvt(libc::prctl(libc::PR_SET_PDEATHSIG, death as libc::c_ulong, 0, 0, 0))?;
                if libc::getppid() != parent {
                    return Err(Errno::ESRCH);
                }
            }
            Ok(())
        }
    }
}

/// Steps of [`ChildSetup`] named in failure reports (mount `i` is `STEP_MOUNT + i`).
const STEP_NAMESPACES: u32 = 0;
const STEP_HOSTNAME: u32 = 1;
const STEP_PID_NAMESPACE: u32 = 2;
const STEP_WORKDIR: u32 = 3;
const STEP_STAGE: u32 = 4;
const STEP_HIDE: u32 = 5;
const STEP_READ_ONLY_ROOT: u32 = 6;
const STEP_USER: u32 = 7;
const STEP_PROC: u32 = 8;
const STEP_CAPABILITIES: u32 = 9;
const STEP_MASK: u32 = 10;
const STEP_MOUNT: u32 = 11;

/// Everything a container's child does before exec, prepared before the fork.
#[derive(Debug)]
pub struct ChildSetup {
    /// The agent's pid: the child's parent, or the agent died before the death signal was armed.
    pub agent: libc::pid_t,
    /// Unshare a mount namespace (and make `/` private) and apply `mounts`.
    pub mount_ns: bool,
    /// Unshare a UTS namespace and set this hostname (with `mount_ns` only).
    pub hostname: Option<CString>,
    pub mounts: Vec<BindMount>,
    /// Run the command as pid 2 of a new PID namespace (see the module docs).
    pub pid_ns: bool,
    /// Created when missing, then the working directory.
    pub workdir: Option<(Vec<CString>, CString)>,
    /// In-memory volumes, written on a tmpfs before the hiding (with `mount_ns`).
    pub stage: Option<Stage>,
    /// Covered by an empty read-only tmpfs (with `mount_ns`).
    pub hide: Vec<CString>,
    /// `/` remounted read-only once everything is mounted (with `mount_ns`).
    pub read_only_root: bool,
    /// Set just before exec.
    pub identity: Option<PreparedIdentity>,
    /// A procfs of the container's PID namespace on `/proc` (with `mount_ns` and `pid_ns`): the
    /// host's shows every process, and `/proc/<pid>/root` reaches their files.
    pub private_proc: bool,
    /// The capabilities kept ([`SandboxPlan::capabilities`]).
    pub capabilities: Option<u64>,
    pub no_new_privs: bool,
    /// Covered by `/dev/null` (a file) or an empty read-only tmpfs (a directory), after `/proc`.
    pub masked: Vec<CString>,
    /// Bound read-only on themselves, after `/proc`.
    pub read_only: Vec<CString>,
}

impl ChildSetup {
    pub fn workdir(dir: &Path) -> io::Result<(Vec<CString>, CString)> {
        Ok((ancestors(dir, true)?, cstring(dir)?))
    }

    /// What failed, from a report: `(host pid of the command, failed step description)`.
    pub fn read_report(&self, bytes: &[u8]) -> (Option<u32>, Option<String>) {
        let text = String::from_utf8_lossy(bytes);
        let mut pid = None;
        let mut step = None;
        for line in text.lines() {
            if let Some(p) = line.strip_prefix('P') {
                pid = p.parse().ok();
            } else if let Some(s) = line.strip_prefix('E').and_then(|s| s.parse::<u32>().ok()) {
                step = Some(match s {
                    STEP_NAMESPACES => "creating the mount namespace".to_string(),
                    STEP_HOSTNAME => "setting the hostname".into(),
                    STEP_PID_NAMESPACE => "creating the PID namespace".into(),
                    STEP_WORKDIR => format!(
                        "entering the working directory {:?}",
                        self.workdir.as_ref().map(|w| w.1.to_string_lossy()).unwrap_or_default()
                    ),
                    STEP_STAGE => "writing the in-memory (secret and projected) volumes".into(),
                    STEP_HIDE => "hiding the runtime's state from the container".into(),
                    STEP_READ_ONLY_ROOT => "making the root filesystem read-only".into(),
                    STEP_USER => "setting the user and groups (securityContext)".into(),
                    STEP_PROC => "mounting the container's /proc".into(),
                    STEP_CAPABILITIES => "dropping capabilities (securityContext)".into(),
                    STEP_MASK => "masking /proc and /sys paths".into(),
                    s => match self.mounts.get((s - STEP_MOUNT) as usize) {
                        Some(m) => m.what.clone(),
                        None => format!("step {s}"),
                    },
                });
            }
        }
        (pid, step)
    }

    fn report(fd: RawFd, kind: u8, n: u64) {
        if fd < 0 {
            return;
        }
        let mut buf = [0u8; 32];
        buf[0] = kind;
        let len = 1 + write_decimal(&mut buf[1..31], n);
        buf[len] = b'\n';
        // SAFETY: a plain write(2) of a stack buffer.
        unsafe {
            libc::write(fd, buf.as_ptr().cast(), len + 1);
        }
    }

    fn fail(report: RawFd, step: u32, e: Errno) -> io::Error {
        Self::report(report, b'E', step as u64);
        io::Error::from_raw_os_error(e as i32)
    }

    /// Runs in the forked child (`pre_exec`). Returns only in the process that execs. `report`
    /// is the write end of the report pipe ([`report_pipe`]; -1 for none): `P<host pid>\n` is
    /// written before exec, `E<step>\n` on failure ([`ChildSetup::read_report`] reads it).
    ///
    /// # Safety
    /// Only in a freshly forked child: it forks, blocks signals and may `_exit`.
    pub unsafe fn run(&self, report: RawFd) -> io::Result<()> {
        let fail = |step: u32| move |e: Errno| Self::fail(report, step, e);
        unsafe {
            // Containers get the umask runc gives them, not `jobset up`'s private 077.
            libc::umask(0o022);
            cvt(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0))?;
            // The agent may have died before the signal was armed.
            if libc::getppid() != self.agent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            if self.mount_ns {
                let flags = libc::CLONE_NEWNS | if self.hostname.is_some() { libc::CLONE_NEWUTS } else { 0 };
                cvt(libc::unshare(flags)).map_err(fail(STEP_NAMESPACES))?;
                let null = std::ptr::null();
                cvt(libc::mount(null, c"/".as_ptr(), null, libc::MS_REC | libc::MS_PRIVATE, null.cast()))
                    .map_err(fail(STEP_NAMESPACES))?;
                if let Some(h) = &self.hostname {
                    cvt(libc::sethostname(h.as_ptr(), h.as_bytes().len())).map_err(fail(STEP_HOSTNAME))?;
                }
                // Every source is opened before anything is mounted over it: the pod's /tmp, the
                // hiding tmpfs.
                for (i, m) in self.mounts.iter().enumerate().filter(|(_, m)| !m.staged) {
                    m.open_source().map_err(fail(STEP_MOUNT + i as u32))?;
                }
                if let Some(stage) = &self.stage {
                    stage.write().map_err(fail(STEP_STAGE))?;
                }
                for (i, m) in self.mounts.iter().enumerate().filter(|(_, m)| m.staged) {
                    m.open_source().map_err(fail(STEP_MOUNT + i as u32))?;
                }
                for h in &self.hide {
                    let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                    cvt(libc::mount(
                        c"tmpfs".as_ptr(),
                        h.as_ptr(),
                        c"tmpfs".as_ptr(),
                        flags,
                        c"mode=0755".as_ptr().cast(),
                    ))
                    .map_err(fail(STEP_HIDE))?;
                }
                for (i, m) in self.mounts.iter().enumerate() {
                    m.apply().map_err(fail(STEP_MOUNT + i as u32))?;
                }
                for (i, m) in self.mounts.iter().enumerate() {
                    m.seal().map_err(fail(STEP_MOUNT + i as u32))?;
                }
                // Before the root may become read-only.
                if let Some((mkdirs, _)) = &self.workdir {
                    mkdir_all(mkdirs);
                }
                if self.read_only_root {
                    // MS_BIND: this mount of `/` only (in this namespace), not the filesystem.
                    let flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;
                    cvt(libc::mount(null, c"/".as_ptr(), null, flags, null.cast()))
                        .map_err(fail(STEP_READ_ONLY_ROOT))?;
                }
            }
            if self.pid_ns {
                self.enter_pid_namespace().map_err(fail(STEP_PID_NAMESPACE))?;
                // W: signals as the command expects them.
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            }
            // Still the host's /proc: it names W's host pid.
            Self::report(report, b'P', host_pid() as u64);
            if self.private_proc {
                // W is in the new PID namespace: the procfs mounted is that namespace's.
                let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                let null = std::ptr::null();
                cvt(libc::mount(c"proc".as_ptr(), c"/proc".as_ptr(), c"proc".as_ptr(), flags, null))
                    .map_err(fail(STEP_PROC))?;
            }
            // As runc: while CAP_SYS_ADMIN is still there.
            for p in &self.masked {
                mask_path(p).map_err(fail(STEP_MASK))?;
            }
            for p in &self.read_only {
                read_only_path(p).map_err(fail(STEP_MASK))?;
            }
            if let Some(keep) = self.capabilities {
                // While CAP_SETPCAP is still there.
                drop_bounding(keep).map_err(fail(STEP_CAPABILITIES))?;
            }
            if let Some((mkdirs, _)) = &self.workdir {
                mkdir_all(mkdirs);
            }
            if let Some(id) = &self.identity {
                id.apply(self.agent).map_err(fail(STEP_USER))?;
            }
            if let Some(keep) = self.capabilities {
                limit_capabilities(keep).map_err(fail(STEP_CAPABILITIES))?;
            }
            if self.no_new_privs {
                cvt(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0))
                    .map_err(fail(STEP_CAPABILITIES))?;
            }
            // As the container's user, as runc.
            if let Some((_, dir)) = &self.workdir {
                cvt(libc::chdir(dir.as_ptr())).map_err(fail(STEP_WORKDIR))?;
            }
            Ok(())
        }
    }

    /// C → I → W (module docs). Returns in W only; C and I end with `_exit`.
    unsafe fn enter_pid_namespace(&self) -> Result<(), Errno> {
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
            cvt(libc::unshare(libc::CLONE_NEWPID))?;
            // Open in C as long as C lives: I checks it after arming its death signal.
            let mut alive = [0 as RawFd; 2];
            cvt(libc::pipe2(alive.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK))?;
            let init = cvt(libc::fork())?;
            if init > 0 {
                close_fds(0, alive[1]);
                wait_and_exit(init, false);
            }
            // I: pid 1 of the namespace.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
            libc::close(alive[1]);
            let mut b = 0u8;
            if libc::read(alive[0], (&mut b as *mut u8).cast(), 1) == 0 {
                libc::_exit(137); // C is gone.
            }
            libc::close(alive[0]);
            let main = cvt(libc::fork())?;
            if main > 0 {
                close_fds(0, -1);
                wait_and_exit(main, true);
            }
            Ok(())
        }
    }
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`: two [`CapData`], capabilities 0-31 then 32-63.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Drops from the bounding set every capability not in `keep` (needs CAP_SETPCAP), so that no
/// program the command execs gains one, even as root.
unsafe fn drop_bounding(keep: u64) -> Result<(), Errno> {
    for cap in 0..64u32 {
        // SAFETY: prctl(2) with integer arguments.
        let has = unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) };
        if has < 0 {
            break; // Past the kernel's last capability.
        }
        if has == 1 && keep & (1 << cap) == 0 {
            cvt(unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) })?;
        }
    }
    Ok(())
}

/// Effective and permitted capabilities become `keep` ∩ permitted, inheritable none (as runc
/// with containerd's default spec). After `setuid` to a user other than root the kernel has
/// cleared permitted already: such a user keeps none, as in containerd without ambient ones.
unsafe fn limit_capabilities(keep: u64) -> Result<(), Errno> {
    let mut header = CapHeader { version: CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget(2)/capset(2) on a version 3 header and two data structs.
    unsafe {
        if libc::syscall(libc::SYS_capget, &mut header as *mut CapHeader, data.as_mut_ptr()) == -1 {
            return Err(Errno::last());
        }
        let permitted = u64::from(data[0].permitted) | (u64::from(data[1].permitted) << 32);
        let set = keep & permitted;
        for (i, d) in data.iter_mut().enumerate() {
            let half = (set >> (32 * i)) as u32;
            *d = CapData { effective: half, permitted: half, inheritable: 0 };
        }
        if libc::syscall(libc::SYS_capset, &mut header as *mut CapHeader, data.as_ptr()) == -1 {
            return Err(Errno::last());
        }
    }
    Ok(())
}

/// Creates the directories (outermost first) that do not exist; stops at the first failure,
/// which entering the directory then reports.
unsafe fn mkdir_all(dirs: &[CString]) {
    for d in dirs {
        // SAFETY: mkdir(2) of a NUL-terminated path.
        if unsafe { libc::mkdir(d.as_ptr(), 0o755) } == -1 && Errno::last() != Errno::EEXIST {
            break;
        }
    }
}

/// Formats `n` in decimal into `buf`; returns the length.
fn write_decimal(buf: &mut [u8], mut n: u64) -> usize {
    let mut tmp = [0u8; 20];
    let mut i = 0;
    loop {
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        i += 1;
        if n == 0 || i == tmp.len() {
            break;
        }
    }
    let len = i.min(buf.len());
    for j in 0..len {
        buf[j] = tmp[i - 1 - j];
    }
    len
}

/// Masks `path` as runc does (`maskPath`): `/dev/null` bound over it, or, for a directory, an
/// empty read-only tmpfs; a path that does not exist is left. Async-signal-safe.
///
/// # Safety
/// `path` is a valid C string (only system calls, for the forked child).
unsafe fn mask_path(path: &CString) -> Result<(), Errno> {
    unsafe {
        let null = std::ptr::null();
        match cvt(libc::mount(c"/dev/null".as_ptr(), path.as_ptr(), null, libc::MS_BIND, null.cast())) {
            Ok(_) | Err(Errno::ENOENT) => Ok(()),
            Err(Errno::ENOTDIR) => {
                let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                cvt(libc::mount(c"tmpfs".as_ptr(), path.as_ptr(), c"tmpfs".as_ptr(), flags, null.cast())).map(drop)
            }
            Err(e) => Err(e),
        }
    }
}

/// Makes `path` read-only as runc does (`readonlyPath`): bound on itself, then remounted
/// read-only (keeping procfs' `nosuid`, `nodev`, `noexec`); a path that does not exist is left.
/// Async-signal-safe.
///
/// # Safety
/// `path` is a valid C string (only system calls, for the forked child).
unsafe fn read_only_path(path: &CString) -> Result<(), Errno> {
    unsafe {
        let null = std::ptr::null();
        let p = path.as_ptr();
        match cvt(libc::mount(p, p, null, libc::MS_BIND | libc::MS_REC, null.cast())) {
            Err(Errno::ENOENT) => return Ok(()),
            r => r?,
        };
        let flags =
            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        cvt(libc::mount(p, p, null, flags, null.cast())).map(drop)
    }
}

/// This process's pid in the host's PID namespace: `/proc` is the host's, so `/proc/self`
/// names it even inside a PID namespace.
unsafe fn host_pid() -> libc::pid_t {
    let mut buf = [0u8; 24];
    // SAFETY: readlink(2) into a stack buffer.
    let n = unsafe { libc::readlink(c"/proc/self".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n <= 0 {
        return unsafe { libc::getpid() };
    }
    let mut pid: libc::pid_t = 0;
    for &c in &buf[..n as usize] {
        if !c.is_ascii_digit() {
            return unsafe { libc::getpid() };
        }
        pid = pid * 10 + (c - b'0') as libc::pid_t;
    }
    pid
}

/// Closes every descriptor from `from` on, except `keep`.
unsafe fn close_fds(from: RawFd, keep: RawFd) {
    unsafe {
        let range = |a: RawFd, b: libc::c_uint| {
            if libc::syscall(libc::SYS_close_range, a as libc::c_uint, b, 0) == -1 {
                let top = (libc::sysconf(libc::_SC_OPEN_MAX).clamp(1024, 65536) as libc::c_uint).min(b);
                let mut fd = a as libc::c_uint;
                while fd <= top {
                    libc::close(fd as RawFd);
                    fd += 1;
                }
            }
        };
        if keep >= from {
            if keep > from {
                range(from, (keep - 1) as libc::c_uint);
            }
            range(keep + 1, libc::c_uint::MAX);
        } else {
            range(from, libc::c_uint::MAX);
        }
    }
}

/// Waits for `child` (as a namespace's init: reaping every other child too) and exits with its
/// code, or 128 + the signal that killed it.
unsafe fn wait_and_exit(child: libc::pid_t, init: bool) -> ! {
    unsafe {
        loop {
            let mut st = 0;
            let r = libc::waitpid(if init { -1 } else { child }, &mut st, 0);
            if r == child {
                if libc::WIFEXITED(st) {
                    libc::_exit(libc::WEXITSTATUS(st));
                }
                if libc::WIFSIGNALED(st) {
                    libc::_exit(128 + libc::WTERMSIG(st));
                }
            } else if r == -1 && Errno::last() != Errno::EINTR {
                libc::_exit(128);
            }
        }
    }
}

/// A pipe whose ends close on exec: (read, write).
pub fn report_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2(2) fills two new descriptors that we then own.
    unsafe {
        cvt(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC))?;
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

/// Reads a report pipe to its end (every writer has closed or exec'd), waiting at most 10 s.
pub fn read_report(fd: OwnedFd) -> Vec<u8> {
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut buf = [0u8; 256];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: poll(2) and read(2) on a descriptor we own.
        let n = unsafe {
            if libc::poll(&mut pfd, 1, left.as_millis().max(1) as libc::c_int) <= 0 {
                if Errno::last() == Errno::EINTR {
                    continue;
                }
                return out;
            }
            libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len())
        };
        match n {
            0 => return out,
            n if n > 0 => out.extend_from_slice(&buf[..n as usize]),
            _ if Errno::last() == Errno::EINTR => {}
            _ => return out,
        }
    }
}

/// The namespaces (`mnt`, `uts`, `pid`) of `pid` that differ from this process's, opened to join.
fn foreign_namespaces(pid: u32) -> io::Result<Vec<(File, libc::c_int)>> {
    let mut out = Vec::new();
    for (name, flag) in [("mnt", libc::CLONE_NEWNS), ("uts", libc::CLONE_NEWUTS), ("pid", libc::CLONE_NEWPID)] {
        let theirs = format!("/proc/{pid}/ns/{name}");
        let mine = std::fs::metadata(format!("/proc/self/ns/{name}"))?;
        let f = File::open(&theirs)?;
        let meta = f.metadata()?;
        if (meta.dev(), meta.ino()) != (mine.dev(), mine.ino()) {
            out.push((f, flag));
        }
    }
    Ok(out)
}

/// The user, group and supplementary groups of a `/proc/<pid>/status` (real ids).
pub fn status_identity(status: &str) -> Option<Identity> {
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
    let first = |name: &str| field(name)?.split_whitespace().next()?.parse().ok();
    let groups = field("Groups:")?.split_whitespace().map(str::parse).collect::<Result<Vec<u32>, _>>().ok()?;
    Some(Identity { uid: first("Uid:")?, gid: first("Gid:")?, groups })
}

/// Makes `cmd` join the mount, UTS and PID namespaces of `pid` (those that differ from ours)
/// and, with `enter_cwd`, its working directory. As root, the command also takes the process's
/// user and groups (a container's `runAsUser`), as `kubectl exec` runs as the container's user;
/// it keeps the caller's capabilities (the in-place restart examples `mount` a tmpfs through
/// `jobset exec`), which a user other than root loses with `setuid`. Joining a PID namespace places only children in
/// it: the spawned process forks, runs the command in its child (pid in the container's
/// `/proc`, parent-death signal SIGKILL) and exits with the child's code.
pub fn join(cmd: &mut std::process::Command, pid: u32, enter_cwd: bool) -> io::Result<()> {
    let namespaces = foreign_namespaces(pid)?;
    // The container's working directory, opened from outside: a path under /tmp would be hidden
    // by the pod's private /tmp once inside its mount namespace.
    let dir = if enter_cwd {
        use std::os::unix::fs::OpenOptionsExt;
        let mut open = std::fs::OpenOptions::new();
        open.read(true).custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC);
        Some(open.open(format!("/proc/{pid}/cwd"))?)
    } else {
        None
    };
    // SAFETY: geteuid(2) cannot fail.
    let identity = if unsafe { libc::geteuid() } == 0 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let id = status_identity(&status)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("no user in /proc/{pid}/status")))?;
        Some(PreparedIdentity { groups: id.groups, gid: id.gid, uid: id.uid })
    } else {
        None
    };
    // SAFETY: setns(2), the identity's system calls and fchdir(2) only; the namespace and
    // directory files stay open in the closure (closed on exec) until the command is dropped.
    unsafe {
        let parent = libc::getpid();
        cmd.pre_exec(move || {
            let mut pid_ns = false;
            let mut parent = parent;
            for (f, flag) in &namespaces {
                cvt(libc::setns(f.as_raw_fd(), *flag))?;
                pid_ns |= *flag == libc::CLONE_NEWPID;
            }
            if pid_ns {
                let child = cvt(libc::fork())?;
                if child > 0 {
                    wait_and_exit(child, false);
                }
                cvt(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0))?;
                // The parent is outside the namespace (ppid 0) unless it died already.
                parent = 0;
                if libc::getppid() != parent {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
            }
            if let Some(id) = &identity {
                id.apply(parent)?;
            }
            if let Some(d) = &dir {
                cvt(libc::fchdir(d.as_raw_fd()))?;
            }
            // As the container's own processes: runc's 022, not `jobset up`'s private 077.
            libc::umask(0o022);
            Ok(())
        });
    }
    Ok(())
}

/// The pid in a process runtime container ID: `process://<pid>-<n>`, where `<pid>` is the host
/// pid of the process running the container's command and `<n>` tells runs apart.
pub fn container_pid(container_id: &str) -> Option<u32> {
    let rest = container_id.strip_prefix("process://")?;
    rest.split_once('-').map_or(rest, |(pid, _)| pid).parse().ok()
}

/// A command that runs `argv` in the container whose command runs as `container_pid` (see
/// [`container_pid`]): in its mount and UTS namespaces, with its environment
/// (`/proc/<pid>/environ`) and working directory. For `jobset exec`; needs the privileges the
/// runtime had (root) when the container is isolated. The caller sets stdio and spawns.
pub fn exec_command(container_pid: u32, argv: &[String]) -> io::Result<std::process::Command> {
    let Some((program, args)) = argv.split_first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "exec: no command given"));
    };
    let environ = std::fs::read(format!("/proc/{container_pid}/environ"))?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(args).env_clear();
    for entry in environ.split(|b| *b == 0).filter(|e| !e.is_empty()) {
        let text = String::from_utf8_lossy(entry);
        if let Some((k, v)) = text.split_once('=') {
            cmd.env(k, v);
        }
    }
    join(&mut cmd, container_pid, true)?;
    Ok(cmd)
}

/// A hostname for `sethostname(2)`: at most 64 bytes, no NUL; `None` when empty.
pub fn hostname(name: &str) -> Option<CString> {
    let mut end = name.len().min(64);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    CString::new(&name[..end]).ok().filter(|c| !c.as_bytes().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_carry_the_pid() {
        assert_eq!(container_pid("process://1234-7"), Some(1234));
        assert_eq!(container_pid("process://99"), Some(99));
        assert_eq!(container_pid("containerd://abc"), None);
    }

    #[test]
    fn decimal_and_ancestors() {
        let mut buf = [0u8; 8];
        let n = write_decimal(&mut buf, 40213);
        assert_eq!(&buf[..n], b"40213");
        let n = write_decimal(&mut buf, 0);
        assert_eq!(&buf[..n], b"0");
        let a = ancestors(Path::new("/a/b/c"), true).unwrap();
        assert_eq!(a, [c"/a".to_owned(), c"/a/b".to_owned(), c"/a/b/c".to_owned()]);
        let a = ancestors(Path::new("/a/b/f"), false).unwrap();
        assert_eq!(a, [c"/a".to_owned(), c"/a/b".to_owned()]);
    }

    #[test]
    fn reports_name_the_failed_step() {
        let setup = ChildSetup {
            agent: 1,
            mount_ns: true,
            hostname: None,
            mounts: vec![
                BindMount::new("mounting volume \"v\" at /x".into(), Path::new("/"), Path::new("/x"), false).unwrap(),
            ],
            pid_ns: false,
            workdir: None,
            stage: None,
            hide: Vec::new(),
            read_only_root: false,
            identity: None,
            private_proc: false,
            capabilities: None,
            no_new_privs: false,
            masked: Vec::new(),
            read_only: Vec::new(),
        };
        assert_eq!(setup.read_report(b"P42\n"), (Some(42), None));
        assert_eq!(setup.read_report(b"E11\n").1.as_deref(), Some("mounting volume \"v\" at /x"));
        assert_eq!(setup.read_report(b"E10\n").1.as_deref(), Some("masking /proc and /sys paths"));
        assert_eq!(
            setup.read_report(b"P42\nE7\n"),
            (Some(42), Some("setting the user and groups (securityContext)".into()))
        );
    }

    #[test]
    fn proc_paths_are_masked_in_a_mount_namespace_when_asked() {
        let masked = |mount_ns, mask_paths| {
            let setup = SandboxPlan { mount_ns, mask_paths, ..SandboxPlan::default() }.child_setup(1).unwrap();
            (setup.masked.len(), setup.read_only.len())
        };
        assert_eq!(masked(true, true), (MASKED_PATHS.len(), READ_ONLY_PATHS.len()));
        assert_eq!(masked(true, false), (0, 0), "privileged");
        assert_eq!(masked(false, true), (0, 0), "no mount namespace: the host's own paths");
        let setup = SandboxPlan { mount_ns: true, mask_paths: true, ..SandboxPlan::default() }.child_setup(1).unwrap();
        assert_eq!(setup.masked[2], c"/proc/kcore".to_owned());
        assert_eq!(setup.read_only[3], c"/proc/sys".to_owned());
    }

    fn memory_volume(files: &[(&str, u32)], dirs: &[&str]) -> MemoryVolume {
        MemoryVolume {
            name: "sec".into(),
            files: files
                .iter()
                .map(|(p, m)| MemoryFile { path: p.into(), data: b"s3cr3t".to_vec(), mode: *m })
                .collect(),
            dir_mode: 0o2755,
            gid: Some(2000),
            dirs: dirs.iter().map(PathBuf::from).collect(),
        }
    }

    #[test]
    fn in_memory_volumes_are_staged_one_directory_each_parents_first() {
        let volumes = [memory_volume(&[("a/b/key", 0o400), ("top", 0o644)], &["sub"]), memory_volume(&[], &[])];
        let stage = Stage::new(Path::new("/state"), &volumes).unwrap();
        let dirs: Vec<(&str, u32, Option<u32>)> =
            stage.dirs.iter().map(|(d, m, g)| (d.to_str().unwrap(), *m, *g)).collect();
        assert_eq!(
            dirs,
            [
                ("/state/0", 0o2755, Some(2000)),
                ("/state/0/sub", 0o2755, Some(2000)),
                ("/state/0/a", 0o2755, Some(2000)),
                ("/state/0/a/b", 0o2755, Some(2000)),
                ("/state/1", 0o2755, Some(2000)),
            ]
        );
        let files: Vec<(&str, u32)> = stage.files.iter().map(|f| (f.path.to_str().unwrap(), f.mode)).collect();
        assert_eq!(files, [("/state/0/a/b/key", 0o400), ("/state/0/top", 0o644)]);
        assert!(!format!("{stage:?}{volumes:?}").contains("s3cr3t"), "no secret in debug output");
        let escaping = [memory_volume(&[("../out", 0o644)], &[])];
        assert!(Stage::new(Path::new("/state"), &escaping).is_err());
    }

    #[test]
    fn memory_binds_need_their_volume_and_a_stage() {
        let bind = |volume| Bind {
            what: "mounting volume \"sec\" at /s".into(),
            source: BindSource::Memory { volume, path: PathBuf::from("top"), file: true },
            target: PathBuf::from("/s"),
            read_only: true,
        };
        let plan = SandboxPlan {
            mount_ns: true,
            binds: vec![bind(0)],
            memory: vec![memory_volume(&[("top", 0o644)], &[])],
            stage: Some(PathBuf::from("/state")),
            ..SandboxPlan::default()
        };
        let setup = plan.child_setup(1).unwrap();
        assert_eq!(setup.mounts[0].source.to_str().unwrap(), "/state/0/top");
        assert!(setup.mounts[0].staged && setup.mounts[0].touch.is_some(), "a file, opened once staged");
        let err = SandboxPlan { binds: vec![bind(3)], ..plan.clone() }.child_setup(1).unwrap_err();
        assert!(err.contains("no in-memory volume 3"), "{err}");
        let err = SandboxPlan { stage: None, ..plan }.child_setup(1).unwrap_err();
        assert!(err.contains("staging"), "{err}");
    }

    #[test]
    fn a_process_status_gives_its_user_and_groups() {
        let status = "Name:\tsh\nUid:\t1001\t1001\t1001\t1001\nGid:\t3000\t3000\t3000\t3000\nGroups:\t2000 4000 \n";
        assert_eq!(status_identity(status), Some(Identity { uid: 1001, gid: 3000, groups: vec![2000, 4000] }));
        let none = "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\n";
        assert_eq!(status_identity(none), Some(Identity { uid: 0, gid: 0, groups: vec![] }));
        assert_eq!(status_identity("Name:\tx\n"), None);
    }
}
