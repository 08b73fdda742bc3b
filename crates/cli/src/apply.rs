//! Sending manifest objects to the server: `jobset apply` (server-side apply) and the create
//! step of `jobset run`. Every object is mapped to a resource before anything is sent.

use std::path::PathBuf;

use clap::Args;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::Request;

use crate::client::{self, ClientArgs};
use crate::kinds::{self, Resource};
use crate::manifest::{self, Doc};
use crate::{Failure, USAGE};

#[derive(Args, Debug)]
pub struct ApplyArgs {
    /// Manifest file (YAML, multi-document, or JSON); `-` reads stdin. Repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// A manifest object and where it goes.
pub struct Target<'a> {
    pub doc: &'a Doc,
    pub resource: Resource,
    /// `None` for cluster-scoped objects.
    pub namespace: Option<String>,
}

impl Target<'_> {
    /// `job.batch/name`.
    pub fn reference(&self) -> String {
        format!("{}/{}", self.resource.singular_ref(), self.doc.name())
    }

    pub fn api(&self, client: &Client) -> Api<DynamicObject> {
        let ar = self.resource.api_resource();
        match &self.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        }
    }

    /// Requests for this target's resource (kube's `Api` does not show the response's warnings).
    fn request(&self) -> Request {
        let ar = self.resource.api_resource();
        Request::new(<DynamicObject as kube::Resource>::url_path(&ar, self.namespace.as_deref()))
    }

    /// POSTs the object; warnings are printed.
    async fn create(&self, client: &Client) -> Result<DynamicObject, kube::Error> {
        let body = serde_json::to_vec(&self.object()).map_err(kube::Error::SerdeError)?;
        let req = self.request().create(&PostParams::default(), body).map_err(kube::Error::BuildRequest)?;
        client::send_warned(client, req).await
    }

    /// Server-side applies the object (forced, field manager `jobset`); warnings are printed.
    async fn apply(&self, client: &Client) -> Result<DynamicObject, kube::Error> {
        let params = PatchParams::apply("jobset").force();
        let req = self
            .request()
            .patch(self.doc.name(), &params, &Patch::Apply(&self.object()))
            .map_err(kube::Error::BuildRequest)?;
        client::send_warned(client, req).await
    }

    /// The object with its namespace filled in.
    pub fn object(&self) -> serde_json::Value {
        let mut obj = self.doc.object.clone();
        if let Some(ns) = &self.namespace {
            obj["metadata"]["namespace"] = serde_json::Value::String(ns.clone());
        }
        obj
    }
}

/// Reads every file (`-`: stdin) into objects, in order. Errors name the file.
pub fn read_files(files: &[PathBuf]) -> Result<Vec<Doc>, Failure> {
    let mut docs = Vec::new();
    for f in files {
        let name = f.display().to_string();
        let text = if name == "-" { std::io::read_to_string(std::io::stdin()) } else { std::fs::read_to_string(f) }
            .map_err(|e| Failure::new(USAGE, format!("error: reading {name}: {e}")))?;
        docs.extend(manifest::parse(&name, &text).map_err(|e| Failure::new(USAGE, format!("error: {e}")))?);
    }
    Ok(docs)
}

/// Maps every object to its resource and namespace (pure): kubectl's "resource mapping not
/// found" for a kind the server does not serve.
pub fn plan<'a>(docs: &'a [Doc], resources: &[Resource], namespace: &str) -> Result<Vec<Target<'a>>, String> {
    docs.iter()
        .map(|doc| {
            let resource = kinds::for_kind(resources, doc.api_version(), doc.kind()).ok_or_else(|| {
                let version = doc.api_version().rsplit('/').next().unwrap_or_default();
                format!(
                    "error: resource mapping not found for name: {:?} namespace: {:?} from {:?}: no matches for kind {:?} in version {:?}\nensure CRDs are installed first",
                    doc.name(),
                    doc.namespace().unwrap_or_default(),
                    doc.file,
                    doc.kind(),
                    if doc.api_version().contains('/') { doc.api_version() } else { version },
                )
            })?;
            let namespace = resource.namespaced.then(|| doc.namespace().unwrap_or(namespace).to_string());
            Ok(Target { doc, resource: resource.clone(), namespace })
        })
        .collect()
}

