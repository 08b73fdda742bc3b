//! Resource resolution like kubectl: `po`, `pods`, `pod`, `Pod`, `jobs.batch`, `js`, from the
//! server's discovery documents (which carry short names, unlike kube's `Discovery`).

use anyhow::Context;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroupList, APIResourceList};
use kube::Client;
use kube::discovery::ApiResource;

/// One servable resource of one group version.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub namespaced: bool,
}

impl Resource {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    pub fn api_resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: self.api_version(),
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }

    /// `job.batch`, `configmap`: how kubectl names objects in `created` lines and `-o name`.
    pub fn singular_ref(&self) -> String {
        with_group(&self.singular, &self.group)
    }

    /// `jobs.batch`, `configmaps`: how the server names the resource in NotFound messages.
    #[cfg(test)]
    pub fn plural_ref(&self) -> String {
        with_group(&self.plural, &self.group)
    }

    /// The collection path: `/api/v1/namespaces/NS/pods`, `/apis/batch/v1/jobs` (all namespaces).
    pub fn collection_path(&self, namespace: Option<&str>) -> String {
        let base = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match namespace.filter(|_| self.namespaced) {
            Some(ns) => format!("{base}/namespaces/{ns}/{}", self.plural),
            None => format!("{base}/{}", self.plural),
        }
    }
}

fn with_group(name: &str, group: &str) -> String {
    if group.is_empty() { name.to_string() } else { format!("{name}.{group}") }
}

/// The resource a user's word names: plural, singular, short name or kind (any case), optionally
/// qualified with a group or group prefix (`jobs.batch`, `jobsets.jobset.x-k8s.io`). Core first.
pub fn resolve<'a>(all: &'a [Resource], word: &str) -> Option<&'a Resource> {
    let word = word.to_ascii_lowercase();
    let candidates = |name: &str, group: Option<&str>| {
        all.iter()
            .filter(move |r| group.is_none_or(|g| r.group == g || r.group.starts_with(&format!("{g}."))))
            .find(|r| {
                r.plural == name
                    || r.singular == name
                    || r.kind.to_ascii_lowercase() == name
                    || r.short_names.iter().any(|s| s == name)
            })
            .cloned()
    };
    let found = candidates(&word, None).or_else(|| {
        let (name, group) = word.split_once('.')?;
        candidates(name, Some(group))
    })?;
    all.iter().find(|r| **r == found)
}

/// The resource of an object's `apiVersion` and `kind`.
pub fn for_kind<'a>(all: &'a [Resource], api_version: &str, kind: &str) -> Option<&'a Resource> {
    all.iter().find(|r| r.api_version() == api_version && r.kind == kind)
}

/// Every resource the server serves: core v1, then each group's versions (preferred first).
pub async fn discover(client: &Client) -> anyhow::Result<Vec<Resource>> {
    let mut out = Vec::new();
    let core: APIResourceList = get(client, "/api/v1").await?;
    out.extend(from_list("", "v1", &core));
    let groups: APIGroupList = get(client, "/apis").await?;
    let mut paths = Vec::new();
    for g in &groups.groups {
        let preferred = g.preferred_version.as_ref().map(|p| p.version.clone());
        let mut versions: Vec<&str> = g.versions.iter().map(|v| v.version.as_str()).collect();
        versions.sort_by_key(|v| Some(*v) != preferred.as_deref());
        for v in versions {
            paths.push((g.name.clone(), v.to_string()));
        }
    }
    let lists = futures::future::join_all(
        paths.iter().map(|(g, v)| async move { get::<APIResourceList>(client, &format!("/apis/{g}/{v}")).await }),
    )
    .await;
    for ((g, v), list) in paths.iter().zip(lists) {
        // A group version that fails discovery (an aggregated API down) is skipped, like kubectl.
        if let Ok(list) = list {
            out.extend(from_list(g, v, &list));
        }
    }
    Ok(out)
}

fn from_list(group: &str, version: &str, list: &APIResourceList) -> Vec<Resource> {
    list.resources
        .iter()
        .filter(|r| !r.name.contains('/'))
        .map(|r| Resource {
            group: group.to_string(),
            version: version.to_string(),
            kind: r.kind.clone(),
            plural: r.name.clone(),
            singular: if r.singular_name.is_empty() { r.kind.to_ascii_lowercase() } else { r.singular_name.clone() },
            short_names: r.short_names.clone().unwrap_or_default(),
            namespaced: r.namespaced,
        })
        .collect()
}

async fn get<T: k8s_openapi::serde::de::DeserializeOwned>(client: &Client, path: &str) -> anyhow::Result<T> {
    let req = http::Request::get(path).body(Vec::new())?;
    client.request::<T>(req).await.with_context(|| format!("discovery: GET {path}"))
}

#[cfg(test)]
pub(crate) fn fake(group: &str, kind: &str, plural: &str, short: &[&str], namespaced: bool) -> Resource {
    Resource {
        group: group.into(),
        version: "v1".into(),
        kind: kind.into(),
        plural: plural.into(),
        singular: kind.to_ascii_lowercase(),
        short_names: short.iter().map(|s| s.to_string()).collect(),
        namespaced,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Resource> {
        vec![
            fake("", "Pod", "pods", &["po"], true),
            fake("", "Event", "events", &["ev"], true),
            fake("", "Node", "nodes", &["no"], false),
            fake("batch", "Job", "jobs", &[], true),
            fake("events.k8s.io", "Event", "events", &["ev"], true),
            fake("jobset.x-k8s.io", "JobSet", "jobsets", &["js"], true),
        ]
    }

    #[test]
    fn words_resolve_like_kubectl() {
        let all = all();
        let name = |w: &str| resolve(&all, w).map(|r| r.plural_ref());
        assert_eq!(name("po").as_deref(), Some("pods"));
        assert_eq!(name("Pod").as_deref(), Some("pods"));
        assert_eq!(name("pod").as_deref(), Some("pods"));
        assert_eq!(name("jobs").as_deref(), Some("jobs.batch"));
        assert_eq!(name("jobs.batch").as_deref(), Some("jobs.batch"));
        assert_eq!(name("job.batch").as_deref(), Some("jobs.batch"));
        assert_eq!(name("ev").as_deref(), Some("events"), "core first");
        assert_eq!(name("events.events.k8s.io").as_deref(), Some("events.events.k8s.io"));
        assert_eq!(name("events.events").as_deref(), Some("events.events.k8s.io"));
        assert_eq!(name("js").as_deref(), Some("jobsets.jobset.x-k8s.io"));
        assert_eq!(name("jobsets.jobset.x-k8s.io").as_deref(), Some("jobsets.jobset.x-k8s.io"));
        assert_eq!(name("foo"), None);
        assert_eq!(name("jobs.core"), None);
    }

    #[test]
    fn names_and_paths() {
        let all = all();
        let job = resolve(&all, "job").unwrap();
        assert_eq!((job.singular_ref(), job.api_version()), ("job.batch".into(), "batch/v1".into()));
        assert_eq!(job.collection_path(Some("x")), "/apis/batch/v1/namespaces/x/jobs");
        assert_eq!(job.collection_path(None), "/apis/batch/v1/jobs");
        let node = resolve(&all, "no").unwrap();
        assert_eq!(node.collection_path(Some("x")), "/api/v1/nodes");
        assert_eq!(for_kind(&all, "batch/v1", "Job"), Some(job));
        assert_eq!(for_kind(&all, "v1", "Job"), None);
    }
}
