//! Kubernetes strategic merge patch (`application/strategic-merge-patch+json`) for built-in kinds.
//!
//! This is a port of the *apply* half of `k8s.io/apimachinery/pkg/util/strategicpatch`
//! (`StrategicMergePatch`, i.e. `mergeMap` with `MergeParallelList` and `IgnoreUnmatchedNulls`)
//! working on [`serde_json::Value`]. Go reads the patch metadata (`patchStrategy` and
//! `patchMergeKey` struct tags) from the typed API structs; here the static `SCHEMA` table of
//! `(parent type, field, child type, list strategy)` rows stands in for them, so merge keys are
//! path-aware (`spec.ports` of a Service merges by `port`, a container's `ports` by
//! `containerPort`).
//!
//! Supported directives: `$patch: replace|delete` (maps and list items), `$retainKeys`,
//! `$setElementOrder/<field>` and `$deleteFromPrimitiveList/<field>`.
//!
//! Upstream hides a few corner cases by decoding the result into typed structs; this port works
//! on untyped JSON, so it differs deliberately there:
//! - a patch value taken as-is (a new key, a type change, a replaced map or list, a new list item)
//!   has its directives and `null` map values stripped;
//! - `{"$patch": "delete"}` on an existing map removes the key (upstream leaves `{}`);
//! - fields missing from the table never cause an error: maps merge and lists are replaced;
//! - a list the table does not mark as mergeable, but for which the patch carries
//!   `$setElementOrder/<field>`, is merged with the merge key inferred from that directive (the
//!   client's schema knew it was a merge list, and replacing would drop unchanged items).

use serde_json::{Map, Value};

type JsonMap = Map<String, Value>;

/// A strategic merge patch that cannot be applied; `Display` gives the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StrategicMergeError(String);

impl StrategicMergeError {
    fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }

    /// The error message (same as `Display`).
    pub fn message(&self) -> &str {
        &self.0
    }
}

type Result<T> = std::result::Result<T, StrategicMergeError>;

const DIRECTIVE_MARKER: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";

/// Applies the strategic merge `patch` to `original`, an object of the built-in `kind`
/// (e.g. `"Pod"`, `"Job"`; matched case-insensitively). Kinds without list merge metadata
/// (ConfigMap, Secret, Lease, Event, unknown kinds, ...) still get `metadata` handling; all
/// their other maps merge and lists are replaced.
pub fn apply(kind: &str, original: Value, patch: Value) -> std::result::Result<Value, StrategicMergeError> {
    let Value::Object(patch) = patch else {
        return Err(StrategicMergeError::new(format!(
            "strategic merge patch must be a JSON object, got {}",
            type_name(&patch)
        )));
    };
    let original = match original {
        Value::Object(map) => map,
        Value::Null => JsonMap::new(),
        other => {
            return Err(StrategicMergeError::new(format!(
                "object to patch must be a JSON object, got {}",
                type_name(&other)
            )));
        }
    };
    match merge_map(original, patch, root_type(kind), &Path::Root)? {
        MapOutcome::Keep(map) => Ok(Value::Object(map)),
        MapOutcome::Delete => Ok(Value::Object(JsonMap::new())),
    }
}

// ---------------------------------------------------------------------------------------------
// Schema: the patch metadata of the built-in types.
// ---------------------------------------------------------------------------------------------

/// The Go types that carry patch metadata (or lead to types that do).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    /// Anything without patch metadata: maps merge, lists are replaced.
    Unknown,
    // Top-level objects; their `metadata` is an ObjectMeta.
    Object,
    Pod,
    PodTemplate,
    Service,
    Node,
    Namespace,
    PersistentVolumeClaim,
    ServiceAccount,
    Job,
    CronJob,
    /// Deployment, StatefulSet, DaemonSet, ReplicaSet, ReplicationController.
    Workload,
    // Nested types.
    ObjectMeta,
    PodTemplateSpec,
    PodSpec,
    Container,
    PodStatus,
    ServiceSpec,
    NodeSpec,
    NodeStatus,
    JobSpec,
    PodFailurePolicy,
    JobTemplateSpec,
    CronJobSpec,
    WorkloadSpec,
    /// A status whose only merge list is `conditions`, merged by `type`.
    ConditionsStatus,
}

impl Ty {
    fn is_root(self) -> bool {
        matches!(
            self,
            Ty::Object
                | Ty::Pod
                | Ty::PodTemplate
                | Ty::Service
                | Ty::Node
                | Ty::Namespace
                | Ty::PersistentVolumeClaim
                | Ty::ServiceAccount
                | Ty::Job
                | Ty::CronJob
                | Ty::Workload
        )
    }
}

/// How a list field is patched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ListStrategy<'a> {
    /// No `patchStrategy` (atomic): the patch list replaces the original.
    Replace,
    /// `patchStrategy:"merge"` + `patchMergeKey`: items are matched by the key field.
    MergeByKey(&'a str),
    /// `patchStrategy:"merge"` on a list of scalars: ordered set union.
    MergePrimitive,
}

impl<'a> ListStrategy<'a> {
    fn merge_key(self) -> Option<&'a str> {
        match self {
            ListStrategy::MergeByKey(key) => Some(key),
            _ => None,
        }
    }
}

/// Patch metadata of a field: the type of its value (for lists: of its items) and its list
/// strategy (meaningless for map fields).
#[derive(Clone, Copy, Debug)]
struct FieldMeta<'a> {
    ty: Ty,
    strategy: ListStrategy<'a>,
}

const UNKNOWN_FIELD: FieldMeta<'static> = FieldMeta { ty: Ty::Unknown, strategy: ListStrategy::Replace };

use ListStrategy::{MergeByKey, MergePrimitive, Replace};

