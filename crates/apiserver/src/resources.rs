//! The kinds this server serves: built-ins plus whatever CRDs define.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;

/// Which subresources a kind has beyond the object itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    Status,
    Log,
    Binding,
    Eviction,
    /// `serviceaccounts/token`: POST a `TokenRequest`, get a token for the ServiceAccount.
    Token,
}

impl Subresource {
    pub fn name(self) -> &'static str {
        match self {
            Subresource::Status => "status",
            Subresource::Log => "log",
            Subresource::Binding => "binding",
            Subresource::Eviction => "eviction",
            Subresource::Token => "token",
        }
    }
}

/// A create-only resource that stores nothing: the request is answered with the posted object
/// and a `status` (kube-apiserver's review APIs, `crate::review`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Review {
    /// `authentication.k8s.io/v1` `tokenreviews`: who a bearer token names.
    Token,
    /// `authorization.k8s.io/v1` `subjectaccessreviews`: whether a user may make a request.
    SubjectAccess,
    /// `authorization.k8s.io/v1` `selfsubjectaccessreviews`: whether the requester may.
    SelfSubjectAccess,
}

#[derive(Debug, Clone)]
pub struct ResourceDef {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub subresources: Vec<Subresource>,
    /// Built-in kinds accept strategic merge patches; custom resources answer 415.
    pub builtin: bool,
    /// Field selector labels beyond `metadata.name`/`metadata.namespace`, with the JSON pointer each reads.
    pub selectable_fields: Vec<(String, String)>,
    /// CRD `additionalPrinterColumns`, for Table output.
    pub printer_columns: Vec<Value>,
    /// Served as a view of another resource's storage (events.k8s.io/v1 events are core/v1
    /// events, as in kube-apiserver).
    pub view: Option<View>,
    /// A review API: `create` only, nothing stored.
    pub review: Option<Review>,
    /// A CRD version's structural schema, compiled: what custom resources are pruned,
    /// defaulted and validated against (`crate::crd_schema`).
    pub schema: Option<Arc<crate::crd_schema::CrdSchema>>,
}

/// A resource served from another one's storage, converted on the way in and out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// events.k8s.io/v1 `Event` over core/v1 `Event` storage.
    EventsV1,
}

impl View {
    /// (group, version, plural) of the stored resource.
    pub fn storage(self) -> (&'static str, &'static str, &'static str) {
        match self {
            View::EventsV1 => ("", "v1", "events"),
        }
    }
    /// A stored object as this view serves it.
    pub fn to_view(self, v: serde_json::Value) -> serde_json::Value {
        match self {
            View::EventsV1 => crate::events::core_to_v1(v),
        }
    }
    /// An object written through this view, in stored form.
    pub fn from_view(self, v: serde_json::Value) -> serde_json::Value {
        match self {
            View::EventsV1 => crate::events::v1_to_core(v),
        }
    }
    /// A field selector label of the view, as the stored resource names it.
    pub fn storage_field(self, field: &str) -> String {
        match self {
            View::EventsV1 => crate::events::v1_field_to_core(field),
        }
    }
}

impl ResourceDef {
    /// Key under which objects of every served version of this kind are stored.
    pub fn storage_key(&self) -> String {
        format!("{}/{}", self.group, self.plural)
    }
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }
    /// `jobsets.jobset.x-k8s.io`, or `pods` for the core group: how kube-apiserver names a resource in messages.
    pub fn qualified_plural(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }
    pub fn has(&self, sub: Subresource) -> bool {
        self.subresources.contains(&sub)
    }
    pub fn has_status(&self) -> bool {
        self.has(Subresource::Status)
    }
    /// Pods are deleted gracefully: they stay until their node agent confirms.
    pub fn graceful(&self) -> bool {
        self.group.is_empty() && self.plural == "pods"
    }
    pub fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.plural == "namespaces"
    }
    pub fn is_crd(&self) -> bool {
        self.group == "apiextensions.k8s.io" && self.plural == "customresourcedefinitions"
    }
    /// kube-apiserver's default propagation when the client names none: Jobs orphan their pods
    /// (batch/v1 kept that for compatibility), everything else is deleted in the background.
    pub fn default_propagation(&self) -> Propagation {
        if self.group == "batch" && self.plural == "jobs" { Propagation::Orphan } else { Propagation::Background }
    }
    pub fn field_pointer(&self, field: &str) -> Option<&str> {
        self.selectable_fields.iter().find(|(f, _)| f == field).map(|(_, p)| p.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Foreground,
    Background,
    Orphan,
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    categories: &'static [&'static str],
    subresources: &'static [Subresource],
    fields: &'static [(&'static str, &'static str)],
    review: Option<Review>,
}

