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
    target: CString,
    read_only: bool,
}

impl BindMount {
    /// `source` must exist (a file source gets a file mount point).
    pub fn new(what: String, source: &Path, target: &Path, read_only: bool) -> io::Result<BindMount> {
        let file = std::fs::metadata(source).map(|m| !m.is_dir())?;
        Ok(BindMount {
            what,
            mkdirs: ancestors(target, !file)?,
            touch: if file { Some(cstring(target)?) } else { None },
            source: cstring(source)?,
            source_fd: AtomicI32::new(-1),
            target: cstring(target)?,
            read_only,
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
            // "/proc/self/fd/<n>\0" in a stack buffer.
            let fd = self.source_fd.load(Ordering::Relaxed);
            let mut path = [0u8; 40];
            let prefix = b"/proc/self/fd/";
            path[..prefix.len()].copy_from_slice(prefix);
            let n = write_decimal(&mut path[prefix.len()..prefix.len() + 12], fd.max(0) as u64);
            path[prefix.len() + n] = 0;
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
                let flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;
                cvt(libc::mount(null, self.target.as_ptr(), null, flags, null.cast()))?;
            }
            Ok(())
        }
    }
}

/// One bind mount as the agent plans it: plain data, sent to the container's supervisor
/// ([`super::shim`]), which turns it into a [`BindMount`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bind {
    /// For error messages.
    pub what: String,
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
}

/// What a container's sandbox needs (namespaces, mounts, hostname, working directory), as plain
/// data: the agent prepares the directories and files, the supervisor builds the
/// [`ChildSetup`] from it ([`SandboxPlan::child_setup`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SandboxPlan {
    pub mount_ns: bool,
    /// Set with `mount_ns` and UTS namespaces only.
    pub hostname: Option<String>,
    pub binds: Vec<Bind>,
    pub pid_ns: bool,
    pub working_dir: Option<PathBuf>,
}

impl SandboxPlan {
    /// The setup of a child of process `parent`; an error names what could not be prepared.
    pub fn child_setup(&self, parent: libc::pid_t) -> Result<ChildSetup, String> {
        let mut mounts = Vec::with_capacity(self.binds.len());
        for b in &self.binds {
            let m = BindMount::new(b.what.clone(), &b.source, &b.target, b.read_only)
                .map_err(|e| format!("{} (from {}): {e}", b.what, b.source.display()))?;
            mounts.push(m);
        }
        let workdir = match &self.working_dir {
            Some(d) => Some(ChildSetup::workdir(d).map_err(|e| format!("working directory {}: {e}", d.display()))?),
            None => None,
        };
        Ok(ChildSetup {
            agent: parent,
            mount_ns: self.mount_ns,
            hostname: if self.mount_ns { self.hostname.as_deref().and_then(hostname) } else { None },
            mounts,
            pid_ns: self.pid_ns,
            workdir,
        })
    }
}

/// Steps of [`ChildSetup`] named in failure reports (mount `i` is `STEP_MOUNT + i`).
const STEP_NAMESPACES: u32 = 0;
const STEP_HOSTNAME: u32 = 1;
const STEP_PID_NAMESPACE: u32 = 2;
const STEP_WORKDIR: u32 = 3;
const STEP_MOUNT: u32 = 10;

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
                for (i, m) in self.mounts.iter().enumerate() {
                    m.open_source().map_err(fail(STEP_MOUNT + i as u32))?;
                }
                for (i, m) in self.mounts.iter().enumerate() {
                    m.apply().map_err(fail(STEP_MOUNT + i as u32))?;
                }
            }
            if self.pid_ns {
                self.enter_pid_namespace().map_err(fail(STEP_PID_NAMESPACE))?;
                // W: signals as the command expects them.
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            }
            Self::report(report, b'P', host_pid() as u64);
            if let Some((mkdirs, dir)) = &self.workdir {
                for d in mkdirs {
                    if libc::mkdir(d.as_ptr(), 0o755) == -1 && Errno::last() != Errno::EEXIST {
                        break; // chdir reports it
                    }
                }
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

/// The namespaces (`mnt`, `uts`) of `pid` that differ from this process's, opened to join.
fn foreign_namespaces(pid: u32) -> io::Result<Vec<(File, libc::c_int)>> {
    let mut out = Vec::new();
    for (name, flag) in [("mnt", libc::CLONE_NEWNS), ("uts", libc::CLONE_NEWUTS)] {
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

/// Makes `cmd` join the mount and UTS namespaces of `pid` (those that differ from ours) and,
/// with `enter_cwd`, its working directory.
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
    // SAFETY: setns(2) and fchdir(2) only; the namespace and directory files stay open in the
    // closure (closed on exec) until the command is dropped.
    unsafe {
        cmd.pre_exec(move || {
            for (f, flag) in &namespaces {
                cvt(libc::setns(f.as_raw_fd(), *flag))?;
            }
            if let Some(d) = &dir {
                cvt(libc::fchdir(d.as_raw_fd()))?;
            }
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
        };
        assert_eq!(setup.read_report(b"P42\n"), (Some(42), None));
        assert_eq!(setup.read_report(b"E10\n").1.as_deref(), Some("mounting volume \"v\" at /x"));
    }
}
