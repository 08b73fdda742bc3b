//! Admission webhooks and policies: the server calls the webhooks that
//! `admissionregistration.k8s.io/v1` `MutatingWebhookConfiguration`s and
//! `ValidatingWebhookConfiguration`s register, and checks the `ValidatingAdmissionPolicy`s
//! their bindings bind ([`policy`]), as kube-apiserver does, on create and update (POST, PUT,
//! PATCH; `/status` too).
//!
//! A write runs in one synchronous store transaction, and a webhook is an HTTPS call, so a
//! request that some webhook's rules match is written in passes, each a transaction:
//!
//! 1. the operation runs up to the admission point (after the built-in defaults, before the
//!    built-in validation) and is rolled back, keeping the object as it stands there, the old
//!    object and its resourceVersion;
//! 2. the mutating webhooks are called in order (configurations by name, webhooks in their
//!    order), each on the object the previous ones left, and their JSON patches applied;
//! 3. the operation runs again with that object put in at the admission point (rolled back), if
//!    a validating webhook may apply: the policies and the built-in validation run, and the
//!    object as it would be stored goes to the validating webhooks, called at once (as
//!    kube-apiserver does; the first error in webhook order is answered);
//! 4. the operation runs a last time the same way and commits.
//!
//! Passes 3 and 4 require the stored object to be at pass 1's resourceVersion; when a write
//! came in between, the request starts over from pass 1 (webhooks are called again), up to
//! [`MAX_CONFLICT_RETRIES`] times, as kube-apiserver's update retries a conflicting write. Name,
//! uid and creation time generated in pass 1 (`generateName`) are what is stored: pass 1's
//! server-owned metadata is put back over whatever the webhooks did to it. A request only
//! policies apply to takes one pass, checked at the admission point; one nothing applies to
//! takes one pass, as before (the registered webhooks and policies are parsed once per change).
//!
//! Simplifications: `reinvocationPolicy: IfNeeded` reinvokes those webhooks once, after the
//! first round, when a later webhook changed the object (the built-in defaults are not re-run);
//! DELETE and CONNECT are not sent to webhooks or policies; `dryRun` is not served, so never
//! sent; a service reference is reached as [`resolve_service`] says; with no `caBundle`
//! nothing is trusted (kube-apiserver would use the system roots); a webhook sees the name and
//! uid the server generated (kube-apiserver sends a `generateName` create unnamed); unknown
//! fields a mutating webhook adds to a custom resource are not pruned (the schema's validation
//! does see them).

pub mod client;
pub mod config;
pub mod matching;
pub mod policy;
pub mod review;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde_json::{Value, json};

use crate::admission::{Admission, AdmissionHook, Lookup};
use crate::auth::User;
use crate::error::{ApiError, Cause, Result};
use crate::http::ApiServer;
use crate::object::Obj;
use crate::ops::Ctx;
use crate::resources::ResourceDef;
use crate::store::{Store, Txn};
use config::{Hook, Phase};
use matching::{Attributes, Operation};
use review::{Answer, Failure, RequestInfo};

/// The API group of webhook configurations and admission policies.
pub const GROUP: &str = "admissionregistration.k8s.io";

/// How often a request whose object changed between its passes starts over (kube-apiserver's
/// `maxRetryWhenPatchConflicts`).
pub const MAX_CONFLICT_RETRIES: usize = 5;

/// What admission calls and checks besides the built-in hooks.
#[derive(Default)]
pub struct Registered {
    /// Every webhook of the stored configurations: mutating ones first, each kind in
    /// configuration name order.
    pub hooks: Vec<Hook>,
    /// Every policy binding, with its policy, in binding name order.
    pub policies: Vec<(Arc<policy::Policy>, Arc<policy::Binding>)>,
}

/// The stored webhooks and policies, parsed once per change of them.
#[derive(Default)]
pub struct Cache {
    parsed: RwLock<Option<(u64, Arc<Registered>)>>,
}

