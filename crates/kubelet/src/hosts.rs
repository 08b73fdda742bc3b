//! `/etc/hosts` files for pods that share one host (the process runtime): one file per namespace,
//! `<dir>/<namespace>`, naming the namespace's pods and headless Services. The process runtime
//! bind-mounts it onto each container's `/etc/hosts`, so `<hostname>.<subdomain>` (what JobSet
//! and indexed Jobs use) resolves to the other pod's 127.x address without a DNS server.
//!
//! [`render`] is pure; [`run`] keeps the files up to date from watches.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};

/// The cluster domain in the names written.
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// How long changes are collected before the files are rewritten.
const DEBOUNCE: Duration = Duration::from_millis(50);

fn pod_ip(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.pod_ip.as_deref().filter(|ip| !ip.is_empty())
}

fn finished(p: &Pod) -> bool {
    matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

fn ready_or_running(p: &Pod) -> bool {
    let Some(s) = p.status.as_ref() else { return false };
    s.phase.as_deref() == Some("Running")
        || s.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

fn selects(selector: &BTreeMap<String, String>, p: &Pod) -> bool {
    let labels = p.metadata.labels.as_ref();
    selector.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// The hosts file of `namespace` (objects of other namespaces are ignored):
///
/// ```text
/// 127.0.0.1\tlocalhost
/// <ip>\t<hostname>.<subdomain>.<ns>.svc.cluster.local <hostname>.<subdomain> <hostname>   (pods with spec.subdomain)
/// <ip>\t<podname>                                                                        (other pods; plus spec.hostname when set)
/// <ip>\t<svc>.<ns>.svc.cluster.local <svc>                                                (headless Services, per selected pod)
/// ```
///
/// Pods are listed while they have an IP and have not finished; a headless Service (clusterIP
/// `None`, with a selector) lists its pods that are running or ready (any pod with an IP when
/// it publishes not-ready addresses). Lines are sorted by pod name, Services by name.
pub fn render(namespace: &str, pods: &[Pod], services: &[Service]) -> String {
    let mut out = String::from("127.0.0.1\tlocalhost\n");
    let mut pods: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(namespace) && pod_ip(p).is_some() && !finished(p))
        .collect();
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for p in &pods {
        let (Some(ip), Some(name)) = (pod_ip(p), p.metadata.name.as_deref()) else { continue };
        let spec = p.spec.as_ref();
        let hostname = spec.and_then(|s| s.hostname.as_deref()).filter(|h| !h.is_empty());
        match spec.and_then(|s| s.subdomain.as_deref()).filter(|s| !s.is_empty()) {
            Some(sub) => {
                let h = hostname.unwrap_or(name);
                out.push_str(&format!("{ip}\t{h}.{sub}.{namespace}.svc.{CLUSTER_DOMAIN} {h}.{sub} {h}\n"));
            }
            None => match hostname.filter(|h| *h != name) {
                Some(h) => out.push_str(&format!("{ip}\t{name} {h}\n")),
                None => out.push_str(&format!("{ip}\t{name}\n")),
            },
        }
    }
    let mut services: Vec<&Service> =
        services.iter().filter(|s| s.metadata.namespace.as_deref() == Some(namespace)).collect();
    services.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for svc in services {
        let Some(spec) = &svc.spec else { continue };
        let (Some(name), Some(selector)) = (svc.metadata.name.as_deref(), spec.selector.as_ref()) else { continue };
        if spec.cluster_ip.as_deref() != Some("None") || selector.is_empty() {
            continue;
        }
        let not_ready_too = spec.publish_not_ready_addresses == Some(true);
        for p in pods.iter().filter(|p| selects(selector, p) && (not_ready_too || ready_or_running(p))) {
            let ip = pod_ip(p).unwrap_or_default();
            out.push_str(&format!("{ip}\t{name}.{namespace}.svc.{CLUSTER_DOMAIN} {name}\n"));
        }
    }
    out
}

/// Rewrites `path` with `content` in place (truncate and write, keeping the inode a bind mount
/// pins), creating it when missing.
pub fn write_in_place(path: &Path, content: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(path)?;
    readable(&f)?;
    f.write_all(content.as_bytes())
}

/// Mode 0644 whatever the umask (`jobset up` runs with 077): a container of any `runAsUser` reads
/// its `/etc/hosts`, as the kubelet's 0644 file.
fn readable(f: &std::fs::File) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(0o644))
}