/// `(parent type, JSON field, value/item type, list strategy)`. The comment on each group gives
/// the paths (relative to the kind) the rows apply to. `metadata` of every top-level kind is an
/// ObjectMeta (see `lookup`). Rows with `Replace` for a list only document upstream atomic
/// lists: any field not listed is treated the same way.
const SCHEMA: &[(Ty, &str, Ty, ListStrategy<'static>)] = &[
    // ObjectMeta: metadata, spec.template.metadata (Job, workloads, PodTemplate: template.metadata),
    // spec.jobTemplate.metadata and spec.jobTemplate.spec.template.metadata (CronJob).
    (Ty::ObjectMeta, "finalizers", Ty::Unknown, MergePrimitive),
    (Ty::ObjectMeta, "ownerReferences", Ty::Unknown, MergeByKey("uid")),
    (Ty::ObjectMeta, "managedFields", Ty::Unknown, Replace),
    // Pod: spec (PodSpec), status.
    (Ty::Pod, "spec", Ty::PodSpec, Replace),
    (Ty::Pod, "status", Ty::PodStatus, Replace),
    // PodTemplate: template.
    (Ty::PodTemplate, "template", Ty::PodTemplateSpec, Replace),
    // PodTemplateSpec: spec.template (Job, workloads), template (PodTemplate).
    (Ty::PodTemplateSpec, "metadata", Ty::ObjectMeta, Replace),
    (Ty::PodTemplateSpec, "spec", Ty::PodSpec, Replace),
    // PodSpec: spec (Pod), spec.template.spec (Job, workloads), template.spec (PodTemplate),
    // spec.jobTemplate.spec.template.spec (CronJob).
    (Ty::PodSpec, "containers", Ty::Container, MergeByKey("name")),
    (Ty::PodSpec, "initContainers", Ty::Container, MergeByKey("name")),
    (Ty::PodSpec, "ephemeralContainers", Ty::Container, MergeByKey("name")),
    (Ty::PodSpec, "volumes", Ty::Unknown, MergeByKey("name")),
    (Ty::PodSpec, "imagePullSecrets", Ty::Unknown, MergeByKey("name")),
    (Ty::PodSpec, "hostAliases", Ty::Unknown, MergeByKey("ip")),
    (Ty::PodSpec, "topologySpreadConstraints", Ty::Unknown, MergeByKey("topologyKey")),
    (Ty::PodSpec, "resourceClaims", Ty::Unknown, MergeByKey("name")),
    (Ty::PodSpec, "schedulingGates", Ty::Unknown, MergeByKey("name")),
    (Ty::PodSpec, "tolerations", Ty::Unknown, Replace),
    (Ty::PodSpec, "readinessGates", Ty::Unknown, Replace),
    // Container: <PodSpec>.containers[*], .initContainers[*], .ephemeralContainers[*].
    (Ty::Container, "env", Ty::Unknown, MergeByKey("name")),
    (Ty::Container, "ports", Ty::Unknown, MergeByKey("containerPort")),
    (Ty::Container, "volumeMounts", Ty::Unknown, MergeByKey("mountPath")),
    (Ty::Container, "volumeDevices", Ty::Unknown, MergeByKey("devicePath")),
    // Upstream declares resizePolicy `+listType=atomic` without a patch strategy.
    (Ty::Container, "resizePolicy", Ty::Unknown, Replace),
    (Ty::Container, "envFrom", Ty::Unknown, Replace),
    // PodStatus: status (Pod).
    (Ty::PodStatus, "conditions", Ty::Unknown, MergeByKey("type")),
    (Ty::PodStatus, "podIPs", Ty::Unknown, MergeByKey("ip")),
    (Ty::PodStatus, "hostIPs", Ty::Unknown, MergeByKey("ip")),
    (Ty::PodStatus, "resourceClaimStatuses", Ty::Unknown, MergeByKey("name")),
    (Ty::PodStatus, "containerStatuses", Ty::Unknown, Replace),
    (Ty::PodStatus, "initContainerStatuses", Ty::Unknown, Replace),
    (Ty::PodStatus, "ephemeralContainerStatuses", Ty::Unknown, Replace),
    // Service: spec.ports, status.conditions.
    (Ty::Service, "spec", Ty::ServiceSpec, Replace),
    (Ty::Service, "status", Ty::ConditionsStatus, Replace),
    (Ty::ServiceSpec, "ports", Ty::Unknown, MergeByKey("port")),
    // Node: spec.podCIDRs, spec.taints, status.conditions, status.addresses.
    (Ty::Node, "spec", Ty::NodeSpec, Replace),
    (Ty::Node, "status", Ty::NodeStatus, Replace),
    (Ty::NodeSpec, "podCIDRs", Ty::Unknown, MergePrimitive),
    (Ty::NodeSpec, "taints", Ty::Unknown, Replace),
    (Ty::NodeStatus, "conditions", Ty::Unknown, MergeByKey("type")),
    (Ty::NodeStatus, "addresses", Ty::Unknown, MergeByKey("type")),
    // Namespace, PersistentVolumeClaim: status.conditions (Namespace spec.finalizers is atomic).
    (Ty::Namespace, "status", Ty::ConditionsStatus, Replace),
    (Ty::PersistentVolumeClaim, "status", Ty::ConditionsStatus, Replace),
    // ServiceAccount: secrets.
    (Ty::ServiceAccount, "secrets", Ty::Unknown, MergeByKey("name")),
    // Job: spec.template, spec.podFailurePolicy.rules (atomic), status.conditions.
    (Ty::Job, "spec", Ty::JobSpec, Replace),
    (Ty::Job, "status", Ty::ConditionsStatus, Replace),
    (Ty::JobSpec, "template", Ty::PodTemplateSpec, Replace),
    (Ty::JobSpec, "podFailurePolicy", Ty::PodFailurePolicy, Replace),
    (Ty::PodFailurePolicy, "rules", Ty::Unknown, Replace),
    // CronJob: spec.jobTemplate.{metadata,spec}.
    (Ty::CronJob, "spec", Ty::CronJobSpec, Replace),
    (Ty::CronJobSpec, "jobTemplate", Ty::JobTemplateSpec, Replace),
    (Ty::JobTemplateSpec, "metadata", Ty::ObjectMeta, Replace),
    (Ty::JobTemplateSpec, "spec", Ty::JobSpec, Replace),
    // Deployment, StatefulSet, DaemonSet, ReplicaSet, ReplicationController: spec.template,
    // status.conditions.
    (Ty::Workload, "spec", Ty::WorkloadSpec, Replace),
    (Ty::Workload, "status", Ty::ConditionsStatus, Replace),
    (Ty::WorkloadSpec, "template", Ty::PodTemplateSpec, Replace),
    // status.conditions of Service, Namespace, PVC, Job and the workloads.
    (Ty::ConditionsStatus, "conditions", Ty::Unknown, MergeByKey("type")),
];

fn root_type(kind: &str) -> Ty {
    const KINDS: &[(&str, Ty)] = &[
        ("Pod", Ty::Pod),
        ("PodTemplate", Ty::PodTemplate),
        ("Service", Ty::Service),
        ("Node", Ty::Node),
        ("Namespace", Ty::Namespace),
        ("PersistentVolumeClaim", Ty::PersistentVolumeClaim),
        ("ServiceAccount", Ty::ServiceAccount),
        ("Job", Ty::Job),
        ("CronJob", Ty::CronJob),
        ("Deployment", Ty::Workload),
        ("StatefulSet", Ty::Workload),
        ("DaemonSet", Ty::Workload),
        ("ReplicaSet", Ty::Workload),
        ("ReplicationController", Ty::Workload),
    ];
    KINDS.iter().find(|(name, _)| name.eq_ignore_ascii_case(kind)).map_or(Ty::Object, |&(_, ty)| ty)
}

fn lookup(parent: Ty, field: &str) -> FieldMeta<'static> {
    if parent.is_root() && field == "metadata" {
        return FieldMeta { ty: Ty::ObjectMeta, strategy: Replace };
    }
    // Most fields are under types the table does not list: no need to scan it.
    if parent == Ty::Unknown {
        return UNKNOWN_FIELD;
    }
    SCHEMA
        .iter()
        .find(|&&(p, f, _, _)| p == parent && f == field)
        .map_or(UNKNOWN_FIELD, |&(_, _, ty, strategy)| FieldMeta { ty, strategy })
}

/// Infers the list strategy from a `$setElementOrder` list for a field the schema does not know
/// as a merge list: single-key maps that all use the same key, or scalars.
fn infer_strategy(order: &[Value]) -> Option<ListStrategy<'_>> {
    match order.first()? {
        Value::Object(first) if first.len() == 1 => {
            let key = first.keys().next()?.as_str();
            order
                .iter()
                .all(|v| v.as_object().is_some_and(|m| m.len() == 1 && m.contains_key(key)))
                .then_some(MergeByKey(key))
        }
        _ => order
            .iter()
            .all(|v| matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_)))
            .then_some(MergePrimitive),
    }
}

// ---------------------------------------------------------------------------------------------
// Maps.
// ---------------------------------------------------------------------------------------------

enum MapOutcome {
    Keep(JsonMap),
    Delete,
}

/// upstream `mergeMap`.
fn merge_map(mut original: JsonMap, mut patch: JsonMap, ty: Ty, path: &Path<'_>) -> Result<MapOutcome> {
    if let Some(directive) = take_key(&mut patch, DIRECTIVE_MARKER) {
        return match directive.as_str() {
            Some("replace") => Ok(MapOutcome::Keep(sanitize_map(patch, ty, path)?)),
            Some("delete") => Ok(MapOutcome::Delete),
            _ => Err(bad_patch_type(path, &directive, &patch)),
        };
    }

    apply_retain_keys(&mut original, &mut patch, path)?;
    apply_set_element_order(&mut original, &mut patch, ty, path)?;

    let mut deletions = Vec::new();
    for (key, value) in patch {
        if key.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
            deletions.push((key, value));
        } else {
            merge_field(&mut original, key, value, ty, path)?;
        }
    }
    for (key, value) in deletions {
        delete_from_primitive_list(&mut original, &key, value, path)?;
    }
    Ok(MapOutcome::Keep(original))
}

/// Merges one patch field into `original`.
fn merge_field(original: &mut JsonMap, key: String, patch_value: Value, ty: Ty, path: &Path<'_>) -> Result<()> {
    let field = lookup(ty, &key);
    let path = Path::Field(path, &key);
    if patch_value.is_null() {
        remove_key(original, &key);
        return Ok(());
    }
    let merged = match original.get_mut(&key) {
        None => sanitize(patch_value, field.ty, &path)?,
        Some(slot) => match (std::mem::take(slot), patch_value) {
            (Value::Object(o), Value::Object(p)) => match merge_map(o, p, field.ty, &path)? {
                MapOutcome::Keep(map) => Some(Value::Object(map)),
                MapOutcome::Delete => None,
            },
            (Value::Array(o), Value::Array(p)) => Some(Value::Array(merge_list(o, p, field, &path)?)),
            // Scalars, or a change of type: take the patch value.
            (_, p) => sanitize(p, field.ty, &path)?,
        },
    };
    match merged {
        Some(value) => {
            original.insert(key, value);
        }
        None => remove_key(original, &key),
    }
    Ok(())
}

/// upstream `applyRetainKeysDirective`: drops the original keys not listed; every non-null patch
/// key must be listed.
fn apply_retain_keys(original: &mut JsonMap, patch: &mut JsonMap, path: &Path<'_>) -> Result<()> {
    let Some(retain) = take_key(patch, RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(at(path, "invalid patch format of retainKeys: expected a list of field names"));
    };
    let listed = |key: &str| retain.iter().any(|v| v.as_str() == Some(key));
    for (key, value) in patch.iter() {
        if value.is_null() || key.starts_with(DELETE_FROM_PRIMITIVE_LIST) || key.starts_with(SET_ELEMENT_ORDER) {
            continue;
        }
        if !listed(key) {
            return Err(at(
                path,
                format!("invalid patch format of retainKeys: field {key:?} is in the patch but not in $retainKeys"),
            ));
        }
    }
    original.retain(|key, _| listed(key));
    Ok(())
}

