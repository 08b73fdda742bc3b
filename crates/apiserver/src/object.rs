//! A stored object: its JSON bytes (served as is) plus the few metadata fields the server indexes.

use std::collections::BTreeMap;
use std::ops::Range;

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
    /// Where `metadata`'s value is in `raw` (empty without one): a labels-or-annotations patch
    /// parses and replaces only those bytes.
    pub meta: Range<usize>,
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
        let (raw, meta_range) = serialize(value);
        Obj {
            raw: Bytes::from(raw),
            meta: meta_range,
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

    /// This object at resourceVersion `rv` with its metadata replaced by `meta`, which differs
    /// only in labels and annotations, so every other indexed field stays as it is.
    pub fn relabelled(&self, rv: u64, meta: &Value) -> Obj {
        let mut raw = Vec::with_capacity(self.raw.len() + 64);
        raw.extend_from_slice(&self.raw[..self.meta.start]);
        // Writing to a Vec does not fail, and a Value always serializes.
        let _ = serde_json::to_writer(&mut raw, meta);
        let end = raw.len();
        raw.extend_from_slice(&self.raw[self.meta.end..]);
        Obj {
            raw: Bytes::from(raw),
            meta: self.meta.start..end,
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

/// `serde_json::to_vec(value)`, and where the value of its top-level `metadata` is in it.
fn serialize(value: &Value) -> (Vec<u8>, Range<usize>) {
    let Value::Object(map) = value else { return (serde_json::to_vec(value).unwrap_or_default(), 0..0) };
    // Writing to a Vec does not fail, and a key or a Value always serializes.
    let mut raw = vec![b'{'];
    let mut meta = 0..0;
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            raw.push(b',');
        }
        let _ = serde_json::to_writer(&mut raw, k);
        raw.push(b':');
        let start = raw.len();
        let _ = serde_json::to_writer(&mut raw, v);
        if k == "metadata" {
            meta = start..raw.len();
        }
    }
    raw.push(b'}');
    (raw, meta)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_object_is_stored_as_serde_json_writes_it_and_its_metadata_is_found_in_the_bytes() {
        let cases = [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "\"é\"\n"}},
                   "spec": {"x": [1, {"metadata": 2}]}, "status": {}}),
            json!({"kind": "Thing", "zzz": null, "metadata": {}}),
            json!({"kind": "NoMeta", "spec": {"metadata": {"name": "inner"}}}),
            json!({}),
            json!([1, 2]),
        ];
        for v in cases {
            let (raw, meta) = serialize(&v);
            assert_eq!(raw, serde_json::to_vec(&v).unwrap(), "{v}");
            let found: Option<Value> = serde_json::from_slice(&raw[meta]).ok();
            assert_eq!(found.as_ref(), v.get("metadata"), "{v}");
        }
    }

    #[test]
    fn relabelling_replaces_only_the_metadata_bytes() {
        let registry = crate::resources::Registry::with_builtins();
        let def = registry.get("", "v1", "pods").expect("pods are built in");
        let v = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "1"}},
                       "spec": {"nodeName": "n1"}});
        let new_meta = json!({"name": "p", "labels": {"a": "2", "b": "3"}, "resourceVersion": "7"});
        let obj = Obj::new(&def, &v).relabelled(7, &new_meta);
        let mut want = v.clone();
        want["metadata"] = new_meta;
        assert_eq!(obj.value(), want);
        assert_eq!(obj.raw, serde_json::to_vec(&want).unwrap());
        assert_eq!(serde_json::from_slice::<Value>(&obj.raw[obj.meta.clone()]).unwrap(), want["metadata"]);
        assert_eq!(obj.labels.get("b").map(String::as_str), Some("3"));
    }
}