impl Cache {
    /// The stored webhooks and policies.
    pub fn registered(&self, store: &Store) -> Arc<Registered> {
        let generation = store.admission_generation();
        if let Some((g, r)) = &*self.parsed.read().unwrap_or_else(|e| e.into_inner())
            && *g == generation
        {
            return r.clone();
        }
        // Listed in name order (the store's key order).
        let list = |plural: &str| -> Vec<Value> {
            let Some(def) = store.registry.get(GROUP, "v1", plural) else { return vec![] };
            store.list(&def, None, None, |_| true, None).0.iter().map(|o| o.value()).collect()
        };
        let mut hooks = vec![];
        for (plural, phase) in
            [("mutatingwebhookconfigurations", Phase::Mutating), ("validatingwebhookconfigurations", Phase::Validating)]
        {
            for o in list(plural) {
                hooks.extend(config::hooks_of(&o, phase));
            }
        }
        let policies = policy::bind(
            list("validatingadmissionpolicies").iter().map(policy::Policy::parse).collect(),
            list("validatingadmissionpolicybindings").iter().map(policy::Binding::parse).collect(),
        );
        let registered = Arc::new(Registered { hooks, policies });
        *self.parsed.write().unwrap_or_else(|e| e.into_inner()) = Some((generation, registered.clone()));
        registered
    }
}

/// Defaults and validation of webhook configurations, as kube-apiserver's.
struct ConfigurationAdmission(Phase);

impl AdmissionHook for ConfigurationAdmission {
    fn default(&self, obj: &mut Value, _old: Option<&Value>) {
        config::default_configuration(obj, self.0);
    }
    fn validate(&self, obj: &Value, _old: Option<&Value>, _lookup: &dyn Lookup) -> Vec<Cause> {
        config::validate_configuration(obj, self.0)
    }
}

/// Defaults and validation of policies and their bindings.
struct PolicyAdmission {
    binding: bool,
}

impl AdmissionHook for PolicyAdmission {
    fn default(&self, obj: &mut Value, _old: Option<&Value>) {
        if !self.binding {
            policy::default_policy(obj);
        }
    }
    fn validate(&self, obj: &Value, _old: Option<&Value>, _lookup: &dyn Lookup) -> Vec<Cause> {
        if self.binding { policy::validate_binding(obj) } else { policy::validate_policy(obj) }
    }
}

/// Registers the defaulting and validation of webhook configurations and admission policies.
pub fn register(admission: &mut Admission) {
    admission.register(GROUP, "MutatingWebhookConfiguration", Arc::new(ConfigurationAdmission(Phase::Mutating)));
    admission.register(GROUP, "ValidatingWebhookConfiguration", Arc::new(ConfigurationAdmission(Phase::Validating)));
    admission.register(GROUP, "ValidatingAdmissionPolicy", Arc::new(PolicyAdmission { binding: false }));
    admission.register(GROUP, "ValidatingAdmissionPolicyBinding", Arc::new(PolicyAdmission { binding: true }));
}

/// Where a pass stands at the admission point (held by the request's [`Ctx`]).
pub enum Stage {
    /// Pass 1: keep the object and roll back.
    Capture(Option<Admitted>),
    /// Later passes: put `object` in, if the stored object is still at `rv`, and check it
    /// against the policies.
    Substitute { object: Value, rv: Option<u64>, conflict: bool, policies: Option<policy::PolicyCheck> },
    /// The one pass of a write no webhook applies to: check the object against the policies.
    Policies(policy::PolicyCheck),
}

/// The object at the admission point of pass 1.
pub struct Admitted {
    pub object: Value,
    pub old: Option<Value>,
    /// The old object's resourceVersion.
    pub rv: Option<u64>,
}

fn rv_of(v: Option<&Value>) -> Option<u64> {
    v?.pointer("/metadata/resourceVersion")?.as_str()?.parse().ok()
}

/// The error a rolled-back pass ends with (never answered).
fn rolled_back() -> ApiError {
    ApiError::internal("admission pass rolled back")
}

impl Stage {
    /// Runs at the admission point of a staged write.
    pub fn at_admission_point(&mut self, def: &ResourceDef, obj: &mut Value, old: Option<&Value>) -> Result<()> {
        match self {
            Stage::Capture(slot) => {
                *slot = Some(Admitted { object: obj.clone(), old: old.cloned(), rv: rv_of(old) });
                Err(rolled_back())
            }
            Stage::Substitute { object, rv, conflict, policies } => {
                if rv_of(old) != *rv {
                    *conflict = true;
                    let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
                    return Err(ApiError::stale(def, name));
                }
                *obj = object.clone();
                policies.as_mut().map_or(Ok(()), |p| p.check(def, obj, old))
            }
            Stage::Policies(p) => p.check(def, obj, old),
        }
    }

