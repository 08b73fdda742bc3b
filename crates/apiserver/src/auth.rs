//! Who a request comes from and what a pod's bound token may do.
//!
//! The server's own bearer token (`tls::Credentials::token`) may do anything. Local mode also
//! gives each pod a token bound to it (mounted by the node agent at the usual
//! `/var/run/secrets/kubernetes.io/serviceaccount/token`), so the in-place restart agent inside
//! the pod can use the standard in-cluster configuration. Such a token grants exactly what the
//! in-place restart design's Role and ValidatingAdmissionPolicy grant together, scoped tighter
//! (to the pod's own JobSet and own pod):
//! - discovery (`/api`, `/apis`, ...), as every authenticated user may;
//! - `get` of its own pod, `get` of its own JobSet, `list`/`watch` of JobSets with the field
//!   selector `metadata.name=<its JobSet>`;
//! - `patch` of its own pod (as the shipped Role, config/in-place-restart/rbac.yaml) changing nothing but the annotation
//!   `jobset.sigs.k8s.io/in-place-restart-attempt`.
//!
//! Everything else is 403 with RBAC's wording. A token is `jsp1.<claims>.<HMAC-SHA256>`, keyed by
//! the server token, so it survives an API server restart; it stops working once its pod (same
//! uid) is gone, like a Kubernetes bound service-account token.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::Method;
use ring::hmac;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ApiError;
use crate::resources::ResourceDef;
use crate::selector::FieldSelector;

const PREFIX: &str = "jsp1.";
/// The annotation the in-place restart agent writes on its pod.
pub use jobset_api::jobset::keys::IN_PLACE_RESTART_ATTEMPT;
use jobset_api::jobset::keys::JOBSET_NAME;

/// The authenticated caller of a request (a request extension; none means in-process: admin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum User {
    Admin,
    Pod(PodIdentity),
}

/// The pod a token is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodIdentity {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub service_account: String,
    /// The pod's `jobset.sigs.k8s.io/jobset-name` label when the token was issued.
    pub jobset: Option<String>,
}

impl PodIdentity {
    /// The identity of a pod object (JSON as stored).
    pub fn of(pod: &Value) -> PodIdentity {
        let s = |p: &str| pod.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
        let sa = s("/spec/serviceAccountName");
        PodIdentity {
            namespace: s("/metadata/namespace"),
            pod: s("/metadata/name"),
            uid: s("/metadata/uid"),
            service_account: if sa.is_empty() { "default".into() } else { sa },
            jobset: pod
                .pointer("/metadata/labels")
                .and_then(|l| l.get(JOBSET_NAME))
                .and_then(Value::as_str)
                .map(Into::into),
        }
    }

    /// The user name Kubernetes gives a service account.
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.service_account)
    }
}

/// Issues and checks pod-bound tokens.
pub struct PodTokens {
    key: hmac::Key,
}

impl std::fmt::Debug for PodTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PodTokens(<redacted>)")
    }
}

impl PodTokens {
    /// Keys derived from the server's token: whoever holds that may do anything anyway.
    pub fn new(server_token: &str) -> PodTokens {
        let derive = hmac::Key::new(hmac::HMAC_SHA256, server_token.as_bytes());
        let key = hmac::sign(&derive, b"jobset-rs pod-bound service account tokens v1");
        PodTokens { key: hmac::Key::new(hmac::HMAC_SHA256, key.as_ref()) }
    }

    pub fn issue(&self, id: &PodIdentity) -> String {
        let claims = URL_SAFE_NO_PAD.encode(serde_json::to_vec(id).unwrap_or_default());
        let tag = URL_SAFE_NO_PAD.encode(hmac::sign(&self.key, claims.as_bytes()));
        format!("{PREFIX}{claims}.{tag}")
    }

    /// The identity a token names, if this server issued it (whether the pod still exists is the
    /// caller's check).
    pub fn verify(&self, token: &str) -> Option<PodIdentity> {
        let (claims, tag) = token.strip_prefix(PREFIX)?.split_once('.')?;
        hmac::verify(&self.key, claims.as_bytes(), &URL_SAFE_NO_PAD.decode(tag).ok()?).ok()?;
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).ok()?).ok()
    }
}

/// A request to a resource, as authorization sees it.
pub struct ResourceRequest<'a> {
    pub method: &'a Method,
    pub def: &'a ResourceDef,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
    pub subresource: Option<&'a str>,
    pub watch: bool,
    pub field_selector: Option<&'a str>,
}