/// upstream `mergePatchIntoOriginal`: merges every list that has a `$setElementOrder/<field>`
/// directive and orders the result by it.
fn apply_set_element_order(original: &mut JsonMap, patch: &mut JsonMap, ty: Ty, path: &Path<'_>) -> Result<()> {
    let directives: Vec<String> = patch.keys().filter(|k| k.starts_with(SET_ELEMENT_ORDER)).cloned().collect();
    for directive in directives {
        let order = take_key(patch, &directive).unwrap_or_default();
        let field_name = extract_key(&directive, SET_ELEMENT_ORDER, path)?;
        let fpath = Path::Field(path, field_name);
        let Value::Array(order) = order else {
            return Err(at(
                &fpath,
                format!("invalid patch format of setElementOrder list: expected a list, got {}", type_name(&order)),
            ));
        };
        let mut field = lookup(ty, field_name);
        if field.strategy == Replace {
            match infer_strategy(&order) {
                Some(strategy) => field.strategy = strategy,
                // Not recognisably a merge list: ignore the ordering, the list is replaced.
                None => continue,
            }
        }
        let key = field.strategy.merge_key();

        let original_list = match original.get(field_name) {
            None | Some(Value::Null) => None,
            Some(Value::Array(list)) => Some(list.clone()),
            Some(other) => return Err(bad_arg_type(&fpath, "list", other)),
        };
        let patch_list = match patch.get(field_name) {
            None => None,
            // Deleting the list: nothing to order; the null is handled by the main merge.
            Some(Value::Null) => continue,
            Some(Value::Array(list)) => Some(list.clone()),
            Some(other) => return Err(bad_arg_type(&fpath, "list", other)),
        };
        validate_patch_with_set_order_list(patch_list.as_deref().unwrap_or_default(), &order, key, &fpath)?;

        let merged = match (original_list.clone(), patch_list) {
            (Some(o), None) => o,
            (None, Some(p)) => sanitize_list(p, field.ty, &fpath)?,
            (Some(o), Some(p)) => merge_list(o, p, field, &fpath)?,
            (None, None) => continue,
        };
        let server_order = original_list.unwrap_or_default();
        let ordered = if merged.is_empty() {
            merged
        } else {
            let (listed, server_only) = partition_by_presence(merged, &order, key, &fpath)?;
            normalize_element_order(listed, server_only, &order, &server_order, key, &fpath)?
        };
        original.insert(field_name.to_string(), Value::Array(ordered));
        remove_key(patch, field_name);
    }
    Ok(())
}

/// `$deleteFromPrimitiveList/<field>: [values]`: removes the values from a list of scalars.
fn delete_from_primitive_list(original: &mut JsonMap, directive: &str, value: Value, path: &Path<'_>) -> Result<()> {
    let field_name = extract_key(directive, DELETE_FROM_PRIMITIVE_LIST, path)?;
    if value.is_null() {
        remove_key(original, field_name);
        return Ok(());
    }
    // Upstream ignores the directive when the field is absent or not a list.
    if let (Some(Value::Array(current)), Value::Array(to_delete)) = (original.get_mut(field_name), &value) {
        current.retain(|v| !to_delete.iter().any(|d| scalar_eq(d, v)));
    }
    Ok(())
}

/// upstream `validatePatchWithSetOrderList`: the (non-delete) patch items must appear in the
/// `$setElementOrder` list, in the same relative order.
fn validate_patch_with_set_order_list(
    patch_list: &[Value],
    order: &[Value],
    key: Option<&str>,
    path: &Path<'_>,
) -> Result<()> {
    if order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let mut items = Vec::with_capacity(patch_list.len());
    for item in patch_list {
        if key.is_some() {
            if !item.is_object() {
                return Err(bad_arg_type(path, "map", item));
            }
            if is_delete_directive(item) {
                continue;
            }
        }
        items.push(item);
    }
    let (mut pi, mut si) = (0, 0);
    while pi < items.len() && si < order.len() {
        if has_directive(items[pi]) {
            pi += 1;
            continue;
        }
        if merge_key_value_equal(items[pi], &order[si], key, path)? {
            pi += 1;
        }
        si += 1;
    }
    if pi < items.len() && si >= order.len() {
        return Err(at(
            path,
            format!(
                "the order in patch list {} doesn't match $setElementOrder list {}",
                Value::Array(patch_list.to_vec()),
                Value::Array(order.to_vec())
            ),
        ));
    }
    Ok(())
}

fn merge_key_value_equal(left: &Value, right: &Value, key: Option<&str>, path: &Path<'_>) -> Result<bool> {
    let Some(key) = key else {
        return Ok(scalar_eq(left, right));
    };
    let (Value::Object(l), Value::Object(r)) = (left, right) else {
        let culprit = if left.is_object() { right } else { left };
        return Err(bad_arg_type(path, "map", culprit));
    };
    let lv = l.get(key).ok_or_else(|| no_merge_key(path, l, key))?;
    let rv = r.get(key).ok_or_else(|| no_merge_key(path, r, key))?;
    Ok(scalar_eq(lv, rv))
}

// ---------------------------------------------------------------------------------------------
// Lists.
// ---------------------------------------------------------------------------------------------

/// upstream `mergeSliceHandler`.
fn merge_list(original: Vec<Value>, patch: Vec<Value>, field: FieldMeta<'_>, path: &Path<'_>) -> Result<Vec<Value>> {
    match field.strategy {
        Replace => sanitize_list(patch, field.ty, path),
        MergeByKey(key) => merge_slice(original, patch, Some(key), field.ty, path),
        MergePrimitive => merge_slice(original, patch, None, field.ty, path),
    }
}

/// upstream `mergeSlice` (with `isDeleteList == false`).
fn merge_slice(
    original: Vec<Value>,
    patch: Vec<Value>,
    key: Option<&str>,
    elem_ty: Ty,
    path: &Path<'_>,
) -> Result<Vec<Value>> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let kind = slice_element_kind(&original, &patch, path)?;
    if kind != Some(ElemKind::Map) {
        // Scalars: union without duplicates.
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for v in original.iter().chain(patch.iter()) {
            if !merged.iter().any(|m| scalar_eq(m, v)) {
                merged.push(v.clone());
            }
        }
        let (in_patch, server_only) = partition_by_presence(merged, &patch, key, path)?;
        return normalize_element_order(in_patch, server_only, &patch, &original, key, path);
    }
    let Some(key) = key else {
        return Err(at(path, "cannot merge lists without merge key for type map"));
    };
    let (original, patch) = merge_special_elements(original, patch, key, elem_ty, path)?;
    let server_order = keys_of(&original, key);
    let (merged, patch_order) = merge_without_special_elements(original, patch, key, elem_ty, path)?;
    let (in_patch, server_only) = partition_by_presence(merged, &patch_order, Some(key), path)?;
    normalize_element_order(in_patch, server_only, &patch_order, &server_order, Some(key), path)
}

/// The items of a merge list as ordering reads them: a map holding only the merge key's value
/// (an item without one, which ordering reports as it is, whole), so that the list itself need
/// not be copied.
fn keys_of(list: &[Value], key: &str) -> Vec<Value> {
    list.iter()
        .map(|item| match item.get(key) {
            Some(value) => key_only(key, value.clone()),
            None => item.clone(),
        })
        .collect()
}

fn key_only(key: &str, value: Value) -> Value {
    Value::Object([(key.to_string(), value)].into_iter().collect())
}

/// upstream `mergeSliceWithSpecialElements`: applies `{"<key>": v, "$patch": "delete"}` items
/// and `{"$patch": "replace"}`; returns the new original and the patch without those items.
fn merge_special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
    elem_ty: Ty,
    path: &Path<'_>,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut rest = Vec::with_capacity(patch.len());
    let mut replace = false;
    for item in patch {
        let Value::Object(map) = item else {
            return Err(bad_arg_type(path, "map", &item));
        };
        let Some(directive) = map.get(DIRECTIVE_MARKER) else {
            rest.push(Value::Object(map));
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let value = map.get(key).ok_or_else(|| no_merge_key(path, &map, key))?;
                original.retain(|o| !o.get(key).is_some_and(|v| scalar_eq(v, value)));
            }
            // Keep going: other directive items are still pruned.
            Some("replace") => replace = true,
            Some("merge") => {
                return Err(at(path, "merging lists cannot yet be specified in the patch"));
            }
            _ => return Err(bad_patch_type(path, directive, &map)),
        }
    }
    if replace {
        return Ok((sanitize_list(rest, elem_ty, path)?, Vec::new()));
    }
    Ok((original, rest))
}

/// upstream `mergeSliceWithoutSpecialElements`: merges items with the same key value, appends
/// the others. Returns the merged list, and the patch's items as ordering reads them
/// ([`keys_of`]).
fn merge_without_special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
    elem_ty: Ty,
    path: &Path<'_>,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut order = Vec::with_capacity(patch.len());
    for item in patch {
        let Value::Object(map) = item else {
            return Err(bad_arg_type(path, "map", &item));
        };
        let value = map.get(key).ok_or_else(|| no_merge_key(path, &map, key))?.clone();
        let item_path = Path::Item(path, key, &value);
        match find_by_key(&original, key, &value, path)? {
            Some(index) => {
                let Value::Object(current) = std::mem::take(&mut original[index]) else {
                    unreachable!("find_by_key only matches maps");
                };
                original[index] = match merge_map(current, map, elem_ty, &item_path)? {
                    MapOutcome::Keep(merged) => Value::Object(merged),
                    // Unreachable: directive items were removed by merge_special_elements.
                    MapOutcome::Delete => Value::Object(JsonMap::new()),
                };
            }
            None => original.push(Value::Object(sanitize_map(map, elem_ty, &item_path)?)),
        }
        order.push(key_only(key, value));
    }
    Ok((original, order))
}

