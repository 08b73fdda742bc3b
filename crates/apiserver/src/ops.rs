//! The semantics of every write: create, update, patch and delete (with finalizers and garbage
//! collection), run inside one store transaction.

use std::collections::VecDeque;
use std::sync::Arc;

use rand::Rng;
use serde_json::{Value, json};

use crate::admission::Admission;
use crate::error::{ApiError, Cause, Result};
use crate::object::{Obj, Relabel, meta_mut, meta_str, now_rfc3339};
use crate::resources::{Propagation, ResourceDef};
use crate::store::{Key, Txn};

pub const FOREGROUND: &str = "foregroundDeletion";
pub const ORPHAN: &str = "orphan";

/// Which part of the object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The object: everything but `.status` (for kinds with a status subresource).
    Main,
    /// The `/status` subresource: only `.status`.
    Status,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Json,
    Strategic,
    Apply { force: bool },
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        match ct.split(';').next().unwrap_or_default().trim() {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Some(PatchType::Apply { force: false }),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub propagation: Option<Propagation>,
    pub grace_period: Option<i64>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
}

impl DeleteOptions {
    /// Reads a `DeleteOptions` body (the query parameters are merged in by the caller).
    pub fn from_json(v: &Value) -> Result<DeleteOptions> {
        let mut o = DeleteOptions::default();
        if let Some(p) = v.get("propagationPolicy").and_then(Value::as_str) {
            o.propagation = Some(parse_propagation(p)?);
        } else if let Some(orphan) = v.get("orphanDependents").and_then(Value::as_bool) {
            o.propagation = Some(if orphan { Propagation::Orphan } else { Propagation::Background });
        }
        o.grace_period = v.get("gracePeriodSeconds").and_then(Value::as_i64);
        o.precondition_uid = v.pointer("/preconditions/uid").and_then(Value::as_str).map(str::to_string);
        o.precondition_rv = v.pointer("/preconditions/resourceVersion").and_then(Value::as_str).map(str::to_string);
        Ok(o)
    }
}

pub fn parse_propagation(p: &str) -> Result<Propagation> {
    match p {
        "Foreground" => Ok(Propagation::Foreground),
        "Background" => Ok(Propagation::Background),
        "Orphan" => Ok(Propagation::Orphan),
        other => Err(ApiError::bad_request(format!(
            "propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
        ))),
    }
}

/// Everything a write needs besides the transaction.
pub struct Ctx<'a> {
    pub admission: &'a Admission,
    /// What admission warned about during this request, in order (the `Warning` headers).
    warnings: std::sync::Mutex<Vec<String>>,
    /// Which pass of a write through admission webhooks is running (`crate::webhook`).
    stage: std::sync::Mutex<Option<crate::webhook::Stage>>,
    /// The request's `fieldValidation` (unset: kube-apiserver's default, Warn).
    field_validation: std::sync::OnceLock<crate::crd_schema::FieldValidation>,
    /// Keys the request's body repeats, reported (once) when a custom resource is decoded.
    duplicate_fields: std::sync::Mutex<Vec<String>>,
    /// Who is asking, as admission's `userInfo` (in-process callers: the admin identity).
    requester: crate::auth::Identity,
}

impl<'a> Ctx<'a> {
    pub fn new(admission: &'a Admission) -> Ctx<'a> {
        Ctx {
            admission,
            warnings: Default::default(),
            stage: Default::default(),
            field_validation: Default::default(),
            duplicate_fields: Default::default(),
            requester: crate::auth::User::Admin.identity(None),
        }
    }

    /// This context for a request made by `requester`.
    pub fn with_requester(self, requester: crate::auth::Identity) -> Ctx<'a> {
        Ctx { requester, ..self }
    }

    /// Who is asking: the authenticated user, or the admin identity
    /// ([`crate::auth::ADMIN_USERNAME`], no uid) for in-process callers and the server's token.
    pub fn requester(&self) -> &crate::auth::Identity {
        &self.requester
    }

    /// Sets how unknown fields of this request's custom resources are treated (once).
    pub fn set_field_validation(&self, v: crate::crd_schema::FieldValidation) {
        self.field_validation.set(v).ok();
    }

    fn field_validation(&self) -> crate::crd_schema::FieldValidation {
        self.field_validation.get().copied().unwrap_or_default()
    }

    /// Sets the paths of the keys the request's body repeats (`spec.x`).
    pub fn set_duplicate_fields(&self, paths: Vec<String>) {
        *self.duplicate_fields.lock().unwrap_or_else(|e| e.into_inner()) = paths;
    }

    fn take_duplicate_fields(&self) -> Vec<String> {
        std::mem::take(&mut *self.duplicate_fields.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn warn(&self, warnings: Vec<String>) {
        if !warnings.is_empty() {
            self.warnings.lock().unwrap_or_else(|e| e.into_inner()).extend(warnings);
        }
    }

    /// Sets the webhook pass the next write runs as, returning the one before.
    pub(crate) fn set_stage(&self, stage: Option<crate::webhook::Stage>) -> Option<crate::webhook::Stage> {
        std::mem::replace(&mut *self.stage.lock().unwrap_or_else(|e| e.into_inner()), stage)
    }

    fn staged(&self) -> bool {
        self.stage.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// The webhooks' admission point, between the built-in defaults and validation: a no-op
    /// unless a webhook pass is running.
    fn admit_webhooks(&self, def: &ResourceDef, obj: &mut Value, old: Option<&Value>) -> Result<()> {
        match self.stage.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            Some(stage) => stage.at_admission_point(def, obj, old),
            None => Ok(()),
        }
    }

    /// The warnings admission gave so far, emptying the list.
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.warnings.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// `names.SimpleNameGenerator.GenerateName`: `base` cut to 58 bytes, then 5 random characters,
/// so a generated name fits in 63.
fn generate_name(base: &str) -> String {
    const MAX_GENERATED_NAME_LENGTH: usize = 63 - 5;
    let mut cut = base.len().min(MAX_GENERATED_NAME_LENGTH);
    while !base.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{}", &base[..cut], random_suffix())
}

fn random_suffix() -> String {
    // Same alphabet as Kubernetes' utilrand.String: no vowels, no confusable characters.
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect()
}

/// Checks `apiVersion`/`kind` of a body against the resource, filling them in when absent.
pub(crate) fn check_type(def: &ResourceDef, registry: &crate::resources::Registry, body: &mut Value) -> Result<()> {
    let Some(obj) = body.as_object_mut() else {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): expected a JSON object",
            def.kind
        )));
    };
    for field in ["apiVersion", "kind"] {
        if obj.get(field).is_some_and(|v| !v.is_string() && !v.is_null()) {
            return Err(ApiError::bad_request(format!(
                "the object provided is unrecognized (must be of type {}): {field} must be a string",
                def.kind
            )));
        }
    }
    let want = def.api_version();
    match obj.get("apiVersion").and_then(Value::as_str) {
        // An empty apiVersion or kind is unset, as kube-apiserver's decoder defaults it from the URL.
        Some(av) if !av.is_empty() && av != want => {
            // Any served version of the same group is the same object in storage.
            let (group, version) = av.rsplit_once('/').unwrap_or(("", av));
            if group != def.group || registry.get(group, version, &def.plural).is_none() {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({av}) does not match the expected API version ({want})"
                )));
            }
        }
        _ => {}
    }
    match obj.get("kind").and_then(Value::as_str) {
        Some(k) if !k.is_empty() && k != def.kind => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                def.kind
            )));
        }
        _ => {}
    }
    obj.insert("apiVersion".into(), Value::String(want));
    obj.insert("kind".into(), Value::String(def.kind.clone()));
    Ok(())
}

fn check_namespace(def: &ResourceDef, ns: &str, body: &mut Value) -> Result<()> {
    let meta = meta_mut(body);
    if def.namespaced {
        match meta.get("namespace").and_then(Value::as_str) {
            Some(n) if !n.is_empty() && n != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {
                meta.insert("namespace".into(), Value::String(ns.to_string()));
            }
        }
    } else {
        meta.remove("namespace");
    }
    Ok(())
}

fn validate_meta(def: &ResourceDef, v: &Value) -> Vec<Cause> {
    let mut causes = vec![];
    let name = meta_str(v, "name").unwrap_or_default();
    let problems = if def.is_namespace() || (def.group.is_empty() && def.plural == "services") {
        crate::names::dns1123_label(name)
    } else if (def.group.is_empty()
        && (def.plural == "events" || def.plural == "secrets" || def.plural == "configmaps"))
        || def.group == crate::rbac::GROUP
    {
        // Kubernetes only requires these names to be path segments (RBAC's `ValidateRBACName`
        // too: `system:controller:...` is a valid ClusterRole name).
        path_segment(name)
    } else {
        crate::names::dns1123_subdomain(name)
    };
    for p in problems {
        causes.push(Cause::invalid("metadata.name", name, &p));
    }
    let meta = v.get("metadata");
    causes.extend(validate_labels_and_annotations(
        meta.and_then(|m| m.get("labels")),
        meta.and_then(|m| m.get("annotations")),
    ));
    causes
}