impl ResourceRequest<'_> {
    /// RBAC's verb for the request.
    pub fn verb(&self) -> &'static str {
        match (self.method, self.name.is_some()) {
            (&Method::GET, _) if self.watch => "watch",
            (&Method::GET, true) => "get",
            (&Method::GET, false) => "list",
            (&Method::POST, _) => "create",
            (&Method::PUT, _) => "update",
            (&Method::PATCH, _) => "patch",
            (&Method::DELETE, true) => "delete",
            (&Method::DELETE, false) => "deletecollection",
            _ => "unknown",
        }
    }
}

/// Whether a pod-bound token may make this request (the content of a pod write is checked
/// afterwards by [`check_pod_write`]).
pub fn authorize(id: &PodIdentity, r: &ResourceRequest<'_>) -> Result<(), ApiError> {
    let own_ns = r.namespace == Some(id.namespace.as_str());
    let verb = r.verb();
    let allowed = own_ns
        && r.subresource.is_none()
        && match (r.def.group.as_str(), r.def.plural.as_str()) {
            ("", "pods") => r.name == Some(id.pod.as_str()) && matches!(verb, "get" | "patch"),
            ("jobset.x-k8s.io", "jobsets") => id.jobset.as_deref().is_some_and(|js| match verb {
                "get" => r.name == Some(js),
                "list" | "watch" => r.name.is_none() && selects_only(r.field_selector, js),
                _ => false,
            }),
            _ => false,
        };
    if allowed {
        return Ok(());
    }
    let resource = match r.subresource {
        Some(s) => format!("{}/{s}", r.def.plural),
        None => r.def.plural.clone(),
    };
    let scope = match r.namespace {
        Some(ns) => format!(" in the namespace \"{ns}\""),
        None => " at the cluster scope".into(),
    };
    Err(ApiError::forbidden(
        r.def,
        r.name.unwrap_or_default(),
        format!(
            "User \"{}\" cannot {verb} resource \"{resource}\" in API group \"{}\"{scope}",
            id.username(),
            r.def.group
        ),
    ))
}

/// A list or watch restricted by `metadata.name=<name>`.
fn selects_only(selector: Option<&str>, name: &str) -> bool {
    selector.and_then(|s| FieldSelector::parse(s).ok()).is_some_and(|f| f.exact_value("metadata.name") == Some(name))
}

/// A pod-bound token may change only the in-place restart attempt annotation of its pod.
pub fn check_pod_write(id: &PodIdentity, def: &ResourceDef, old: &Value, new: &Value) -> Result<(), ApiError> {
    if comparable(old) == comparable(new) {
        return Ok(());
    }
    Err(ApiError::forbidden(
        def,
        &id.pod,
        format!(
            "User \"{}\" may only change the annotation \"{IN_PLACE_RESTART_ATTEMPT}\" of its own pod",
            id.username()
        ),
    ))
}

