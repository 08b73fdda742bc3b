//! Role-based access control for service-account identities, decided as kube-apiserver's RBAC
//! authorizer (`plugin/pkg/auth/authorizer/rbac`) decides.
//!
//! - [`RequestInfo::parse`] reads what a request asks for from its method, path and query, as
//!   kube-apiserver's `RequestInfoFactory`: a verb, API group, resource, subresource, namespace
//!   and name, or a non-resource path.
//! - [`Policy`] holds the Roles, ClusterRoles and their bindings, parsed once and indexed by
//!   subject; [`Policy::authorize`] is a pure function of (policy, user, request).
//! - [`Authorizer`] keeps the parsed policy and rebuilds it only when an RBAC object changed (the
//!   store's [`Store::rbac_generation`]), so a request parses no Role.
//! - [`check_escalation`] keeps a service account from granting, in a Role or binding it writes,
//!   more than it holds itself (upstream's `ConfirmNoEscalation`, `escalate` and `bind` verbs).
//! - [`RbacAdmission`] defaults and validates the four kinds (`pkg/apis/rbac/validation`).
//!
//! Every authenticated user may `get` the discovery and version paths (`/api`, `/apis/...`,
//! `/version`, `/openapi/...`, `/healthz`, ...), as the default `system:discovery` and
//! `system:public-info-viewer` ClusterRoleBindings allow on a real cluster, and `create`
//! SelfSubjectAccessReviews (the default `system:basic-user` binding). Members of
//! `system:masters` may do anything, as kube-apiserver's privileged-group authorizer (asked
//! before RBAC) allows. A ClusterRole's `aggregationRule` is not evaluated: a ClusterRole grants
//! its own `rules`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use http::Method;
use serde_json::{Value, json};

use crate::admission::{AdmissionHook, Lookup};
use crate::error::Cause;
use crate::store::Store;

/// The RBAC API group.
pub const GROUP: &str = "rbac.authorization.k8s.io";
/// The group every authenticated user is in.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group whose members may do anything (kube-apiserver's `system:masters`, allowed by its
/// privileged-group authorizer before RBAC is asked).
pub const MASTERS: &str = "system:masters";

/// Who a request comes from, as the authorizer sees it (kube's `user.Info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// Request attributes
// ---------------------------------------------------------------------------------------------

/// What a request asks for: kube-apiserver's `RequestInfo` (and `authorizer.Attributes`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestInfo {
    /// A request to `/api/v1/...` or `/apis/<group>/<version>/...` naming a resource; anything
    /// else (discovery, `/version`, `/metrics`, ...) is a non-resource request.
    pub is_resource_request: bool,
    /// The request path (what `nonResourceURLs` match).
    pub path: String,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`,
    /// `proxy`; for a non-resource request the lowercased HTTP method.
    pub verb: String,
    pub api_group: String,
    pub api_version: String,
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    /// The object's name; for a list or watch, the name a `metadata.name=` field selector
    /// requires, as upstream (so `resourceNames` can grant watching one object).
    pub name: String,
}

/// Verbs that come as a path segment (`/api/v1/watch/...`).
const SPECIAL_VERBS: [&str; 2] = ["proxy", "watch"];
/// Namespace subresources (`/api/v1/namespaces/<ns>/status` is the namespace's status).
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

impl RequestInfo {
    /// Parses a request as `RequestInfoFactory.NewRequestInfo` does. `?watch=true` (or `1`, as
    /// the handlers read it) makes a collection GET a `watch`.
    pub fn parse(method: &Method, path: &str, query: Option<&str>) -> Result<RequestInfo, String> {
        let mut info =
            RequestInfo { path: path.to_string(), verb: method.as_str().to_lowercase(), ..RequestInfo::default() };
        let trimmed = path.trim_matches('/');
        let parts: Vec<String> = if trimmed.is_empty() {
            vec![]
        } else {
            trimmed
                .split('/')
                .map(|s| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned())
                .collect()
        };
        if parts.len() < 3 || (parts[0] != "api" && parts[0] != "apis") {
            return Ok(info);
        }
        let mut cur = &parts[1..];
        if parts[0] == "apis" {
            if cur.len() < 3 {
                return Ok(info);
            }
            info.api_group = cur[0].clone();
            cur = &cur[1..];
        }
        info.is_resource_request = true;
        info.api_version = cur[0].clone();
        cur = &cur[1..];
        if SPECIAL_VERBS.contains(&cur[0].as_str()) {
            if cur.len() < 2 {
                return Err(format!("unable to determine kind and namespace from url, {path}"));
            }
            info.verb = cur[0].clone();
            cur = &cur[1..];
        } else {
            info.verb = match *method {
                Method::POST => "create",
                Method::GET | Method::HEAD => "get",
                Method::PUT => "update",
                Method::PATCH => "patch",
                Method::DELETE => "delete",
                _ => "",
            }
            .to_string();
        }
        if cur[0] == "namespaces" && cur.len() > 1 {
            info.namespace = cur[1].clone();
            if cur.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&cur[2].as_str()) {
                cur = &cur[2..];
            }
        }
        if cur.len() >= 3 && info.verb != "proxy" {
            info.subresource = cur[2].clone();
        }
        if cur.len() >= 2 {
            info.name = cur[1].clone();
        }
        info.resource = cur[0].clone();
        if info.name.is_empty() && info.verb == "get" {
            let mut watch = false;
            for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
                match &*k {
                    "watch" => watch = matches!(&*v, "true" | "1"),
                    "fieldSelector" => {
                        let exact = crate::selector::FieldSelector::parse(&v)
                            .ok()
                            .and_then(|f| f.exact_value("metadata.name").map(str::to_string));
                        if let Some(name) = exact.filter(|n| crate::ops::path_segment(n).is_empty()) {
                            info.name = name;
                        }
                    }
                    _ => {}
                }
            }
            info.verb = if watch { "watch" } else { "list" }.into();
        }
        if info.name.is_empty() && info.verb == "delete" {
            info.verb = "deletecollection".into();
        }
        Ok(info)
    }

    /// `resource` or `resource/subresource`, as rules and messages name it.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Rules
// ---------------------------------------------------------------------------------------------

/// One rule of a Role or ClusterRole (`rbacv1.PolicyRule`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyRule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

/// The strings of a JSON list (anything else in it, or a field that is no list, counts as none:
/// validation rejects such objects before they are stored).
fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

impl PolicyRule {
    pub fn from_json(v: &Value) -> PolicyRule {
        PolicyRule {
            verbs: strings(v.get("verbs")),
            api_groups: strings(v.get("apiGroups")),
            resources: strings(v.get("resources")),
            resource_names: strings(v.get("resourceNames")),
            non_resource_urls: strings(v.get("nonResourceURLs")),
        }
    }

    /// `RuleAllows`: verbs (`*` included), then for a resource request the API group, the
    /// resource (`*`, `resource/subresource`, `*/subresource`) and `resourceNames` (an empty list
    /// allows every name; a request without a name never matches a non-empty one); for a
    /// non-resource request `nonResourceURLs` (`*`, exact, or a prefix ending in `*`).
    pub fn allows(&self, r: &RequestInfo) -> bool {
        if !self.verbs.iter().any(|v| v == "*" || *v == r.verb) {
            return false;
        }
        if !r.is_resource_request {
            return self.non_resource_urls.iter().any(|u| non_resource_url_matches(u, &r.path));
        }
        self.api_groups.iter().any(|g| g == "*" || *g == r.api_group)
            && self.resource_matches(&r.resource, &r.subresource)
            && (self.resource_names.is_empty() || self.resource_names.contains(&r.name))
    }

    fn resource_matches(&self, resource: &str, subresource: &str) -> bool {
        self.resources.iter().any(|rule| {
            if rule == "*" {
                return true;
            }
            if subresource.is_empty() {
                return rule == resource;
            }
            // `resource/subresource`, or `*/subresource`.
            match rule.split_once('/') {
                Some((res, sub)) => sub == subresource && (res == resource || res == "*"),
                None => false,
            }
        })
    }
}

/// `NonResourceURLMatches`.
fn non_resource_url_matches(rule: &str, path: &str) -> bool {
    rule == "*" || rule == path || rule.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix))
}

/// What the default `system:discovery` and `system:public-info-viewer` ClusterRoles grant
/// (`get`), bound to `system:authenticated` on every cluster.
const DISCOVERY_URLS: &[&str] = &[
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/healthz",
    "/livez",
    "/openapi",
    "/openapi/*",
    "/readyz",
    "/version",
    "/version/",
];

/// Whether the default discovery bindings let any authenticated user make this request.
pub fn is_discovery(r: &RequestInfo) -> bool {
    !r.is_resource_request && r.verb == "get" && DISCOVERY_URLS.iter().any(|u| non_resource_url_matches(u, &r.path))
}

/// The default ClusterRoles every cluster binds to `system:authenticated` (each by a
/// ClusterRoleBinding of the same name), with the rules that matter here: `system:discovery`
/// (the discovery and version paths) and `system:basic-user` (a user may ask what it may do:
/// `create` on `selfsubjectaccessreviews` and `selfsubjectrulesreviews`, and on
/// `selfsubjectreviews`).
fn default_grants() -> &'static [(&'static str, PolicyRule)] {
    static GRANTS: std::sync::LazyLock<Vec<(&'static str, PolicyRule)>> = std::sync::LazyLock::new(|| {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<String>>();
        let create = |group: &str, resources: &[&str]| PolicyRule {
            verbs: strings(&["create"]),
            api_groups: strings(&[group]),
            resources: strings(resources),
            ..PolicyRule::default()
        };
        vec![
            (
                "system:discovery",
                PolicyRule {
                    verbs: strings(&["get"]),
                    non_resource_urls: strings(DISCOVERY_URLS),
                    ..PolicyRule::default()
                },
            ),
            (
                "system:basic-user",
                create("authorization.k8s.io", &["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
            ),
            ("system:basic-user", create("authentication.k8s.io", &["selfsubjectreviews"])),
        ]
    });
    &GRANTS
}

// ---------------------------------------------------------------------------------------------
// Policy
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct Binding {
    name: String,
    /// The binding's namespace ("" for a ClusterRoleBinding): where a `Role` reference is looked up.
    namespace: String,
    role_kind: String,
    role_name: String,
    /// (kind, name, namespace as written) of each subject, in order: which one applies to a user
    /// is said in an allowed request's reason.
    subjects: Vec<(String, String, String)>,
}

impl Binding {
    /// `appliesToUser` of one subject.
    fn subject_applies(&self, user: &UserInfo, (kind, name, namespace): &(String, String, String)) -> bool {
        match kind.as_str() {
            "User" => user.name == *name,
            "Group" => user.groups.contains(name),
            "ServiceAccount" => {
                let ns = if namespace.is_empty() { &self.namespace } else { namespace };
                !ns.is_empty() && user.name == service_account_username(ns, name)
            }
            _ => false,
        }
    }

    /// What upstream's rule resolver says a rule of this binding came from
    /// (`clusterRoleBindingDescriber` / `roleBindingDescriber`): `ClusterRoleBinding "b" of
    /// ClusterRole "r" to ServiceAccount "sa/ns"`, or `RoleBinding "b/ns" of Role "r" to User "u"`,
    /// naming the first subject that applies to `user`.
    fn describe(&self, user: &UserInfo) -> String {
        let subject = match self.subjects.iter().find(|s| self.subject_applies(user, s)) {
            Some((kind, name, ns)) if kind == "ServiceAccount" => {
                let ns = if ns.is_empty() { &self.namespace } else { ns };
                format!("{kind} {:?}", format!("{name}/{ns}"))
            }
            Some((kind, name, _)) => format!("{kind} {name:?}"),
            None => String::new(),
        };
        if self.namespace.is_empty() {
            format!("ClusterRoleBinding {:?} of {} {:?} to {subject}", self.name, self.role_kind, self.role_name)
        } else {
            format!(
                "RoleBinding {:?} of {} {:?} to {subject}",
                format!("{}/{}", self.name, self.namespace),
                self.role_kind,
                self.role_name
            )
        }
    }
}

