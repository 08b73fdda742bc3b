//! Building a wrapped object from its component (upstream `createComponent` before the CREATE):
//! namespace, the AppWrapper label on the object and on every pod template, Kueue's podSetInfos
//! merged in, the configured scheduler, Autopilot anti-affinities and the controller
//! ownerReference. Pure.

use std::collections::BTreeMap;

use jobset_api::appwrapper::keys::APPWRAPPER_LABEL;
use jobset_api::appwrapper::{AppWrapper, AppWrapperConfig, AppWrapperPodSetInfo, podsets};
use serde_json::{Map, Value, json};

use super::autopilot;

/// Why a component could not be built or created; `fatal` ones fail the AppWrapper at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateError {
    pub message: String,
    pub fatal: bool,
}

impl CreateError {
    pub fn fatal(message: impl Into<String>) -> Self {
        CreateError { message: message.into(), fatal: true }
    }
    pub fn retryable(message: impl Into<String>) -> Self {
        CreateError { message: message.into(), fatal: false }
    }
}

/// The object to create for component `index` of `aw`.
pub fn build_component(aw: &AppWrapper, index: usize, config: &AppWrapperConfig) -> Result<Value, CreateError> {
    let component = &aw.spec.components[index];
    let mut obj = component.template.clone();
    if !obj.is_object() || obj["apiVersion"].as_str().is_none() || obj["kind"].as_str().is_none() {
        return Err(CreateError::fatal("failed to decode as JSON: the template needs apiVersion and kind"));
    }
    let aw_name = aw.metadata.name.clone().unwrap_or_default();
    let aw_ns = aw.metadata.namespace.clone().unwrap_or_default();
    let meta = object_at(obj.as_object_mut().expect("checked above"), "metadata");
    match meta.get("namespace").and_then(Value::as_str) {
        Some(ns) if !ns.is_empty() && ns != aw_ns => {
            return Err(CreateError::fatal(format!(
                "component namespace {ns} is not the AppWrapper's namespace {aw_ns}"
            )));
        }
        _ => {
            meta.insert("namespace".into(), json!(aw_ns));
        }
    }
    // An existing label value wins, as upstream.
    object_at(&mut *meta, "labels").entry(APPWRAPPER_LABEL).or_insert(json!(aw_name));

    let pod_sets =
        aw.status.as_ref().and_then(|s| s.component_status.get(index)).map(|c| c.pod_sets.clone()).unwrap_or_default();
    for (i, ps) in pod_sets.iter().enumerate() {
        let info = component.pod_set_infos.get(i);
        let template = pod_template_at(&mut obj, &ps.path)
            .map_err(|e| CreateError::fatal(format!("path does not refer to a v1.PodSpecTemplate: {e}")))?;
        apply_pod_set(template, info, &aw_name, config)?;
    }

    let owner = json!({
        "apiVersion": jobset_api::appwrapper::keys::API_VERSION,
        "kind": jobset_api::appwrapper::keys::KIND,
        "name": aw_name,
        "uid": aw.metadata.uid.clone().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    });
    let refs = object_at(obj.as_object_mut().expect("checked above"), "metadata")
        .entry("ownerReferences")
        .or_insert_with(|| json!([]));
    match refs.as_array_mut() {
        Some(list) => list.push(owner),
        None => return Err(CreateError::fatal("metadata.ownerReferences is not a list")),
    }
    Ok(obj)
}

/// The pod template at a podSet `path`, which names the component's template as `template`.
fn pod_template_at<'a>(obj: &'a mut Value, path: &str) -> Result<&'a mut Map<String, Value>, String> {
    let v = podsets::value_at_path_mut(obj, path)?;
    v.as_object_mut().ok_or_else(|| "not an object".to_string())
}

fn apply_pod_set(
    template: &mut Map<String, Value>,
    info: Option<&AppWrapperPodSetInfo>,
    aw_name: &str,
    config: &AppWrapperConfig,
) -> Result<(), CreateError> {
    let meta = object_at(&mut *template, "metadata");
    if let Some(info) = info {
        merge_keep_first(object_at(&mut *meta, "annotations"), &info.annotations)
            .map_err(|e| CreateError::fatal(format!("conflict updating annotations: {e}")))?;
    }
    let mut labels = info.map(|i| i.labels.clone()).unwrap_or_default();
    labels.insert(APPWRAPPER_LABEL.into(), aw_name.into());
    merge_keep_first(object_at(meta, "labels"), &labels)
        .map_err(|e| CreateError::fatal(format!("conflict updating labels: {e}")))?;

    let spec = object_at(template, "spec");
    if let Some(info) = info {
        merge_keep_first(object_at(&mut *spec, "nodeSelector"), &info.node_selector)
            .map_err(|e| CreateError::fatal(format!("conflict updating nodeSelector: {e}")))?;
        if !info.tolerations.is_empty() {
            let list = array_at(spec, "tolerations")?;
            list.extend(info.tolerations.iter().map(|t| serde_json::to_value(t).unwrap_or_default()));
        }
        if !info.scheduling_gates.is_empty() {
            let list = array_at(spec, "schedulingGates")?;
            for g in &info.scheduling_gates {
                if !list.iter().any(|x| x["name"].as_str() == Some(g.name.as_str())) {
                    list.push(json!({"name": g.name}));
                }
            }
        }
    }
    if let Some(name) = &config.scheduler_name
        && spec.get("schedulerName").and_then(Value::as_str).is_none_or(str::is_empty)
    {
        spec.insert("schedulerName".into(), json!(name));
    }
    let mut spec_value = Value::Object(std::mem::take(spec));
    autopilot::inject_anti_affinities(&mut spec_value, &config.autopilot);
    if let Value::Object(m) = spec_value {
        *spec = m;
    }
    Ok(())
}

/// Kueue's `HaveConflict` + `MergeKeepFirst`: a key already present with another value is an error.
fn merge_keep_first(into: &mut Map<String, Value>, from: &BTreeMap<String, String>) -> Result<(), String> {
    for (k, v) in from {
        match into.get(k).and_then(Value::as_str) {
            Some(existing) if existing != v => {
                return Err(format!("conflict for key={k}, value1={existing}, value2={v}"));
            }
            Some(_) => {}
            None => {
                into.insert(k.clone(), json!(v));
            }
        }
    }
    Ok(())
}

/// The object under `key`, created (or replaced, if it is not an object) as needed.
fn object_at<'a>(m: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let v = m.entry(key).or_insert_with(|| json!({}));
    if !v.is_object() {
        *v = json!({});
    }
    v.as_object_mut().expect("just made an object")
}

fn array_at<'a>(m: &'a mut Map<String, Value>, key: &str) -> Result<&'a mut Vec<Value>, CreateError> {
    let v = m.entry(key).or_insert_with(|| json!([]));
    if v.is_null() {
        *v = json!([]);
    }
    v.as_array_mut().ok_or_else(|| CreateError::fatal(format!("{key} is not a list")))
}
