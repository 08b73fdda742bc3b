//! Discovery documents (`/api`, `/apis`, resource lists), `/version` and the OpenAPI stub kubectl needs.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::resources::{Registry, Subresource};

/// Kubernetes version this server mimics (k8s-openapi `v1_36`).
pub const KUBE_MAJOR: &str = "1";
pub const KUBE_MINOR: &str = "36";

pub fn version() -> Value {
    json!({
        "major": KUBE_MAJOR,
        "minor": KUBE_MINOR,
        "gitVersion": format!("v{KUBE_MAJOR}.{KUBE_MINOR}.0-jobset.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, if cfg!(target_arch = "x86_64") { "amd64" } else { std::env::consts::ARCH }),
    })
}

pub fn core_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
           "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
}

/// group → versions it serves, in registration order (the first is preferred).
fn groups(reg: &Registry) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in reg.all() {
        if d.group.is_empty() {
            continue;
        }
        let versions = out.entry(d.group.clone()).or_default();
        if !versions.contains(&d.version) {
            versions.push(d.version.clone());
        }
    }
    out
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v})).collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs[0].clone()})
}

pub fn group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = groups(reg).iter().map(|(g, vs)| group_json(g, vs)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(reg: &Registry, name: &str) -> Option<Value> {
    let groups = groups(reg);
    let vs = groups.get(name)?;
    let mut g = group_json(name, vs);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

const VERBS: [&str; 8] = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let defs: Vec<_> = reg.all().into_iter().filter(|d| d.group == group && d.version == version).collect();
    if defs.is_empty() {
        return None;
    }
    let mut resources = vec![];
    for d in &defs {
        // A review API is create-only.
        let verbs: &[&str] = if d.review.is_some() { &["create"] } else { &VERBS };
        let mut r = json!({
            "name": d.plural, "singularName": d.singular, "namespaced": d.namespaced, "kind": d.kind, "verbs": verbs,
        });
        if !d.short_names.is_empty() {
            r["shortNames"] = json!(d.short_names);
        }
        if !d.categories.is_empty() {
            r["categories"] = json!(d.categories);
        }
        resources.push(r);
        for s in &d.subresources {
            let (kind, verbs): (&str, &[&str]) = match s {
                Subresource::Status => (&d.kind, &["get", "patch", "update"]),
                Subresource::Log => ("Pod", &["get"]),
                Subresource::Binding => ("Binding", &["create"]),
                Subresource::Eviction => ("Eviction", &["create"]),
                Subresource::Token => ("TokenRequest", &["create"]),
            };
            let (group, version) = match s {
                Subresource::Eviction => ("policy", "v1"),
                Subresource::Token => ("authentication.k8s.io", "v1"),
                _ => ("", ""),
            };
            let mut r = json!({"name": format!("{}/{}", d.plural, s.name()), "singularName": "", "namespaced": d.namespaced, "kind": kind, "verbs": verbs});
            if !group.is_empty() {
                r["group"] = json!(group);
                r["version"] = json!(version);
            }
            resources.push(r);
        }
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

/// The smallest OpenAPI v2 protobuf document kubectl accepts (swagger 2.0, empty paths and
/// definitions): with it, client-side validation passes every kind and `kubectl apply` works
/// without `--validate=false` (measured against kubectl 1.20 and 1.32).
pub const OPENAPI_V2_PB: &[u8] = &[
    0x0a, 0x03, 0x32, 0x2e, 0x30, 0x12, 0x15, 0x0a, 0x0a, 0x4b, 0x75, 0x62, 0x65, 0x72, 0x6e, 0x65, 0x74, 0x65, 0x73,
    0x12, 0x07, 0x76, 0x31, 0x2e, 0x32, 0x30, 0x2e, 0x30, 0x42, 0x00, 0x4a, 0x00,
];