/// Bindings of one scope (the cluster, or one namespace), indexed by the users and groups their
/// subjects name. A ServiceAccount subject is the user `system:serviceaccount:<ns>:<name>`
/// (upstream compares it with the user name so), its namespace defaulting to the binding's.
#[derive(Debug, Default)]
struct Bindings {
    list: Vec<Binding>,
    by_user: HashMap<String, Vec<usize>>,
    by_group: HashMap<String, Vec<usize>>,
}

impl Bindings {
    fn add(&mut self, binding: &Value) {
        let namespace = text(binding, "/metadata/namespace").to_string();
        let index = self.list.len();
        let mut subjects = vec![];
        for s in binding.get("subjects").and_then(Value::as_array).into_iter().flatten() {
            let name = text(s, "/name");
            subjects.push((text(s, "/kind").to_string(), name.to_string(), text(s, "/namespace").to_string()));
            let (map, key) = match text(s, "/kind") {
                "User" => (&mut self.by_user, name.to_string()),
                "Group" => (&mut self.by_group, name.to_string()),
                "ServiceAccount" => {
                    let ns = match text(s, "/namespace") {
                        "" => namespace.as_str(),
                        ns => ns,
                    };
                    if ns.is_empty() {
                        continue;
                    }
                    (&mut self.by_user, service_account_username(ns, name))
                }
                _ => continue,
            };
            let entry = map.entry(key).or_default();
            if entry.last() != Some(&index) {
                entry.push(index);
            }
        }
        self.list.push(Binding {
            name: text(binding, "/metadata/name").to_string(),
            namespace,
            role_kind: text(binding, "/roleRef/kind").to_string(),
            role_name: text(binding, "/roleRef/name").to_string(),
            subjects,
        });
    }

    /// The bindings naming `user` or one of its groups, in list order, each once.
    fn applying(&self, user: &UserInfo) -> Vec<&Binding> {
        let mut idx: Vec<usize> = self.by_user.get(&user.name).cloned().unwrap_or_default();
        for g in &user.groups {
            idx.extend(self.by_group.get(g).into_iter().flatten());
        }
        idx.sort_unstable();
        idx.dedup();
        idx.into_iter().map(|i| &self.list[i]).collect()
    }
}

/// `system:serviceaccount:<namespace>:<name>`.
pub fn service_account_username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The outcome of [`Policy::authorize`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// No rule allows the request. `reason` is what resolving the user's bindings went wrong
    /// with (`RBAC: clusterrole.rbac.authorization.k8s.io "x" not found`), as upstream appends it
    /// to the message; usually empty.
    Deny {
        reason: String,
    },
}

/// What allowed a request ([`Policy::review`] words it as upstream's reason).
enum Grant<'a> {
    /// Membership of `system:masters`.
    Masters,
    /// A default ClusterRole bound to `system:authenticated` ([`default_grants`]).
    Default(&'static str),
    /// A rule of the role this ClusterRoleBinding or RoleBinding binds.
    Binding(&'a Binding),
}

/// A SubjectAccessReview's answer: whether the request is allowed and why (upstream's
/// authorizer reason: `RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to ...` when
/// allowed by RBAC, empty for `system:masters`; when not allowed, what resolving the user's
/// bindings went wrong with, as [`Decision::Deny`]). RBAC never denies outright: a request it
/// does not allow has no opinion, so a review's `denied` is always false.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    pub reason: String,
}

/// Every Role, ClusterRole, RoleBinding and ClusterRoleBinding, parsed.
#[derive(Debug, Default)]
pub struct Policy {
    roles: HashMap<(String, String), Vec<PolicyRule>>,
    cluster_roles: HashMap<String, Vec<PolicyRule>>,
    cluster_bindings: Bindings,
    role_bindings: HashMap<String, Bindings>,
}

fn rules_of(role: &Value) -> Vec<PolicyRule> {
    role.get("rules").and_then(Value::as_array).into_iter().flatten().map(PolicyRule::from_json).collect()
}