use Subresource::*;

const BUILTINS: &[Builtin] = &[
    Builtin {
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short: &["ns"],
        categories: &[],
        subresources: &[Status],
        fields: &[("status.phase", "/status/phase")],
        review: None,
    },
    Builtin {
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        short: &["po"],
        categories: &["all"],
        subresources: &[Status, Log, Binding, Eviction],
        fields: &[
            ("spec.nodeName", "/spec/nodeName"),
            ("status.phase", "/status/phase"),
            ("spec.restartPolicy", "/spec/restartPolicy"),
            ("spec.schedulerName", "/spec/schedulerName"),
            ("spec.serviceAccountName", "/spec/serviceAccountName"),
            ("status.podIP", "/status/podIP"),
            ("status.nominatedNodeName", "/status/nominatedNodeName"),
        ],
        review: None,
    },
    Builtin {
        group: "",
        version: "v1",
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        short: &["svc"],
        categories: &["all"],
        subresources: &[Status],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        short: &["no"],
        categories: &[],
        subresources: &[Status],
        fields: &[("spec.unschedulable", "/spec/unschedulable")],
        review: None,
    },
    Builtin {
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short: &["ev"],
        categories: &[],
        subresources: &[],
        fields: &[
            ("involvedObject.kind", "/involvedObject/kind"),
            ("involvedObject.namespace", "/involvedObject/namespace"),
            ("involvedObject.name", "/involvedObject/name"),
            ("involvedObject.uid", "/involvedObject/uid"),
            ("involvedObject.apiVersion", "/involvedObject/apiVersion"),
            ("involvedObject.resourceVersion", "/involvedObject/resourceVersion"),
            ("involvedObject.fieldPath", "/involvedObject/fieldPath"),
            ("reason", "/reason"),
            ("reportingComponent", "/reportingComponent"),
            ("source", "/source/component"),
            ("type", "/type"),
        ],
        review: None,
    },
    Builtin {
        group: "",
        version: "v1",
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        short: &["cm"],
        categories: &[],
        subresources: &[],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "",
        version: "v1",
        plural: "secrets",
        singular: "secret",
        kind: "Secret",
        namespaced: true,
        short: &[],
        categories: &[],
        subresources: &[],
        fields: &[("type", "/type")],
        review: None,
    },
    Builtin {
        group: "",
        version: "v1",
        plural: "serviceaccounts",
        singular: "serviceaccount",
        kind: "ServiceAccount",
        namespaced: true,
        short: &["sa"],
        categories: &[],
        subresources: &[Token],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "",
        version: "v1",
        plural: "persistentvolumeclaims",
        singular: "persistentvolumeclaim",
        kind: "PersistentVolumeClaim",
        namespaced: true,
        short: &["pvc"],
        categories: &[],
        subresources: &[Status],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "",
        version: "v1",
        plural: "resourcequotas",
        singular: "resourcequota",
        kind: "ResourceQuota",
        namespaced: true,
        short: &["quota"],
        categories: &[],
        subresources: &[Status],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "batch",
        version: "v1",
        plural: "jobs",
        singular: "job",
        kind: "Job",
        namespaced: true,
        short: &[],
        categories: &["all"],
        subresources: &[Status],
        fields: &[("status.successful", "/status/succeeded")],
        review: None,
    },
    // Stored only (no controller runs them): the manager's Deployment of the shipped manifests
    // (config/) applies here as on a cluster.
    Builtin {
        group: "apps",
        version: "v1",
        plural: "deployments",
        singular: "deployment",
        kind: "Deployment",
        namespaced: true,
        short: &["deploy"],
        categories: &["all"],
        subresources: &[Status],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short: &["ev"],
        categories: &[],
        subresources: &[],
        fields: &[
            ("regarding.kind", "/regarding/kind"),
            ("regarding.namespace", "/regarding/namespace"),
            ("regarding.name", "/regarding/name"),
            ("regarding.uid", "/regarding/uid"),
            ("reason", "/reason"),
            ("reportingController", "/reportingController"),
            ("type", "/type"),
        ],
        review: None,
    },
    Builtin {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        short: &[],
        categories: &[],
        subresources: &[],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "policy",
        version: "v1",
        plural: "poddisruptionbudgets",
        singular: "poddisruptionbudget",
        kind: "PodDisruptionBudget",
        namespaced: true,
        short: &["pdb"],
        categories: &[],
        subresources: &[Status],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "roles",
        singular: "role",
        kind: "Role",
        namespaced: true,
        short: &[],
        categories: &[],
        subresources: &[],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "rolebindings",
        singular: "rolebinding",
        kind: "RoleBinding",
        namespaced: true,
        short: &[],
        categories: &[],
        subresources: &[],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "clusterroles",
        singular: "clusterrole",
        kind: "ClusterRole",
        namespaced: false,
        short: &[],
        categories: &[],
        subresources: &[],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "clusterrolebindings",
        singular: "clusterrolebinding",
        kind: "ClusterRoleBinding",
        namespaced: false,
        short: &[],
        categories: &[],
        subresources: &[],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "scheduling.k8s.io",
        version: "v1",
        plural: "priorityclasses",
        singular: "priorityclass",
        kind: "PriorityClass",
        namespaced: false,
        short: &["pc"],
        categories: &[],
        subresources: &[],
        fields: &[],
        review: None,
    },
    // After PriorityClass: v1 stays the group's preferred version, as in kube-apiserver.
    Builtin {
        group: "scheduling.k8s.io",
        version: "v1alpha2",
        plural: "workloads",
        singular: "workload",
        kind: "Workload",
        namespaced: true,
        short: &[],
        categories: &[],
        subresources: &[],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "scheduling.k8s.io",
        version: "v1alpha2",
        plural: "podgroups",
        singular: "podgroup",
        kind: "PodGroup",
        namespaced: true,
        short: &[],
        categories: &[],
        subresources: &[Status],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "admissionregistration.k8s.io",
        version: "v1",
        plural: "mutatingwebhookconfigurations",
        singular: "mutatingwebhookconfiguration",
        kind: "MutatingWebhookConfiguration",
        namespaced: false,
        short: &[],
        categories: &["api-extensions"],
        subresources: &[],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "admissionregistration.k8s.io",
        version: "v1",
        plural: "validatingwebhookconfigurations",
        singular: "validatingwebhookconfiguration",
        kind: "ValidatingWebhookConfiguration",
        namespaced: false,
        short: &[],
        categories: &["api-extensions"],
        subresources: &[],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "admissionregistration.k8s.io",
        version: "v1",
        plural: "validatingadmissionpolicies",
        singular: "validatingadmissionpolicy",
        kind: "ValidatingAdmissionPolicy",
        namespaced: false,
        short: &[],
        categories: &["api-extensions"],
        subresources: &[Status],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "admissionregistration.k8s.io",
        version: "v1",
        plural: "validatingadmissionpolicybindings",
        singular: "validatingadmissionpolicybinding",
        kind: "ValidatingAdmissionPolicyBinding",
        namespaced: false,
        short: &[],
        categories: &["api-extensions"],
        subresources: &[],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "apiextensions.k8s.io",
        version: "v1",
        plural: "customresourcedefinitions",
        singular: "customresourcedefinition",
        kind: "CustomResourceDefinition",
        namespaced: false,
        short: &["crd", "crds"],
        categories: &["api-extensions"],
        subresources: &[Status],
        fields: &[],
        review: None,
    },
    Builtin {
        group: "authentication.k8s.io",
        version: "v1",
        plural: "tokenreviews",
        singular: "tokenreview",
        kind: "TokenReview",
        namespaced: false,
        short: &[],
        categories: &[],
        subresources: &[],
        fields: &[],
        review: Some(Review::Token),
    },
    Builtin {
        group: "authorization.k8s.io",
        version: "v1",
        plural: "subjectaccessreviews",
        singular: "subjectaccessreview",
        kind: "SubjectAccessReview",
        namespaced: false,
        short: &[],
        categories: &[],
        subresources: &[],
        fields: &[],
        review: Some(Review::SubjectAccess),
    },
    Builtin {
        group: "authorization.k8s.io",
        version: "v1",
        plural: "selfsubjectaccessreviews",
        singular: "selfsubjectaccessreview",
        kind: "SelfSubjectAccessReview",
        namespaced: false,
        short: &[],
        categories: &[],
        subresources: &[],
        fields: &[],
        review: Some(Review::SelfSubjectAccess),
    },
];

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