/// upstream `findMapInSliceBasedOnKeyValue`.
fn find_by_key(list: &[Value], key: &str, value: &Value, path: &Path<'_>) -> Result<Option<usize>> {
    for (index, item) in list.iter().enumerate() {
        let Value::Object(map) = item else {
            return Err(at(path, format!("value for key {index} is not a map")));
        };
        if map.get(key).is_some_and(|v| scalar_eq(v, value)) {
            return Ok(Some(index));
        }
    }
    Ok(None)
}

/// upstream `partitionMapsByPresentInList` / `partitionPrimitivesByPresentInList`: splits
/// `merged` into the items present in `by` and the others.
fn partition_by_presence(
    merged: Vec<Value>,
    by: &[Value],
    key: Option<&str>,
    path: &Path<'_>,
) -> Result<(Vec<Value>, Vec<Value>)> {
    let mut present = Vec::with_capacity(merged.len());
    let mut absent = Vec::with_capacity(merged.len());
    for item in merged {
        let found = match key {
            None => by.iter().any(|b| scalar_eq(b, &item)),
            Some(key) => {
                let Value::Object(map) = &item else {
                    return Err(bad_arg_type(path, "map", &item));
                };
                let value = map.get(key).ok_or_else(|| no_merge_key(path, map, key))?;
                find_by_key(by, key, value, path)?.is_some()
            }
        };
        if found {
            present.push(item);
        } else {
            absent.push(item);
        }
    }
    Ok((present, absent))
}

/// upstream `normalizeElementOrder`: sorts `patch_items` by `patch_order` and `server_only` by
/// `server_order`, then interleaves them with `mergeSortedSlice`.
fn normalize_element_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
    path: &Path<'_>,
) -> Result<Vec<Value>> {
    let patch_items = normalize_slice_order(patch_items, patch_order, key, path)?;
    let server_only = normalize_slice_order(server_only, server_order, key, path)?;
    Ok(merge_sorted_slice(server_only, patch_items, server_order, key))
}

/// upstream `normalizeSliceOrder`: a `sort.SliceStable` by position in `order` whose comparator
/// treats items missing from `order` as "less" than anything (so the Go sort algorithm itself is
/// reproduced); `$patch: delete` items go last.
fn normalize_slice_order(
    to_sort: Vec<Value>,
    order: &[Value],
    key: Option<&str>,
    path: &Path<'_>,
) -> Result<Vec<Value>> {
    let (keep, to_delete): (Vec<Value>, Vec<Value>) = match key {
        Some(key) => {
            for item in to_sort.iter().chain(order) {
                let Value::Object(map) = item else {
                    return Err(bad_arg_type(path, "map", item));
                };
                if !map.contains_key(key) {
                    return Err(no_merge_key(path, map, key));
                }
            }
            to_sort.into_iter().partition(|item| !is_delete_directive(item))
        }
        None => (to_sort, Vec::new()),
    };
    let mut indexed: Vec<(Option<usize>, Value)> =
        keep.into_iter().map(|item| (index_in(order, &item, key), item)).collect();
    go_sort_slice_stable(&mut indexed, |(a, _), (b, _)| match (a, b) {
        (Some(a), Some(b)) => a < b,
        _ => true,
    });
    let mut sorted: Vec<Value> = indexed.into_iter().map(|(_, item)| item).collect();
    sorted.extend(to_delete);
    Ok(sorted)
}

/// upstream `mergeSortedSlice`: merges `left` (server-only items) into `right` (patch items);
/// a left item goes first only when both are found in `server_order` and it comes earlier there.
fn merge_sorted_slice(left: Vec<Value>, right: Vec<Value>, server_order: &[Value], key: Option<&str>) -> Vec<Value> {
    let left: Vec<(Option<usize>, Value)> = left.into_iter().map(|v| (index_in(server_order, &v, key), v)).collect();
    let right: Vec<(Option<usize>, Value)> = right.into_iter().map(|v| (index_in(server_order, &v, key), v)).collect();
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (Some((Some(l), _)), Some((Some(r), _))) => l < r,
            (Some(_), Some(_)) => false,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next.map(|(_, v)| v));
    }
    out
}

/// upstream `index`: position of `item` in `order`, comparing merge key values for maps (a
/// missing key compares like `null`) and whole values for scalars.
fn index_in(order: &[Value], item: &Value, key: Option<&str>) -> Option<usize> {
    match key {
        Some(key) => {
            let wanted = key_value(item, key);
            order.iter().position(|o| scalar_eq(key_value(o, key), wanted))
        }
        None => order.iter().position(|o| scalar_eq(o, item)),
    }
}

fn key_value<'v>(item: &'v Value, key: &str) -> &'v Value {
    static NULL: Value = Value::Null;
    item.as_object().and_then(|m| m.get(key)).unwrap_or(&NULL)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ElemKind {
    Null,
    Bool,
    Number,
    String,
    Map,
}