fn validate_labels_and_annotations(labels: Option<&Value>, annotations: Option<&Value>) -> Vec<Cause> {
    let mut causes = vec![];
    if let Some(labels) = labels {
        for (field, value, msg) in crate::names::validate_labels(labels, "metadata.labels") {
            causes.push(Cause::invalid(field, value, &msg));
        }
    }
    if let Some(ann) = annotations {
        for (field, value, msg) in crate::names::validate_annotations(ann, "metadata.annotations") {
            causes.push(Cause::invalid(field, value, &msg));
        }
    }
    causes
}

/// `path.IsValidPathSegmentName`: the problems of `name` as one URL path segment.
pub(crate) fn path_segment(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"].iter().filter(|c| name.contains(*c)).map(|c| format!("may not contain '{c}'")).collect()
}

/// Status a built-in kind starts with, as each kind's create strategy resets it.
fn initial_status(def: &ResourceDef, body: &mut Value) {
    if !def.has_status() {
        return;
    }
    let obj = body.as_object_mut().expect("checked object");
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "pods") => {
            obj.insert("status".into(), json!({"phase": "Pending"}));
        }
        ("", "namespaces") => {
            obj.insert("status".into(), json!({"phase": "Active"}));
        }
        // Node agents register with their status.
        ("", "nodes") => {}
        ("batch", "jobs") => {
            obj.insert("status".into(), json!({}));
        }
        _ => {
            obj.remove("status");
        }
    }
}

fn namespace_def(txn: &Txn<'_>) -> Arc<ResourceDef> {
    txn.registry.get("", "v1", "namespaces").expect("namespaces are built in")
}

pub fn create(txn: &mut Txn<'_>, ctx: &Ctx<'_>, def: &Arc<ResourceDef>, ns: &str, mut body: Value) -> Result<Arc<Obj>> {
    check_type(def, txn.registry, &mut body)?;
    check_namespace(def, ns, &mut body)?;
    ctx.warn(crate::crd_schema::decode_body(def, &mut body, ctx.field_validation(), ctx.take_duplicate_fields())?);
    let meta = meta_mut(&mut body);
    if meta.get("resourceVersion").and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::bad_request("resourceVersion should not be set on objects to be created"));
    }
    let name = match meta.get("name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => match meta.get("generateName").and_then(Value::as_str) {
            Some(g) if !g.is_empty() => generate_name(g),
            _ => {
                return Err(ApiError::invalid(
                    def,
                    "",
                    vec![Cause {
                        reason: "FieldValueRequired",
                        field: "metadata.name".into(),
                        message: "Required value: name or generateName is required".into(),
                    }],
                ));
            }
        },
    };
    meta.insert("name".into(), Value::String(name.clone()));
    for k in ["deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"] {
        meta.remove(k);
    }
    meta.insert("uid".into(), Value::String(uuid::Uuid::new_v4().to_string()));
    meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
    meta.insert("generation".into(), json!(1));
    if def.is_namespace() {
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let Some(l) = labels.as_object_mut() {
            l.insert("kubernetes.io/metadata.name".into(), Value::String(name.clone()));
        }
        body["spec"] = json!({"finalizers": ["kubernetes"]});
    }
    initial_status(def, &mut body);
    if def.namespaced {
        let ns_obj = txn.get(&Txn::key(&namespace_def(txn), "", ns));
        match ns_obj {
            None => return Err(ApiError::not_found(&namespace_def(txn), ns)),
            Some(n) if n.deleting => {
                return Err(ApiError::forbidden(
                    def,
                    &name,
                    format!("unable to create new content in namespace {ns} because it is being terminated"),
                ));
            }
            Some(_) => {}
        }
    }
    ctx.admission.apply_defaults(def, &mut body, None, ctx.requester());
    // The built-in admission plugins (Priority) run before the webhooks, as kube-apiserver orders them.
    ctx.admission.admit_create(def, &mut body, &*txn).map_err(|why| ApiError::forbidden(def, &name, why))?;
    ctx.admit_webhooks(def, &mut body, None)?;
    // A later webhook pass puts in the first pass's object, with the name generated then.
    let name = meta_str(&body, "name").unwrap_or_default().to_string();
    let mut causes = validate_meta(def, &body);
    // A custom resource the schema rejects does not reach validating admission, as upstream.
    let schema_causes = crate::crd_schema::validate_write(def, &body, None, false);
    if schema_causes.is_empty() {
        causes.extend(ctx.admission.validate(def, &body, None, &*txn));
    }
    causes.extend(schema_causes);
    if !causes.is_empty() {
        return Err(ApiError::invalid(def, &name, causes));
    }
    ctx.admission.validate_admission(def, &body, None, &*txn).map_err(|why| ApiError::forbidden(def, &name, why))?;
    ctx.warn(ctx.admission.warnings(def, &body, None));
    // Quota admission, the last admission step, as kube-apiserver orders it.
    crate::quota::admit_create(txn, def, ns, &name, &mut body)?;
    if txn.get(&Txn::key(def, ns_of(def, ns), &name)).is_some() {
        return Err(ApiError::already_exists(def, &name));
    }
    if def.is_crd() {
        let causes = crate::crd_schema::check_crd(&body);
        if !causes.is_empty() {
            return Err(ApiError::invalid(def, &name, causes));
        }
        // A CRD that defines nothing servable is rejected before it is stored.
        crate::resources::defs_from_crd(&body).map_err(|m| {
            ApiError::invalid(def, &name, vec![Cause { reason: "FieldValueInvalid", field: String::new(), message: m }])
        })?;
        crd_established(&mut body);
    }
    Ok(txn.put(def, body))
}

fn ns_of<'a>(def: &ResourceDef, ns: &'a str) -> &'a str {
    if def.namespaced { ns } else { "" }
}

fn crd_established(body: &mut Value) {
    let now = now_rfc3339();
    let names = body.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let stored: Vec<Value> = body
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("storage").and_then(Value::as_bool).unwrap_or(false))
        .filter_map(|v| v.get("name").cloned())
        .collect();
    body["status"] = json!({
        "acceptedNames": names,
        "storedVersions": stored,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
        ]
    });
}

/// Whether anything outside `metadata` and `status` differs: what bumps `generation`.
fn spec_changed(a: &Value, b: &Value) -> bool {
    fn spec(o: &serde_json::Map<String, Value>) -> Vec<(&String, &Value)> {
        let mut fields: Vec<(&String, &Value)> =
            o.iter().filter(|(k, _)| k.as_str() != "metadata" && k.as_str() != "status").collect();
        fields.sort_by_key(|(k, _)| *k);
        fields
    }
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => spec(a) != spec(b),
        _ => a != b,
    }
}

/// Replaces an object with `body`, keeping what the client may not change. `old` is `cur`'s
/// value when the caller has it parsed already.
#[allow(clippy::too_many_arguments)]
pub fn update(
    txn: &mut Txn<'_>,
    ctx: &Ctx<'_>,
    def: &Arc<ResourceDef>,
    ns: &str,
    name: &str,
    mut body: Value,
    target: Target,
    cur: Option<Arc<Obj>>,
    old: Option<Value>,
) -> Result<Arc<Obj>> {
    check_type(def, txn.registry, &mut body)?;
    check_namespace(def, ns, &mut body)?;
    ctx.warn(crate::crd_schema::decode_body(def, &mut body, ctx.field_validation(), ctx.take_duplicate_fields())?);
    match meta_str(&body, "name") {
        Some(n) if n != name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        _ => {
            meta_mut(&mut body).insert("name".into(), Value::String(name.to_string()));
        }
    }
    let key = Txn::key(def, ns_of(def, ns), name);
    let Some(cur) = cur.or_else(|| txn.get(&key)) else { return Err(ApiError::not_found(def, name)) };
    if let Some(rv) = meta_str(&body, "resourceVersion")
        && !rv.is_empty()
        && rv != cur.rv.to_string()
    {
        return Err(ApiError::stale(def, name));
    }
    let old = old.unwrap_or_else(|| cur.value());
    if target == Target::Status {
        // Only the status changes: the stored object with the body's status, compared and
        // stored without copying the rest (thousands of node agents write pod statuses).
        let status = body.as_object_mut().and_then(|o| o.remove("status"));
        if old.get("status") == status.as_ref() {
            return Ok(cur);
        }
        // The schema's checks and a kind's status validation read the stored object: a copy
        // costs less than parsing it again. Kinds with neither (pods) skip it.
        let hooked = ctx.admission.validates_status(def);
        let stored = (def.schema.is_some() || hooked).then(|| old.clone());
        let mut new = old;
        match status {
            Some(s) => new["status"] = s,
            None => {
                new.as_object_mut().map(|o| o.remove("status"));
            }
        }
        if ctx.staged() {
            ctx.admit_webhooks(def, &mut new, Some(&cur.value()))?;
        }
        if let Some(stored) = &stored {
            let mut causes = if hooked { ctx.admission.validate_status(def, &new, stored) } else { vec![] };
            if causes.is_empty() && def.schema.is_some() {
                causes = crate::crd_schema::validate_write(def, &new, Some(stored), true);
            }
            if !causes.is_empty() {
                return Err(ApiError::invalid(def, name, causes));
            }
        }
        return store_update(txn, def, ns, name, &cur, new);
    }
    let mut new = body;
    if def.has_status() {
        match old.get("status") {
            // A patch leaves the status as it was: no copy then.
            Some(s) if new.get("status") == Some(s) => {}
            Some(s) => new["status"] = s.clone(),
            None => {
                new.as_object_mut().map(|o| o.remove("status"));
            }
        }
    }
    // Server-owned metadata always comes from the stored object.
    {
        let old_meta = old.get("metadata").and_then(Value::as_object);
        let meta = meta_mut(&mut new);
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
            "namespace",
        ] {
            match old_meta.and_then(|m| m.get(k)) {
                Some(v) => meta.insert(k.into(), v.clone()),
                None => meta.remove(k),
            };
        }
        meta.remove("managedFields");
        meta.remove("selfLink");
    }
    ctx.admission.apply_defaults(def, &mut new, Some(&old), ctx.requester());
    ctx.admit_webhooks(def, &mut new, Some(&old))?;
    if cur.deleting {
        let old_f: Vec<&str> = cur.finalizers.iter().map(String::as_str).collect();
        let added: Vec<String> =
            meta_list(&new, "finalizers").into_iter().filter(|f| !old_f.contains(&f.as_str())).collect();
        if !added.is_empty() {
            return Err(ApiError::invalid(
                def,
                name,
                vec![Cause::forbidden(
                    "metadata.finalizers",
                    &format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                    ),
                )],
            ));
        }
    }
    let mut causes = validate_meta(def, &new);
    // A custom resource the schema rejects does not reach validating admission, as upstream.
    let mut schema_causes = crate::crd_schema::validate_write(def, &new, Some(&old), false);
    if def.is_crd() {
        schema_causes.extend(crate::crd_schema::check_crd(&new));
    }
    if schema_causes.is_empty() {
        causes.extend(ctx.admission.validate(def, &new, Some(&old), &*txn));
    }
    causes.extend(schema_causes);
    if !causes.is_empty() {
        return Err(ApiError::invalid(def, name, causes));
    }
    ctx.admission
        .validate_admission(def, &new, Some(&old), &*txn)
        .map_err(|why| ApiError::forbidden(def, name, why))?;
    ctx.warn(ctx.admission.warnings(def, &new, Some(&old)));
    if new == old {
        return Ok(cur);
    }
    if spec_changed(&new, &old) {
        let generation = old.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0) + 1;
        meta_mut(&mut new).insert("generation".into(), json!(generation));
    }
    store_update(txn, def, ns, name, &cur, new)
}