impl Policy {
    /// The policy these objects (JSON as stored) make.
    pub fn from_objects<'a>(
        roles: impl IntoIterator<Item = &'a Value>,
        cluster_roles: impl IntoIterator<Item = &'a Value>,
        role_bindings: impl IntoIterator<Item = &'a Value>,
        cluster_role_bindings: impl IntoIterator<Item = &'a Value>,
    ) -> Policy {
        let mut p = Policy::default();
        for r in roles {
            let key = (text(r, "/metadata/namespace").to_string(), text(r, "/metadata/name").to_string());
            p.roles.insert(key, rules_of(r));
        }
        for r in cluster_roles {
            p.cluster_roles.insert(text(r, "/metadata/name").to_string(), rules_of(r));
        }
        for b in role_bindings {
            p.role_bindings.entry(text(b, "/metadata/namespace").to_string()).or_default().add(b);
        }
        for b in cluster_role_bindings {
            p.cluster_bindings.add(b);
        }
        p
    }

    /// The policy the store holds now.
    pub fn from_store(store: &Store) -> Policy {
        let list = |plural: &str| -> Vec<Value> {
            let Some(def) = store.registry.get(GROUP, "v1", plural) else { return vec![] };
            store.list(&def, None, None, |_| true, None).0.iter().map(|o| o.value()).collect()
        };
        let (r, cr, rb, crb) = (list("roles"), list("clusterroles"), list("rolebindings"), list("clusterrolebindings"));
        Policy::from_objects(&r, &cr, &rb, &crb)
    }

    /// `GetRoleReferenceRules`: the rules a binding grants, or why they cannot be found.
    fn rules(&self, b: &Binding) -> Result<&[PolicyRule], String> {
        self.role_rules(&b.role_kind, &b.namespace, &b.role_name)
    }

    /// The rules of the Role (in `namespace`) or ClusterRole a `roleRef` names.
    fn role_rules(&self, kind: &str, namespace: &str, name: &str) -> Result<&[PolicyRule], String> {
        let found = match kind {
            "Role" => self.roles.get(&(namespace.to_string(), name.to_string())),
            "ClusterRole" => self.cluster_roles.get(name),
            other => return Err(format!("unsupported role reference kind: {other:?}")),
        };
        found.map(Vec::as_slice).ok_or_else(|| format!("{}.{GROUP} \"{name}\" not found", kind.to_lowercase()))
    }

    /// `RulesFor`: every rule that applies to `user` in `namespace` (cluster-wide ones only for
    /// ""), the discovery defaults included, and what could not be resolved.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> (Vec<PolicyRule>, Vec<String>) {
        let mut rules = vec![];
        if user.groups.iter().any(|g| g == AUTHENTICATED) {
            rules.extend(default_grants().iter().map(|(_, rule)| rule.clone()));
        }
        let mut errors = vec![];
        let namespaced = (!namespace.is_empty()).then(|| self.role_bindings.get(namespace)).flatten();
        for b in self
            .cluster_bindings
            .applying(user)
            .into_iter()
            .chain(namespaced.into_iter().flat_map(|b| b.applying(user)))
        {
            match self.rules(b) {
                Ok(r) => rules.extend_from_slice(r),
                Err(e) => errors.push(e),
            }
        }
        (rules, errors)
    }

    /// Whether `user` may make request `r`: allowed as a member of `system:masters`, by the
    /// default grants to every authenticated user, by a rule of a ClusterRole a
    /// ClusterRoleBinding binds to the user, or (for a request in a namespace) by a rule of a Role
    /// or ClusterRole a RoleBinding of that namespace binds to the user.
    pub fn authorize(&self, user: &UserInfo, r: &RequestInfo) -> Decision {
        match self.grant(user, r) {
            Ok(_) => Decision::Allow,
            Err(reason) => Decision::Deny { reason },
        }
    }

    /// [`Policy::authorize`] with upstream's reason for an allowed request too: what a
    /// SubjectAccessReview answers.
    pub fn review(&self, user: &UserInfo, r: &RequestInfo) -> Verdict {
        match self.grant(user, r) {
            Ok(Grant::Masters) => Verdict { allowed: true, reason: String::new() },
            Ok(Grant::Default(role)) => Verdict {
                allowed: true,
                reason: format!(
                    "RBAC: allowed by ClusterRoleBinding {role:?} of ClusterRole {role:?} to Group {AUTHENTICATED:?}"
                ),
            },
            Ok(Grant::Binding(b)) => {
                Verdict { allowed: true, reason: format!("RBAC: allowed by {}", b.describe(user)) }
            }
            Err(reason) => Verdict { allowed: false, reason },
        }
    }

    /// What allows the request, or why nothing could (upstream's `RBAC: <errors>` reason, or "").
    fn grant(&self, user: &UserInfo, r: &RequestInfo) -> Result<Grant<'_>, String> {
        if user.groups.iter().any(|g| g == MASTERS) {
            return Ok(Grant::Masters);
        }
        if user.groups.iter().any(|g| g == AUTHENTICATED)
            && let Some((role, _)) = default_grants().iter().find(|(_, rule)| rule.allows(r))
        {
            return Ok(Grant::Default(role));
        }
        let mut errors: Vec<String> = vec![];
        let namespaced = (!r.namespace.is_empty()).then(|| self.role_bindings.get(&r.namespace)).flatten();
        let bindings = self
            .cluster_bindings
            .applying(user)
            .into_iter()
            .chain(namespaced.into_iter().flat_map(|b| b.applying(user)));
        for b in bindings {
            match self.rules(b) {
                Ok(rules) if rules.iter().any(|rule| rule.allows(r)) => return Ok(Grant::Binding(b)),
                Ok(_) => {}
                Err(e) => errors.push(e),
            }
        }
        Err(if errors.is_empty() { String::new() } else { format!("RBAC: {}", aggregate(&errors)) })
    }
}

/// `utilerrors.NewAggregate(errs).Error()`: one error as it is, several as `[a, b]` (repeats
/// left out).
fn aggregate(errors: &[String]) -> String {
    let mut seen: Vec<&str> = vec![];
    for e in errors {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    if errors.len() == 1 || seen.len() == 1 {
        return seen.join(", ");
    }
    format!("[{}]", seen.join(", "))
}

// ---------------------------------------------------------------------------------------------
// Escalation prevention
// ---------------------------------------------------------------------------------------------

/// Whether `user` may write this Role, ClusterRole, RoleBinding or ClusterRoleBinding (`obj`,
/// replacing `old` on update) in `namespace` ("" for the cluster-scoped kinds), as
/// kube-apiserver's RBAC storage decides to prevent privilege escalation: a role may hold only
/// rules the user holds itself in that namespace, unless the user may `escalate` roles; a binding
/// may bind only a role whose rules the user holds, unless the user may `bind` that role. `name`
/// is the object's name in the request path (none for a create by POST). An update that leaves
/// the rules (of a role) or the role and subjects (of a binding) as they were grants nothing new
/// and is allowed. The error is the message after `<resource> "<name>" is forbidden: `.
pub fn check_escalation(
    policy: &Policy,
    user: &UserInfo,
    kind: &str,
    namespace: &str,
    name: &str,
    obj: &Value,
    old: Option<&Value>,
) -> Result<(), String> {
    let allowed = |verb: &str, resource: &str, name: &str| {
        let r = RequestInfo {
            is_resource_request: true,
            verb: verb.into(),
            api_group: GROUP.into(),
            api_version: "*".into(),
            namespace: namespace.into(),
            resource: resource.into(),
            name: name.into(),
            ..RequestInfo::default()
        };
        policy.authorize(user, &r) == Decision::Allow
    };
    let granted: Vec<PolicyRule> = match kind {
        "Role" | "ClusterRole" => {
            let rules = rules_of(obj);
            let plural = if kind == "Role" { "roles" } else { "clusterroles" };
            if old.is_some_and(|o| rules_of(o) == rules) || allowed("escalate", plural, name) {
                return Ok(());
            }
            rules
        }
        _ => {
            let unchanged =
                old.is_some_and(|o| o.get("roleRef") == obj.get("roleRef") && o.get("subjects") == obj.get("subjects"));
            let (role_kind, role_name) = (text(obj, "/roleRef/kind"), text(obj, "/roleRef/name"));
            let plural = match role_kind {
                "Role" => "roles",
                "ClusterRole" => "clusterroles",
                _ => "",
            };
            if unchanged || (!plural.is_empty() && allowed("bind", plural, role_name)) {
                return Ok(());
            }
            policy.role_rules(role_kind, namespace, role_name)?.to_vec()
        }
    };
    let (owner, errors) = policy.rules_for(user, namespace);
    let missing = uncovered(&owner, &granted);
    if missing.is_empty() {
        return Ok(());
    }
    let mut described: Vec<String> = compact(missing).iter().map(compact_string).collect();
    described.sort();
    described.dedup();
    let groups: Vec<String> = user.groups.iter().map(|g| format!("{g:?}")).collect();
    let mut msg = format!(
        "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        groups.join(" "),
        described.join("\n")
    );
    if !errors.is_empty() {
        msg.push_str(&format!("; resolution errors: [{}]", aggregate(&errors)));
    }
    Err(msg)
}

/// `validation.Covers`: the atoms (one group, resource, verb and name; or one path and verb) of
/// `servant` that no rule of `owner` covers.
pub fn uncovered(owner: &[PolicyRule], servant: &[PolicyRule]) -> Vec<PolicyRule> {
    servant.iter().flat_map(breakdown).filter(|atom| !owner.iter().any(|o| covers(o, atom))).collect()
}

/// `BreakdownRule`.
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let one = |v: &String| vec![v.clone()];
    let mut out = vec![];
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let atom = PolicyRule {
                    verbs: one(verb),
                    api_groups: one(group),
                    resources: one(resource),
                    ..PolicyRule::default()
                };
                if rule.resource_names.is_empty() {
                    out.push(atom);
                } else {
                    out.extend(
                        rule.resource_names.iter().map(|n| PolicyRule { resource_names: one(n), ..atom.clone() }),
                    );
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            out.push(PolicyRule { verbs: one(verb), non_resource_urls: one(url), ..PolicyRule::default() });
        }
    }
    out
}

/// `ruleCovers`: whether `owner` grants all of the atom `sub`.
fn covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let has_all = |set: &[String], items: &[String]| items.iter().all(|i| set.contains(i));
    let has = |set: &[String], item: &str| set.iter().any(|s| s == item);
    let verbs = has(&owner.verbs, "*") || has_all(&owner.verbs, &sub.verbs);
    let groups = has(&owner.api_groups, "*") || has_all(&owner.api_groups, &sub.api_groups);
    let resources = has(&owner.resources, "*")
        || sub.resources.iter().all(|r| {
            has(&owner.resources, r)
                || r.split_once('/').is_some_and(|(_, sub)| has(&owner.resources, &format!("*/{sub}")))
        });
    let urls = sub.non_resource_urls.iter().all(|path| {
        owner.non_resource_urls.iter().any(|o| o == path || o.strip_suffix('*').is_some_and(|p| path.starts_with(p)))
    });
    let names = owner.resource_names.is_empty()
        || (!sub.resource_names.is_empty() && has_all(&owner.resource_names, &sub.resource_names));
    verbs && groups && resources && urls && names
}

