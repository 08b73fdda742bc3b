//! Admission for built-in kinds, registered on every server: Job defaulting and validation
//! (the logic lives in `jobset_api::job`), Secret defaulting, Pod validation
//! (`jobset_api::pod`), the Priority plugin for pods and PriorityClasses (`crate::priority`),
//! upstream JobSet's exclusive-placement pod webhooks (`jobset_api::jobset::exclusive`), JobSet
//! defaulting and validation (upstream's webhooks; the logic lives in `jobset_api::jobset`;
//! the CRD's schema and CEL rules are enforced before, by `crate::crd_schema`), with a warning
//! for an `InPlaceRestart` JobSet whose pods run no in-place restart agent, AppWrapper
//! defaulting and validation (upstream's webhooks; the logic lives in `jobset_api::admission`
//! and `jobset_api::appwrapper`), RBAC objects' defaulting and validation (`crate::rbac`), and
//! Workload and PodGroup validation (`jobset_api::workload`).

use std::sync::Arc;

use serde_json::Value;

use crate::admission::{Admission, AdmissionHook, Lookup};
use crate::auth::Identity;
use crate::error::Cause;

fn causes(errors: Vec<jobset_api::field::FieldError>) -> Vec<Cause> {
    errors.into_iter().map(|e| Cause { reason: e.reason(), message: e.message(), field: e.field }).collect()
}

struct JobAdmission;

impl AdmissionHook for JobAdmission {
    fn default(&self, obj: &mut Value, _old: Option<&Value>) {
        jobset_api::job::default_job(obj);
    }
    fn validate(&self, obj: &Value, old: Option<&Value>, _lookup: &dyn Lookup) -> Vec<Cause> {
        causes(jobset_api::job::validate_job(obj, old))
    }
    fn validates_status(&self) -> bool {
        true
    }
    fn validate_status(&self, obj: &Value, old: &Value) -> Vec<Cause> {
        causes(jobset_api::job_status::validate_job_status_update(obj, old))
    }
}

/// Pod validation: the container and restart-policy checks of kube-apiserver's
/// `ValidatePodCreate` and the spec immutability of `ValidatePodUpdate` (`jobset_api::pod`). On
/// update only new problems of a changed spec count, so writes to stored pods that predate a
/// check pass; status and binding writes do not come here.
struct PodValidation;

impl AdmissionHook for PodValidation {
    // Only a changed spec is checked.
    fn sees_metadata_patches(&self) -> bool {
        false
    }
    fn validate(&self, obj: &Value, old: Option<&Value>, _lookup: &dyn Lookup) -> Vec<Cause> {
        causes(jobset_api::pod::validate_pod(obj, old))
    }
}

/// kube-apiserver's Secret defaulting (`SetDefaults_Secret`): no `type` is `Opaque`.
struct SecretDefaults;

impl AdmissionHook for SecretDefaults {
    fn default(&self, obj: &mut Value, _old: Option<&Value>) {
        if let Some(secret) = obj.as_object_mut()
            && secret.get("type").and_then(Value::as_str).is_none_or(str::is_empty)
        {
            secret.insert("type".into(), Value::from("Opaque"));
        }
    }
}

/// The store as `jobset_api::jobset::exclusive` reads the cluster.
struct StoreCluster<'a>(&'a dyn Lookup);

impl jobset_api::jobset::exclusive::Cluster for StoreCluster<'_> {
    type Error = String;
    fn pods(
        &self,
        ns: &str,
        labels: &[(&str, &str)],
    ) -> impl std::future::Future<Output = Result<Vec<Value>, String>> + Send {
        use crate::selector::{LabelSelector, Operator, Requirement};
        let requirements: Result<Vec<Requirement>, _> =
            labels.iter().map(|(k, v)| Requirement::new(k, Operator::Equals, vec![v.to_string()])).collect();
        let pods =
            requirements.map(|r| self.0.list("", "pods", ns, &LabelSelector::from_requirements(r))).map_err(|e| e.0);
        std::future::ready(pods)
    }
    fn node_labels(
        &self,
        name: &str,
    ) -> impl std::future::Future<Output = Result<serde_json::Map<String, Value>, String>> + Send {
        let node = self.0.get("", "nodes", "", name);
        let labels = match node {
            Some(n) => Ok(n.pointer("/metadata/labels").and_then(Value::as_object).cloned().unwrap_or_default()),
            None => Err(format!("nodes {} not found", jobset_api::field::quote(name))),
        };
        std::future::ready(labels)
    }
}

/// Exclusive placement: upstream JobSet's pod webhooks (`jobset_api::jobset::exclusive`, shared
/// with `jobset manager`'s), as one admission step on create: the priority label, the leader's
/// affinity terms and a follower's `nodeSelector`, then the refusal of a follower whose leader is
/// not scheduled yet (403, which the Job controller retries).
struct ExclusivePlacement;