/// Stores `new` in place of `cur`, then settles what the change may have unblocked (an owner
/// waiting for its dependents, an object whose last finalizer went).
fn store_update(
    txn: &mut Txn<'_>,
    def: &Arc<ResourceDef>,
    ns: &str,
    name: &str,
    cur: &Obj,
    mut new: Value,
) -> Result<Arc<Obj>> {
    if def.is_crd() {
        crate::resources::defs_from_crd(&new).map_err(|m| {
            ApiError::invalid(def, name, vec![Cause { reason: "FieldValueInvalid", field: String::new(), message: m }])
        })?;
    }
    crate::quota::admit_update(txn, def, ns, cur, &mut new)?;
    let obj = txn.put(def, new);
    settle_update(txn, def, ns, name, cur, obj)
}

/// Settles what replacing `cur` with the stored `obj` may have unblocked.
fn settle_update(
    txn: &mut Txn<'_>,
    def: &Arc<ResourceDef>,
    ns: &str,
    name: &str,
    cur: &Obj,
    obj: Arc<Obj>,
) -> Result<Arc<Obj>> {
    let key = Txn::key(def, ns_of(def, ns), name);
    let mut work = VecDeque::new();
    for o in &cur.owners {
        work.push_back(Work::CheckOwner(o.uid.clone()));
    }
    if obj.deleting {
        work.push_back(Work::MaybeRemove(key.clone()));
    }
    settle(txn, work)?;
    Ok(txn.get(&key).unwrap_or(obj))
}

fn meta_list(v: &Value, key: &str) -> Vec<String> {
    v.get("metadata")
        .and_then(|m| m.get(key))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// Kubernetes' JSON Patch: like RFC 6902, except that `test` of a missing path against `null` succeeds.
pub fn json_patch(doc: &mut Value, patch: &Value) -> Result<()> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone()).map_err(|e| {
        ApiError::bad_request(format!(
            "the server rejected our request due to an error in our request: invalid JSON patch: {e}"
        ))
    })?;
    for (i, op) in ops.0.into_iter().enumerate() {
        if let json_patch::PatchOperation::Test(t) = &op
            && t.value.is_null()
            && doc.pointer(t.path.as_str()).is_none()
        {
            continue;
        }
        json_patch::patch(doc, &[op]).map_err(|e| {
            ApiError::new(
                422,
                "Invalid",
                format!("the server rejected our request due to an error in our request: operation {i}: {e}"),
            )
        })?;
    }
    Ok(())
}

fn parse_apply_body(body: &[u8]) -> Result<Value> {
    // Clients (kube-rs, client-go) send apply configurations as JSON, which is YAML too: the
    // JSON parser is the fast path, the YAML one parses the rest and words the errors.
    if let Ok(v) = serde_json::from_slice(body) {
        return Ok(v);
    }
    let text =
        std::str::from_utf8(body).map_err(|e| ApiError::bad_request(format!("apply patch is not UTF-8: {e}")))?;
    let v: Value =
        serde_saphyr::from_str(text).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    Ok(v)
}

/// A patch's body, parsed, and for a patch that changes only labels or annotations, or only
/// the status, its merge into the object as it was when read: the work [`PatchBody::prepare`]
/// does before the store's lock is taken, so that thousands of agents writing their attempt
/// annotation, or node agents their pods' status, at once do not queue behind each other's
/// parsing and merging (kube-apiserver's GuaranteedUpdate too computes an update outside any
/// lock). [`patch`] uses the merge if the object is still the one it was made from (the same
/// stored `Arc`: every write stores a new one), and otherwise makes it again.
pub struct PatchBody {
    patch: Parsed,
    prepared: Option<(Arc<Obj>, Prepared)>,
}

/// A patch's body, parsed; or, once a status merge prepared ahead took the parsed body (no copy
/// of it, and nothing of it left to free under the lock), its bytes, parsed again only where
/// that merge cannot be used.
#[derive(Clone)]
enum Parsed {
    Value(Value),
    Bytes(PatchType, Vec<u8>),
}

impl Parsed {
    fn value(self) -> Result<Value> {
        match self {
            Parsed::Value(v) => Ok(v),
            Parsed::Bytes(kind, body) => parse_patch(kind, &body),
        }
    }
}

fn parse_patch(kind: PatchType, body: &[u8]) -> Result<Value> {
    match kind {
        PatchType::Apply { .. } => parse_apply_body(body),
        _ => serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}"))),
    }
}

/// A patch merged ahead of the lock, by [`fast_path`].
enum Prepared {
    Metadata(MetaChange),
    Status(StatusChange),
}

impl PatchBody {
    /// The same body for another pass of a write (nothing prepared).
    pub fn again(&self) -> PatchBody {
        PatchBody { patch: self.patch.clone(), prepared: None }
    }

    /// The body parsed, nothing prepared.
    pub fn parse(kind: PatchType, body: &[u8]) -> Result<PatchBody> {
        Ok(PatchBody { patch: Parsed::Value(parse_patch(kind, body)?), prepared: None })
    }

    /// The body parsed, and merged into the object as `store` has it now where
    /// [`patch_metadata`]'s or [`patch_status`]'s path applies. An error of that merge is left
    /// for [`patch`] to find again under the lock (the object may be gone by then, which is the
    /// error to report).
    #[allow(clippy::too_many_arguments)]
    pub fn prepare(
        store: &crate::store::Store,
        ctx: &Ctx<'_>,
        def: &Arc<ResourceDef>,
        ns: &str,
        name: &str,
        kind: PatchType,
        body: &[u8],
        target: Target,
        view: Option<crate::resources::View>,
    ) -> Result<PatchBody> {
        let patch = parse_patch(kind, body)?;
        let parsed = |patch| PatchBody { patch: Parsed::Value(patch), prepared: None };
        let Some(path) = fast_path(ctx, def, kind, target, view) else { return Ok(parsed(patch)) };
        let Some(cur) = store.get(def, ns_of(def, ns), name) else { return Ok(parsed(patch)) };
        Ok(match path {
            FastPath::Metadata => {
                let change = prepare_metadata(def, ns, name, &cur, kind, &patch).ok().flatten();
                PatchBody { patch: Parsed::Value(patch), prepared: change.map(|c| (cur, Prepared::Metadata(c))) }
            }
            FastPath::Status if status_patch_applies(ns, name, &cur, &patch) => {
                let change = merge_status(def, &cur, kind, patch);
                PatchBody {
                    patch: Parsed::Bytes(kind, body.to_vec()),
                    prepared: change.map(|c| (cur, Prepared::Status(c))),
                }
            }
            FastPath::Status => parsed(patch),
        })
    }
}

/// A shorter path a patch may take, for the patches it takes giving what the general one gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FastPath {
    /// [`patch_metadata`]'s: to the object itself (not a status or a view of it), of a built-in
    /// kind without admission hooks that must see it (they would see the whole object).
    Metadata,
    /// [`patch_status`]'s: a merge or strategic merge patch to the status of an object of a
    /// namespaced built-in kind whose status writes no admission hook validates and no schema
    /// checks (pods'), so that only the status and the resourceVersion change.
    Status,
}