/// upstream `sliceElementType`: all items must have the same JSON type, and not be lists.
fn slice_element_kind(original: &[Value], patch: &[Value], path: &Path<'_>) -> Result<Option<ElemKind>> {
    let mut kind = None;
    for item in original.iter().chain(patch) {
        let this = match item {
            Value::Null => ElemKind::Null,
            Value::Bool(_) => ElemKind::Bool,
            Value::Number(_) => ElemKind::Number,
            Value::String(_) => ElemKind::String,
            Value::Object(_) => ElemKind::Map,
            Value::Array(_) => return Err(at(path, "lists of lists are not supported")),
        };
        match kind {
            None => kind = Some(this),
            Some(previous) if previous != this => {
                return Err(at(
                    path,
                    format!(
                        "list element types are not identical: {} and {}",
                        Value::Array(original.to_vec()),
                        Value::Array(patch.to_vec())
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(kind)
}

// ---------------------------------------------------------------------------------------------
// Patch values taken as they are.
// ---------------------------------------------------------------------------------------------

/// A patch value with no counterpart in the original: processes its directives against an empty
/// original and drops `null` map values. `None` means the field must not exist.
fn sanitize(value: Value, ty: Ty, path: &Path<'_>) -> Result<Option<Value>> {
    if !needs_sanitizing(&value) && !value.is_null() {
        return Ok(Some(value));
    }
    Ok(match value {
        Value::Null => None,
        Value::Object(map) => match merge_map(JsonMap::new(), map, ty, path)? {
            MapOutcome::Keep(map) => Some(Value::Object(map)),
            MapOutcome::Delete => None,
        },
        Value::Array(items) => Some(Value::Array(sanitize_list(items, ty, path)?)),
        scalar => Some(scalar),
    })
}

fn sanitize_map(map: JsonMap, ty: Ty, path: &Path<'_>) -> Result<JsonMap> {
    if !map_needs_sanitizing(&map) {
        return Ok(map);
    }
    match merge_map(JsonMap::new(), map, ty, path)? {
        MapOutcome::Keep(map) => Ok(map),
        MapOutcome::Delete => Ok(JsonMap::new()),
    }
}

/// Items of a list taken from the patch: directive items (`$patch`) are dropped, maps sanitized.
fn sanitize_list(items: Vec<Value>, elem_ty: Ty, path: &Path<'_>) -> Result<Vec<Value>> {
    if !items.iter().any(needs_sanitizing) {
        return Ok(items);
    }
    let mut out = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        match item {
            Value::Object(map) => {
                if let Some(directive) = map.get(DIRECTIVE_MARKER) {
                    match directive.as_str() {
                        Some("delete" | "replace" | "merge") => continue,
                        _ => return Err(bad_patch_type(path, directive, &map)),
                    }
                }
                out.push(Value::Object(sanitize_map(map, elem_ty, &Path::Index(path, index))?));
            }
            Value::Array(inner) => out.push(Value::Array(sanitize_list(inner, Ty::Unknown, path)?)),
            scalar => out.push(scalar),
        }
    }
    Ok(out)
}

/// Whether sanitizing `value` changes it: it holds a directive (a map key starting with `$`) or
/// a `null` map value somewhere. Without either, the merge into nothing copies every map and
/// list as it is: most of a node agent's status patch (its container statuses replace the
/// stored ones).
fn needs_sanitizing(value: &Value) -> bool {
    match value {
        Value::Object(map) => map_needs_sanitizing(map),
        Value::Array(items) => items.iter().any(needs_sanitizing),
        _ => false,
    }
}

fn map_needs_sanitizing(map: &JsonMap) -> bool {
    map.iter().any(|(k, v)| k.starts_with('$') || v.is_null() || needs_sanitizing(v))
}

// ---------------------------------------------------------------------------------------------
// Go's sort.SliceStable (insertion sort on blocks of 20, then in-place SymMerge), reproduced
// exactly because upstream sorts with a comparator that is not a strict weak order.
// ---------------------------------------------------------------------------------------------

fn go_sort_slice_stable<T>(data: &mut [T], less: impl Fn(&T, &T) -> bool) {
    let n = data.len();
    let mut block = 20;
    let (mut a, mut b) = (0, block);
    while b <= n {
        go_insertion_sort(data, a, b, &less);
        a = b;
        b += block;
    }
    go_insertion_sort(data, a, n, &less);
    while block < n {
        a = 0;
        b = 2 * block;
        while b <= n {
            go_sym_merge(data, a, a + block, b, &less);
            a = b;
            b += 2 * block;
        }
        let m = a + block;
        if m < n {
            go_sym_merge(data, a, m, n, &less);
        }
        block *= 2;
    }
}

fn go_insertion_sort<T>(data: &mut [T], a: usize, b: usize, less: &impl Fn(&T, &T) -> bool) {
    for i in a + 1..b {
        let mut j = i;
        while j > a && less(&data[j], &data[j - 1]) {
            data.swap(j, j - 1);
            j -= 1;
        }
    }
}

fn go_sym_merge<T>(data: &mut [T], a: usize, m: usize, b: usize, less: &impl Fn(&T, &T) -> bool) {
    if m - a == 1 {
        let (mut i, mut j) = (m, b);
        while i < j {
            let h = (i + j) / 2;
            if less(&data[h], &data[a]) {
                i = h + 1;
            } else {
                j = h;
            }
        }
        for k in a..i - 1 {
            data.swap(k, k + 1);
        }
        return;
    }
    if b - m == 1 {
        let (mut i, mut j) = (a, m);
        while i < j {
            let h = (i + j) / 2;
            if !less(&data[m], &data[h]) {
                i = h + 1;
            } else {
                j = h;
            }
        }
        let mut k = m;
        while k > i {
            data.swap(k, k - 1);
            k -= 1;
        }
        return;
    }
    let mid = (a + b) / 2;
    let n = mid + m;
    let (mut start, mut r) = if m > mid { (n - b, mid) } else { (a, m) };
    let p = n - 1;
    while start < r {
        let c = (start + r) / 2;
        if !less(&data[p - c], &data[c]) {
            start = c + 1;
        } else {
            r = c;
        }
    }
    let end = n - start;
    if start < m && m < end {
        go_rotate(data, start, m, end);
    }
    if a < start && start < mid {
        go_sym_merge(data, a, start, mid, less);
    }
    if mid < end && end < b {
        go_sym_merge(data, mid, end, b, less);
    }
}

fn go_rotate<T>(data: &mut [T], a: usize, m: usize, b: usize) {
    let mut i = m - a;
    let mut j = b - m;
    while i != j {
        if i > j {
            go_swap_range(data, m - i, m, j);
            i -= j;
        } else {
            go_swap_range(data, m - i, m + j - i, i);
            j -= i;
        }
    }
    go_swap_range(data, m - i, m, i);
}

fn go_swap_range<T>(data: &mut [T], a: usize, b: usize, n: usize) {
    for i in 0..n {
        data.swap(a + i, b + i);
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------------------------

/// Equality as Go's `==` on decoded JSON: all numbers are float64.
fn scalar_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y || matches!((x.as_f64(), y.as_f64()), (Some(p), Some(q)) if p == q)
        }
        _ => a == b,
    }
}

fn has_directive(item: &Value) -> bool {
    item.as_object().is_some_and(|m| m.contains_key(DIRECTIVE_MARKER))
}

fn is_delete_directive(item: &Value) -> bool {
    item.get(DIRECTIVE_MARKER).and_then(Value::as_str) == Some("delete")
}

/// upstream `extractKey`: `"<prefix>/<field>"` → `field`.
fn extract_key<'k>(directive: &'k str, prefix: &str, path: &Path<'_>) -> Result<&'k str> {
    match directive.split_once('/') {
        Some((p, field)) if p == prefix => Ok(field),
        _ => {
            let what = if prefix == SET_ELEMENT_ORDER { "setElementOrder list" } else { "primitive list" };
            Err(at(path, format!("invalid patch format of {what}: expected \"{prefix}/<field>\", got {directive:?}")))
        }
    }
}

/// Removes a key keeping the order of the others (with or without `preserve_order`).
fn remove_key(map: &mut JsonMap, key: &str) {
    if map.contains_key(key) {
        map.retain(|k, _| k != key);
    }
}

fn take_key(map: &mut JsonMap, key: &str) -> Option<Value> {
    let value = map.get_mut(key).map(std::mem::take)?;
    remove_key(map, key);
    Some(value)
}

/// Where a merge is in the object (`spec.containers[name=c].env`), for error messages: written
/// out only when an error is, since a merge runs for every status a node agent writes.
#[derive(Clone, Copy, Debug)]
enum Path<'a> {
    Root,
    /// A map's field.
    Field(&'a Path<'a>, &'a str),
    /// A merge list's item, by the value of its merge key.
    Item(&'a Path<'a>, &'a str, &'a Value),
    /// A list's item, by its index.
    Index(&'a Path<'a>, usize),
}

impl Path<'_> {
    /// Whether the path is written as nothing (the root, or fields with empty names under it).
    fn is_empty(&self) -> bool {
        match self {
            Path::Root => true,
            Path::Field(parent, key) => key.is_empty() && parent.is_empty(),
            Path::Item(..) | Path::Index(..) => false,
        }
    }
}

impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Field(parent, key) if parent.is_empty() => f.write_str(key),
            Path::Field(parent, key) => write!(f, "{parent}.{key}"),
            Path::Item(parent, key, value) => write!(f, "{parent}[{key}={}]", display_scalar(value)),
            Path::Index(parent, index) => write!(f, "{parent}[{index}]"),
        }
    }
}

fn at(path: &Path<'_>, message: impl std::fmt::Display) -> StrategicMergeError {
    if path.is_empty() {
        StrategicMergeError::new(message.to_string())
    } else {
        StrategicMergeError::new(format!("{path}: {message}"))
    }
}

fn bad_patch_type(path: &Path<'_>, directive: &Value, map: &JsonMap) -> StrategicMergeError {
    at(
        path,
        format!(
            "unknown patch type: {directive} in map: {} (expected \"replace\" or \"delete\")",
            Value::Object(map.clone())
        ),
    )
}

fn no_merge_key(path: &Path<'_>, map: &JsonMap, key: &str) -> StrategicMergeError {
    at(path, format!("map: {} does not contain declared merge key: {key}", Value::Object(map.clone())))
}

fn bad_arg_type(path: &Path<'_>, expected: &str, got: &Value) -> StrategicMergeError {
    at(path, format!("expected a {expected}, but received a {}: {got}", type_name(got)))
}