/// The object without what the server maintains and the one annotation the agent may write.
fn comparable(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in ["resourceVersion", "managedFields", "generation"] {
            meta.remove(k);
        }
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove(IN_PLACE_RESTART_ATTEMPT);
            if a.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Registry;
    use serde_json::json;

    fn id() -> PodIdentity {
        PodIdentity::of(&json!({
            "metadata": {"name": "w-0", "namespace": "ns", "uid": "u1",
                         "labels": {JOBSET_NAME: "js"}},
            "spec": {"serviceAccountName": "agent-sa"}
        }))
    }

    #[test]
    fn a_token_names_its_pod_and_a_forged_or_foreign_one_names_nobody() {
        let tokens = PodTokens::new("server-secret");
        let t = tokens.issue(&id());
        assert_eq!(tokens.verify(&t), Some(id()));
        assert_eq!(PodTokens::new("other-server").verify(&t), None);
        let (head, _) = t.rsplit_once('.').unwrap();
        let mut other = id();
        other.pod = "w-1".into();
        let forged =
            format!("{PREFIX}{}.{}", URL_SAFE_NO_PAD.encode(serde_json::to_vec(&other).unwrap()), &t[head.len() + 1..]);
        assert_eq!(tokens.verify(&forged), None);
        assert_eq!(tokens.verify("not-a-token"), None);
    }

    /// (case, (method, resource, name), namespace, subresource, fieldSelector, allowed)
    type Case<'a> =
        (&'a str, (&'a Method, &'a str, Option<&'a str>), Option<&'a str>, Option<&'a str>, Option<&'a str>, bool);

    #[test]
    fn a_pod_token_reaches_its_own_pod_and_jobset_only() {
        // JobSets are a preinstalled CRD: served once the server bootstrapped.
        let server = crate::ApiServer::in_memory();
        let reg = server.registry();
        let pods = reg.get("", "v1", "pods").unwrap();
        let jobsets = reg.get("jobset.x-k8s.io", "v1alpha2", "jobsets").unwrap();
        let secrets = reg.get("", "v1", "secrets").unwrap();
        let req = |method: &'static Method, def: &'static str, name: Option<&'static str>| (method, def, name);
        let cases: Vec<Case> = vec![
            // (case, (method, resource, name), namespace, subresource, fieldSelector, allowed)
            ("get own pod", req(&Method::GET, "pods", Some("w-0")), Some("ns"), None, None, true),
            ("patch own pod", req(&Method::PATCH, "pods", Some("w-0")), Some("ns"), None, None, true),
            ("patch another pod", req(&Method::PATCH, "pods", Some("w-1")), Some("ns"), None, None, false),
            ("own pod in another namespace", req(&Method::GET, "pods", Some("w-0")), Some("other"), None, None, false),
            ("own pod's status", req(&Method::PATCH, "pods", Some("w-0")), Some("ns"), Some("status"), None, false),
            ("delete own pod", req(&Method::DELETE, "pods", Some("w-0")), Some("ns"), None, None, false),
            ("list pods", req(&Method::GET, "pods", None), Some("ns"), None, None, false),
            ("get own jobset", req(&Method::GET, "jobsets", Some("js")), Some("ns"), None, None, true),
            ("get another jobset", req(&Method::GET, "jobsets", Some("other")), Some("ns"), None, None, false),
            (
                "list own jobset by name",
                req(&Method::GET, "jobsets", None),
                Some("ns"),
                None,
                Some("metadata.name=js"),
                true,
            ),
            ("list every jobset", req(&Method::GET, "jobsets", None), Some("ns"), None, None, false),
            (
                "list another jobset",
                req(&Method::GET, "jobsets", None),
                Some("ns"),
                None,
                Some("metadata.name=x"),
                false,
            ),
            ("patch own jobset", req(&Method::PATCH, "jobsets", Some("js")), Some("ns"), None, None, false),
            ("read a secret", req(&Method::GET, "secrets", Some("s")), Some("ns"), None, None, false),
        ];
        for (case, (method, resource, name), namespace, subresource, field_selector, allowed) in cases {
            let def = match resource {
                "pods" => &pods,
                "jobsets" => &jobsets,
                _ => &secrets,
            };
            let r = ResourceRequest { method, def, namespace, name, subresource, watch: false, field_selector };
            assert_eq!(authorize(&id(), &r).is_ok(), allowed, "{case}");
        }
    }

    #[test]
    fn a_refusal_reads_like_rbac() {
        let reg = Registry::with_builtins();
        let pods = reg.get("", "v1", "pods").unwrap();
        let r = ResourceRequest {
            method: &Method::PATCH,
            def: &pods,
            namespace: Some("ns"),
            name: Some("w-1"),
            subresource: None,
            watch: false,
            field_selector: None,
        };
        let e = authorize(&id(), &r).unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "pods \"w-1\" is forbidden: User \"system:serviceaccount:ns:agent-sa\" cannot patch resource \"pods\" in API group \"\" in the namespace \"ns\""
        );
    }

    #[test]
    fn a_pod_write_may_change_only_the_attempt_annotation() {
        let reg = Registry::with_builtins();
        let pods = reg.get("", "v1", "pods").unwrap();
        let old =
            json!({"metadata": {"name": "w-0", "resourceVersion": "5", "annotations": {"a": "1"}}, "spec": {"x": 1}});
        let ok = json!({"metadata": {"name": "w-0", "resourceVersion": "6", "managedFields": [],
                        "annotations": {"a": "1", IN_PLACE_RESTART_ATTEMPT: "3"}}, "spec": {"x": 1}});
        assert!(check_pod_write(&id(), &pods, &old, &ok).is_ok());
        for (case, new) in [
            ("another annotation", json!({"metadata": {"name": "w-0", "annotations": {"a": "2"}}, "spec": {"x": 1}})),
            (
                "a label",
                json!({"metadata": {"name": "w-0", "labels": {"l": "v"}, "annotations": {"a": "1"}}, "spec": {"x": 1}}),
            ),
            ("the spec", json!({"metadata": {"name": "w-0", "annotations": {"a": "1"}}, "spec": {"x": 2}})),
        ] {
            let e = check_pod_write(&id(), &pods, &old, &new).unwrap_err();
            assert_eq!(e.code, 403, "{case}");
        }
    }
}