    /// What the policies' `Warn` bindings said during the pass.
    fn take_warnings(&mut self) -> Vec<String> {
        match self {
            Stage::Substitute { policies: Some(p), .. } | Stage::Policies(p) => std::mem::take(&mut p.warnings),
            _ => vec![],
        }
    }
}

/// Server-owned metadata, put back from pass 1 over what the webhooks returned.
const SERVER_OWNED: [&str; 8] = [
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "resourceVersion",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

fn restore_server_owned(object: &mut Value, admitted: &Value) {
    let Some(meta) = object.as_object_mut().map(|o| o.entry("metadata").or_insert_with(|| json!({}))) else { return };
    let Some(meta) = meta.as_object_mut() else { return };
    let was = admitted.get("metadata").and_then(Value::as_object);
    for k in SERVER_OWNED {
        match was.and_then(|m| m.get(k)) {
            Some(v) => meta.insert(k.into(), v.clone()),
            None => meta.remove(k),
        };
    }
}

/// How a service reference is reached on one machine: `config.webhook_service_addresses`
/// (`<name>.<namespace>.svc:<port>` → `host:port`) when it names it; else the Service must
/// exist: an `ExternalName` service is its external name at the port, and any other is the
/// host's loopback at the matching service port's `targetPort` (a number; the port itself when
/// absent), where a pod's listener is when pods are processes of this machine. Errors are
/// kube-apiserver's service resolver's.
pub fn resolve_service(
    server: &ApiServer,
    namespace: &str,
    name: &str,
    port: u16,
) -> std::result::Result<String, String> {
    if let Some(a) = server.config.webhook_service_addresses.get(&format!("{name}.{namespace}.svc:{port}")) {
        return Ok(a.clone());
    }
    let def = server.registry().get("", "v1", "services").expect("services are built in");
    let svc = server.store.get(&def, namespace, name).ok_or_else(|| format!("service {name:?} not found"))?.value();
    let spec = svc.get("spec").cloned().unwrap_or(Value::Null);
    if spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
        let host = spec.get("externalName").and_then(Value::as_str).unwrap_or_default();
        return Ok(format!("{host}:{port}"));
    }
    let entry = spec
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|p| p.get("port").and_then(Value::as_u64) == Some(u64::from(port)))
        .ok_or_else(|| format!("no service port {port} found for service {name:?}"))?;
    match entry.get("targetPort") {
        None | Some(Value::Null) => Ok(format!("127.0.0.1:{port}")),
        Some(Value::Number(n)) => Ok(format!("127.0.0.1:{n}")),
        Some(Value::String(s)) if s.parse::<u16>().is_ok() => Ok(format!("127.0.0.1:{s}")),
        Some(other) => {
            Err(format!("target port {other} of service {name:?} is not a number: named ports are not resolved"))
        }
    }
}

/// Calls one webhook; warnings and denial are the caller's to handle.
async fn call(
    server: &ApiServer,
    hook: &Hook,
    info: &RequestInfo,
    object: Option<&Value>,
    old: Option<&Value>,
) -> std::result::Result<Answer, Failure> {
    let version = review::review_version(&hook.review_versions).map_err(Failure::Calling)?;
    let uid = uuid::Uuid::new_v4().to_string();
    let body = serde_json::to_vec(&review::request(version, &uid, info, object, old))
        .map_err(|e| Failure::Internal(e.to_string()))?;
    let tls = hook.tls.clone().map_err(Failure::Calling)?;
    let endpoint = match &hook.target {
        config::Target::Url(url) => client::Endpoint::for_url(url, hook.timeout).map_err(Failure::Calling)?,
        config::Target::Service { namespace, name, path, port } => {
            let address = resolve_service(server, namespace, name, *port);
            let e = client::Endpoint::for_service(
                namespace,
                name,
                *port,
                path,
                address.clone().unwrap_or_default(),
                hook.timeout,
            );
            if let Err(why) = address {
                return Err(Failure::Calling(format!("failed to call webhook: Post {:?}: {why}", e.url)));
            }
            e
        }
    };
    let reply = client::post(&endpoint, tls, body, hook.timeout).await.map_err(Failure::Calling)?;
    if !(200..=206).contains(&reply.code) {
        return Err(Failure::Calling(review::error_answer(reply.code, &reply.body)));
    }
    review::verify(version, &uid, hook.phase == Phase::Mutating, &reply.content_type, &reply.body)
        .map_err(Failure::Calling)
}

