//! Pod subresources: `binding` (the scheduler's write) and `eviction` (a disruption).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::{ApiError, Result};
use crate::object::now_rfc3339;
use crate::ops::{self, Ctx, DeleteOptions, Target};
use crate::resources::ResourceDef;
use crate::store::Txn;

/// Sets or replaces the condition of `type_` in `status.conditions`, keeping lastTransitionTime when the status holds.
pub fn set_condition(pod: &mut Value, type_: &str, status: &str, reason: &str, message: &str) {
    let now = now_rfc3339();
    if !pod.get("status").is_some_and(Value::is_object) {
        pod["status"] = json!({});
    }
    let conds =
        pod["status"].as_object_mut().expect("status is an object").entry("conditions").or_insert_with(|| json!([]));
    if !conds.is_array() {
        *conds = json!([]);
    }
    let list = conds.as_array_mut().expect("conditions is an array");
    let new = json!({"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": now, "lastProbeTime": null});
    match list.iter_mut().find(|c| c.get("type").and_then(Value::as_str) == Some(type_)) {
        Some(c) if c.get("status").and_then(Value::as_str) == Some(status) => {
            c["reason"] = json!(reason);
            c["message"] = json!(message);
        }
        Some(c) => *c = new,
        None => list.push(new),
    }
}

pub fn bind(txn: &mut Txn<'_>, def: &Arc<ResourceDef>, ns: &str, name: &str, binding: &Value) -> Result<()> {
    let node = binding
        .pointer("/target/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::bad_request("Binding.target.name: Required value"))?;
    let key = Txn::key(def, ns, name);
    let pod = txn.get(&key).ok_or_else(|| ApiError::not_found(def, name))?;
    if pod.deleting {
        return Err(ApiError::conflict(def, name, "pod is being deleted, cannot be assigned to a host"));
    }
    let mut v = pod.value();
    if let Some(cur) = v.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
        return Err(ApiError::conflict(def, name, &format!("pod {name} is already assigned to node \"{cur}\"")));
    }
    v["spec"]["nodeName"] = json!(node);
    set_condition(&mut v, "PodScheduled", "True", "", "");
    if let Some(c) = v.pointer_mut("/status/conditions").and_then(Value::as_array_mut) {
        for cond in c.iter_mut().filter(|c| c["type"] == "PodScheduled") {
            cond.as_object_mut().map(|o| {
                o.remove("reason");
                o.remove("message")
            });
        }
    }
    txn.put(def, v);
    Ok(())
}

/// Evicts a pod as kube-apiserver's eviction subresource: a pod that is terminal, pending or
/// being deleted goes at once; any other spends a disruption of the PodDisruptionBudget that
/// covers it (refused while none is left, `crate::pdb::check`) in the same transaction. The pod is
/// then marked with `DisruptionTarget` and deleted.
pub fn evict(
    txn: &mut Txn<'_>,
    ctx: &Ctx<'_>,
    def: &Arc<ResourceDef>,
    ns: &str,
    name: &str,
    opts: &DeleteOptions,
) -> Result<()> {
    let key = Txn::key(def, ns, name);
    let pod = txn.get(&key).ok_or_else(|| ApiError::not_found(def, name))?;
    let mut v = pod.value();
    if !pod.deleting && !crate::pdb::can_ignore_pdb(&v) {
        let budgets: Vec<Value> = txn.objects_in(crate::pdb::STORAGE_KEY, ns).iter().map(|b| b.value()).collect();
        if let crate::pdb::Budget::Spend { name: budget, status } = crate::pdb::check(&v, &budgets, &now_rfc3339())? {
            let pdb_def = txn.registry.by_storage_key(crate::pdb::STORAGE_KEY).expect("built in");
            let cur =
                txn.get(&Txn::key(&pdb_def, ns, &budget)).ok_or_else(|| ApiError::not_found(&pdb_def, &budget))?;
            let mut updated = cur.value();
            updated["status"] = status;
            ops::update(txn, ctx, &pdb_def, ns, &budget, updated, Target::Status, Some(cur), None)?;
        }
    }
    let terminal = matches!(v.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"));
    if !terminal && !pod.deleting {
        set_condition(&mut v, "DisruptionTarget", "True", "EvictionByEvictionAPI", "Eviction API: evicting");
        ops::update(txn, ctx, def, ns, name, v, Target::Status, Some(pod), None)?;
    }
    ops::delete(txn, def, ns, name, opts)?;
    Ok(())
}