/// `CompactRules`: atoms of one group and resource (and at most one name) that differ only in
/// their verbs become one rule.
fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = vec![];
    for rule in rules {
        let simple = rule.non_resource_urls.is_empty()
            && rule.resource_names.len() <= 1
            && rule.api_groups.len() == 1
            && rule.resources.len() == 1;
        let same = |o: &PolicyRule| {
            o.non_resource_urls.is_empty()
                && (&o.api_groups, &o.resources, &o.resource_names)
                    == (&rule.api_groups, &rule.resources, &rule.resource_names)
        };
        match out.iter_mut().find(|o| simple && same(o)) {
            Some(existing) => {
                for v in rule.verbs {
                    if !existing.verbs.contains(&v) {
                        existing.verbs.push(v);
                    }
                }
            }
            None => out.push(rule),
        }
    }
    out
}

/// `CompactString`: `{APIGroups:["g"], Resources:["r"], Verbs:["get" "list"]}`, empty lists left out.
fn compact_string(r: &PolicyRule) -> String {
    let q = |v: &[String]| format!("[{}]", v.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(" "));
    let parts: Vec<String> = [
        ("APIGroups", &r.api_groups),
        ("Resources", &r.resources),
        ("NonResourceURLs", &r.non_resource_urls),
        ("ResourceNames", &r.resource_names),
        ("Verbs", &r.verbs),
    ]
    .iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| format!("{k}:{}", q(v)))
    .collect();
    format!("{{{}}}", parts.join(", "))
}

/// The parsed policy, rebuilt from the store when (and only when) an RBAC object changed.
#[derive(Default)]
pub struct Authorizer {
    cached: RwLock<Option<(u64, Arc<Policy>)>>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authorizer")
    }
}

impl Authorizer {
    /// The policy as of now: the cached one if no RBAC object changed since it was built.
    pub fn policy(&self, store: &Store) -> Arc<Policy> {
        let generation = store.rbac_generation();
        if let Some((g, p)) = self.cached.read().unwrap_or_else(|e| e.into_inner()).as_ref()
            && *g == generation
        {
            return p.clone();
        }
        // Built from a state at least as new as `generation` (see `Store::rbac_generation`).
        let policy = Arc::new(Policy::from_store(store));
        let mut cached = self.cached.write().unwrap_or_else(|e| e.into_inner());
        if cached.as_ref().is_none_or(|(g, _)| *g < generation) {
            *cached = Some((generation, policy.clone()));
        }
        policy
    }

    /// The store's RBAC generation the cached policy was built at, if one was (for tests of
    /// the cache).
    pub fn cached_generation(&self) -> Option<u64> {
        self.cached.read().unwrap_or_else(|e| e.into_inner()).as_ref().map(|(g, _)| *g)
    }
}

// ---------------------------------------------------------------------------------------------
// Admission: defaulting and validation
// ---------------------------------------------------------------------------------------------

/// Defaulting and validation of one RBAC kind, as kube-apiserver's registry strategy
/// (`pkg/apis/rbac/v1/defaults.go`, `pkg/apis/rbac/validation`).
pub struct RbacAdmission {
    pub kind: &'static str,
}

/// The four kinds, for registration.
pub const KINDS: [&str; 4] = ["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"];

impl AdmissionHook for RbacAdmission {
    fn default(&self, obj: &mut Value, _old: Option<&Value>) {
        default_object(self.kind, obj);
    }
    fn validate(&self, obj: &Value, old: Option<&Value>, _lookup: &dyn Lookup) -> Vec<Cause> {
        validate_object(self.kind, obj, old)
    }
}

/// A binding's `roleRef.apiGroup` defaults to the RBAC group, a User or Group subject's
/// `apiGroup` too.
pub fn default_object(kind: &str, obj: &mut Value) {
    if !kind.ends_with("Binding") {
        return;
    }
    if let Some(r) = obj.get_mut("roleRef").and_then(Value::as_object_mut)
        && r.get("apiGroup").and_then(Value::as_str).is_none_or(str::is_empty)
    {
        r.insert("apiGroup".into(), json!(GROUP));
    }
    for s in obj.get_mut("subjects").and_then(Value::as_array_mut).into_iter().flatten() {
        let Some(s) = s.as_object_mut() else { continue };
        let user_or_group = matches!(s.get("kind").and_then(Value::as_str), Some("User" | "Group"));
        if user_or_group && s.get("apiGroup").and_then(Value::as_str).is_none_or(str::is_empty) {
            s.insert("apiGroup".into(), json!(GROUP));
        }
    }
}

/// Go's `%#v` of a `[]string`: `[]string{"a", "b"}`.
fn go_strings(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
    format!("[]string{{{}}}", items.join(", "))
}

/// A list-of-strings field, or a cause naming it when it is something else.
fn string_list(v: &Value, key: &str, field: &str, causes: &mut Vec<Cause>) -> Vec<String> {
    match v.get(key) {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => strings(v.get(key)),
        Some(other) => {
            causes.push(Cause::invalid_rendered(
                format!("{field}.{key}"),
                &other.to_string(),
                "must be a list of strings",
            ));
            vec![]
        }
    }
}

/// A string field, or a cause naming it when it is something else.
fn string_field<'a>(v: &'a Value, key: &str, field: &str, causes: &mut Vec<Cause>) -> &'a str {
    match v.get(key) {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s,
        Some(other) => {
            causes.push(Cause::invalid_rendered(format!("{field}.{key}"), &other.to_string(), "must be a string"));
            ""
        }
    }
}