impl From<&Builtin> for ResourceDef {
    fn from(b: &Builtin) -> Self {
        ResourceDef {
            group: b.group.into(),
            version: b.version.into(),
            plural: b.plural.into(),
            singular: b.singular.into(),
            kind: b.kind.into(),
            namespaced: b.namespaced,
            short_names: strings(b.short),
            categories: strings(b.categories),
            subresources: b.subresources.to_vec(),
            builtin: true,
            selectable_fields: b.fields.iter().map(|(f, p)| (f.to_string(), p.to_string())).collect(),
            printer_columns: vec![],
            view: (b.group == "events.k8s.io").then_some(View::EventsV1),
            review: b.review,
            schema: None,
        }
    }
}

/// Every `ResourceDef` a CRD object serves (one per served version), or an error naming the bad field.
pub fn defs_from_crd(crd: &Value) -> Result<Vec<ResourceDef>, String> {
    let spec = crd.get("spec").ok_or("spec: Required value")?;
    let group = spec.get("group").and_then(Value::as_str).ok_or("spec.group: Required value")?;
    let names = spec.get("names").ok_or("spec.names: Required value")?;
    let plural = names.get("plural").and_then(Value::as_str).ok_or("spec.names.plural: Required value")?;
    let kind = names.get("kind").and_then(Value::as_str).ok_or("spec.names.kind: Required value")?;
    let singular =
        names.get("singular").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| kind.to_lowercase());
    let list_of = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default()
    };
    let namespaced = match spec.get("scope").and_then(Value::as_str) {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        _ => return Err("spec.scope: Unsupported value: must be \"Namespaced\" or \"Cluster\"".into()),
    };
    let versions = spec.get("versions").and_then(Value::as_array).ok_or("spec.versions: Required value")?;
    if versions.is_empty() {
        return Err("spec.versions: Invalid value: must have exactly one version marked as storage version".into());
    }
    let mut defs = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let name = v.get("name").and_then(Value::as_str).ok_or(format!("spec.versions[{i}].name: Required value"))?;
        if !v.get("served").and_then(Value::as_bool).unwrap_or(false) {
            continue;
        }
        let mut subresources = vec![];
        if v.pointer("/subresources/status").is_some() {
            subresources.push(Subresource::Status);
        }
        defs.push(ResourceDef {
            group: group.into(),
            version: name.into(),
            plural: plural.into(),
            singular: singular.clone(),
            kind: kind.into(),
            namespaced,
            short_names: list_of(names.get("shortNames")),
            categories: list_of(names.get("categories")),
            subresources,
            builtin: false,
            selectable_fields: vec![],
            printer_columns: v.get("additionalPrinterColumns").and_then(Value::as_array).cloned().unwrap_or_default(),
            view: None,
            review: None,
            schema: crate::crd_schema::for_version(crd, name).map(Arc::new),
        });
    }
    Ok(defs)
}