/// Creates `<dir>/<namespace>` with only `localhost` when it does not exist yet (so a container
/// can mount it before [`run`] catches up). Returns its path.
pub fn ensure(dir: &Path, namespace: &str) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(namespace);
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
        Ok(mut f) => {
            readable(&f)?;
            f.write_all(render(namespace, &[], &[]).as_bytes())?
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    Ok(path)
}

/// Writes the files whose content changed since `written`.
fn sync(dir: &Path, pods: &[Pod], services: &[Service], written: &mut HashMap<String, String>) {
    let mut namespaces: BTreeSet<String> = written.keys().cloned().collect();
    namespaces.extend(pods.iter().filter_map(|p| p.metadata.namespace.clone()));
    namespaces.extend(services.iter().filter_map(|s| s.metadata.namespace.clone()));
    if let Err(e) = std::fs::create_dir_all(dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "creating the hosts directory");
        return;
    }
    for ns in namespaces {
        if ns.is_empty() || ns.contains('/') {
            continue;
        }
        let content = render(&ns, pods, services);
        if written.get(&ns) == Some(&content) {
            continue;
        }
        let path = dir.join(&ns);
        match write_in_place(&path, &content) {
            Ok(()) => {
                written.insert(ns, content);
            }
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "writing a hosts file"),
        }
    }
}