/// `ValidatePolicyRule`.
fn validate_rule(rule: &Value, namespaced: bool, field: &str, causes: &mut Vec<Cause>) {
    if !rule.is_object() {
        causes.push(Cause::invalid_rendered(field, &rule.to_string(), "must be an object"));
        return;
    }
    let verbs = string_list(rule, "verbs", field, causes);
    let groups = string_list(rule, "apiGroups", field, causes);
    let resources = string_list(rule, "resources", field, causes);
    let names = string_list(rule, "resourceNames", field, causes);
    let urls = string_list(rule, "nonResourceURLs", field, causes);
    if verbs.is_empty() {
        causes.push(Cause::required_because(format!("{field}.verbs"), "verbs must contain at least one value"));
    }
    if !urls.is_empty() {
        if namespaced {
            causes.push(Cause::invalid_rendered(
                format!("{field}.nonResourceURLs"),
                &go_strings(&urls),
                "namespaced rules cannot apply to non-resource URLs",
            ));
        }
        if !groups.is_empty() || !resources.is_empty() || !names.is_empty() {
            causes.push(Cause::invalid_rendered(
                format!("{field}.nonResourceURLs"),
                &go_strings(&urls),
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        return;
    }
    if groups.is_empty() {
        causes.push(Cause::required_because(
            format!("{field}.apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    if resources.is_empty() {
        causes.push(Cause::required_because(
            format!("{field}.resources"),
            "resource rules must supply at least one resource",
        ));
    }
}

/// `ValidateRoleBindingSubject`.
fn validate_subject(s: &Value, namespaced: bool, field: &str, causes: &mut Vec<Cause>) {
    if !s.is_object() {
        causes.push(Cause::invalid_rendered(field, &s.to_string(), "must be an object"));
        return;
    }
    let name = string_field(s, "name", field, causes);
    let kind = string_field(s, "kind", field, causes);
    let api_group = string_field(s, "apiGroup", field, causes);
    let namespace = string_field(s, "namespace", field, causes);
    if name.is_empty() {
        causes.push(Cause::required(format!("{field}.name")));
    }
    match kind {
        "ServiceAccount" => {
            if !name.is_empty() {
                for msg in crate::names::dns1123_subdomain(name) {
                    causes.push(Cause::invalid(format!("{field}.name"), name, &msg));
                }
            }
            if !api_group.is_empty() {
                causes.push(Cause::not_supported(format!("{field}.apiGroup"), api_group, &[""]));
            }
            if !namespaced && namespace.is_empty() {
                causes.push(Cause::required(format!("{field}.namespace")));
            }
        }
        "User" | "Group" => {
            if api_group != GROUP {
                causes.push(Cause::not_supported(format!("{field}.apiGroup"), api_group, &[GROUP]));
            }
        }
        other => {
            causes.push(Cause::not_supported(format!("{field}.kind"), other, &["ServiceAccount", "User", "Group"]))
        }
    }
}

/// `rbac.RoleRef{...}` as Go's `%#v` prints it.
fn go_role_ref(r: &Value) -> String {
    format!(
        "rbac.RoleRef{{APIGroup:{:?}, Kind:{:?}, Name:{:?}}}",
        text(r, "/apiGroup"),
        text(r, "/kind"),
        text(r, "/name")
    )
}

/// Validation of a Role, ClusterRole, RoleBinding or ClusterRoleBinding (`old` on update).
pub fn validate_object(kind: &str, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = vec![];
    let namespaced = matches!(kind, "Role" | "RoleBinding");
    if matches!(kind, "Role" | "ClusterRole") {
        match obj.get("rules") {
            None | Some(Value::Null) => {}
            Some(Value::Array(rules)) => {
                for (i, rule) in rules.iter().enumerate() {
                    validate_rule(rule, namespaced, &format!("rules[{i}]"), &mut causes);
                }
            }
            Some(other) => causes.push(Cause::invalid_rendered("rules", &other.to_string(), "must be a list of rules")),
        }
        return causes;
    }
    // A binding.
    let null = Value::Null;
    let role_ref = obj.get("roleRef").unwrap_or(&null);
    if !role_ref.is_object() {
        causes.push(Cause::required("roleRef"));
        return causes;
    }
    let api_group = string_field(role_ref, "apiGroup", "roleRef", &mut causes);
    if api_group != GROUP {
        causes.push(Cause::not_supported("roleRef.apiGroup", api_group, &[GROUP]));
    }
    let role_kind = string_field(role_ref, "kind", "roleRef", &mut causes);
    let kinds: &[&str] = if namespaced { &["Role", "ClusterRole"] } else { &["ClusterRole"] };
    if !kinds.contains(&role_kind) {
        causes.push(Cause::not_supported("roleRef.kind", role_kind, kinds));
    }
    let role_name = string_field(role_ref, "name", "roleRef", &mut causes);
    if role_name.is_empty() {
        causes.push(Cause::required("roleRef.name"));
    } else {
        for msg in crate::ops::path_segment(role_name) {
            causes.push(Cause::invalid("roleRef.name", role_name, &msg));
        }
    }
    match obj.get("subjects") {
        None | Some(Value::Null) => {}
        Some(Value::Array(subjects)) => {
            for (i, s) in subjects.iter().enumerate() {
                validate_subject(s, namespaced, &format!("subjects[{i}]"), &mut causes);
            }
        }
        Some(other) => {
            causes.push(Cause::invalid_rendered("subjects", &other.to_string(), "must be a list of subjects"))
        }
    }
    if let Some(old_ref) = old.and_then(|o| o.get("roleRef"))
        && ["apiGroup", "kind", "name"]
            .iter()
            .any(|k| text(old_ref, &format!("/{k}")) != text(role_ref, &format!("/{k}")))
    {
        causes.push(Cause::invalid_rendered("roleRef", &go_role_ref(role_ref), "cannot change roleRef"));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa_user(ns: &str, name: &str) -> UserInfo {
        UserInfo {
            name: service_account_username(ns, name),
            groups: vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{ns}"), AUTHENTICATED.into()],
        }
    }

    fn req(method: Method, path: &str, query: Option<&str>) -> RequestInfo {
        RequestInfo::parse(&method, path, query).unwrap()
    }

    /// (method, path, query) → (resource request, verb, group, namespace, resource, subresource, name)
    #[test]
    fn requests_read_as_kube_apiservers_request_info() {
        type Want<'a> = (bool, &'a str, &'a str, &'a str, &'a str, &'a str, &'a str);
        let cases: Vec<(Method, &str, Option<&str>, Want)> = vec![
            (Method::GET, "/api/v1/namespaces/default/pods/p", None, (true, "get", "", "default", "pods", "", "p")),
            (Method::GET, "/api/v1/namespaces/default/pods", None, (true, "list", "", "default", "pods", "", "")),
            (Method::GET, "/api/v1/pods", None, (true, "list", "", "", "pods", "", "")),
            (Method::GET, "/api/v1/namespaces/d/pods", Some("watch=true"), (true, "watch", "", "d", "pods", "", "")),
            (Method::GET, "/api/v1/namespaces/d/pods", Some("watch=1&x=y"), (true, "watch", "", "d", "pods", "", "")),
            (Method::GET, "/api/v1/namespaces/d/pods", Some("watch=false"), (true, "list", "", "d", "pods", "", "")),
            (Method::GET, "/api/v1/watch/namespaces/d/pods/p", None, (true, "watch", "", "d", "pods", "", "p")),
            (Method::GET, "/api/v1/watch/pods", None, (true, "watch", "", "", "pods", "", "")),
            (
                Method::GET,
                "/apis/jobset.x-k8s.io/v1alpha2/namespaces/d/jobsets",
                Some("watch=true&fieldSelector=metadata.name%3Dx"),
                (true, "watch", "jobset.x-k8s.io", "d", "jobsets", "", "x"),
            ),
            (Method::POST, "/api/v1/namespaces/d/pods", None, (true, "create", "", "d", "pods", "", "")),
            (
                Method::PUT,
                "/apis/jobset.x-k8s.io/v1alpha2/namespaces/d/jobsets/x/status",
                None,
                (true, "update", "jobset.x-k8s.io", "d", "jobsets", "status", "x"),
            ),
            (Method::PATCH, "/api/v1/nodes/n", None, (true, "patch", "", "", "nodes", "", "n")),
            (Method::DELETE, "/api/v1/namespaces/d/pods/p", None, (true, "delete", "", "d", "pods", "", "p")),
            (Method::DELETE, "/api/v1/namespaces/d/pods", None, (true, "deletecollection", "", "d", "pods", "", "")),
            (
                Method::POST,
                "/api/v1/namespaces/d/serviceaccounts/sa/token",
                None,
                (true, "create", "", "d", "serviceaccounts", "token", "sa"),
            ),
            // A namespace is an object in its own namespace; status and finalize are its subresources.
            (Method::GET, "/api/v1/namespaces/d", None, (true, "get", "", "d", "namespaces", "", "d")),
            (Method::PUT, "/api/v1/namespaces/d/status", None, (true, "update", "", "d", "namespaces", "status", "d")),
            (Method::GET, "/api/v1/namespaces", None, (true, "list", "", "", "namespaces", "", "")),
            (
                Method::GET,
                "/api/v1/namespaces/d/services/s/proxy/a/b",
                None,
                (true, "get", "", "d", "services", "proxy", "s"),
            ),
            (
                Method::GET,
                "/api/v1/proxy/namespaces/d/services/s/a",
                None,
                (true, "proxy", "", "d", "services", "", "s"),
            ),
            // Discovery and the rest: non-resource.
            (Method::GET, "/api", None, (false, "get", "", "", "", "", "")),
            (Method::GET, "/api/v1", None, (false, "get", "", "", "", "", "")),
            (Method::GET, "/apis/jobset.x-k8s.io", None, (false, "get", "", "", "", "", "")),
            (Method::GET, "/apis/jobset.x-k8s.io/v1alpha2", None, (false, "get", "", "", "", "", "")),
            (Method::GET, "/metrics", None, (false, "get", "", "", "", "", "")),
            (Method::POST, "/metrics", None, (false, "post", "", "", "", "", "")),
            (Method::GET, "/foo/bar/baz", None, (false, "get", "", "", "", "", "")),
        ];
        for (method, path, query, want) in cases {
            let r = req(method.clone(), path, query);
            let got = (
                r.is_resource_request,
                r.verb.as_str(),
                r.api_group.as_str(),
                r.namespace.as_str(),
                r.resource.as_str(),
                r.subresource.as_str(),
                r.name.as_str(),
            );
            assert_eq!(got, want, "{method} {path}?{query:?}");
            assert_eq!(r.path, path);
        }
        assert!(RequestInfo::parse(&Method::GET, "/api/v1/watch", None).is_err());
    }

    fn rule(v: Value) -> PolicyRule {
        PolicyRule::from_json(&v)
    }

    #[test]
    fn a_rule_matches_verbs_groups_resources_subresources_and_names_as_upstream() {
        let get_pod = req(Method::GET, "/api/v1/namespaces/d/pods/p", None);
        let list_pods = req(Method::GET, "/api/v1/namespaces/d/pods", None);
        let create_pod = req(Method::POST, "/api/v1/namespaces/d/pods", None);
        let pod_status = req(Method::PATCH, "/api/v1/namespaces/d/pods/p/status", None);
        let js_status = req(Method::PUT, "/apis/jobset.x-k8s.io/v1alpha2/namespaces/d/jobsets/x/status", None);
        let watch_named =
            req(Method::GET, "/api/v1/namespaces/d/pods", Some("watch=true&fieldSelector=metadata.name=p"));
        let metrics = req(Method::GET, "/metrics", None);
        let cases: Vec<(&str, Value, &RequestInfo, bool)> = vec![
            ("exact", json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}), &get_pod, true),
            ("another verb", json!({"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}), &get_pod, false),
            ("every verb", json!({"verbs": ["*"], "apiGroups": [""], "resources": ["pods"]}), &get_pod, true),
            ("another group", json!({"verbs": ["get"], "apiGroups": ["apps"], "resources": ["pods"]}), &get_pod, false),
            ("every group", json!({"verbs": ["get"], "apiGroups": ["*"], "resources": ["pods"]}), &get_pod, true),
            ("every resource", json!({"verbs": ["get"], "apiGroups": [""], "resources": ["*"]}), &get_pod, true),
            (
                "resource rule misses its subresource",
                json!({"verbs": ["patch"], "apiGroups": [""], "resources": ["pods"]}),
                &pod_status,
                false,
            ),
            (
                "subresource",
                json!({"verbs": ["patch"], "apiGroups": [""], "resources": ["pods/status"]}),
                &pod_status,
                true,
            ),
            (
                "any resource's subresource",
                json!({"verbs": ["patch"], "apiGroups": [""], "resources": ["*/status"]}),
                &pod_status,
                true,
            ),
            (
                "* covers subresources",
                json!({"verbs": ["patch"], "apiGroups": [""], "resources": ["*"]}),
                &pod_status,
                true,
            ),
            (
                "subresource rule misses the resource",
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods/status"]}),
                &get_pod,
                false,
            ),
            (
                "another subresource",
                json!({"verbs": ["patch"], "apiGroups": [""], "resources": ["pods/log"]}),
                &pod_status,
                false,
            ),
            (
                "custom resource status",
                json!({"verbs": ["update"], "apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets/status"]}),
                &js_status,
                true,
            ),
            (
                "named",
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["p"]}),
                &get_pod,
                true,
            ),
            (
                "another name",
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["q"]}),
                &get_pod,
                false,
            ),
            (
                "names never match a list",
                json!({"verbs": ["list"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["p"]}),
                &list_pods,
                false,
            ),
            (
                "names never match a create",
                json!({"verbs": ["create"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["p"]}),
                &create_pod,
                false,
            ),
            (
                "names match a watch of that name",
                json!({"verbs": ["watch"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["p"]}),
                &watch_named,
                true,
            ),
            (
                "resource rule misses a path",
                json!({"verbs": ["get"], "apiGroups": ["*"], "resources": ["*"]}),
                &metrics,
                false,
            ),
            ("path", json!({"verbs": ["get"], "nonResourceURLs": ["/metrics"]}), &metrics, true),
            ("path prefix", json!({"verbs": ["get"], "nonResourceURLs": ["/met*"]}), &metrics, true),
            ("every path", json!({"verbs": ["get"], "nonResourceURLs": ["*"]}), &metrics, true),
            ("another path", json!({"verbs": ["get"], "nonResourceURLs": ["/metrics/x"]}), &metrics, false),
            ("path rule misses a resource", json!({"verbs": ["get"], "nonResourceURLs": ["*"]}), &get_pod, false),
        ];
        for (case, r, request, want) in cases {
            assert_eq!(rule(r).allows(request), want, "{case}");
        }
    }

    fn role(kind: &str, ns: &str, name: &str, rules: Value) -> Value {
        json!({"kind": kind, "metadata": {"name": name, "namespace": ns}, "rules": rules})
    }

    fn binding(ns: &str, name: &str, role_kind: &str, role: &str, subjects: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": ns}, "roleRef": {"apiGroup": GROUP, "kind": role_kind, "name": role}, "subjects": subjects})
    }

    fn sa(ns: &str, name: &str) -> Value {
        json!({"kind": "ServiceAccount", "name": name, "namespace": ns})
    }

    const READ_PODS: &str = r#"[{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]"#;

    fn read_pods() -> Value {
        serde_json::from_str(READ_PODS).unwrap()
    }

    #[test]
    fn a_user_without_bindings_may_read_discovery_only() {
        let p = Policy::default();
        let u = sa_user("ns", "a");
        for path in
            ["/api", "/api/v1", "/apis", "/apis/batch/v1", "/version", "/openapi/v2", "/healthz", "/livez", "/readyz"]
        {
            assert_eq!(p.authorize(&u, &req(Method::GET, path, None)), Decision::Allow, "{path}");
        }
        for (method, path) in [(Method::GET, "/metrics"), (Method::POST, "/api"), (Method::GET, "/api/v1/pods")] {
            assert!(matches!(p.authorize(&u, &req(method, path, None)), Decision::Deny { .. }), "{path}");
        }
        // Not without `system:authenticated`.
        let anonymous = UserInfo { name: "x".into(), groups: vec![] };
        assert!(matches!(p.authorize(&anonymous, &req(Method::GET, "/api", None)), Decision::Deny { .. }));
    }

    #[test]
    fn a_clusterrolebinding_grants_in_every_namespace_and_at_the_cluster_scope() {
        let cr = role("ClusterRole", "", "reader", read_pods());
        let crb = binding("", "b", "ClusterRole", "reader", json!([sa("ns", "a")]));
        let p = Policy::from_objects([], [&cr], [], [&crb]);
        for path in ["/api/v1/namespaces/ns/pods/p", "/api/v1/namespaces/other/pods", "/api/v1/pods"] {
            assert_eq!(p.authorize(&sa_user("ns", "a"), &req(Method::GET, path, None)), Decision::Allow, "{path}");
        }
        assert!(matches!(
            p.authorize(&sa_user("ns", "a"), &req(Method::DELETE, "/api/v1/namespaces/ns/pods/p", None)),
            Decision::Deny { .. }
        ));
        // Same name, another namespace: another service account.
        assert!(matches!(
            p.authorize(&sa_user("other", "a"), &req(Method::GET, "/api/v1/pods", None)),
            Decision::Deny { .. }
        ));
    }

    #[test]
    fn a_rolebinding_grants_a_clusterrole_only_in_its_namespace() {
        let cr = role("ClusterRole", "", "reader", read_pods());
        let rb = binding("ns", "b", "ClusterRole", "reader", json!([sa("ns", "a")]));
        let p = Policy::from_objects([], [&cr], [&rb], []);
        let u = sa_user("ns", "a");
        assert_eq!(p.authorize(&u, &req(Method::GET, "/api/v1/namespaces/ns/pods", None)), Decision::Allow);
        for path in ["/api/v1/namespaces/other/pods", "/api/v1/pods"] {
            assert!(matches!(p.authorize(&u, &req(Method::GET, path, None)), Decision::Deny { .. }), "{path}");
        }
    }

    #[test]
    fn a_rolebinding_grants_a_role_of_its_own_namespace_only() {
        let mine = role("Role", "ns", "reader", read_pods());
        let theirs = role("Role", "other", "other-reader", read_pods());
        let rb = binding("ns", "b", "Role", "reader", json!([sa("ns", "a")]));
        // A RoleBinding naming a Role of another namespace finds nothing.
        let cross = binding("ns", "c", "Role", "other-reader", json!([sa("ns", "b")]));
        let p = Policy::from_objects([&mine, &theirs], [], [&rb, &cross], []);
        assert_eq!(
            p.authorize(&sa_user("ns", "a"), &req(Method::GET, "/api/v1/namespaces/ns/pods/p", None)),
            Decision::Allow
        );
        assert!(matches!(
            p.authorize(&sa_user("ns", "a"), &req(Method::GET, "/api/v1/namespaces/other/pods/p", None)),
            Decision::Deny { .. }
        ));
        assert_eq!(
            p.authorize(&sa_user("ns", "b"), &req(Method::GET, "/api/v1/namespaces/ns/pods/p", None)),
            Decision::Deny { reason: "RBAC: role.rbac.authorization.k8s.io \"other-reader\" not found".into() }
        );
    }

    #[test]
    fn subjects_match_service_accounts_users_and_groups() {
        let cr = role("ClusterRole", "", "reader", read_pods());
        let get = req(Method::GET, "/api/v1/namespaces/ns/pods/p", None);
        let cases: Vec<(&str, Value, bool)> = vec![
            ("service account", binding("ns", "b", "ClusterRole", "reader", json!([sa("ns", "a")])), true),
            (
                "service account of another namespace",
                binding("ns", "b", "ClusterRole", "reader", json!([sa("x", "a")])),
                false,
            ),
            (
                "service account defaulting to the binding's namespace",
                binding("ns", "b", "ClusterRole", "reader", json!([{"kind": "ServiceAccount", "name": "a"}])),
                true,
            ),
            ("another service account", binding("ns", "b", "ClusterRole", "reader", json!([sa("ns", "z")])), false),
            (
                "user by service account name",
                binding(
                    "ns",
                    "b",
                    "ClusterRole",
                    "reader",
                    json!([{"kind": "User", "name": "system:serviceaccount:ns:a"}]),
                ),
                true,
            ),
            (
                "another user",
                binding("ns", "b", "ClusterRole", "reader", json!([{"kind": "User", "name": "a"}])),
                false,
            ),
            (
                "all service accounts",
                binding(
                    "ns",
                    "b",
                    "ClusterRole",
                    "reader",
                    json!([{"kind": "Group", "name": "system:serviceaccounts"}]),
                ),
                true,
            ),
            (
                "service accounts of the namespace",
                binding(
                    "ns",
                    "b",
                    "ClusterRole",
                    "reader",
                    json!([{"kind": "Group", "name": "system:serviceaccounts:ns"}]),
                ),
                true,
            ),
            (
                "service accounts of another namespace",
                binding(
                    "ns",
                    "b",
                    "ClusterRole",
                    "reader",
                    json!([{"kind": "Group", "name": "system:serviceaccounts:x"}]),
                ),
                false,
            ),
            (
                "every authenticated user",
                binding("ns", "b", "ClusterRole", "reader", json!([{"kind": "Group", "name": AUTHENTICATED}])),
                true,
            ),
            (
                "an unknown kind",
                binding("ns", "b", "ClusterRole", "reader", json!([{"kind": "Robot", "name": "a"}])),
                false,
            ),
        ];
        for (case, rb, want) in cases {
            let p = Policy::from_objects([], [&cr], [&rb], []);
            assert_eq!(p.authorize(&sa_user("ns", "a"), &get) == Decision::Allow, want, "{case}");
        }
        // A ClusterRoleBinding's ServiceAccount subject has no namespace to default to.
        let crb = binding("", "b", "ClusterRole", "reader", json!([{"kind": "ServiceAccount", "name": "a"}]));
        let p = Policy::from_objects([], [&cr], [], [&crb]);
        assert!(matches!(p.authorize(&sa_user("ns", "a"), &get), Decision::Deny { .. }));
    }

    #[test]
    fn non_resource_urls_are_granted_by_clusterrolebindings_only() {
        let cr = role("ClusterRole", "", "metrics", json!([{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}]));
        let metrics = req(Method::GET, "/metrics", None);
        let rb = binding("ns", "b", "ClusterRole", "metrics", json!([sa("ns", "a")]));
        let p = Policy::from_objects([], [&cr], [&rb], []);
        assert!(matches!(p.authorize(&sa_user("ns", "a"), &metrics), Decision::Deny { .. }));
        let crb = binding("", "b", "ClusterRole", "metrics", json!([sa("ns", "a")]));
        let p = Policy::from_objects([], [&cr], [], [&crb]);
        assert_eq!(p.authorize(&sa_user("ns", "a"), &metrics), Decision::Allow);
    }

    #[test]
    fn a_review_names_what_allowed_the_request_as_upstream() {
        let cr = role("ClusterRole", "", "reader", read_pods());
        let get = req(Method::GET, "/api/v1/namespaces/ns/pods/p", None);
        let u = sa_user("ns", "a");
        let group = |g: &str| json!({"kind": "Group", "name": g});
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "a ClusterRoleBinding to the service account",
                binding("", "b", "ClusterRole", "reader", json!([sa("ns", "a")])),
                "RBAC: allowed by ClusterRoleBinding \"b\" of ClusterRole \"reader\" to ServiceAccount \"a/ns\"",
            ),
            (
                "a RoleBinding's subject in the binding's namespace",
                binding("ns", "b", "ClusterRole", "reader", json!([{"kind": "ServiceAccount", "name": "a"}])),
                "RBAC: allowed by RoleBinding \"b/ns\" of ClusterRole \"reader\" to ServiceAccount \"a/ns\"",
            ),
            (
                "the first subject that applies",
                binding(
                    "ns",
                    "b",
                    "ClusterRole",
                    "reader",
                    json!([sa("ns", "z"), group("system:serviceaccounts:ns"), sa("ns", "a")]),
                ),
                "RBAC: allowed by RoleBinding \"b/ns\" of ClusterRole \"reader\" to Group \"system:serviceaccounts:ns\"",
            ),
            (
                "a user",
                binding(
                    "",
                    "b",
                    "ClusterRole",
                    "reader",
                    json!([{"kind": "User", "name": "system:serviceaccount:ns:a"}]),
                ),
                "RBAC: allowed by ClusterRoleBinding \"b\" of ClusterRole \"reader\" to User \"system:serviceaccount:ns:a\"",
            ),
        ];
        for (case, b, reason) in cases {
            let (rbs, crbs) =
                if text(&b, "/metadata/namespace").is_empty() { (vec![], vec![&b]) } else { (vec![&b], vec![]) };
            let p = Policy::from_objects([], [&cr], rbs, crbs);
            assert_eq!(p.review(&u, &get), Verdict { allowed: true, reason: reason.into() }, "{case}");
            assert_eq!(p.authorize(&u, &get), Decision::Allow, "{case}");
        }
        let none = Policy::default();
        assert_eq!(none.review(&u, &get), Verdict { allowed: false, reason: String::new() });
        let gone = binding("", "b", "ClusterRole", "gone", json!([sa("ns", "a")]));
        assert_eq!(
            Policy::from_objects([], [], [], [&gone]).review(&u, &get),
            Verdict { allowed: false, reason: "RBAC: clusterrole.rbac.authorization.k8s.io \"gone\" not found".into() }
        );
    }

    #[test]
    fn every_user_may_read_discovery_and_ask_what_it_may_do_and_masters_may_do_anything() {
        let p = Policy::default();
        let u = sa_user("ns", "a");
        let post = |path: &str| req(Method::POST, path, None);
        let default_grant = |role: &str| Verdict {
            allowed: true,
            reason: format!(
                "RBAC: allowed by ClusterRoleBinding {role:?} of ClusterRole {role:?} to Group \"system:authenticated\""
            ),
        };
        assert_eq!(p.review(&u, &req(Method::GET, "/apis", None)), default_grant("system:discovery"));
        let self_review = post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews");
        assert_eq!(p.review(&u, &self_review), default_grant("system:basic-user"));
        // Others' reviews need a grant of their own.
        for path in
            ["/apis/authorization.k8s.io/v1/subjectaccessreviews", "/apis/authentication.k8s.io/v1/tokenreviews"]
        {
            assert!(!p.review(&u, &post(path)).allowed, "{path}");
        }
        // Only for authenticated users.
        let bare = UserInfo { name: "x".into(), groups: vec![] };
        assert!(!p.review(&bare, &self_review).allowed);
        // `system:masters` may do anything, with no reason given, as kube-apiserver's
        // privileged-group authorizer.
        let admin = UserInfo { name: "jobset:admin".into(), groups: vec![MASTERS.into()] };
        for (method, path) in [(Method::DELETE, "/api/v1/namespaces/ns/secrets/s"), (Method::GET, "/metrics")] {
            assert_eq!(p.review(&admin, &req(method, path, None)), Verdict { allowed: true, reason: String::new() });
        }
        // And the escalation check lets such a user grant anything (upstream's `EscalationAllowed`).
        let everything =
            role("ClusterRole", "", "all", json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]));
        assert_eq!(check_escalation(&p, &admin, "ClusterRole", "", "all", &everything, None), Ok(()));
    }

    #[test]
    fn a_denial_names_the_roles_its_bindings_miss_as_upstream() {
        let get = req(Method::GET, "/api/v1/namespaces/ns/pods/p", None);
        let crb = binding("", "b", "ClusterRole", "gone", json!([sa("ns", "a")]));
        let crb2 = binding("", "c", "ClusterRole", "gone", json!([sa("ns", "a")]));
        let rb = binding("ns", "d", "Role", "missing", json!([sa("ns", "a")]));
        let unrelated = binding("", "e", "ClusterRole", "nope", json!([sa("ns", "z")]));
        let one = Policy::from_objects([], [], [], [&crb, &unrelated]);
        assert_eq!(
            one.authorize(&sa_user("ns", "a"), &get),
            Decision::Deny { reason: "RBAC: clusterrole.rbac.authorization.k8s.io \"gone\" not found".into() }
        );
        let several = Policy::from_objects([], [], [&rb], [&crb, &crb2]);
        assert_eq!(
            several.authorize(&sa_user("ns", "a"), &get),
            Decision::Deny {
                reason: "RBAC: [clusterrole.rbac.authorization.k8s.io \"gone\" not found, role.rbac.authorization.k8s.io \"missing\" not found]".into()
            }
        );
        let none = Policy::from_objects([], [], [], [&unrelated]);
        assert_eq!(none.authorize(&sa_user("ns", "a"), &get), Decision::Deny { reason: String::new() });
    }

    #[test]
    fn an_owner_covers_the_rules_it_holds_itself_as_upstream() {
        let r = |v: Value| vec![rule(v)];
        let cases: Vec<(&str, Value, Value, bool)> = vec![
            (
                "same",
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}),
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}),
                true,
            ),
            (
                "more verbs",
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}),
                json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}),
                false,
            ),
            (
                "stars",
                json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
                json!({"verbs": ["delete"], "apiGroups": ["batch"], "resources": ["jobs", "jobs/status"]}),
                true,
            ),
            (
                "*/status",
                json!({"verbs": ["update"], "apiGroups": [""], "resources": ["*/status"]}),
                json!({"verbs": ["update"], "apiGroups": [""], "resources": ["pods/status"]}),
                true,
            ),
            (
                "a resource is not its subresource",
                json!({"verbs": ["update"], "apiGroups": [""], "resources": ["pods"]}),
                json!({"verbs": ["update"], "apiGroups": [""], "resources": ["pods/status"]}),
                false,
            ),
            (
                "named owner, unnamed servant",
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["a"]}),
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}),
                false,
            ),
            (
                "named owner, named servant",
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["a", "b"]}),
                json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["b"]}),
                true,
            ),
            (
                "paths",
                json!({"verbs": ["get"], "nonResourceURLs": ["/metrics*"]}),
                json!({"verbs": ["get"], "nonResourceURLs": ["/metrics/x"]}),
                true,
            ),
            (
                "resources do not cover paths",
                json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
                json!({"verbs": ["get"], "nonResourceURLs": ["/metrics"]}),
                false,
            ),
        ];
        for (case, owner, servant, want) in cases {
            assert_eq!(uncovered(&r(owner), &r(servant)).is_empty(), want, "{case}");
        }
    }

    #[test]
    fn a_user_may_grant_only_what_it_holds_or_may_escalate_or_bind() {
        let u = sa_user("ns", "a");
        let pods_rw = json!([{"verbs": ["get", "list", "create"], "apiGroups": [""], "resources": ["pods"]}]);
        let writer = role(
            "ClusterRole",
            "",
            "rbac-writer",
            json!([{"verbs": ["create", "update"], "apiGroups": [GROUP], "resources": ["*"]}]),
        );
        let pods_reader = role("ClusterRole", "", "pods-reader", read_pods());
        let pods_writer = role("ClusterRole", "", "pods-writer", pods_rw.clone());
        let holds = binding("", "h", "ClusterRole", "rbac-writer", json!([sa("ns", "a")]));
        let reads = binding("ns", "r", "ClusterRole", "pods-reader", json!([sa("ns", "a")]));
        let p = Policy::from_objects([], [&writer, &pods_reader, &pods_writer], [&reads], [&holds]);
        let check = |kind: &str, ns: &str, obj: &Value| check_escalation(&p, &u, kind, ns, "", obj, None);

        // A role with rules the user holds in the namespace: fine; elsewhere or more: refused.
        assert_eq!(check("Role", "ns", &role("Role", "ns", "x", read_pods())), Ok(()));
        assert_eq!(
            check("Role", "ns", &role("Role", "ns", "x", pods_rw.clone())),
            Err("user \"system:serviceaccount:ns:a\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:ns\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"create\"]}".into())
        );
        assert!(check("Role", "other", &role("Role", "other", "x", read_pods())).is_err());
        assert!(check("ClusterRole", "", &role("ClusterRole", "", "x", read_pods())).is_err());
        // Discovery is held by everyone.
        let discovery = json!([{"verbs": ["get"], "nonResourceURLs": ["/api", "/apis/*"]}]);
        assert_eq!(check("ClusterRole", "", &role("ClusterRole", "", "x", discovery)), Ok(()));

        // Binding a role whose rules the user holds: fine; a bigger one: refused; a missing one: says so.
        assert_eq!(
            check("RoleBinding", "ns", &binding("ns", "b", "ClusterRole", "pods-reader", json!([sa("ns", "z")]))),
            Ok(())
        );
        let bigger = binding("ns", "b", "ClusterRole", "pods-writer", json!([sa("ns", "z")]));
        assert!(
            check("RoleBinding", "ns", &bigger)
                .unwrap_err()
                .contains("{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"create\"]}")
        );
        assert_eq!(
            check("ClusterRoleBinding", "", &binding("", "b", "ClusterRole", "gone", json!([sa("ns", "z")]))),
            Err("clusterrole.rbac.authorization.k8s.io \"gone\" not found".into())
        );
        // An update that grants nothing new is fine.
        assert_eq!(check_escalation(&p, &u, "RoleBinding", "ns", "b", &bigger, Some(&bigger)), Ok(()));

        // `bind` on that role, or `escalate` on roles, lifts the limit.
        let delegate = role(
            "ClusterRole",
            "",
            "delegate",
            json!([
                {"verbs": ["bind"], "apiGroups": [GROUP], "resources": ["clusterroles"], "resourceNames": ["pods-writer"]},
                {"verbs": ["escalate"], "apiGroups": [GROUP], "resources": ["roles"]}
            ]),
        );
        let may = binding("", "d", "ClusterRole", "delegate", json!([sa("ns", "a")]));
        let secrets = role(
            "ClusterRole",
            "",
            "secrets",
            json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}]),
        );
        let p = Policy::from_objects(
            [],
            [&writer, &pods_reader, &pods_writer, &delegate, &secrets],
            [&reads],
            [&holds, &may],
        );
        assert_eq!(check_escalation(&p, &u, "RoleBinding", "ns", "", &bigger, None), Ok(()));
        assert_eq!(check_escalation(&p, &u, "Role", "ns", "", &role("Role", "ns", "x", pods_rw), None), Ok(()));
        // Not another role: `bind` names pods-writer only.
        let other = binding("ns", "b", "ClusterRole", "secrets", json!([sa("ns", "z")]));
        assert!(check_escalation(&p, &u, "RoleBinding", "ns", "", &other, None).is_err());
    }

    #[test]
    fn bindings_default_their_role_and_user_api_groups() {
        let mut b = json!({"roleRef": {"kind": "ClusterRole", "name": "r"},
            "subjects": [{"kind": "User", "name": "u"}, {"kind": "Group", "name": "g"}, {"kind": "ServiceAccount", "name": "s"}]});
        default_object("RoleBinding", &mut b);
        assert_eq!(b["roleRef"]["apiGroup"], GROUP);
        assert_eq!(b["subjects"][0]["apiGroup"], GROUP);
        assert_eq!(b["subjects"][1]["apiGroup"], GROUP);
        assert!(b["subjects"][2].get("apiGroup").is_none());
    }

    fn messages(causes: Vec<Cause>) -> Vec<String> {
        causes.into_iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn invalid_roles_are_refused_naming_the_field() {
        let cases: Vec<(&str, &str, Value, Vec<&str>)> = vec![
            ("valid", "Role", json!({"rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]}), vec![]),
            ("no rules", "ClusterRole", json!({}), vec![]),
            (
                "no verbs",
                "Role",
                json!({"rules": [{"apiGroups": [""], "resources": ["pods"]}]}),
                vec!["rules[0].verbs: Required value: verbs must contain at least one value"],
            ),
            (
                "no groups or resources",
                "Role",
                json!({"rules": [{"verbs": ["get"]}]}),
                vec![
                    "rules[0].apiGroups: Required value: resource rules must supply at least one api group",
                    "rules[0].resources: Required value: resource rules must supply at least one resource",
                ],
            ),
            (
                "paths in a Role",
                "Role",
                json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}]}),
                vec![
                    "rules[0].nonResourceURLs: Invalid value: []string{\"/metrics\"}: namespaced rules cannot apply to non-resource URLs",
                ],
            ),
            (
                "paths in a ClusterRole",
                "ClusterRole",
                json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}]}),
                vec![],
            ),
            (
                "paths and resources",
                "ClusterRole",
                json!({"rules": [{"verbs": ["get"], "resources": ["pods"], "nonResourceURLs": ["/metrics"]}]}),
                vec![
                    "rules[0].nonResourceURLs: Invalid value: []string{\"/metrics\"}: rules cannot apply to both regular resources and non-resource URLs",
                ],
            ),
            (
                "verbs not a list",
                "Role",
                json!({"rules": [{"verbs": "get", "apiGroups": [""], "resources": ["pods"]}]}),
                vec![
                    "rules[0].verbs: Invalid value: \"get\": must be a list of strings",
                    "rules[0].verbs: Required value: verbs must contain at least one value",
                ],
            ),
            (
                "rules not a list",
                "Role",
                json!({"rules": {"verbs": ["get"]}}),
                vec!["rules: Invalid value: {\"verbs\":[\"get\"]}: must be a list of rules"],
            ),
        ];
        for (case, kind, obj, want) in cases {
            assert_eq!(messages(validate_object(kind, &obj, None)), want, "{case}");
        }
    }

    #[test]
    fn invalid_bindings_are_refused_naming_the_field() {
        let ok_ref = json!({"apiGroup": GROUP, "kind": "ClusterRole", "name": "r"});
        let cases: Vec<(&str, &str, Value, Vec<&str>)> = vec![
            ("valid", "RoleBinding", json!({"roleRef": ok_ref, "subjects": [sa("ns", "a")]}), vec![]),
            ("no roleRef", "RoleBinding", json!({}), vec!["roleRef: Required value"]),
            (
                "a Role from a ClusterRoleBinding",
                "ClusterRoleBinding",
                json!({"roleRef": {"apiGroup": GROUP, "kind": "Role", "name": "r"}}),
                vec!["roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\""],
            ),
            (
                "an unknown kind and group, no name",
                "RoleBinding",
                json!({"roleRef": {"apiGroup": "x", "kind": "Thing"}}),
                vec![
                    "roleRef.apiGroup: Unsupported value: \"x\": supported values: \"rbac.authorization.k8s.io\"",
                    "roleRef.kind: Unsupported value: \"Thing\": supported values: \"Role\", \"ClusterRole\"",
                    "roleRef.name: Required value",
                ],
            ),
            (
                "subjects",
                "ClusterRoleBinding",
                json!({"roleRef": ok_ref, "subjects": [
                    {"kind": "ServiceAccount", "name": "a"},
                    {"kind": "User", "name": "u", "apiGroup": ""},
                    {"kind": "Robot", "name": "r"},
                    {"kind": "Group"},
                    {"kind": "ServiceAccount", "name": "Bad_Name", "namespace": "ns"}
                ]}),
                vec![
                    "subjects[0].namespace: Required value",
                    "subjects[1].apiGroup: Unsupported value: \"\": supported values: \"rbac.authorization.k8s.io\"",
                    "subjects[2].kind: Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
                    "subjects[3].name: Required value",
                    "subjects[3].apiGroup: Unsupported value: \"\": supported values: \"rbac.authorization.k8s.io\"",
                    "subjects[4].name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                ],
            ),
        ];
        for (case, kind, obj, want) in cases {
            assert_eq!(messages(validate_object(kind, &obj, None)), want, "{case}");
        }
        let old = json!({"roleRef": ok_ref});
        let changed = json!({"roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "other"}});
        assert_eq!(
            messages(validate_object("RoleBinding", &changed, Some(&old))),
            [
                "roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"ClusterRole\", Name:\"other\"}: cannot change roleRef"
            ]
        );
        assert!(validate_object("RoleBinding", &old, Some(&old)).is_empty());
    }
}