fn fast_path(
    ctx: &Ctx<'_>,
    def: &ResourceDef,
    kind: PatchType,
    target: Target,
    view: Option<crate::resources::View>,
) -> Option<FastPath> {
    if view.is_some() || def.is_crd() || ctx.staged() {
        return None;
    }
    match target {
        Target::Main if kind != PatchType::Json && !ctx.admission.sees_metadata_patches(def) => {
            Some(FastPath::Metadata)
        }
        Target::Status
            if matches!(kind, PatchType::Merge | PatchType::Strategic)
                && def.builtin
                && def.namespaced
                && def.schema.is_none()
                && !ctx.admission.validates_status(def) =>
        {
            Some(FastPath::Status)
        }
        _ => None,
    }
}

/// Applies a patch of any supported type; a server-side apply to a missing object creates it.
#[allow(clippy::too_many_arguments)]
pub fn patch(
    txn: &mut Txn<'_>,
    ctx: &Ctx<'_>,
    def: &Arc<ResourceDef>,
    ns: &str,
    name: &str,
    kind: PatchType,
    body: PatchBody,
    target: Target,
    view: Option<crate::resources::View>,
) -> Result<(Arc<Obj>, bool)> {
    let PatchBody { patch, prepared } = body;
    let key = Txn::key(def, ns_of(def, ns), name);
    // A status merge prepared on the object as it still is is all there is to do.
    if let Some((seen, Prepared::Status(_))) = &prepared
        && txn.get(&key).is_some_and(|cur| Arc::ptr_eq(seen, &cur))
        && fast_path(ctx, def, kind, target, view) == Some(FastPath::Status)
        && let Some((cur, Prepared::Status(change))) = prepared
    {
        return Ok((patch_status(txn, def, ns, name, &cur, change)?, false));
    }
    let patch = patch.value()?;
    if kind == PatchType::Strategic && !def.builtin {
        return Err(ApiError::unsupported_media("application/strategic-merge-patch+json"));
    }
    if let PatchType::Apply { .. } = kind {
        for field in ["apiVersion", "kind"] {
            if patch.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
                return Err(ApiError::bad_request(format!(
                    "invalid object type: /, Kind= (apply configuration must set {field})"
                )));
            }
        }
        if let Some(n) = meta_str(&patch, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
    }
    let Some(cur) = txn.get(&key) else {
        if let PatchType::Apply { .. } = kind {
            let mut obj = patch;
            meta_mut(&mut obj).insert("name".into(), Value::String(name.to_string()));
            let obj = view.map_or(obj.clone(), |v| v.from_view(obj));
            return Ok((create(txn, ctx, def, ns, obj)?, true));
        }
        return Err(ApiError::not_found(def, name));
    };
    match fast_path(ctx, def, kind, target, view) {
        Some(FastPath::Metadata) => {
            let change = match prepared {
                Some((seen, Prepared::Metadata(change))) if Arc::ptr_eq(&seen, &cur) => Some(change),
                _ => prepare_metadata(def, ns, name, &cur, kind, &patch)?,
            };
            if let Some(change) = change {
                return Ok((patch_metadata(txn, def, ns, name, &cur, change)?, false));
            }
        }
        Some(FastPath::Status) => {
            if let Some(change) = prepare_status(def, ns, name, &cur, kind, &patch) {
                return Ok((patch_status(txn, def, ns, name, &cur, change)?, false));
            }
        }
        None => {}
    }
    // A patch sent to a view applies to the object as the view shows it. Parsed once: `update`
    // compares with the same value.
    let old = cur.value();
    let mut doc = view.map_or_else(|| old.clone(), |v| v.to_view(old.clone()));
    match kind {
        PatchType::Merge => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("merge patch must be a JSON object"));
            }
            json_patch::merge(&mut doc, &patch)
        }
        PatchType::Json => json_patch(&mut doc, &patch)?,
        PatchType::Strategic => {
            doc = crate::strategic_merge::apply(&def.kind, doc, patch)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
        }
        // Field ownership is not tracked: applying merges the configuration into the live object
        // (by merge keys for built-ins), so fields a manager stops applying are left in place.
        PatchType::Apply { .. } => {
            doc = if def.builtin {
                crate::strategic_merge::apply(&def.kind, doc, patch)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?
            } else {
                let mut d = doc;
                apply_custom(&mut d, &patch);
                d
            };
        }
    }
    if let Some(v) = view {
        doc = v.from_view(doc);
    }
    // A resourceVersion the patch sets is a precondition; one it leaves alone is not.
    if meta_str(&doc, "resourceVersion") == Some(cur.rv.to_string().as_str()) {
        meta_mut(&mut doc).remove("resourceVersion");
    }
    // The patched object is decoded as a body is (`update` finds nothing left to prune).
    ctx.warn(crate::crd_schema::decode_patched(def, &mut doc, ctx.field_validation(), ctx.take_duplicate_fields())?);
    Ok((update(txn, ctx, def, ns, name, doc, target, Some(cur), Some(old))?, false))
}

/// What a patch may name in `metadata` and still take [`patch_metadata`]'s path.
const LABELS_OR_ANNOTATIONS_PATCH: [&str; 4] = ["name", "namespace", "labels", "annotations"];