/// What a call's failure does to the request: nothing (`failurePolicy: Ignore` on a call that
/// failed) or this error.
fn failure_error(hook: &Hook, failure: Failure) -> Option<ApiError> {
    match failure {
        Failure::Calling(reason) if hook.ignore_failures => {
            tracing::warn!(webhook = %hook.name, %reason, "failed calling webhook, failing open");
            None
        }
        Failure::Calling(reason) => Some(review::calling_error(&hook.name, &reason)),
        Failure::Internal(msg) => Some(review::internal(&msg)),
    }
}

/// Calls the mutating webhooks in order on `object`, applying their patches.
async fn mutate<'a>(
    server: &ApiServer,
    ctx: &Ctx<'_>,
    hooks: &[&'a Hook],
    info: &RequestInfo,
    mut object: Value,
    old: Option<&Value>,
) -> Result<Value> {
    // Indexes in `hooks` of the `IfNeeded` webhooks called, for the reinvocation round.
    let mut reinvocable: Vec<usize> = vec![];
    let mut last_change: Option<usize> = None;
    let round = |hook: &'a Hook, object: &Value| {
        let info = info.clone();
        let current = object.clone();
        async move {
            if !matching::object_matches(hook, Some(&current), old) {
                return Ok((current, false, false));
            }
            match policy::conditions_hold(&hook.match_conditions, &info, Some(&current), old) {
                Ok(true) => {}
                Ok(false) => return Ok((current, false, false)),
                Err(why) => return failure_error(hook, Failure::Calling(why)).map_or(Ok((current, true, false)), Err),
            }
            let answer = match call(server, hook, &info, Some(&current), old).await {
                Ok(a) => a,
                Err(f) => return failure_error(hook, f).map_or(Ok((current, true, false)), Err),
            };
            ctx.warn(answer.warnings.clone());
            if !answer.allowed {
                return Err(review::denied(&hook.name, answer.status.as_ref()));
            }
            let Some(patch) = answer.patch else { return Ok((current, true, false)) };
            let patch: json_patch::Patch = serde_json::from_value(patch).map_err(|e| {
                review::calling_error(&hook.name, &format!("received undecodable patch in webhook response: {e}"))
            })?;
            let mut patched = current.clone();
            json_patch::patch(&mut patched, &patch).map_err(|e| review::internal(&e.to_string()))?;
            let changed = patched != current;
            Ok((patched, true, changed))
        }
    };
    for (i, hook) in hooks.iter().enumerate() {
        let (next, called, changed) = round(hook, &object).await?;
        object = next;
        if called && hook.reinvoke_if_needed {
            reinvocable.push(i);
        }
        if changed {
            last_change = Some(i);
        }
    }
    // Simplified `reinvocationPolicy: IfNeeded`: one more call of each such webhook that a later
    // webhook's change may concern.
    for i in reinvocable {
        if last_change.is_some_and(|c| c > i) {
            let (next, _, _) = round(hooks[i], &object).await?;
            object = next;
        }
    }
    Ok(object)
}

