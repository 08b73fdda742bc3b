//! What this machine offers a node of the process runtime, measured as a kubelet measures it
//! (through cAdvisor) and written as a kubelet writes it: `cpu` a core count, `memory` and
//! `ephemeral-storage` byte counts in their canonical binary-SI form (`24684096Ki`), `pods` 110,
//! `nvidia.com/gpu` when NVIDIA GPUs are present. Allocatable is capacity minus kubelet's default
//! hard eviction thresholds (`memory.available<100Mi`, `nodefs.available<10%`), with no
//! kube-reserved or system-reserved, as a kubelet started without those flags computes it.
//!
//! The CPU count is the one available to this process (affinity and cgroup quota, as
//! [`std::thread::available_parallelism`] reads them), not the machine's online CPUs that
//! cAdvisor counts: pods of the process runtime are children of this process and inherit its limits.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::NodeConfig;

/// Pods per node, kubelet's default `--max-pods`.
pub const MAX_PODS: u64 = 110;
/// kubelet's default hard eviction threshold `memory.available<100Mi`, in bytes.
pub const MEMORY_EVICTION_BYTES: u64 = 100 * 1024 * 1024;
/// kubelet's default hard eviction threshold `nodefs.available<10%` (a `float32`, as kubelet keeps it).
pub const NODEFS_EVICTION_FRACTION: f32 = 0.1;
/// The extended resource NVIDIA's device plugin advertises.
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";

/// What was measured on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// The kernel's hostname, as is.
    pub hostname: String,
    /// CPUs this process may run on.
    pub cpus: u64,
    /// `MemTotal` of /proc/meminfo, in bytes.
    pub memory_bytes: u64,
    /// Size of the filesystem holding the node's state directory, in bytes (`None`: not measured).
    pub storage_bytes: Option<u64>,
    /// NVIDIA GPUs (`/dev/nvidia0`, `/dev/nvidia1`, ...).
    pub gpus: u64,
}

/// A measurement that failed: the file or call that failed, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("measuring this machine: {0}")]
pub struct MeasureError(pub String);

impl Machine {
    /// Measures this machine; `storage` is where the node keeps its state (its nearest existing
    /// ancestor's filesystem is measured, as kubelet measures the filesystem of its root dir).
    pub fn measure(storage: &Path) -> Result<Machine, MeasureError> {
        let read = |path: &str| std::fs::read_to_string(path).map_err(|e| MeasureError(format!("reading {path}: {e}")));
        let hostname = read("/proc/sys/kernel/hostname")?.trim().to_string();
        let memory_bytes = mem_total_bytes(&read("/proc/meminfo")?)
            .ok_or_else(|| MeasureError("/proc/meminfo has no MemTotal line".into()))?;
        let cpus = std::thread::available_parallelism()
            .map_err(|e| MeasureError(format!("counting the CPUs available: {e}")))?
            .get() as u64;
        let devices: Vec<String> = std::fs::read_dir("/dev")
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        Ok(Machine { hostname, cpus, memory_bytes, storage_bytes: filesystem_bytes(storage), gpus: gpu_count(devices) })
    }

    /// The node's `status.capacity`.
    pub fn capacity(&self) -> BTreeMap<String, String> {
        let mut c = BTreeMap::from([
            ("cpu".to_string(), self.cpus.to_string()),
            ("memory".to_string(), binary_si(self.memory_bytes)),
            ("pods".to_string(), MAX_PODS.to_string()),
        ]);
        if let Some(bytes) = self.storage_bytes {
            c.insert("ephemeral-storage".into(), binary_si(bytes));
        }
        if self.gpus > 0 {
            c.insert(NVIDIA_GPU.into(), self.gpus.to_string());
        }
        c
    }

    /// The node's `status.allocatable`: capacity less the default hard eviction thresholds.
    pub fn allocatable(&self) -> BTreeMap<String, String> {
        let mut a = self.capacity();
        a.insert("memory".into(), binary_si(self.memory_bytes.saturating_sub(MEMORY_EVICTION_BYTES)));
        if let Some(bytes) = self.storage_bytes {
            a.insert("ephemeral-storage".into(), binary_si(bytes - nodefs_reservation(bytes)));
        }
        a
    }

    /// Gives `node` this machine's capacity and allocatable (its name and the rest stay).
    pub fn apply(&self, node: &mut NodeConfig) {
        node.capacity = self.capacity();
        node.allocatable = self.allocatable();
    }

    /// The node this machine makes: named after the host, with this machine's capacity.
    pub fn node(&self) -> NodeConfig {
        let mut node = NodeConfig::new(node_name(&self.hostname));
        self.apply(&mut node);
        node
    }
}

/// The kernel's hostname (`/proc/sys/kernel/hostname`), trimmed.
pub fn hostname() -> Result<String, MeasureError> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .map_err(|e| MeasureError(format!("reading /proc/sys/kernel/hostname: {e}")))
}

/// A node name from a hostname, as kubelet derives it (lowercased), made a valid DNS-1123
/// subdomain: characters other than `a-z`, `0-9`, `-` and `.` become `-`, each dot-separated label
/// loses its leading and trailing `-`, empty labels go, and the name is cut to 253 characters.
/// A hostname with nothing usable gives `localhost`.
pub fn node_name(hostname: &str) -> String {
    let lower: String = hostname
        .trim()
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' { c } else { '-' })
        .collect();
    let mut name =
        lower.split('.').map(|l| l.trim_matches('-')).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(".");
    if name.len() > 253 {
        name.truncate(253);
        name = name.trim_end_matches(['-', '.']).to_string();
    }
    if name.is_empty() { "localhost".to_string() } else { name }
}