/// What was done before an error, for the error message.
pub fn before_the_error(done: &[String], verb: &str) -> String {
    if done.is_empty() {
        format!("nothing was {verb} before the error")
    } else {
        format!("{verb} before the error: {}", done.join(", "))
    }
}

/// POSTs every target in order; stops at the first error, naming what was created before it.
pub async fn create_all(client: &Client, targets: &[Target<'_>]) -> Result<Vec<DynamicObject>, Failure> {
    let mut created = Vec::new();
    let mut names = Vec::new();
    for t in targets {
        let _: DynamicObject = serde_json::from_value(t.object())
            .map_err(|e| Failure::new(USAGE, format!("error: {}: {}: {e}", t.doc.file, t.reference())))?;
        match t.create(client).await {
            Ok(o) => {
                println!("{} created", t.reference());
                names.push(t.reference());
                created.push(o);
            }
            Err(e) => {
                let code = if client::is_client_error(&e) { USAGE } else { 1 };
                let head = match &e {
                    kube::Error::Api(s) => format!(
                        "Error from server ({}): error when creating {:?}: {}",
                        client::reason(s),
                        t.doc.file,
                        s.message
                    ),
                    other => format!("error: creating {} from {:?}: {other}", t.reference(), t.doc.file),
                };
                return Err(Failure::new(code, format!("{head}\n{}", before_the_error(&names, "created"))));
            }
        }
    }
    Ok(created)
}

pub async fn run(args: ApplyArgs) -> anyhow::Result<i32> {
    let docs = read_files(&args.files)?;
    let conn = client::connect(&args.client).await?;
    let resources = kinds::discover(&conn.client).await?;
    let targets = plan(&docs, &resources, &conn.namespace).map_err(|m| Failure::new(1, m))?;
    let mut done = Vec::new();
    for t in &targets {
        let api = t.api(&conn.client);
        let name = t.doc.name();
        let before = api.get_opt(name).await.map_err(|e| Failure::new(1, client::server_error(&e)))?;
        match t.apply(&conn.client).await {
            Ok(after) => {
                let verb = match before {
                    None => "created",
                    Some(b) if b.metadata.resource_version == after.metadata.resource_version => "unchanged",
                    Some(_) => "configured",
                };
                println!("{} {verb}", t.reference());
                done.push(t.reference());
            }
            Err(e) => {
                let head = match &e {
                    kube::Error::Api(s) => format!(
                        "Error from server ({}): error when applying {:?}: {}",
                        client::reason(s),
                        t.doc.file,
                        s.message
                    ),
                    other => format!("error: applying {}: {other}", t.reference()),
                };
                return Err(Failure::new(1, format!("{head}\n{}", before_the_error(&done, "applied"))).into());
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::fake;

    #[test]
    fn plans_map_kinds_and_namespaces() {
        let text = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: x}\n---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: b, namespace: other}\n";
        let docs = manifest::parse("f.yaml", text).unwrap();
        let resources = [fake("batch", "Job", "jobs", &[], true), fake("", "Node", "nodes", &["no"], false)];
        let mut resources = resources.to_vec();
        resources[0].version = "v1".into();
        let targets = plan(&docs, &resources, "dflt").unwrap();
        let got: Vec<_> = targets.iter().map(|t| (t.reference(), t.namespace.clone())).collect();
        assert_eq!(
            got,
            [
                ("job.batch/a".into(), Some("dflt".into())),
                ("node/x".into(), None),
                ("job.batch/b".into(), Some("other".into()))
            ]
        );
        assert_eq!(targets[0].object()["metadata"]["namespace"], "dflt");
    }

    #[test]
    fn unknown_kinds_are_reported_like_kubectl() {
        let docs = manifest::parse("x.yaml", "apiVersion: v1\nkind: Foo\nmetadata: {name: x}\n").unwrap();
        let err = plan(&docs, &[], "default").err().unwrap();
        assert!(
            err.starts_with(
                r#"error: resource mapping not found for name: "x" namespace: "" from "x.yaml": no matches for kind "Foo" in version "v1""#
            ),
            "{err}"
        );
        assert_eq!(before_the_error(&[], "created"), "nothing was created before the error");
        assert_eq!(
            before_the_error(&["job.batch/a".into(), "configmap/b".into()], "created"),
            "created before the error: job.batch/a, configmap/b"
        );
    }
}