/// The set of served resources; CRDs add and remove entries at run time.
#[derive(Default)]
pub struct Registry {
    inner: RwLock<RegistryInner>,
}

#[derive(Default)]
struct RegistryInner {
    defs: Vec<Arc<ResourceDef>>,
    by_path: HashMap<(String, String, String), Arc<ResourceDef>>,
}

impl Registry {
    pub fn with_builtins() -> Registry {
        let r = Registry::default();
        for b in BUILTINS {
            r.add(ResourceDef::from(b));
        }
        r
    }

    pub fn add(&self, def: ResourceDef) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let key = (def.group.clone(), def.version.clone(), def.plural.clone());
        let def = Arc::new(def);
        inner.defs.retain(|d| (d.group.as_str(), d.version.as_str(), d.plural.as_str()) != (&key.0, &key.1, &key.2));
        inner.defs.push(def.clone());
        inner.by_path.insert(key, def);
    }

    /// Stops serving every version of `group/plural`.
    pub fn remove(&self, group: &str, plural: &str) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.defs.retain(|d| !(d.group == group && d.plural == plural));
        inner.by_path.retain(|(g, _, p), _| !(g == group && p == plural));
    }

    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.by_path.get(&(group.to_string(), version.to_string(), plural.to_string())).cloned()
    }

    /// Any served version of `group/plural` (for storage-level work such as garbage collection).
    /// Views are never returned: they are not how objects are stored.
    pub fn by_storage_key(&self, key: &str) -> Option<Arc<ResourceDef>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.defs.iter().find(|d| d.view.is_none() && d.storage_key() == key).cloned()
    }

    pub fn all(&self) -> Vec<Arc<ResourceDef>> {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).defs.clone()
    }
}