/// A merge, strategic merge or apply patch that changes only labels or annotations (a pod's
/// in-place restart attempt, written by thousands of agents at once in a group restart): it is
/// merged into the stored `metadata` alone, which is then spliced between the stored bytes of
/// the other fields, instead of parsing, copying, comparing and serializing the whole object.
/// The caller makes sure the kind has no admission hooks (they would see the whole object).
/// [`prepare_metadata`] merges (`None` when the patch or its result is not of that shape: the
/// general path then runs, and gives the same result for the patches taken here); this stores.
fn prepare_metadata(
    def: &ResourceDef,
    ns: &str,
    name: &str,
    cur: &Obj,
    kind: PatchType,
    patch: &Value,
) -> Result<Option<MetaChange>> {
    let Some(p) = patch.as_object() else { return Ok(None) };
    let same = |field: &str, want: &str| p.get(field).and_then(Value::as_str).is_none_or(|v| v == want);
    let Some(pm) = p.get("metadata").and_then(Value::as_object) else { return Ok(None) };
    let shape = p.keys().all(|k| matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
        && pm.keys().all(|k| LABELS_OR_ANNOTATIONS_PATCH.contains(&k.as_str()))
        && same("apiVersion", &def.api_version())
        && same("kind", &def.kind)
        && pm.get("name").and_then(Value::as_str).is_none_or(|n| n == name)
        && pm.get("namespace").and_then(Value::as_str).is_none_or(|n| n.is_empty() || n == ns);
    if !shape {
        return Ok(None);
    }
    let Ok(old) = serde_json::from_slice::<serde_json::Map<String, Value>>(&cur.raw[cur.meta.clone()]) else {
        return Ok(None);
    };
    // Whether the patch changes each map, read from the patch itself: merging a map of strings
    // sets or (null) removes each key it names. A map with a directive (`$patch`, `$retainKeys`)
    // or that is not a map goes down the general path.
    let changes = |k: &str| match (pm.get(k), old.get(k)) {
        (None, _) => Some(false),
        (Some(Value::Null), was) => Some(was.is_some()),
        (Some(Value::Object(m)), _) if m.keys().any(|k| k.starts_with('$')) => None,
        // The merge creates the map, even an empty one.
        (Some(Value::Object(_)), None) => Some(true),
        (Some(Value::Object(m)), Some(Value::Object(was))) => Some(m.iter().any(|(key, v)| match (was.get(key), v) {
            (None, Value::Null) => false,
            (before, v) => before != Some(v),
        })),
        _ => None,
    };
    let (Some(labels), Some(annotations)) = (changes("labels"), changes("annotations")) else { return Ok(None) };
    if !labels && !annotations {
        return Ok(Some(MetaChange::Unchanged));
    }
    let (kept_name, kept_namespace) = (old.get("name").cloned(), old.get("namespace").cloned());
    // The same merge as the general path's, on an object that is only the metadata.
    let mut doc = Value::Object([("metadata".to_string(), Value::Object(old))].into_iter().collect());
    match kind {
        PatchType::Merge => json_patch::merge(&mut doc, patch),
        _ => {
            doc = crate::strategic_merge::apply(&def.kind, doc, patch.clone())
                .map_err(|e| ApiError::bad_request(e.to_string()))?
        }
    }
    let Some(new) = doc.get("metadata").and_then(Value::as_object) else { return Ok(None) };
    // Nothing but the maps the patch names can change, unless it set the name or namespace.
    if new.get("name") != kept_name.as_ref() || new.get("namespace") != kept_namespace.as_ref() {
        return Ok(None);
    }
    // The name did not change, and the stored labels or annotations that did not were valid.
    let changed_map = |k: &str, changed: bool| new.get(k).filter(|_| changed);
    let causes =
        validate_labels_and_annotations(changed_map("labels", labels), changed_map("annotations", annotations));
    if !causes.is_empty() {
        return Err(ApiError::invalid(def, name, causes));
    }
    let Some(Value::Object(new)) = doc.get_mut("metadata").map(Value::take) else { return Ok(None) };
    Ok(Some(MetaChange::To(Relabel::new(new))))
}

/// What a labels-or-annotations patch does to an object's metadata.
enum MetaChange {
    Unchanged,
    To(Relabel),
}

fn patch_metadata(
    txn: &mut Txn<'_>,
    def: &Arc<ResourceDef>,
    ns: &str,
    name: &str,
    cur: &Arc<Obj>,
    change: MetaChange,
) -> Result<Arc<Obj>> {
    match change {
        MetaChange::Unchanged => Ok(cur.clone()),
        MetaChange::To(meta) => {
            let obj = txn.put_metadata(def, cur, meta);
            settle_update(txn, def, ns, name, cur, obj)
        }
    }
}

/// A merge or strategic merge patch of nothing but the status (`{"status": {...}}`: what node
/// agents send), on [`FastPath::Status`]: the status alone is parsed from the stored bytes,
/// merged and serialized, and spliced with the new resourceVersion between the stored bytes of
/// the rest ([`Obj::with_status`]), instead of parsing, copying, comparing and serializing the
/// whole object. The rest would pass `update`'s checks as it is: it is the stored object's, of
/// the URL's kind, name and namespace, at its own resourceVersion. This merges (`None` where
/// the patch, the stored bytes or the result is not of that shape, or on a merge error: the
/// general path then runs, and gives the same result for the patches taken here, or the
/// error); [`patch_status`] stores.
fn prepare_status(
    def: &ResourceDef,
    ns: &str,
    name: &str,
    cur: &Obj,
    kind: PatchType,
    patch: &Value,
) -> Option<StatusChange> {
    status_patch_applies(ns, name, cur, patch).then(|| merge_status(def, cur, kind, patch.clone()))?
}

/// Whether [`prepare_status`]'s merge may apply to this patch (`{"status": {...}}`) and object.
fn status_patch_applies(ns: &str, name: &str, cur: &Obj, patch: &Value) -> bool {
    patch.as_object().is_some_and(|p| p.len() == 1 && p.get("status").is_some_and(Value::is_object))
        && cur.namespace == ns
        && cur.name == name
        && cur.splices_status()
}

/// [`prepare_status`]'s merge, taking the patch.
fn merge_status(def: &ResourceDef, cur: &Obj, kind: PatchType, patch: Value) -> Option<StatusChange> {
    if !typed_as(def, &cur.raw) {
        return None;
    }
    let old: Value = serde_json::from_slice(cur.status_bytes()).ok()?;
    // The same merge as the general path's, on an object that is only the status.
    let mut doc = Value::Object([("status".to_string(), old)].into_iter().collect());
    match kind {
        PatchType::Merge => json_patch::merge(&mut doc, &patch),
        PatchType::Strategic => doc = crate::strategic_merge::apply(&def.kind, doc, patch).ok()?,
        _ => return None,
    }
    let new = doc.as_object_mut()?.remove("status").filter(Value::is_object)?;
    // Writing to a Vec does not fail, and a Value always serializes.
    let bytes = serde_json::to_vec(&new).unwrap_or_default();
    // Without floats, equal values are equal bytes (serde_json writes one form of each).
    let unchanged = if has_float(&new) {
        serde_json::from_slice::<Value>(cur.status_bytes()).is_ok_and(|old| old == new)
    } else {
        bytes == cur.status_bytes()
    };
    if unchanged {
        return Some(StatusChange::Unchanged);
    }
    // Quota admission reads the whole object when a pod's phase turns terminal (or back).
    if !crate::quota::ignores_status_update(def, cur, new.get("phase").and_then(Value::as_str)) {
        return None;
    }
    let fields = cur.fields_with_status(def, &new)?;
    Some(StatusChange::To { bytes, fields })
}

/// Whether `raw` (a stored object) starts with its `apiVersion` and `kind` as `def`'s: what
/// `check_type` leaves as it is.
fn typed_as(def: &ResourceDef, raw: &[u8]) -> bool {
    // serde_json writes the keys in order: nothing sorts before `apiVersion` in a stored object
    // of a built-in kind.
    let prefix =
        format!("{{\"apiVersion\":{},\"kind\":{},", Value::String(def.api_version()), Value::String(def.kind.clone()));
    raw.starts_with(prefix.as_bytes())
}

fn has_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(map) => map.values().any(has_float),
        _ => false,
    }
}

/// What a status patch does to an object's status.
enum StatusChange {
    Unchanged,
    /// The new status, serialized, and the object's selectable fields with it.
    To {
        bytes: Vec<u8>,
        fields: Vec<String>,
    },
}

fn patch_status(
    txn: &mut Txn<'_>,
    def: &Arc<ResourceDef>,
    ns: &str,
    name: &str,
    cur: &Arc<Obj>,
    change: StatusChange,
) -> Result<Arc<Obj>> {
    match change {
        StatusChange::Unchanged => Ok(cur.clone()),
        StatusChange::To { bytes, fields } => {
            let obj = txn.put_status(def, cur, &bytes, fields);
            settle_update(txn, def, ns, name, cur, obj)
        }
    }
}