/// Keeps `<dir>/<namespace>` up to date from cluster-wide watches of Pods and Services; files are
/// rewritten in place, only when their content changes, at most every 50 ms. Runs until the
/// watches end (never, in practice: drop or abort the task to stop it).
pub async fn run(client: Client, dir: PathBuf) {
    let (pod_store, pod_writer) = reflector::store::<Pod>();
    let (svc_store, svc_writer) = reflector::store::<Service>();
    let pods = reflector(pod_writer, watcher(Api::<Pod>::all(client.clone()), watcher::Config::default()))
        .default_backoff()
        .boxed();
    let services = reflector(svc_writer, watcher(Api::<Service>::all(client), watcher::Config::default()))
        .default_backoff()
        .boxed();
    let (mut pods, mut services) = (pods, services);
    let (mut pods_listed, mut services_listed) = (false, false);
    let mut written = HashMap::new();
    let mut due: Option<tokio::time::Instant> = None;
    loop {
        let at = due.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            ev = pods.next() => match ev {
                None => break,
                Some(Ok(watcher::Event::InitDone)) => pods_listed = true,
                Some(Ok(watcher::Event::Init | watcher::Event::InitApply(_))) => {}
                Some(Ok(_)) => {}
                Some(Err(e)) => { tracing::debug!(error = %e, "hosts: pod watch"); continue }
            },
            ev = services.next() => match ev {
                None => break,
                Some(Ok(watcher::Event::InitDone)) => services_listed = true,
                Some(Ok(_)) => {}
                Some(Err(e)) => { tracing::debug!(error = %e, "hosts: service watch"); continue }
            },
            _ = tokio::time::sleep_until(at), if due.is_some() => {
                due = None;
                let pods: Vec<Pod> = pod_store.state().iter().map(|p| (**p).clone()).collect();
                let services: Vec<Service> = svc_store.state().iter().map(|s| (**s).clone()).collect();
                sync(&dir, &pods, &services, &mut written);
                continue;
            }
        }
        if pods_listed && services_listed && due.is_none() {
            due = Some(tokio::time::Instant::now() + DEBOUNCE);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    fn running(name: &str, ip: &str, spec: serde_json::Value, labels: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([]);
        pod(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": spec,
            "status": {"phase": "Running", "podIP": ip}
        }))
    }

    #[test]
    fn renders_pods_and_headless_services() {
        let pods = vec![
            running(
                "js-w-0-0-abc",
                "127.1.0.2",
                json!({"hostname": "js-w-0-0", "subdomain": "js"}),
                json!({"app": "js"}),
            ),
            running("plain", "127.1.0.3", json!({}), json!({"app": "other"})),
            running("named", "127.1.0.4", json!({"hostname": "alias"}), json!({})),
            running("sub-no-hostname", "127.1.0.5", json!({"subdomain": "js"}), json!({"app": "js"})),
            pod(json!({"metadata": {"name": "pending", "namespace": "ns", "labels": {"app": "js"}},
                "spec": {"containers": []}, "status": {"phase": "Pending", "podIP": "127.1.0.6"}})),
            pod(
                json!({"metadata": {"name": "no-ip", "namespace": "ns"}, "spec": {"containers": []}, "status": {"phase": "Pending"}}),
            ),
            pod(json!({"metadata": {"name": "done", "namespace": "ns"}, "spec": {"containers": []},
                "status": {"phase": "Succeeded", "podIP": "127.1.0.7"}})),
            pod(json!({"metadata": {"name": "elsewhere", "namespace": "other"}, "spec": {"containers": []},
                "status": {"phase": "Running", "podIP": "127.1.0.8"}})),
        ];
        let services = vec![
            svc(
                json!({"metadata": {"name": "js", "namespace": "ns"}, "spec": {"clusterIP": "None", "selector": {"app": "js"}}}),
            ),
            svc(
                json!({"metadata": {"name": "vip", "namespace": "ns"}, "spec": {"clusterIP": "10.96.0.1", "selector": {"app": "js"}}}),
            ),
            svc(json!({"metadata": {"name": "all", "namespace": "ns"},
                "spec": {"clusterIP": "None", "selector": {"app": "js"}, "publishNotReadyAddresses": true}})),
            svc(
                json!({"metadata": {"name": "js", "namespace": "other"}, "spec": {"clusterIP": "None", "selector": {"app": "js"}}}),
            ),
        ];
        let want = "127.0.0.1\tlocalhost
127.1.0.2\tjs-w-0-0.js.ns.svc.cluster.local js-w-0-0.js js-w-0-0
127.1.0.4\tnamed alias
127.1.0.6\tpending
127.1.0.3\tplain
127.1.0.5\tsub-no-hostname.js.ns.svc.cluster.local sub-no-hostname.js sub-no-hostname
127.1.0.2\tall.ns.svc.cluster.local all
127.1.0.6\tall.ns.svc.cluster.local all
127.1.0.5\tall.ns.svc.cluster.local all
127.1.0.2\tjs.ns.svc.cluster.local js
127.1.0.5\tjs.ns.svc.cluster.local js
";
        assert_eq!(render("ns", &pods, &services), want);
        assert_eq!(render("empty", &pods, &services), "127.0.0.1\tlocalhost\n");
    }

    #[test]
    fn files_are_rewritten_in_place_only_on_change() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = ensure(dir.path(), "ns").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "127.0.0.1\tlocalhost\n");
        let inode = std::fs::metadata(&path).unwrap().ino();
        let pods = vec![running("a", "127.1.0.9", json!({}), json!({}))];
        let mut written = HashMap::new();
        sync(dir.path(), &pods, &[], &mut written);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "127.0.0.1\tlocalhost\n127.1.0.9\ta\n");
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode, "same inode: a bind mount keeps seeing it");
        // Unchanged content is not written again.
        std::fs::write(&path, "edited").unwrap();
        sync(dir.path(), &pods, &[], &mut written);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "edited");
        // ensure() leaves an existing file alone; a namespace whose pods are gone keeps localhost.
        ensure(dir.path(), "ns").unwrap();
        sync(dir.path(), &[], &[], &mut written);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "127.0.0.1\tlocalhost\n");
    }
}