fn display_scalar(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Case {
        name: &'static str,
        kind: &'static str,
        original: Value,
        patch: Value,
        want: Value,
    }

    fn run(cases: Vec<Case>) {
        for case in cases {
            let got = apply(case.kind, case.original.clone(), case.patch.clone())
                .unwrap_or_else(|e| panic!("{}: unexpected error: {e}", case.name));
            assert_eq!(
                got,
                case.want,
                "{}:\n got: {}\nwant: {}",
                case.name,
                serde_json::to_string_pretty(&got).unwrap(),
                serde_json::to_string_pretty(&case.want).unwrap()
            );
        }
    }

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": spec})
    }

    #[test]
    fn containers() {
        run(vec![
            Case {
                name: "container merged by name keeps unpatched fields",
                kind: "Pod",
                original: pod(json!({"containers": [
                    {"name": "main", "image": "busybox", "command": ["sleep", "1"], "imagePullPolicy": "Always"},
                    {"name": "side", "image": "nginx"}
                ]})),
                patch: json!({"spec": {"containers": [{"name": "main", "image": "alpine"}]}}),
                want: pod(json!({"containers": [
                    {"name": "main", "image": "alpine", "command": ["sleep", "1"], "imagePullPolicy": "Always"},
                    {"name": "side", "image": "nginx"}
                ]})),
            },
            Case {
                // Without $setElementOrder upstream puts patch items that are new before the
                // server-only ones (mergeSortedSlice); kubectl apply always sends the order.
                name: "new container added (placed like upstream: before server-only items)",
                kind: "Pod",
                original: pod(json!({"containers": [{"name": "main", "image": "busybox"}]})),
                patch: json!({"spec": {"containers": [{"name": "side", "image": "nginx"}]}}),
                want: pod(json!({"containers": [
                    {"name": "side", "image": "nginx"},
                    {"name": "main", "image": "busybox"}
                ]})),
            },
            Case {
                name: "new container appended when $setElementOrder lists it last",
                kind: "Pod",
                original: pod(json!({"containers": [{"name": "main", "image": "busybox"}]})),
                patch: json!({"spec": {
                    "$setElementOrder/containers": [{"name": "main"}, {"name": "side"}],
                    "containers": [{"name": "side", "image": "nginx"}]
                }}),
                want: pod(json!({"containers": [
                    {"name": "main", "image": "busybox"},
                    {"name": "side", "image": "nginx"}
                ]})),
            },
            Case {
                name: "$patch: delete removes a container",
                kind: "Pod",
                original: pod(json!({"containers": [
                    {"name": "main", "image": "busybox"},
                    {"name": "side", "image": "nginx"}
                ]})),
                patch: json!({"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}),
                want: pod(json!({"containers": [{"name": "main", "image": "busybox"}]})),
            },
            Case {
                name: "$setElementOrder reorders containers",
                kind: "Pod",
                original: pod(json!({"containers": [
                    {"name": "a", "image": "1"}, {"name": "b", "image": "2"}, {"name": "c", "image": "3"}
                ]})),
                patch: json!({"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "b"}, {"name": "a"}]}}),
                want: pod(json!({"containers": [
                    {"name": "c", "image": "3"}, {"name": "b", "image": "2"}, {"name": "a", "image": "1"}
                ]})),
            },
            Case {
                // normalizeElementOrder: listed items follow the directive; an unlisted server
                // item goes before a listed one that comes after it in the live list.
                name: "$setElementOrder keeps unlisted server items in place (upstream interleaving)",
                kind: "Pod",
                original: pod(json!({"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]})),
                patch: json!({"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "a"}]}}),
                want: pod(json!({"containers": [{"name": "b"}, {"name": "c"}, {"name": "a"}]})),
            },
            Case {
                name: "$patch: replace item replaces the whole container list",
                kind: "Pod",
                original: pod(json!({"containers": [
                    {"name": "main", "image": "busybox"}, {"name": "side", "image": "nginx"}
                ]})),
                patch: json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "alpine"}]}}),
                want: pod(json!({"containers": [{"name": "only", "image": "alpine"}]})),
            },
            Case {
                name: "env merged by name inside a merged container, with order and delete",
                kind: "Pod",
                original: pod(json!({"containers": [{"name": "main", "env": [
                    {"name": "A", "value": "1"}, {"name": "B", "value": "2"}
                ]}]})),
                patch: json!({"spec": {"containers": [{"name": "main",
                    "$setElementOrder/env": [{"name": "C"}, {"name": "A"}],
                    "env": [{"name": "C", "value": "3"}, {"name": "A", "value": "10"}, {"name": "B", "$patch": "delete"}]
                }]}}),
                want: pod(json!({"containers": [{"name": "main", "env": [
                    {"name": "C", "value": "3"}, {"name": "A", "value": "10"}
                ]}]})),
            },
            Case {
                name: "volumeMounts by mountPath, volumeDevices by devicePath, init containers by name",
                kind: "Pod",
                original: pod(json!({"initContainers": [{"name": "init", "image": "x",
                    "volumeMounts": [{"mountPath": "/a", "name": "v1"}, {"mountPath": "/b", "name": "v2"}],
                    "volumeDevices": [{"devicePath": "/dev/x", "name": "d1"}]
                }]})),
                patch: json!({"spec": {"initContainers": [{"name": "init",
                    "volumeMounts": [{"mountPath": "/b", "readOnly": true}],
                    "volumeDevices": [{"devicePath": "/dev/x", "name": "d2"}]
                }]}}),
                want: pod(json!({"initContainers": [{"name": "init", "image": "x",
                    "volumeMounts": [{"mountPath": "/a", "name": "v1"}, {"mountPath": "/b", "name": "v2", "readOnly": true}],
                    "volumeDevices": [{"devicePath": "/dev/x", "name": "d2"}]
                }]})),
            },
            Case {
                name: "resizePolicy is atomic upstream: replaced",
                kind: "Pod",
                original: pod(json!({"containers": [{"name": "main", "resizePolicy": [
                    {"resourceName": "cpu", "restartPolicy": "NotRequired"},
                    {"resourceName": "memory", "restartPolicy": "RestartContainer"}
                ]}]})),
                patch: json!({"spec": {"containers": [{"name": "main", "resizePolicy": [
                    {"resourceName": "cpu", "restartPolicy": "RestartContainer"}
                ]}]}}),
                want: pod(json!({"containers": [{"name": "main", "resizePolicy": [
                    {"resourceName": "cpu", "restartPolicy": "RestartContainer"}
                ]}]})),
            },
        ]);
    }

    #[test]
    fn maps_and_directives() {
        run(vec![
            Case {
                name: "null deletes a key",
                kind: "ConfigMap",
                original: json!({"metadata": {"name": "c", "annotations": {"a": "1", "b": "2"}}, "data": {"x": "1", "y": "2"}}),
                patch: json!({"metadata": {"annotations": {"a": null, "missing": null}}, "data": {"y": null, "z": "3"}}),
                want: json!({"metadata": {"name": "c", "annotations": {"b": "2"}}, "data": {"x": "1", "z": "3"}}),
            },
            Case {
                name: "$patch: replace on a map replaces it with the rest of the patch map",
                kind: "Pod",
                original: json!({"metadata": {"name": "p", "labels": {"a": "1", "c": "3"}}}),
                patch: json!({"metadata": {"labels": {"$patch": "replace", "b": "2"}}}),
                want: json!({"metadata": {"name": "p", "labels": {"b": "2"}}}),
            },
            Case {
                name: "$patch: delete on a map removes it",
                kind: "Pod",
                original: pod(json!({"securityContext": {"runAsUser": 1}, "restartPolicy": "Never"})),
                patch: json!({"spec": {"securityContext": {"$patch": "delete"}}}),
                want: pod(json!({"restartPolicy": "Never"})),
            },
            Case {
                name: "$retainKeys drops unlisted keys of a volume (emptyDir -> configMap)",
                kind: "Pod",
                original: pod(json!({"volumes": [
                    {"name": "data", "emptyDir": {}},
                    {"name": "other", "hostPath": {"path": "/x"}}
                ]})),
                patch: json!({"spec": {"volumes": [
                    {"$retainKeys": ["configMap", "name"], "name": "data", "configMap": {"name": "cm"}}
                ]}}),
                want: pod(json!({"volumes": [
                    {"name": "data", "configMap": {"name": "cm"}},
                    {"name": "other", "hostPath": {"path": "/x"}}
                ]})),
            },
            Case {
                name: "$retainKeys on a deployment strategy",
                kind: "Deployment",
                original: json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}),
                patch: json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
                want: json!({"spec": {"strategy": {"type": "Recreate"}}}),
            },
            Case {
                name: "directives and nulls are stripped from new values",
                kind: "Pod",
                original: pod(json!({})),
                patch: json!({"spec": {
                    "containers": [{"name": "main", "$setElementOrder/env": [{"name": "A"}], "env": [{"name": "A", "value": "1"}, {"name": "X", "$patch": "delete"}], "args": null}],
                    "affinity": {"$patch": "replace", "nodeAffinity": {"x": null}},
                    "securityContext": {"$patch": "delete"}
                }}),
                want: pod(json!({
                    "containers": [{"name": "main", "env": [{"name": "A", "value": "1"}]}],
                    "affinity": {"nodeAffinity": {}}
                })),
            },
            Case {
                name: "a change of type takes the patch value",
                kind: "Pod",
                original: json!({"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": {"x": [1]}}),
                patch: json!({"spec": {"x": {"y": 1}}, "metadata": {"labels": "oops"}}),
                want: json!({"metadata": {"name": "p", "labels": "oops"}, "spec": {"x": {"y": 1}}}),
            },
        ]);
    }

    #[test]
    fn primitive_lists() {
        run(vec![
            Case {
                name: "finalizers union keeps order without duplicates",
                kind: "Pod",
                original: json!({"metadata": {"finalizers": ["a", "b"]}}),
                patch: json!({"metadata": {"finalizers": ["b", "c"]}}),
                want: json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            },
            Case {
                name: "new finalizer placed like upstream (before server-only items)",
                kind: "Pod",
                original: json!({"metadata": {"finalizers": ["a", "b"]}}),
                patch: json!({"metadata": {"finalizers": ["c"]}}),
                want: json!({"metadata": {"finalizers": ["c", "a", "b"]}}),
            },
            Case {
                name: "$deleteFromPrimitiveList/finalizers removes values",
                kind: "Job",
                original: json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
                patch: json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b", "zz"]}}),
                want: json!({"metadata": {"finalizers": ["a", "c"]}}),
            },
            Case {
                name: "finalizers with $setElementOrder, additions and deletions (kubectl apply)",
                kind: "Pod",
                original: json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
                patch: json!({"metadata": {
                    "$setElementOrder/finalizers": ["c", "d", "a"],
                    "$deleteFromPrimitiveList/finalizers": ["b"],
                    "finalizers": ["d"]
                }}),
                want: json!({"metadata": {"finalizers": ["c", "d", "a"]}}),
            },
            Case {
                name: "$deleteFromPrimitiveList on a missing list is ignored",
                kind: "Pod",
                original: json!({"metadata": {"name": "p"}}),
                patch: json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
                want: json!({"metadata": {"name": "p"}}),
            },
            Case {
                name: "Node spec.podCIDRs merges as a set, taints are replaced",
                kind: "Node",
                original: json!({"spec": {"podCIDRs": ["10.0.0.0/24"], "taints": [{"key": "a", "effect": "NoSchedule"}]}}),
                patch: json!({"spec": {"podCIDRs": ["10.0.0.0/24", "fd00::/64"], "taints": [{"key": "b", "effect": "NoExecute"}]}}),
                want: json!({"spec": {"podCIDRs": ["10.0.0.0/24", "fd00::/64"], "taints": [{"key": "b", "effect": "NoExecute"}]}}),
            },
        ]);
    }

    #[test]
    fn a_value_needs_sanitizing_only_with_a_directive_or_a_null_map_value() {
        let cases = [
            (json!({"a": [{"b": 1}, [2, null]], "c": {}}), false, "no directive, a null list item"),
            (json!({"a": {"b": null}}), true, "a null map value"),
            (json!([{"$patch": "delete", "name": "x"}]), true, "a directive item"),
            (json!({"a": [{"$setElementOrder/x": []}]}), true, "a directive deep down"),
            (json!("$patch"), false, "a string"),
            (json!(null), false, "null itself (sanitize drops it apart)"),
        ];
        for (v, want, what) in cases {
            assert_eq!(needs_sanitizing(&v), want, "{what}");
        }
        // Where nothing needs it, sanitizing gives the value back.
        let v = json!({"a": [{"b": 1}, [2, null]], "c": {}});
        assert_eq!(sanitize(v.clone(), Ty::Pod, &Path::Root).unwrap(), Some(v));
    }

    #[test]
    fn ordering_reads_only_the_merge_key_of_each_item() {
        let list = [json!({"type": "Ready", "status": "True"}), json!({"status": "False"}), json!({"type": 2})];
        assert_eq!(keys_of(&list, "type"), [json!({"type": "Ready"}), json!({"status": "False"}), json!({"type": 2})]);
    }

    #[test]
    fn errors_name_where_the_merge_failed() {
        let bogus = json!({"$patch": "bogus"});
        let unknown = "unknown patch type: \"bogus\" in map: {} (expected \"replace\" or \"delete\")";
        let cases = [
            (
                "a merge list's item, by its key",
                json!({"spec": {"containers": [{"name": "c", "env": [{"name": "A"}]}]}}),
                json!({"spec": {"containers": [{"name": "c", "env": [{"value": "x"}]}]}}),
                "spec.containers[name=c].env: map: {\"value\":\"x\"} does not contain declared merge key: name"
                    .to_string(),
            ),
            (
                "a replaced list's item, by its index",
                json!({}),
                json!({"spec": {"tolerations": [{"a": 1}, {"a": bogus.clone()}]}}),
                format!("spec.tolerations[1].a: {unknown}"),
            ),
            ("the root", json!({}), bogus.clone(), unknown.to_string()),
            ("a field with an empty name", json!({}), json!({"": bogus.clone()}), unknown.to_string()),
            ("under a field with an empty name", json!({}), json!({"": {"x": bogus.clone()}}), format!("x: {unknown}")),
            (
                "a number as a merge key's value",
                json!({"spec": {"ports": [{"port": 80}]}}),
                json!({"spec": {"ports": [{"port": 80, "x": bogus.clone()}]}}),
                format!("spec.ports[port=80].x: {unknown}"),
            ),
        ];
        for (what, original, patch, want) in cases {
            let kind = if what.contains("number") { "Service" } else { "Pod" };
            assert_eq!(apply(kind, original, patch).map_err(|e| e.to_string()), Err(want), "{what}");
        }
    }

    #[test]
    fn path_aware_merge_keys() {
        run(vec![
            Case {
                name: "Service spec.ports merge by port",
                kind: "Service",
                original: json!({"spec": {"ports": [
                    {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                    {"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"}
                ]}}),
                patch: json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
                want: json!({"spec": {"ports": [
                    {"name": "http", "port": 80, "targetPort": 9090, "protocol": "TCP"},
                    {"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"}
                ]}}),
            },
            Case {
                name: "container ports merge by containerPort",
                kind: "Pod",
                original: pod(json!({"containers": [{"name": "main", "ports": [
                    {"containerPort": 80, "name": "http"}, {"containerPort": 9090, "name": "metrics"}
                ]}]})),
                patch: json!({"spec": {"containers": [{"name": "main", "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}}),
                want: pod(json!({"containers": [{"name": "main", "ports": [
                    {"containerPort": 80, "name": "http", "protocol": "TCP"}, {"containerPort": 9090, "name": "metrics"}
                ]}]})),
            },
            Case {
                name: "merge key values compare numerically like Go float64",
                kind: "Service",
                original: json!({"spec": {"ports": [{"port": 80, "name": "http"}]}}),
                patch: json!({"spec": {"ports": [{"port": 80.0, "targetPort": 1}]}}),
                // The patch's value of the key wins, as for any other field.
                want: json!({"spec": {"ports": [{"port": 80.0, "name": "http", "targetPort": 1}]}}),
            },
            Case {
                name: "ownerReferences merge by uid",
                kind: "ConfigMap",
                original: json!({"metadata": {"ownerReferences": [
                    {"uid": "1", "kind": "Job", "name": "a"}, {"uid": "2", "kind": "Job", "name": "b"}
                ]}}),
                patch: json!({"metadata": {"ownerReferences": [{"uid": "2", "controller": true}]}}),
                want: json!({"metadata": {"ownerReferences": [
                    {"uid": "1", "kind": "Job", "name": "a"}, {"uid": "2", "kind": "Job", "name": "b", "controller": true}
                ]}}),
            },
            Case {
                name: "Node status conditions and addresses merge by type",
                kind: "Node",
                original: json!({"status": {
                    "conditions": [{"type": "Ready", "status": "False"}, {"type": "MemoryPressure", "status": "False"}],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "n1"}]
                }}),
                patch: json!({"status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]
                }}),
                want: json!({"status": {
                    "conditions": [{"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "False"}],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}, {"type": "Hostname", "address": "n1"}]
                }}),
            },
            Case {
                name: "Pod status conditions merge by type, containerStatuses replaced",
                kind: "Pod",
                original: json!({"status": {
                    "conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}],
                    "containerStatuses": [{"name": "a", "ready": false}, {"name": "b", "ready": false}]
                }}),
                patch: json!({"status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "containerStatuses": [{"name": "a", "ready": true}]
                }}),
                want: json!({"status": {
                    "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
                    "containerStatuses": [{"name": "a", "ready": true}]
                }}),
            },
            Case {
                name: "Job status conditions merge by type, podFailurePolicy rules replaced",
                kind: "Job",
                original: json!({
                    "spec": {"podFailurePolicy": {"rules": [{"action": "Ignore"}, {"action": "FailJob"}]}},
                    "status": {"conditions": [{"type": "Suspended", "status": "True"}]}
                }),
                patch: json!({
                    "spec": {"podFailurePolicy": {"rules": [{"action": "Count"}]}},
                    "status": {"conditions": [{"type": "Complete", "status": "True"}]}
                }),
                want: json!({
                    "spec": {"podFailurePolicy": {"rules": [{"action": "Count"}]}},
                    "status": {"conditions": [{"type": "Complete", "status": "True"}, {"type": "Suspended", "status": "True"}]}
                }),
            },
            Case {
                name: "Job template metadata finalizers and template spec tolerations",
                kind: "Job",
                original: json!({"spec": {"template": {
                    "metadata": {"finalizers": ["x"]},
                    "spec": {"tolerations": [{"key": "a"}], "imagePullSecrets": [{"name": "s1"}]}
                }}}),
                patch: json!({"spec": {"template": {
                    "metadata": {"finalizers": ["x", "y"]},
                    "spec": {"tolerations": [{"key": "b"}], "imagePullSecrets": [{"name": "s2"}]}
                }}}),
                want: json!({"spec": {"template": {
                    "metadata": {"finalizers": ["x", "y"]},
                    "spec": {"tolerations": [{"key": "b"}], "imagePullSecrets": [{"name": "s2"}, {"name": "s1"}]}
                }}}),
            },
            Case {
                name: "CronJob reaches the PodSpec through spec.jobTemplate",
                kind: "CronJob",
                original: json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "a", "args": ["x"]}]}}}}}}),
                patch: json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "b"}]}}}}}}),
                want: json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "b", "args": ["x"]}]}}}}}}),
            },
            Case {
                name: "unknown kind: metadata handled, lists replaced",
                kind: "Lease",
                original: json!({"metadata": {"finalizers": ["a"]}, "spec": {"holderIdentity": "x", "list": [1, 2]}}),
                patch: json!({"metadata": {"finalizers": ["b"]}, "spec": {"holderIdentity": "y", "list": [3]}}),
                want: json!({"metadata": {"finalizers": ["b", "a"]}, "spec": {"holderIdentity": "y", "list": [3]}}),
            },
        ]);
    }

    #[test]
    fn unknown_fields() {
        run(vec![
            Case {
                name: "unknown list field replaced, unknown map merged",
                kind: "Pod",
                original: pod(
                    json!({"futureList": [{"name": "a"}, {"name": "b"}], "futureMap": {"a": 1, "b": {"c": 2}}}),
                ),
                patch: json!({"spec": {"futureList": [{"name": "c"}], "futureMap": {"b": {"d": 3}}}}),
                want: pod(json!({"futureList": [{"name": "c"}], "futureMap": {"a": 1, "b": {"c": 2, "d": 3}}})),
            },
            Case {
                name: "unknown list with $setElementOrder merges by the inferred key",
                kind: "Pod",
                original: pod(json!({"futureList": [{"id": "a", "v": 1}, {"id": "b", "v": 2}]})),
                patch: json!({"spec": {
                    "$setElementOrder/futureList": [{"id": "b"}, {"id": "a"}],
                    "futureList": [{"id": "a", "v": 10}]
                }}),
                want: pod(json!({"futureList": [{"id": "b", "v": 2}, {"id": "a", "v": 10}]})),
            },
            Case {
                name: "unknown top-level kind",
                kind: "Widget",
                original: json!({"spec": {"items": [1, 2], "m": {"a": 1}}}),
                patch: json!({"spec": {"items": [3], "m": {"b": 2}}}),
                want: json!({"spec": {"items": [3], "m": {"a": 1, "b": 2}}}),
            },
        ]);
    }

    #[test]
    fn kubectl_client_side_apply_against_a_job() {
        let last_applied = r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"annotations":{},"name":"pi","namespace":"default"},"spec":{"backoffLimit":2,"template":{"spec":{"containers":[{"env":[{"name":"MODE","value":"fast"},{"name":"DEBUG","value":"1"}],"image":"alpine","name":"main"},{"image":"busybox","name":"sidecar"}],"restartPolicy":"Never"}}}}"#;
        let original = json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "pi", "namespace": "default", "uid": "u-1", "resourceVersion": "7",
                "labels": {"batch.kubernetes.io/job-name": "pi"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}
            },
            "spec": {
                "backoffLimit": 6,
                "completions": 1,
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}},
                "template": {
                    "metadata": {"labels": {"batch.kubernetes.io/controller-uid": "u-1", "job-name": "pi"}},
                    "spec": {
                        "containers": [{
                            "name": "main", "image": "perl:5.34",
                            "command": ["perl", "-Mbignum=bpi", "-wle", "print bpi(2000)"],
                            "env": [{"name": "MODE", "value": "slow"}, {"name": "OLD", "value": "x"}],
                            "resources": {},
                            "terminationMessagePath": "/dev/termination-log",
                            "terminationMessagePolicy": "File",
                            "imagePullPolicy": "IfNotPresent"
                        }],
                        "restartPolicy": "Never",
                        "dnsPolicy": "ClusterFirst",
                        "schedulerName": "default-scheduler",
                        "securityContext": {},
                        "terminationGracePeriodSeconds": 30
                    }
                }
            },
            "status": {"active": 1, "conditions": [{"type": "Suspended", "status": "False"}]}
        });
        // What `kubectl apply` (client side) sends after editing the manifest: image changed,
        // command removed, env OLD removed and DEBUG added, a sidecar added.
        let patch = json!({
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": last_applied}},
            "spec": {
                "backoffLimit": 2,
                "template": {"spec": {
                    "$setElementOrder/containers": [{"name": "main"}, {"name": "sidecar"}],
                    "containers": [
                        {
                            "$setElementOrder/env": [{"name": "MODE"}, {"name": "DEBUG"}],
                            "command": null,
                            "env": [
                                {"name": "MODE", "value": "fast"},
                                {"name": "DEBUG", "value": "1"},
                                {"$patch": "delete", "name": "OLD"}
                            ],
                            "image": "alpine",
                            "name": "main"
                        },
                        {"image": "busybox", "name": "sidecar"}
                    ]
                }}
            }
        });
        let mut want = original.clone();
        want["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = json!(last_applied);
        want["spec"]["backoffLimit"] = json!(2);
        let main = &mut want["spec"]["template"]["spec"]["containers"][0];
        main["image"] = json!("alpine");
        main.as_object_mut().unwrap().remove("command");
        main["env"] = json!([{"name": "MODE", "value": "fast"}, {"name": "DEBUG", "value": "1"}]);
        want["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"image": "busybox", "name": "sidecar"}));

        let got = apply("Job", original.clone(), patch.clone()).unwrap();
        assert_eq!(got, want, "got {}", serde_json::to_string_pretty(&got).unwrap());
    }

    #[test]
    fn kubectl_patch_example_from_the_brief() {
        let original = json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {"containers": [
            {"name": "main", "image": "busybox", "args": ["a"]}
        ]}}}});
        let patch = json!({"metadata":{"annotations":{"k":"v"}},"spec":{"template":{"spec":{"$setElementOrder/containers":[{"name":"main"}],"containers":[{"image":"alpine","name":"main"}]}}}});
        let got = apply("Job", original.clone(), patch.clone()).unwrap();
        assert_eq!(
            got,
            json!({"metadata": {"name": "j", "annotations": {"k": "v"}}, "spec": {"template": {"spec": {"containers": [
                {"name": "main", "image": "alpine", "args": ["a"]}
            ]}}}})
        );
    }

    fn expect_error(kind: &str, original: Value, patch: Value, needles: &[&str]) {
        let err = apply(kind, original.clone(), patch.clone()).expect_err("expected an error");
        for needle in needles {
            assert!(err.to_string().contains(needle), "error {err:?} should mention {needle:?}");
        }
    }

    #[test]
    fn errors() {
        expect_error("Pod", json!({}), json!([1]), &["must be a JSON object"]);
        expect_error("Pod", json!({}), json!("x"), &["must be a JSON object"]);
        expect_error("Pod", json!([]), json!({}), &["must be a JSON object"]);
        expect_error(
            "Pod",
            pod(json!({"containers": [{"name": "main", "image": "a"}]})),
            json!({"spec": {"containers": [{"image": "b"}]}}),
            &["spec.containers", "merge key: name"],
        );
        expect_error(
            "Service",
            json!({"spec": {"ports": [{"port": 80}]}}),
            json!({"spec": {"ports": [{"containerPort": 80}]}}),
            &["spec.ports", "merge key: port"],
        );
        expect_error(
            "Pod",
            pod(json!({"containers": [{"name": "main"}]})),
            json!({"spec": {"containers": [{"$patch": "delete"}]}}),
            &["merge key: name"],
        );
        expect_error(
            "Pod",
            json!({"metadata": {"labels": {"a": "1"}}}),
            json!({"metadata": {"labels": {"$patch": "frobnicate"}}}),
            &["metadata.labels", "unknown patch type", "frobnicate"],
        );
        expect_error(
            "Pod",
            pod(json!({"containers": [{"name": "main"}]})),
            json!({"spec": {"containers": [{"name": "main", "$patch": "bogus"}]}}),
            &["unknown patch type"],
        );
        expect_error(
            "Pod",
            pod(json!({"containers": [{"name": "main"}]})),
            json!({"spec": {"containers": [{"name": "main", "$patch": "merge"}]}}),
            &["merging lists cannot yet be specified"],
        );
        expect_error(
            "Pod",
            json!({"metadata": {"labels": {"a": "1"}}}),
            json!({"metadata": {"labels": {"$retainKeys": ["a"], "b": "2"}}}),
            &["retainKeys"],
        );
        expect_error(
            "Pod",
            json!({"metadata": {"labels": {"a": "1"}}}),
            json!({"metadata": {"labels": {"$retainKeys": "a"}}}),
            &["retainKeys"],
        );
        expect_error(
            "Pod",
            pod(json!({"containers": [{"name": "a"}, {"name": "b"}]})),
            json!({"spec": {"$setElementOrder/containers": [{"name": "a"}], "containers": [{"name": "b", "image": "x"}]}}),
            &["doesn't match $setElementOrder"],
        );
        expect_error(
            "Pod",
            pod(json!({"containers": [{"name": "a"}]})),
            json!({"spec": {"$setElementOrder/containers": {"name": "a"}}}),
            &["setElementOrder"],
        );
        expect_error(
            "Pod",
            pod(json!({"containers": [{"name": "a"}]})),
            json!({"spec": {"containers": ["a"]}}),
            &["list element types are not identical"],
        );
        expect_error(
            "Pod",
            json!({"metadata": {"finalizers": ["a"]}}),
            json!({"metadata": {"finalizers": [["a"]]}}),
            &["lists of lists"],
        );
        expect_error(
            "Pod",
            json!({"metadata": {"finalizers": ["a"]}}),
            json!({"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}}),
            &["primitive list"],
        );
    }

    #[test]
    fn inputs_are_not_modified_and_root_directives() {
        let original = json!({"metadata": {"name": "x"}, "spec": {"a": 1}});
        let patch = json!({"$patch": "replace", "metadata": {"name": "y"}});
        assert_eq!(apply("Pod", original.clone(), patch.clone()).unwrap(), json!({"metadata": {"name": "y"}}));
        assert_eq!(original, json!({"metadata": {"name": "x"}, "spec": {"a": 1}}));
        assert_eq!(apply("Pod", original, json!({"$patch": "delete"})).unwrap(), json!({}));
        assert_eq!(apply("pod", Value::Null, json!({"a": 1})).unwrap(), json!({"a": 1}));
    }

    #[test]
    fn go_stable_sort_matches_std_stable_sort_for_a_consistent_order() {
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for len in [0usize, 1, 2, 5, 19, 20, 21, 39, 40, 41, 64, 100, 257] {
            let data: Vec<(u64, usize)> = (0..len).map(|i| (next() % 7, i)).collect();
            let mut ours = data.clone();
            go_sort_slice_stable(&mut ours, |a, b| a.0 < b.0);
            let mut std_sorted = data;
            std_sorted.sort_by_key(|&(k, _)| k);
            assert_eq!(ours, std_sorted, "len {len}");
        }
    }

    #[test]
    fn go_stable_sort_reproduces_inconsistent_comparator() {
        // Items missing from the order list compare "less" than anything: Go's insertion sort
        // then reverses them.
        let mut items = vec![1, 2, 3];
        go_sort_slice_stable(&mut items, |_, _| true);
        assert_eq!(items, vec![3, 2, 1]);
    }
}