/// Server-side apply for a custom resource: a JSON merge, except that lists whose items are all
/// objects with a string `name` merge item by item on it (as `x-kubernetes-list-type: map` lists
/// keyed by `name` do, e.g. a JobSet's `replicatedJobs` or a pod's `containers`), so fields the
/// server defaulted inside an item survive a re-apply.
fn apply_custom(doc: &mut Value, patch: &Value) {
    fn keyed(list: &[Value]) -> Option<Vec<&str>> {
        list.iter().map(|v| v.get("name")?.as_str()).collect()
    }
    match (doc, patch) {
        (Value::Object(d), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    d.remove(k);
                } else {
                    apply_custom(d.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (Value::Array(d), Value::Array(p)) if keyed(p).is_some() && keyed(d).is_some() => {
            let mut merged = Vec::with_capacity(p.len());
            for item in p {
                let name = item.get("name");
                let mut base = d.iter().find(|x| x.get("name") == name).cloned().unwrap_or(Value::Null);
                apply_custom(&mut base, item);
                merged.push(base);
            }
            *d = merged;
        }
        (d, p) => {
            *d = Value::Null;
            json_patch::merge(d, p);
        }
    }
}

/// What became of a delete request.
pub struct Deleted {
    /// The object as removed (with the deletion's resourceVersion), or as it now stands while it waits.
    pub obj: Arc<Obj>,
    pub removed: bool,
}

pub fn delete(
    txn: &mut Txn<'_>,
    def: &Arc<ResourceDef>,
    ns: &str,
    name: &str,
    opts: &DeleteOptions,
) -> Result<Deleted> {
    let key = Txn::key(def, ns_of(def, ns), name);
    let Some(cur) = txn.get(&key) else { return Err(ApiError::not_found(def, name)) };
    if let Some(uid) = &opts.precondition_uid
        && uid != &cur.uid
    {
        return Err(ApiError::conflict(
            def,
            name,
            &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", cur.uid),
        ));
    }
    if let Some(rv) = &opts.precondition_rv
        && rv != &cur.rv.to_string()
    {
        return Err(ApiError::conflict(
            def,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                cur.rv
            ),
        ));
    }
    if def.is_namespace() && name == "default" {
        return Err(ApiError::forbidden(def, name, "this namespace may not be deleted"));
    }
    let mut work = VecDeque::new();
    delete_key(txn, def, &key, opts, &mut work)?;
    settle(txn, work)?;
    Ok(match txn.get(&key) {
        Some(o) if o.uid == cur.uid => Deleted { obj: o, removed: false },
        _ => Deleted { obj: txn.removed_obj(&key).unwrap_or(cur), removed: true },
    })
}

/// Deferred garbage-collection steps, run to a fixpoint within the same transaction.
enum Work {
    /// An object is gone: its dependents may now be orphans to collect.
    Removed { uid: String, owners: Vec<String>, namespace: Option<String> },
    /// An owner is being deleted in the foreground: delete its dependents.
    DeleteDependents(String),
    /// An owner waiting for its dependents may be able to drop `foregroundDeletion`.
    CheckOwner(String),
    /// A deleting object may have no finalizers left.
    MaybeRemove(Key),
    /// A terminating namespace may now be empty.
    Namespace(String),
}

fn def_of(txn: &Txn<'_>, key: &Key) -> Result<Arc<ResourceDef>> {
    txn.registry.by_storage_key(&key.0).ok_or_else(|| ApiError::internal(format!("no resource serves {}", key.0)))
}

fn pod_grace(def: &ResourceDef, v: &Value, requested: Option<i64>) -> i64 {
    if !def.graceful() {
        return 0;
    }
    let bound = v.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
    let terminal = matches!(v.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"));
    if !bound || terminal {
        return 0;
    }
    requested.or_else(|| v.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64)).unwrap_or(30).max(0)
}

fn delete_key(
    txn: &mut Txn<'_>,
    def: &Arc<ResourceDef>,
    key: &Key,
    opts: &DeleteOptions,
    work: &mut VecDeque<Work>,
) -> Result<()> {
    let Some(cur) = txn.get(key) else { return Ok(()) };
    let mut v = cur.value();
    let grace = pod_grace(def, &v, opts.grace_period);
    if cur.deleting {
        // A second delete may only shorten the grace period (a force delete confirms termination).
        if def.graceful() && cur.grace.is_none_or(|g| grace < g) {
            let meta = meta_mut(&mut v);
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
            meta.insert("deletionTimestamp".into(), json!(timestamp_in(grace)));
            txn.put(def, v);
            work.push_back(Work::MaybeRemove(key.clone()));
        }
        return Ok(());
    }
    let propagation = opts.propagation.unwrap_or_else(|| def.default_propagation());
    let mut finalizers = cur.finalizers.clone();
    let has_dependents = txn.iter_dependents(&cur.uid).next().is_some();
    match propagation {
        Propagation::Foreground if has_dependents && !finalizers.iter().any(|f| f == FOREGROUND) => {
            finalizers.push(FOREGROUND.into())
        }
        Propagation::Orphan if has_dependents && !finalizers.iter().any(|f| f == ORPHAN) => {
            finalizers.push(ORPHAN.into())
        }
        _ => {}
    }
    if def.is_namespace() {
        v["status"] = json!({"phase": "Terminating"});
    }
    let namespace_has_content = def.is_namespace() && !txn.keys_in_namespace(&cur.name).is_empty();
    if finalizers.is_empty() && grace == 0 && !namespace_has_content {
        remove(txn, def, key, work);
        return Ok(());
    }
    let meta = meta_mut(&mut v);
    meta.insert("deletionTimestamp".into(), json!(timestamp_in(grace)));
    meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
    if !finalizers.is_empty() {
        meta.insert("finalizers".into(), json!(finalizers));
    }
    txn.put(def, v);
    if def.is_namespace() {
        for k in txn.keys_in_namespace(&cur.name) {
            let d = def_of(txn, &k)?;
            delete_key(txn, &d, &k, &DeleteOptions::default(), work)?;
        }
        work.push_back(Work::Namespace(cur.name.clone()));
    }
    if finalizers.iter().any(|f| f == FOREGROUND) {
        work.push_back(Work::DeleteDependents(cur.uid.clone()));
    }
    if finalizers.iter().any(|f| f == ORPHAN) {
        for (dk, dep) in txn.dependents(&cur.uid) {
            drop_owner_refs(txn, &dk, &dep, &[cur.uid.as_str()])?;
        }
        remove_finalizer(txn, def, key, ORPHAN);
        work.push_back(Work::MaybeRemove(key.clone()));
    }
    Ok(())
}

fn timestamp_in(secs: i64) -> String {
    let t = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(secs);
    crate::object::rfc3339_seconds(t)
}

fn remove(txn: &mut Txn<'_>, def: &Arc<ResourceDef>, key: &Key, work: &mut VecDeque<Work>) {
    if let Some(obj) = txn.remove(def, key) {
        crate::quota::released_by(txn, def, &obj);
        if def.is_crd() {
            // Deleting a CRD deletes every custom resource it defined.
            let v = obj.value();
            let group = v.pointer("/spec/group").and_then(Value::as_str).unwrap_or_default();
            let plural = v.pointer("/spec/names/plural").and_then(Value::as_str).unwrap_or_default();
            let storage_key = format!("{group}/{plural}");
            if let Some(cr_def) = txn.registry.by_storage_key(&storage_key) {
                for k in txn.keys_of(&storage_key) {
                    remove(txn, &cr_def, &k, work);
                }
            }
        }
        work.push_back(Work::Removed {
            uid: obj.uid.clone(),
            owners: obj.owners.iter().map(|o| o.uid.clone()).collect(),
            namespace: (!obj.namespace.is_empty()).then(|| obj.namespace.clone()),
        });
    }
}

fn remove_finalizer(txn: &mut Txn<'_>, def: &Arc<ResourceDef>, key: &Key, finalizer: &str) {
    let Some(cur) = txn.get(key) else { return };
    let mut v = cur.value();
    let rest: Vec<String> = cur.finalizers.iter().filter(|f| *f != finalizer).cloned().collect();
    let meta = meta_mut(&mut v);
    if rest.is_empty() {
        meta.remove("finalizers");
    } else {
        meta.insert("finalizers".into(), json!(rest));
    }
    txn.put(def, v);
}

fn drop_owner_refs(txn: &mut Txn<'_>, key: &Key, dep: &Obj, uids: &[&str]) -> Result<()> {
    let def = def_of(txn, key)?;
    let mut v = dep.value();
    let meta = meta_mut(&mut v);
    if let Some(Value::Array(refs)) = meta.get_mut("ownerReferences") {
        refs.retain(|r| !r.get("uid").and_then(Value::as_str).is_some_and(|u| uids.contains(&u)));
        if refs.is_empty() {
            meta.remove("ownerReferences");
        }
    }
    txn.put(&def, v);
    Ok(())
}

fn is_waiting_for_dependents(o: &Obj) -> bool {
    o.deleting && o.finalizers.iter().any(|f| f == FOREGROUND)
}

/// The garbage collector's decision for one dependent whose owners changed (kube's attemptToDeleteItem).
fn collect_dependent(txn: &mut Txn<'_>, key: &Key, dep: &Arc<Obj>, work: &mut VecDeque<Work>) -> Result<()> {
    if dep.deleting {
        return Ok(());
    }
    let (mut solid, mut gone, mut waiting) = (vec![], vec![], vec![]);
    for r in &dep.owners {
        match txn.by_uid(&r.uid) {
            None => gone.push(r.uid.as_str()),
            Some((_, o)) if is_waiting_for_dependents(&o) => waiting.push(r.uid.as_str()),
            Some(_) => solid.push(r.uid.as_str()),
        }
    }
    if !solid.is_empty() {
        if !gone.is_empty() || !waiting.is_empty() {
            let drop: Vec<&str> = gone.iter().chain(waiting.iter()).copied().collect();
            drop_owner_refs(txn, key, dep, &drop)?;
            for w in waiting {
                work.push_back(Work::CheckOwner(w.to_string()));
            }
        }
        return Ok(());
    }
    if gone.is_empty() && waiting.is_empty() {
        return Ok(());
    }
    let def = def_of(txn, key)?;
    let has_dependents = txn.iter_dependents(&dep.uid).next().is_some();
    let propagation =
        if !waiting.is_empty() && has_dependents { Propagation::Foreground } else { Propagation::Background };
    delete_key(txn, &def, key, &DeleteOptions { propagation: Some(propagation), ..Default::default() }, work)
}

fn settle(txn: &mut Txn<'_>, mut work: VecDeque<Work>) -> Result<()> {
    while let Some(w) = work.pop_front() {
        match w {
            Work::Removed { uid, owners, namespace } => {
                for (k, dep) in txn.dependents(&uid) {
                    collect_dependent(txn, &k, &dep, &mut work)?;
                }
                for o in owners {
                    work.push_back(Work::CheckOwner(o));
                }
                if let Some(ns) = namespace {
                    work.push_back(Work::Namespace(ns));
                }
            }
            Work::DeleteDependents(uid) => {
                for (k, dep) in txn.dependents(&uid) {
                    collect_dependent(txn, &k, &dep, &mut work)?;
                }
                work.push_back(Work::CheckOwner(uid));
            }
            Work::CheckOwner(uid) => {
                let Some((key, owner)) = txn.by_uid(&uid) else { continue };
                if !is_waiting_for_dependents(&owner) {
                    continue;
                }
                let blocked = txn
                    .iter_dependents(&uid)
                    .any(|(_, d)| d.owners.iter().any(|r| r.uid == uid && r.block_owner_deletion));
                if !blocked {
                    let def = def_of(txn, &key)?;
                    remove_finalizer(txn, &def, &key, FOREGROUND);
                    work.push_back(Work::MaybeRemove(key));
                }
            }
            Work::MaybeRemove(key) => {
                let Some(o) = txn.get(&key) else { continue };
                if o.deleting && o.finalizers.is_empty() && o.grace.is_none_or(|g| g == 0) {
                    let def = def_of(txn, &key)?;
                    if def.is_namespace() && !txn.keys_in_namespace(&o.name).is_empty() {
                        continue;
                    }
                    remove(txn, &def, &key, &mut work);
                }
            }
            Work::Namespace(ns) => {
                let def = namespace_def(txn);
                let key = Txn::key(&def, "", &ns);
                if txn.get(&key).is_some_and(|o| o.deleting) && txn.keys_in_namespace(&ns).is_empty() {
                    work.push_back(Work::MaybeRemove(key));
                }
            }
        }
    }
    Ok(())
}

/// Deletes dependents whose owners no longer exist (for example created after their owner went away).
pub fn collect_orphans(txn: &mut Txn<'_>, candidates: Vec<(Key, Arc<Obj>)>) -> Result<()> {
    let mut work = VecDeque::new();
    for (k, o) in candidates {
        collect_dependent(txn, &k, &o, &mut work)?;
    }
    settle(txn, work)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::AdmissionHook;
    use crate::persist::Memory;
    use crate::resources::Registry;
    use crate::store::{Store, StoreConfig};

    #[test]
    fn generated_names_cut_the_base_to_58_bytes_like_kubernetes() {
        for (base, kept) in
            [("job-", "job-"), (&"a".repeat(58)[..], &"a".repeat(58)[..]), (&"b".repeat(70)[..], &"b".repeat(58)[..])]
        {
            let name = generate_name(base);
            assert_eq!(name.len(), kept.len() + 5, "{name}");
            assert!(name.starts_with(kept), "{name}");
        }
    }

    /// A hook that changes nothing: registered for pods, it sends every patch down the general path.
    struct Noop;
    impl AdmissionHook for Noop {}

    /// A store of built-in resources holding `pod`, and the pods' definition.
    fn stored(pod: Value) -> (Arc<ResourceDef>, Store) {
        let registry = Arc::new(Registry::with_builtins());
        let def = registry.get("", "v1", "pods").expect("pods are built in");
        let store = Store::open(Box::new(Memory), registry, StoreConfig::default()).expect("a store");
        store.write(|txn| Ok(txn.put(&def, pod))).expect("the pod is stored");
        (def, store)
    }

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "default", "uid": "u1", "creationTimestamp": "2026-11-26T00:00:00Z",
                "labels": {"app": "a"}, "annotations": {"keep": "1", "drop": "2", "example.com/quoted": "\"é\"\\\n"},
                "finalizers": ["example.com/f"],
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j1", "controller": true}]
            },
            "spec": {"nodeName": "n1", "containers": [{"name": "m", "image": "x"}]},
            "status": {"phase": "Running", "message": "ünïcode \u{1F600}"}
        })
    }

    /// The stored object (or the error) after `patch`, in a store whose pods have admission hooks
    /// (`general`) or none; and whether the labels-or-annotations path took it.
    fn patched(general: bool, kind: PatchType, body: &Value) -> (std::result::Result<String, String>, bool) {
        patched_with(general, false, kind, body)
    }

    /// [`patched`], with the body prepared before the store's lock where `prepared`.
    fn patched_with(
        general: bool,
        prepared: bool,
        kind: PatchType,
        body: &Value,
    ) -> (std::result::Result<String, String>, bool) {
        let (def, store) = stored(pod());
        let mut admission = Admission::default();
        if general {
            admission.register("", "Pod", Arc::new(Noop));
        }
        let ctx = Ctx::new(&admission);
        let bytes = serde_json::to_vec(body).expect("a JSON patch");
        let mut fast = false;
        if !general {
            // Only whether the path applies (with a result or an error) is asked here.
            let cur = store.get(&def, "default", "p").expect("stored");
            fast = prepare_metadata(&def, "default", "p", &cur, kind, body).map_or(true, |o| o.is_some());
        }
        let body = if prepared {
            PatchBody::prepare(&store, &ctx, &def, "default", "p", kind, &bytes, Target::Main, None)
        } else {
            PatchBody::parse(kind, &bytes)
        };
        let out = body
            .and_then(|body| store.write(|txn| patch(txn, &ctx, &def, "default", "p", kind, body, Target::Main, None)))
            // The bytes and what is indexed of them (label selectors, field selectors, GC).
            .map(|(o, _)| {
                let indexed = (&o.labels, &o.fields, &o.owners, &o.finalizers, o.rv, o.deleting);
                format!("{} {indexed:?}", String::from_utf8_lossy(&o.raw))
            })
            .map_err(|e| e.to_string());
        (out, fast)
    }

    #[test]
    fn metadata_patches_of_pods_skip_the_built_in_pod_hooks_and_not_the_job_ones() {
        let registry = Registry::with_builtins();
        let admission = crate::builtin::with_builtins(Admission::default(), &[]);
        let ctx = Ctx::new(&admission);
        let applies = |plural: &str| {
            let def = registry.get(if plural == "jobs" { "batch" } else { "" }, "v1", plural).expect("built in");
            fast_path(&ctx, &def, PatchType::Strategic, Target::Main, None) == Some(FastPath::Metadata)
        };
        assert!(applies("pods"), "pod validation, priority and exclusive placement never read a metadata patch");
        assert!(!applies("jobs"), "Job defaulting and validation see every write");
    }

    #[test]
    fn status_patches_of_pods_take_the_status_path_and_not_those_of_kinds_whose_status_is_validated() {
        let registry = Registry::with_builtins();
        let admission = crate::builtin::with_builtins(Admission::default(), &[]);
        let ctx = Ctx::new(&admission);
        let path = |group: &str, plural: &str, kind: PatchType, target: Target| {
            let def = registry.get(group, "v1", plural).expect("built in");
            fast_path(&ctx, &def, kind, target, None)
        };
        let cases = [
            ("pods", "", "pods", PatchType::Strategic, Some(FastPath::Status)),
            ("pods, merge", "", "pods", PatchType::Merge, Some(FastPath::Status)),
            ("pods, JSON patch", "", "pods", PatchType::Json, None),
            ("pods, apply", "", "pods", PatchType::Apply { force: true }, None),
            ("Jobs: their status is validated", "batch", "jobs", PatchType::Strategic, None),
            ("nodes: cluster-scoped", "", "nodes", PatchType::Strategic, None),
        ];
        for (what, group, plural, kind, want) in cases {
            assert_eq!(path(group, plural, kind, Target::Status), want, "{what}");
        }
        let server = crate::ApiServer::in_memory();
        let jobsets = server.registry().get("jobset.x-k8s.io", "v1alpha2", "jobsets").expect("preinstalled");
        assert_eq!(
            fast_path(&ctx, &jobsets, PatchType::Merge, Target::Status, None),
            None,
            "custom resources: a schema"
        );
    }

    /// A hook that checks nothing but says it validates status writes: registered for pods, it
    /// sends every status patch down the general path.
    struct StatusChecked;
    impl AdmissionHook for StatusChecked {
        fn validates_status(&self) -> bool {
            true
        }
    }

    /// The stored object, as [`Obj`]'s `Debug` shows it (bytes, where its parts are in them and
    /// what is indexed), or the error, after a status `patch` on a pod whose status is
    /// `status`: down the general path (`general`), or prepared before the lock (`prepared`), or
    /// neither; and whether the status path takes it.
    fn status_patched(
        general: bool,
        prepared: bool,
        status: &Value,
        kind: PatchType,
        body: &Value,
    ) -> (std::result::Result<String, String>, bool) {
        let mut with_status = pod();
        with_status["status"] = status.clone();
        let (def, store) = stored(with_status);
        let mut admission = Admission::default();
        if general {
            admission.register("", "Pod", Arc::new(StatusChecked));
        }
        let ctx = Ctx::new(&admission);
        let bytes = serde_json::to_vec(body).expect("a JSON patch");
        let cur = store.get(&def, "default", "p").expect("stored");
        let fast = !general && prepare_status(&def, "default", "p", &cur, kind, body).is_some();
        let body = if prepared {
            PatchBody::prepare(&store, &ctx, &def, "default", "p", kind, &bytes, Target::Status, None)
        } else {
            PatchBody::parse(kind, &bytes)
        };
        let out = body
            .and_then(|body| {
                store.write(|txn| patch(txn, &ctx, &def, "default", "p", kind, body, Target::Status, None))
            })
            .map(|(o, _)| format!("{o:?}"))
            .map_err(|e| e.to_string());
        (out, fast)
    }

    #[test]
    fn a_status_patch_stores_the_bytes_the_general_path_stores() {
        let running = json!({"phase": "Running", "message": "ünïcode \u{1F600}",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-26T00:00:00Z"},
                           {"type": "PodScheduled", "status": "True", "lastProbeTime": null}],
            "containerStatuses": [{"name": "m", "ready": true, "restartCount": 0, "state": {"running": {}}}],
            "podIP": "10.0.0.1"});
        let smp = PatchType::Strategic;
        let cases = [
            (
                "a node agent's whole status: conditions merged by type, nulls removing",
                smp,
                json!({"status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "m", "lastTransitionTime": "2026-11-27T00:00:00Z"},
                    {"type": "PodScheduled", "status": "True", "reason": null, "message": null}],
                    "containerStatuses": [{"name": "m", "ready": false, "restartCount": 1, "state": {"waiting": {"reason": "x"}}}],
                    "podIP": "10.0.0.1"}}),
                true,
            ),
            ("the same status again: nothing written", smp, json!({"status": running.clone()}), true),
            (
                "a merge patch of the message",
                PatchType::Merge,
                json!({"status": {"message": "done", "podIP": null}}),
                true,
            ),
            ("a merge patch that changes nothing", PatchType::Merge, json!({"status": {"phase": "Running"}}), true),
            (
                "a directive ordering the conditions",
                smp,
                json!({"status": {"$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}],
                                  "conditions": [{"type": "Ready", "status": "False"}]}}),
                true,
            ),
            ("a float", smp, json!({"status": {"ratio": 0.5}}), true),
            ("the phase turning terminal", smp, json!({"status": {"phase": "Succeeded"}}), false),
            ("a bad directive", smp, json!({"status": {"$patch": "bogus"}}), false),
            ("the status deleted by a directive", smp, json!({"status": {"$patch": "delete"}}), false),
            ("the status removed", PatchType::Merge, json!({"status": null}), false),
            ("not a map", PatchType::Merge, json!({"status": [1]}), false),
            (
                "a stale resourceVersion precondition",
                PatchType::Merge,
                json!({"metadata": {"resourceVersion": "1"}, "status": {"message": "x"}}),
                false,
            ),
            (
                "labels beside the status (ignored on the status subresource)",
                smp,
                json!({"metadata": {"labels": {"b": "c"}}, "status": {"message": "x"}}),
                false,
            ),
            ("another name", PatchType::Merge, json!({"metadata": {"name": "q"}, "status": {}}), false),
            ("a list that is not a list", smp, json!({"status": {"conditions": {"type": "Ready"}}}), true),
        ];
        for (what, kind, patch, fast) in cases {
            let (general, _) = status_patched(true, false, &running, kind, &patch);
            let (quick, taken) = status_patched(false, false, &running, kind, &patch);
            assert_eq!(taken, fast, "{what}: status path taken");
            assert_eq!(quick, general, "{what}");
            let (prepared, _) = status_patched(false, true, &running, kind, &patch);
            assert_eq!(prepared, general, "{what}, prepared before the lock");
        }
        // A float already stored: compared as values, not as bytes.
        let with_float = json!({"phase": "Running", "ratio": 1.0});
        for patch in [json!({"status": {"ratio": 1.0}}), json!({"status": {"ratio": 1}})] {
            let (general, _) = status_patched(true, false, &with_float, smp, &patch);
            let (quick, taken) = status_patched(false, true, &with_float, smp, &patch);
            assert!(taken, "{patch}");
            assert_eq!(quick, general, "{patch}");
        }
    }

    #[test]
    fn status_patches_prepared_on_an_object_that_changed_since_are_merged_again_and_both_land() {
        let (def, store) = stored(pod());
        let admission = Admission::default();
        let ctx = Ctx::new(&admission);
        let prepare = |v: Value| {
            let bytes = serde_json::to_vec(&v).unwrap();
            PatchBody::prepare(&store, &ctx, &def, "default", "p", PatchType::Strategic, &bytes, Target::Status, None)
                .unwrap()
        };
        let run = |body: PatchBody| {
            store.write(|txn| patch(txn, &ctx, &def, "default", "p", PatchType::Strategic, body, Target::Status, None))
        };
        // Both read the pod at resourceVersion 1.
        let first = prepare(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}));
        let second = prepare(json!({"status": {"conditions": [{"type": "Initialized", "status": "True"}]}}));
        run(first).unwrap();
        let (o, _) = run(second).unwrap();
        let v = o.value();
        let mut types: Vec<&str> =
            v["status"]["conditions"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap()).collect();
        types.sort();
        assert_eq!(types, ["Initialized", "Ready"], "the condition written in between is kept");
        assert_eq!(o.rv, 3);
        assert_eq!(v["metadata"]["resourceVersion"], "3");
    }

    #[test]
    fn concurrent_status_patches_to_one_pod_all_land() {
        const EACH: usize = 50;
        let (def, store) = stored(pod());
        let admission = Admission::default();
        std::thread::scope(|s| {
            for writer in ["a", "b"] {
                let (store, def, admission) = (&store, &def, &admission);
                s.spawn(move || {
                    let ctx = Ctx::new(admission);
                    for i in 1..=EACH {
                        let body = json!({"status": {"conditions": [{"type": writer, "status": i.to_string()}]}});
                        let bytes = serde_json::to_vec(&body).unwrap();
                        let kind = PatchType::Strategic;
                        let body =
                            PatchBody::prepare(store, &ctx, def, "default", "p", kind, &bytes, Target::Status, None)
                                .unwrap();
                        store
                            .write(|txn| patch(txn, &ctx, def, "default", "p", kind, body, Target::Status, None))
                            .unwrap();
                    }
                });
            }
        });
        let o = store.get(&def, "default", "p").unwrap();
        let v = o.value();
        let status_of = |t: &str| {
            v["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == t).map(|c| c["status"].clone())
        };
        assert_eq!(status_of("a"), Some(json!(EACH.to_string())));
        assert_eq!(status_of("b"), Some(json!(EACH.to_string())));
        assert_eq!(o.rv, 1 + 2 * EACH as u64, "every patch wrote");
        assert_eq!(format!("{o:?}"), format!("{:?}", Obj::new(&def, &v)), "stored as a whole write stores it");
    }

    #[test]
    fn a_stored_object_is_of_its_kind_when_its_bytes_start_with_its_api_version_and_kind() {
        let registry = Registry::with_builtins();
        let pods = registry.get("", "v1", "pods").expect("pods are built in");
        let jobs = registry.get("batch", "v1", "jobs").expect("jobs are built in");
        let cases = [
            (&pods, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}}), true),
            (&jobs, json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {}}), true),
            (&jobs, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}}), false),
            (&pods, json!({"kind": "Pod", "metadata": {}}), false),
            (&pods, json!({"Zeta": 1, "apiVersion": "v1", "kind": "Pod", "metadata": {}}), false),
            (&pods, json!({"apiVersion": "v1", "kind": "Pod"}), false),
        ];
        for (def, v, want) in cases {
            assert_eq!(typed_as(def, &serde_json::to_vec(&v).unwrap()), want, "{v}");
        }
    }

    #[test]
    fn floats_are_found_at_any_depth() {
        let cases = [
            (json!({"a": [1, {"b": 2.5}]}), true),
            (json!(1.0), true),
            (json!({"a": [1, {"b": "2.5"}], "c": -3}), false),
            (json!(null), false),
        ];
        for (v, want) in cases {
            assert_eq!(has_float(&v), want, "{v}");
        }
    }

    #[test]
    fn a_labels_or_annotations_patch_stores_the_bytes_the_general_path_stores() {
        let apply = PatchType::Apply { force: true };
        let cases = [
            (
                "apply one annotation",
                apply,
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {"attempt": "1"}}}),
                true,
            ),
            (
                "strategic: a label added, an annotation removed",
                PatchType::Strategic,
                json!({"metadata": {"labels": {"b": "c"}, "annotations": {"drop": null}}}),
                true,
            ),
            ("merge: every annotation removed", PatchType::Merge, json!({"metadata": {"annotations": null}}), true),
            (
                "merge: the same annotation again",
                PatchType::Merge,
                json!({"metadata": {"namespace": "default", "annotations": {"keep": "1"}}}),
                true,
            ),
            ("merge: a finalizer", PatchType::Merge, json!({"metadata": {"finalizers": null}}), false),
            (
                "apply: spec and annotation",
                apply,
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": {"a": "1"}}, "spec": {"activeDeadlineSeconds": 5}}),
                false,
            ),
            (
                "merge: a resourceVersion precondition",
                PatchType::Merge,
                json!({"metadata": {"resourceVersion": "1", "annotations": {"a": "1"}}}),
                false,
            ),
            (
                "merge: another kind",
                PatchType::Merge,
                json!({"kind": "Job", "metadata": {"annotations": {"a": "1"}}}),
                false,
            ),
            (
                "merge: an invalid annotation key",
                PatchType::Merge,
                json!({"metadata": {"annotations": {"bad key": "1"}}}),
                true,
            ),
            (
                "merge: an invalid label value",
                PatchType::Merge,
                json!({"metadata": {"labels": {"app": "not valid!"}}}),
                true,
            ),
            (
                "merge: removing a label there is not",
                PatchType::Merge,
                json!({"metadata": {"labels": {"nope": null}}}),
                true,
            ),
            ("strategic: an empty map of labels", PatchType::Strategic, json!({"metadata": {"labels": {}}}), true),
            ("merge: every label removed", PatchType::Merge, json!({"metadata": {"labels": null}}), true),
            (
                "merge: a name that is not a string",
                PatchType::Merge,
                json!({"metadata": {"name": 5, "labels": {"b": "c"}}}),
                false,
            ),
            (
                "strategic: a directive among the annotations",
                PatchType::Strategic,
                json!({"metadata": {"annotations": {"$patch": "replace", "x": "1"}}}),
                false,
            ),
        ];
        for (what, kind, patch, fast) in cases {
            let (general, _) = patched(true, kind, &patch);
            let (quick, taken) = patched(false, kind, &patch);
            assert_eq!(taken, fast, "{what}: labels-or-annotations path taken");
            assert_eq!(quick, general, "{what}");
            let (prepared, _) = patched_with(false, true, kind, &patch);
            assert_eq!(prepared, general, "{what}, prepared before the lock");
        }
    }

    #[test]
    fn a_patch_prepared_on_an_object_that_changed_since_is_merged_again() {
        let (def, store) = stored(pod());
        let admission = Admission::default();
        let ctx = Ctx::new(&admission);
        let run = |body: PatchBody| {
            store.write(|txn| patch(txn, &ctx, &def, "default", "p", PatchType::Merge, body, Target::Main, None))
        };
        let bytes = |v: Value| serde_json::to_vec(&v).unwrap();
        let first = bytes(json!({"metadata": {"annotations": {"a": "1"}}}));
        let stale =
            PatchBody::prepare(&store, &ctx, &def, "default", "p", PatchType::Merge, &first, Target::Main, None)
                .unwrap();
        run(PatchBody::parse(PatchType::Merge, &bytes(json!({"metadata": {"labels": {"b": "2"}}}))).unwrap()).unwrap();
        let (o, _) = run(stale).unwrap();
        let v = o.value();
        assert_eq!(v["metadata"]["annotations"]["a"], "1");
        assert_eq!(v["metadata"]["labels"]["b"], "2", "the change made in between is kept");
        assert_eq!(o.rv, 3);
    }
}