impl AdmissionHook for ExclusivePlacement {
    // Create only.
    fn sees_metadata_patches(&self) -> bool {
        false
    }
    fn admit_create(&self, obj: &mut Value, lookup: &dyn Lookup) -> Result<(), String> {
        use futures::FutureExt;
        let cluster = StoreCluster(lookup);
        // The store answers at once: the flow never waits.
        jobset_api::jobset::exclusive::admit_create(obj, &cluster)
            .now_or_never()
            .unwrap_or_else(|| Err("the store's lookups did not answer at once".into()))
    }
}

/// JobSet admission: upstream's webhook defaults and validation. Unlike upstream's mutating
/// webhook (create only), the defaults also apply on update, where they fill only what a request
/// left out: a client-side re-apply of a manifest that omits defaulted fields (say
/// `completionMode`) then compares equal instead of failing as an immutable change.
pub struct JobSetAdmission {
    pub features: jobset_api::jobset::Features,
}

impl AdmissionHook for JobSetAdmission {
    fn default(&self, obj: &mut Value, _old: Option<&Value>) {
        jobset_api::jobset::default_jobset(obj);
    }
    fn validate(&self, obj: &Value, old: Option<&Value>, lookup: &dyn Lookup) -> Vec<Cause> {
        let claim = |ns: &str, name: &str| lookup.get("", "persistentvolumeclaims", ns, name);
        causes(jobset_api::jobset::validate_jobset_in(obj, old, &self.features, &claim))
    }
    fn warnings(&self, obj: &Value, _old: Option<&Value>) -> Vec<String> {
        jobset_api::jobset::agent::missing_agent_warnings(obj)
    }
}

/// AppWrapper admission: upstream's webhooks. Defaulting labels a new AppWrapper with the
/// requesting user (`workload.codeflare.dev/user`, `.../userid`, as `jobset manager`'s webhook
/// does); validation runs on create and update. (Upstream's default queue name needs Kueue,
/// which is not here.)
struct AppWrapperAdmission;

impl AdmissionHook for AppWrapperAdmission {
    fn default_as(&self, obj: &mut Value, old: Option<&Value>, requester: &Identity) {
        // Upstream's mutating webhook is registered for CREATE only.
        if old.is_none() {
            jobset_api::admission::default_appwrapper_user(obj, &requester.username, &requester.uid);
        }
    }
    fn validate(&self, obj: &Value, old: Option<&Value>, _lookup: &dyn Lookup) -> Vec<Cause> {
        use jobset_api::appwrapper::validation::{validate_appwrapper, validate_appwrapper_update};
        match old {
            None => {
                let namespace = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
                causes(validate_appwrapper(obj, namespace))
            }
            Some(old) => causes(validate_appwrapper_update(obj, old)),
        }
    }
}

/// `scheduling.k8s.io/v1alpha2` Workload validation (`jobset_api::workload`): the spec is
/// immutable.
struct WorkloadAdmission;

impl AdmissionHook for WorkloadAdmission {
    fn validate(&self, obj: &Value, old: Option<&Value>, _lookup: &dyn Lookup) -> Vec<Cause> {
        causes(jobset_api::workload::validate_workload(obj, old))
    }
}

/// `scheduling.k8s.io/v1alpha2` PodGroup validation: one scheduling policy, immutable once set.
struct PodGroupAdmission;

impl AdmissionHook for PodGroupAdmission {
    fn validate(&self, obj: &Value, old: Option<&Value>, _lookup: &dyn Lookup) -> Vec<Cause> {
        causes(jobset_api::workload::validate_pod_group(obj, old))
    }
}

/// `extra` with the built-in hooks in front, but for the custom kinds of `external` (`(group,
/// kind)`), whose admission webhooks a `jobset manager` serves.
pub fn with_builtins(extra: Admission, external: &[(String, String)]) -> Admission {
    let builtin = |group: &str, kind: &str| !external.iter().any(|(g, k)| g == group && k == kind);
    let mut a = Admission::default();
    a.register("batch", "Job", Arc::new(JobAdmission));
    a.register("", "Secret", Arc::new(SecretDefaults));
    a.register("", "Pod", Arc::new(PodValidation));
    // The Priority plugin runs before the exclusive-placement step below (upstream's pod webhook
    // reads `spec.priority`), as kube-apiserver runs it before the admission webhooks.
    a.register("", "Pod", Arc::new(crate::priority::PodPriority));
    a.register(crate::priority::GROUP, "PriorityClass", Arc::new(crate::priority::PriorityClassAdmission));
    let (group, kind) = (jobset_api::jobset::keys::GROUP, jobset_api::jobset::keys::KIND);
    if builtin(group, kind) {
        a.register(group, kind, Arc::new(JobSetAdmission { features: Default::default() }));
        // The pod webhooks come with the JobSet ones (config/webhook/).
        a.register("", "Pod", Arc::new(ExclusivePlacement));
    }
    let (group, kind) = (jobset_api::appwrapper::keys::GROUP, jobset_api::appwrapper::keys::KIND);
    if builtin(group, kind) {
        a.register(group, kind, Arc::new(AppWrapperAdmission));
    }
    a.register(jobset_api::pdb::GROUP, jobset_api::pdb::KIND, Arc::new(crate::pdb::PdbAdmission));
    use jobset_api::workload::{GROUP as SCHEDULING, POD_GROUP_KIND, WORKLOAD_KIND};
    a.register(SCHEDULING, WORKLOAD_KIND, Arc::new(WorkloadAdmission));
    a.register(SCHEDULING, POD_GROUP_KIND, Arc::new(PodGroupAdmission));
    for kind in crate::rbac::KINDS {
        a.register(crate::rbac::GROUP, kind, Arc::new(crate::rbac::RbacAdmission { kind }));
    }
    a.extend(extra);
    a
}