/// Calls the validating webhooks at once on the object as it would be stored.
async fn validate(
    server: &ApiServer,
    ctx: &Ctx<'_>,
    hooks: &[&Hook],
    info: &RequestInfo,
    object: &Value,
    old: Option<&Value>,
) -> Result<()> {
    let calls = hooks.iter().filter(|h| matching::object_matches(h, Some(object), old)).map(|h| async move {
        let out = match policy::conditions_hold(&h.match_conditions, info, Some(object), old) {
            Ok(false) => return None,
            Ok(true) => call(server, h, info, Some(object), old).await,
            Err(why) => Err(Failure::Calling(why)),
        };
        Some((*h, out))
    });
    let mut first_error = None;
    for (hook, out) in futures::future::join_all(calls).await.into_iter().flatten() {
        let err = match out {
            Ok(answer) => {
                ctx.warn(answer.warnings);
                (!answer.allowed).then(|| review::denied(&hook.name, answer.status.as_ref()))
            }
            Err(f) => failure_error(hook, f),
        };
        if first_error.is_none() {
            first_error = err;
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// What the HTTP layer knows of a write before it runs.
pub struct Request<'a> {
    pub server: &'a Arc<ApiServer>,
    pub ctx: &'a Ctx<'a>,
    /// The resource as requested (the kind and resource webhooks are told).
    pub def: &'a ResourceDef,
    pub namespace: &'a str,
    /// `""` for the object itself.
    pub subresource: &'a str,
    /// What the write may turn out to be (a server-side apply creates or updates).
    pub operations: &'static [Operation],
    pub user: Option<&'a User>,
    /// `CreateOptions`, `UpdateOptions` or `PatchOptions`.
    pub options_kind: &'static str,
    pub field_manager: Option<&'a str>,
}

impl Request<'_> {
    /// The attributes rules are matched against; `own_namespace` is a Namespace's own name.
    fn attributes<'s>(&'s self, operation: Operation, own_namespace: &'s str) -> Attributes<'s> {
        Attributes {
            operation,
            group: &self.def.group,
            version: &self.def.version,
            resource: &self.def.plural,
            subresource: self.subresource,
            namespace: if own_namespace.is_empty() { self.namespace } else { own_namespace },
        }
    }
}

/// Ends a staged pass: its policy warnings go to the request's; whether it hit a write made
/// since pass 1.
fn end_pass(ctx: &Ctx<'_>) -> bool {
    let mut stage = ctx.set_stage(None);
    if let Some(s) = stage.as_mut() {
        ctx.warn(s.take_warnings());
    }
    matches!(stage, Some(Stage::Substitute { conflict: true, .. }))
}

/// Runs a write (`op`, given a fresh `again(&body)` for each pass) through the webhooks and
/// policies that apply to it, as the module's doc describes; `stored` reads the stored object
/// of a result.
pub async fn write<B, R>(
    req: Request<'_>,
    body: B,
    again: impl Fn(&B) -> B,
    op: impl Fn(&mut Txn<'_>, B) -> Result<R>,
    stored: impl Fn(&R) -> &Arc<Obj>,
) -> Result<R> {
    let server = req.server;
    let registered =
        if matching::exempt(&req.def.group) { None } else { Some(server.webhooks.registered(&server.store)) };
    let may_apply = |rules_match: &dyn Fn(&Attributes<'_>) -> bool| {
        req.operations.iter().any(|op| rules_match(&req.attributes(*op, "")))
    };
    let candidates: Vec<&Hook> = registered
        .iter()
        .flat_map(|r| r.hooks.iter())
        .filter(|h| may_apply(&|a| matching::rules_match(h, a)))
        .collect();
    let policies: Vec<(Arc<policy::Policy>, Arc<policy::Binding>)> = registered
        .iter()
        .flat_map(|r| r.policies.iter())
        .filter(|(p, b)| may_apply(&|a| policy::rules_match(p, b, a)))
        .cloned()
        .collect();
    if candidates.is_empty() && policies.is_empty() {
        return crate::http::write(server, |txn| op(txn, body)).await;
    }
    // Boxed: calling webhooks makes a future of kilobytes that every write (and every request
    // future around it) would otherwise carry and move.
    Box::pin(through_webhooks(req, body, again, op, stored, candidates, policies)).await
}

/// [`write`] when webhooks or policies may apply: `candidates` and `policies` are those whose
/// rules match one of the request's operations.
async fn through_webhooks<B, R>(
    req: Request<'_>,
    body: B,
    again: impl Fn(&B) -> B,
    op: impl Fn(&mut Txn<'_>, B) -> Result<R>,
    stored: impl Fn(&R) -> &Arc<Obj>,
    candidates: Vec<&Hook>,
    policies: Vec<(Arc<policy::Policy>, Arc<policy::Binding>)>,
) -> Result<R> {
    let server = req.server;
    let ctx = req.ctx;
    let is_namespace = req.def.group.is_empty() && req.def.plural == "namespaces";
    // A Namespace is matched by its own labels (read from the object, below).
    let namespace_labels: Option<BTreeMap<String, String>> = if is_namespace || req.namespace.is_empty() {
        None
    } else {
        let def = server.registry().get("", "v1", "namespaces").expect("namespaces are built in");
        matching::labels_of(server.store.get(&def, "", req.namespace).map(|n| n.value()).as_ref())
    };
    let user = req.user.cloned().unwrap_or(User::Admin);
    let mut info = RequestInfo {
        group: req.def.group.clone(),
        version: req.def.version.clone(),
        kind: req.def.kind.clone(),
        resource: req.def.plural.clone(),
        subresource: req.subresource.to_string(),
        name: String::new(),
        namespace: if req.def.namespaced { req.namespace.to_string() } else { String::new() },
        operation: req.operations[0],
        user: server.identity(&user),
        dry_run: false,
        options: match req.field_manager {
            Some(m) => json!({"kind": req.options_kind, "apiVersion": "meta.k8s.io/v1", "fieldManager": m}),
            None => json!({"kind": req.options_kind, "apiVersion": "meta.k8s.io/v1"}),
        },
    };
    let checks = (!policies.is_empty()).then(|| policy::PolicyCheck {
        pairs: policies,
        info: info.clone(),
        namespace_labels: namespace_labels.clone(),
        warnings: vec![],
    });
    if candidates.is_empty() {
        // Policies only: one pass, checked at the admission point.
        ctx.set_stage(checks.map(Stage::Policies));
        let out = crate::http::write(server, |txn| op(txn, body)).await;
        end_pass(ctx);
        return out;
    }
    let mut attempt = 0;
    loop {
        ctx.set_stage(Some(Stage::Capture(None)));
        let mut first = None;
        let _ = crate::http::write(server, |txn| {
            first = Some(op(txn, again(&body)));
            Err::<(), _>(rolled_back())
        })
        .await;
        let admitted = match ctx.set_stage(None) {
            Some(Stage::Capture(Some(a))) => a,
            // The write ended before the admission point: its error, or nothing to admit.
            _ => {
                return match first {
                    Some(Err(e)) => Err(e),
                    _ => crate::http::write(server, |txn| op(txn, body)).await,
                };
            }
        };
        info.operation = if admitted.old.is_none() { Operation::Create } else { Operation::Update };
        info.name = admitted.object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
        let own_namespace = if is_namespace { info.name.as_str() } else { "" };
        let attrs = req.attributes(info.operation, own_namespace);
        let ns_labels =
            if is_namespace { matching::labels_of(Some(&admitted.object)) } else { namespace_labels.clone() };
        let applies = |phase: Phase| -> Vec<&Hook> {
            candidates
                .iter()
                .copied()
                .filter(|h| h.phase == phase && matching::rules_match(h, &attrs))
                .filter(|h| matching::namespace_matches(h, &attrs, ns_labels.as_ref()))
                .collect()
        };
        let (mutating, validating) = (applies(Phase::Mutating), applies(Phase::Validating));
        let old = admitted.old.as_ref();
        let mut object = mutate(server, ctx, &mutating, &info, admitted.object.clone(), old).await?;
        restore_server_owned(&mut object, &admitted.object);
        let substitute = |object: &Value| Stage::Substitute {
            object: object.clone(),
            rv: admitted.rv,
            conflict: false,
            policies: checks.clone(),
        };
        if !validating.is_empty() {
            ctx.set_stage(Some(substitute(&object)));
            let mut second = None;
            let _ = crate::http::write(server, |txn| {
                second = Some(op(txn, again(&body)).map(|r| stored(&r).value()));
                Err::<(), _>(rolled_back())
            })
            .await;
            if end_pass(ctx) {
                attempt += 1;
                if attempt <= MAX_CONFLICT_RETRIES {
                    continue;
                }
                return Err(ApiError::stale(req.def, &info.name));
            }
            let stored_object = second.unwrap_or_else(|| Err(rolled_back()))?;
            validate(server, ctx, &validating, &info, &stored_object, old).await?;
        }
        ctx.set_stage(Some(substitute(&object)));
        let out = crate::http::write(server, |txn| op(txn, again(&body))).await;
        if end_pass(ctx) {
            attempt += 1;
            if attempt <= MAX_CONFLICT_RETRIES {
                continue;
            }
        }
        return out;
    }
}