/// `MemTotal` of /proc/meminfo's text, in bytes (the kernel writes `kB`, meaning KiB).
pub fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
    let mut words = line.split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

/// How many of these `/dev` entry names are NVIDIA GPUs (`nvidia0`, `nvidia1`, ..., not
/// `nvidiactl` or `nvidia-uvm`).
pub fn gpu_count(dev_entries: impl IntoIterator<Item = String>) -> u64 {
    dev_entries
        .into_iter()
        .filter(|n| n.strip_prefix("nvidia").is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit())))
        .count() as u64
}

/// A byte count as a Kubernetes quantity in canonical binary-SI form, as kubelet writes memory
/// and storage: the largest of `Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei` that divides it exactly, else
/// plain bytes.
pub fn binary_si(bytes: u64) -> String {
    let mut n = bytes;
    let mut suffix = "";
    for s in ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"] {
        if n == 0 || !n.is_multiple_of(1024) {
            break;
        }
        n /= 1024;
        suffix = s;
    }
    format!("{n}{suffix}")
}

/// What the `nodefs.available` threshold keeps back of `bytes`, computed as kubelet's
/// `GetThresholdQuantity` does (a float32 fraction of the capacity, truncated).
fn nodefs_reservation(bytes: u64) -> u64 {
    (bytes as f64 * f64::from(NODEFS_EVICTION_FRACTION)) as u64
}

/// The size of the filesystem holding `path` or its nearest existing ancestor.
fn filesystem_bytes(path: &Path) -> Option<u64> {
    let mut p: Option<PathBuf> = Some(path.to_path_buf());
    while let Some(dir) = p {
        if let Ok(s) = nix::sys::statvfs::statvfs(&dir) {
            // Both are 32 bits wide on some targets.
            #[allow(clippy::unnecessary_cast)]
            return (s.blocks() as u64).checked_mul(s.fragment_size() as u64);
        }
        p = dir.parent().map(Path::to_path_buf);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_name_is_the_hostname_lowercased_as_a_dns_subdomain() {
        let long = "a".repeat(300);
        for (host, want) in [
            ("vm", "vm"),
            ("My-Laptop.Local\n", "my-laptop.local"),
            ("host_name", "host-name"),
            ("-edge-.x..y-", "edge.x.y"),
            ("Ünïcode", "n-code"),
            ("___", "localhost"),
            ("", "localhost"),
            (long.as_str(), &long[..253]),
        ] {
            assert_eq!(node_name(host), want, "hostname {host:?}");
        }
        let cut = format!("{}-b", "a".repeat(252));
        assert_eq!(node_name(&cut), "a".repeat(252), "no trailing dash after the cut");
    }

    #[test]
    fn mem_total_is_read_in_kib_from_meminfo() {
        let meminfo = "MemTotal:       24684096 kB\nMemFree:         1000 kB\n";
        assert_eq!(mem_total_bytes(meminfo), Some(24684096 * 1024));
        assert_eq!(mem_total_bytes("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total_bytes("MemTotal: lots kB\n"), None);
        assert_eq!(mem_total_bytes("MemTotal: 5 MB\n"), None);
    }

    #[test]
    fn quantities_are_written_in_canonical_binary_si() {
        for (bytes, want) in [
            (0, "0"),
            (1000, "1000"),
            (1024, "1Ki"),
            (24684096 * 1024, "24684096Ki"),
            (16 << 30, "16Gi"),
            ((1 << 20) + 1024, "1025Ki"),
        ] {
            assert_eq!(binary_si(bytes), want, "{bytes} bytes");
        }
    }

    #[test]
    fn gpus_are_the_numbered_nvidia_devices() {
        let devs = ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia", "null", "nvidia12"];
        assert_eq!(gpu_count(devs.map(String::from)), 3);
        assert_eq!(gpu_count(Vec::new()), 0);
    }

    #[test]
    fn capacity_and_allocatable_are_what_a_kubelet_reports() {
        let m = Machine {
            hostname: "Box".into(),
            cpus: 8,
            memory_bytes: 16 << 30,
            storage_bytes: Some(100 << 30),
            gpus: 0,
        };
        let q = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(
            m.capacity(),
            q(&[("cpu", "8"), ("memory", "16Gi"), ("pods", "110"), ("ephemeral-storage", "100Gi")])
        );
        assert_eq!(
            m.allocatable(),
            q(&[("cpu", "8"), ("memory", "16284Mi"), ("pods", "110"), ("ephemeral-storage", "96636764000")])
        );
        let gpus = Machine { gpus: 2, storage_bytes: None, ..m.clone() };
        assert_eq!(gpus.capacity().get(NVIDIA_GPU).map(String::as_str), Some("2"));
        assert!(!gpus.capacity().contains_key("ephemeral-storage"));
        let node = m.node();
        assert_eq!(node.name, "box");
        assert_eq!(node.effective_capacity(), m.capacity());
        assert_eq!(node.effective_allocatable(), m.allocatable());
    }

    #[test]
    fn measuring_this_machine_reads_proc() {
        let m = Machine::measure(Path::new("/nonexistent/state")).unwrap();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        assert_eq!(m.memory_bytes, mem_total_bytes(&meminfo).unwrap());
        assert_eq!(m.cpus, std::thread::available_parallelism().unwrap().get() as u64);
        assert!(m.storage_bytes.is_some_and(|b| b > 0), "the root filesystem has a size");
    }
}