#[cfg(test)]
mod tests {
    use kube::api::{Api, DynamicObject, PostParams};
    use kube::core::{ApiResource, GroupVersionKind};
    use serde_json::json;

    use crate::{Admission, ApiServer, ServerConfig, persist};

    /// Creates a JobSet only upstream's validating webhook rejects (the first replicated job
    /// depends on another) and an AppWrapper only its webhook rejects (a nested AppWrapper);
    /// the CRD schemas accept both. Ok(()) when stored, else the error's message.
    async fn create_both(external: &[Kind]) -> [Result<(), String>; 2] {
        let config = ServerConfig {
            external_admission: external.iter().map(|(g, k)| (g.to_string(), k.to_string())).collect(),
            ..ServerConfig::default()
        };
        let server = ApiServer::new(Box::new(persist::Memory), Admission::default(), config).unwrap();
        let create = |group: &str, version: &str, kind: &str, plural: &str, obj: serde_json::Value| {
            let gvk = GroupVersionKind::gvk(group, version, kind);
            let api: Api<DynamicObject> =
                Api::namespaced_with(server.client(), "default", &ApiResource::from_gvk_with_plural(&gvk, plural));
            async move {
                let obj: DynamicObject = serde_json::from_value(obj).unwrap();
                api.create(&PostParams::default(), &obj).await.map(|_| ()).map_err(|e| e.to_string())
            }
        };
        let containers = json!({"spec": {"containers": [{"name": "c", "image": "busybox"}]}});
        let jobset = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
            "spec": {"replicatedJobs": [{"name": "a", "dependsOn": [{"name": "b", "status": "Ready"}],
                "template": {"spec": {"template": containers}}}, {"name": "b", "template": {"spec": {"template": containers}}}]}});
        let nested = json!({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper", "metadata": {"name": "inner"},
            "spec": {"components": []}});
        let appwrapper = json!({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper", "metadata": {"name": "aw"},
            "spec": {"components": [{"template": nested}]}});
        [
            create("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", jobset).await,
            create("workload.codeflare.dev", "v1beta2", "AppWrapper", "appwrappers", appwrapper).await,
        ]
    }

    /// A custom kind, `(group, kind)`.
    type Kind = (&'static str, &'static str);

    #[tokio::test]
    async fn a_secret_without_a_type_is_opaque_and_a_typed_one_keeps_its_type() {
        use k8s_openapi::api::core::v1::Secret;
        let server = ApiServer::new(Box::new(persist::Memory), Admission::default(), ServerConfig::default()).unwrap();
        let api: Api<Secret> = Api::namespaced(server.client(), "default");
        for (name, asked, want) in [
            ("plain", None, "Opaque"),
            ("empty", Some(""), "Opaque"),
            ("tls", Some("kubernetes.io/tls"), "kubernetes.io/tls"),
        ] {
            let mut secret = json!({"metadata": {"name": name}});
            if let Some(t) = asked {
                secret["type"] = json!(t);
            }
            if want == "kubernetes.io/tls" {
                secret["data"] = json!({"tls.crt": "", "tls.key": ""});
            }
            let created = api.create(&PostParams::default(), &serde_json::from_value(secret).unwrap()).await.unwrap();
            assert_eq!(created.type_.as_deref(), Some(want), "{name}");
        }
    }

    #[tokio::test]
    async fn external_kinds_lose_their_built_in_admission_and_the_others_keep_it() {
        const JOBSET: Kind = ("jobset.x-k8s.io", "JobSet");
        const APPWRAPPER: Kind = ("workload.codeflare.dev", "AppWrapper");
        // The external kinds, and whether the JobSet and the AppWrapper are stored.
        let cases: [(&[Kind], [bool; 2]); 4] = [
            (&[], [false, false]),
            (&[JOBSET], [true, false]),
            (&[APPWRAPPER], [false, true]),
            (&[JOBSET, APPWRAPPER], [true, true]),
        ];
        for (external, stored) in cases {
            let got = create_both(external).await;
            assert_eq!(got.iter().map(Result::is_ok).collect::<Vec<_>>(), stored, "external {external:?}: {got:?}");
            let denials = got.iter().filter_map(|r| r.as_ref().err());
            for e in denials {
                assert!(
                    e.contains("DependsOn can't be set for the first ReplicatedJob")
                        || e.contains("Nested AppWrappers"),
                    "external {external:?}: {e}"
                );
            }
        }
    }
}
