//! A stored object: its JSON bytes (served as is) plus the few metadata fields the server indexes.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::Value;

use crate::resources::ResourceDef;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    pub uid: String,
    pub block_owner_deletion: bool,
}

#[derive(Debug)]
pub struct Obj {
    /// The serialized object, exactly what GET returns.
    pub raw: Bytes,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub rv: u64,
    pub labels: BTreeMap<String, String>,
    pub owners: Vec<OwnerRef>,
    pub finalizers: Vec<String>,
    pub deleting: bool,
    /// `metadata.deletionGracePeriodSeconds`: 0 once the node agent (or a force delete) confirmed.
    pub grace: Option<i64>,
    /// Values of the kind's selectable fields, in `ResourceDef::selectable_fields` order.
    pub fields: Vec<String>,
}

impl Obj {
    pub fn new(def: &ResourceDef, value: &Value) -> Obj {
        let meta = value.get("metadata");
        let s = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_str).unwrap_or_default().to_string();
        let labels = labels_of(meta);
        let owners = meta
            .and_then(|m| m.get("ownerReferences"))
            .and_then(Value::as_array)
            .map(|refs| {
                refs.iter()
                    .filter_map(|r| {
                        Some(OwnerRef {
                            uid: r.get("uid")?.as_str()?.to_string(),
                            block_owner_deletion: r.get("blockOwnerDeletion").and_then(Value::as_bool).unwrap_or(false),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let finalizers = meta
            .and_then(|m| m.get("finalizers"))
            .and_then(Value::as_array)
            .map(|f| f.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        let fields = def
            .selectable_fields
            .iter()
            .map(|(_, ptr)| match value.pointer(ptr) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            })
            .collect();
        Obj {
            raw: Bytes::from(serde_json::to_vec(value).unwrap_or_default()),
            namespace: s("namespace"),
            name: s("name"),
            uid: s("uid"),
            rv: s("resourceVersion").parse().unwrap_or(0),
            labels,
            owners,
            finalizers,
            deleting: meta.and_then(|m| m.get("deletionTimestamp")).is_some_and(|t| !t.is_null()),
            grace: meta.and_then(|m| m.get("deletionGracePeriodSeconds")).and_then(Value::as_i64),
            fields,
        }
    }

    /// This object with new bytes `raw` at resourceVersion `rv` whose metadata (`meta`) differs
    /// only in labels and annotations, so every other indexed field stays as it is.
    pub fn relabelled(&self, raw: Bytes, rv: u64, meta: &Value) -> Obj {
        Obj {
            raw,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            rv,
            labels: labels_of(Some(meta)),
            owners: self.owners.clone(),
            finalizers: self.finalizers.clone(),
            deleting: self.deleting,
            grace: self.grace,
            fields: self.fields.clone(),
        }
    }

    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.raw).unwrap_or(Value::Null)
    }

    /// The value of a field selector label (`metadata.name`, `spec.nodeName`, ...), if the kind supports it.
    pub fn field(&self, def: &ResourceDef, field: &str) -> Option<&str> {
        match field {
            "metadata.name" => Some(&self.name),
            "metadata.namespace" => Some(&self.namespace),
            _ => def.selectable_fields.iter().position(|(f, _)| f == field).map(|i| self.fields[i].as_str()),
        }
    }
}

fn labels_of(meta: Option<&Value>) -> BTreeMap<String, String> {
    meta.and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default()
}

/// Mutable access to `metadata`, creating it when absent.
pub fn meta_mut(v: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !v.get("metadata").is_some_and(Value::is_object) {
        v["metadata"] = Value::Object(Default::default());
    }
    v["metadata"].as_object_mut().expect("metadata is an object")
}

pub fn meta_str<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get("metadata")?.get(key)?.as_str()
}

pub fn now_rfc3339() -> String {
    rfc3339_seconds(jiff::Timestamp::now())
}

/// A timestamp as Kubernetes serializes `metav1.Time`: whole seconds, truncated (never in the future).
pub fn rfc3339_seconds(t: jiff::Timestamp) -> String {
    let opts = jiff::TimestampRound::new().smallest(jiff::Unit::Second).mode(jiff::RoundMode::Trunc);
    t.round(opts).unwrap_or(t).to_string()
}
