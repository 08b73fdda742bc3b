//! A stored object: its JSON bytes (served as is) plus the few metadata fields the server indexes.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

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
    /// Where `metadata.resourceVersion`'s value (a JSON string) is in `raw`, and where the
    /// top-level `status`'s value is (each empty without one): a status write replaces only
    /// those bytes ([`Obj::with_status`]).
    rv_at: Range<usize>,
    status: Range<usize>,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub rv: u64,
    /// Shared by the states of the object that keep them (a status write).
    pub labels: Arc<BTreeMap<String, String>>,
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
        let labels = Arc::new(labels_of(meta));
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
        let fields = def.selectable_fields.iter().map(|(_, ptr)| field_value(pointer(value, ptr))).collect();
        let (mut raw, layout) = serialize(value);
        // Kept as long as the object is: without spare capacity (a 1.3 KB pod held 2 KB).
        raw.shrink_to_fit();
        Obj {
            raw: Bytes::from(raw),
            meta: layout.meta,
            rv_at: layout.rv_at,
            status: layout.status,
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

    /// This object at resourceVersion `rv` with its metadata replaced by `meta` (serialized
    /// ahead), which differs only in labels and annotations, so every other indexed field stays
    /// as it is.
    pub fn relabelled(&self, rv: u64, meta: Relabel) -> Obj {
        let rv_json = format!("\"{rv}\"");
        let Relabel { bytes, rv_at, labels } = meta;
        let mut raw = Vec::with_capacity(self.raw.len() + bytes.len() + rv_json.len() - self.meta.len());
        raw.extend_from_slice(&self.raw[..self.meta.start]);
        raw.extend_from_slice(&bytes[..rv_at.start]);
        let rv_start = raw.len();
        raw.extend_from_slice(rv_json.as_bytes());
        let rv_end = raw.len();
        raw.extend_from_slice(&bytes[rv_at.end..]);
        let end = raw.len();
        raw.extend_from_slice(&self.raw[self.meta.end..]);
        let edit = [Edit { at: self.meta.clone(), len: end - self.meta.start }];
        Obj {
            raw: Bytes::from(raw),
            meta: self.meta.start..end,
            rv_at: rv_start..rv_end,
            status: moved(&self.status, &edit),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            rv,
            labels: Arc::new(labels),
            owners: self.owners.clone(),
            finalizers: self.finalizers.clone(),
            deleting: self.deleting,
            grace: self.grace,
            fields: self.fields.clone(),
        }
    }

    /// Whether [`Obj::with_status`] can write this object: its bytes locate a `status` and a
    /// `metadata.resourceVersion` that is this object's.
    pub fn splices_status(&self) -> bool {
        !self.status.is_empty() && self.raw.get(self.rv_at.clone()) == Some(format!("\"{}\"", self.rv).as_bytes())
    }

    /// The stored bytes of the top-level `status` (empty without one).
    pub fn status_bytes(&self) -> &[u8] {
        &self.raw[self.status.clone()]
    }

    /// This object at resourceVersion `rv` with its `status` replaced by `status` (serialized
    /// by serde_json; `fields` its selectable fields, [`Obj::fields_with_status`]): the bytes
    /// [`Obj::new`] makes of the object with that status and resourceVersion, copied around the
    /// two values that change instead of parsing and serializing the whole object. Only for an
    /// object that [`Obj::splices_status`].
    pub fn with_status(&self, rv: u64, status: &[u8], fields: Vec<String>) -> Obj {
        let rv_json = format!("\"{rv}\"");
        let mut edits = [
            (Edit { at: self.rv_at.clone(), len: rv_json.len() }, rv_json.as_bytes()),
            (Edit { at: self.status.clone(), len: status.len() }, status),
        ];
        edits.sort_by_key(|(e, _)| e.at.start);
        let mut raw = Vec::with_capacity(self.raw.len() + status.len() + 8 - self.status.len());
        let mut from = 0;
        for (e, bytes) in &edits {
            raw.extend_from_slice(&self.raw[from..e.at.start]);
            raw.extend_from_slice(bytes);
            from = e.at.end;
        }
        raw.extend_from_slice(&self.raw[from..]);
        let edits = edits.map(|(e, _)| e);
        Obj {
            raw: Bytes::from(raw),
            meta: moved(&self.meta, &edits),
            rv_at: moved(&self.rv_at, &edits),
            status: moved(&self.status, &edits),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            rv,
            labels: self.labels.clone(),
            owners: self.owners.clone(),
            finalizers: self.finalizers.clone(),
            deleting: self.deleting,
            grace: self.grace,
            fields,
        }
    }

    /// The values of the kind's selectable fields once this object's status is `status`: those
    /// under `/status` read from it, the others kept (`None` if this object's were not read
    /// with `def`'s fields).
    pub fn fields_with_status(&self, def: &ResourceDef, status: &Value) -> Option<Vec<String>> {
        if self.fields.len() != def.selectable_fields.len() {
            return None;
        }
        let fields = def.selectable_fields.iter().zip(&self.fields);
        let field = |(ptr, kept): (&str, &String)| match ptr.strip_prefix("/status") {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => field_value(pointer(status, rest)),
            _ => kept.clone(),
        };
        Some(fields.map(|((_, ptr), kept)| field((ptr, kept))).collect())
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

/// An object's new `metadata` serialized ahead of the write that stores it ([`Obj::relabelled`]),
/// so that only its resourceVersion is written under the store's lock.
#[derive(Debug)]
pub struct Relabel {
    /// The metadata as serde_json writes it, with a placeholder resourceVersion at `rv_at`.
    bytes: Vec<u8>,
    rv_at: Range<usize>,
    labels: BTreeMap<String, String>,
}

impl Relabel {
    /// `meta`, given a `resourceVersion` (the one the write gives it).
    pub fn new(mut meta: serde_json::Map<String, Value>) -> Relabel {
        if !meta.get("resourceVersion").is_some_and(Value::is_string) {
            meta.insert("resourceVersion".into(), Value::String(String::new()));
        }
        let mut meta = Value::Object(meta);
        let mut bytes = Vec::with_capacity(1024);
        let rv_at = write_metadata(&mut bytes, &meta);
        // Written: the labels are moved out rather than copied.
        let labels = match meta.as_object_mut().and_then(|m| m.remove("labels")) {
            Some(Value::Object(labels)) => labels
                .into_iter()
                .filter_map(|(k, v)| match v {
                    Value::String(v) => Some((k, v)),
                    _ => None,
                })
                .collect(),
            _ => BTreeMap::new(),
        };
        Relabel { bytes, rv_at, labels }
    }
}

/// `value.pointer(ptr)` (RFC 6901, as serde_json reads it) without serde_json's two string
/// copies per reference token: a token is unescaped only when it holds a `~`. The create path
/// reads a dozen pointers per object, which cost more than its other field reads together.
pub fn pointer<'a>(value: &'a Value, ptr: &str) -> Option<&'a Value> {
    if ptr.is_empty() {
        return Some(value);
    }
    let rest = ptr.strip_prefix('/')?;
    rest.split('/').try_fold(value, |target, token| {
        let unescaped;
        let token = if token.contains('~') {
            unescaped = token.replace("~1", "/").replace("~0", "~");
            unescaped.as_str()
        } else {
            token
        };
        match target {
            Value::Object(map) => map.get(token),
            Value::Array(list) => array_index(token).and_then(|i| list.get(i)),
            _ => None,
        }
    })
}

/// An array index token as serde_json's pointer reads it: digits, no sign, no leading zero.
fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// A selectable field's value as the field selectors compare it.
fn field_value(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// Where the values an [`Obj`] locates are in its bytes (each empty when absent).
#[derive(Debug, Default, PartialEq)]
struct Layout {
    meta: Range<usize>,
    rv_at: Range<usize>,
    status: Range<usize>,
}

/// `serde_json::to_vec(value)`, and where the values of its top-level `metadata` and `status`
/// and of `metadata.resourceVersion` are in it.
fn serialize(value: &Value) -> (Vec<u8>, Layout) {
    let mut layout = Layout::default();
    let Value::Object(map) = value else { return (serde_json::to_vec(value).unwrap_or_default(), layout) };
    let mut raw = Vec::with_capacity(1024);
    write_map(&mut raw, map, |raw, k, v| {
        let start = raw.len();
        match k {
            "metadata" => layout.rv_at = write_metadata(raw, v),
            // Writing to a Vec does not fail, and a Value always serializes.
            _ => drop(serde_json::to_writer(&mut *raw, v)),
        }
        match k {
            "metadata" => layout.meta = start..raw.len(),
            "status" => layout.status = start..raw.len(),
            _ => {}
        }
    });
    (raw, layout)
}

/// Writes `metadata` as serde_json does, returning where its `resourceVersion`'s value is
/// (empty when it has none, or is not an object).
fn write_metadata(raw: &mut Vec<u8>, meta: &Value) -> Range<usize> {
    let Value::Object(map) = meta else {
        // Writing to a Vec does not fail, and a Value always serializes.
        let _ = serde_json::to_writer(&mut *raw, meta);
        return 0..0;
    };
    let mut rv_at = 0..0;
    write_map(raw, map, |raw, k, v| {
        let start = raw.len();
        let _ = serde_json::to_writer(&mut *raw, v);
        if k == "resourceVersion" {
            rv_at = start..raw.len();
        }
    });
    rv_at
}

/// Writes `map` as serde_json does, each value by `value` (which must write it as serde_json does).
fn write_map(
    raw: &mut Vec<u8>,
    map: &serde_json::Map<String, Value>,
    mut value: impl FnMut(&mut Vec<u8>, &str, &Value),
) {
    raw.push(b'{');
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            raw.push(b',');
        }
        // A key always serializes.
        let _ = serde_json::to_writer(&mut *raw, k);
        raw.push(b':');
        value(raw, k, v);
    }
    raw.push(b'}');
}

/// A replacement of the bytes `at` by `len` bytes.
struct Edit {
    at: Range<usize>,
    len: usize,
}

/// Where `range` (one of the edits, or disjoint from them, or holding some of them) is once
/// the `edits` (disjoint, none empty) are made: each bound moves by what the edits that end at
/// or before it add. An empty range (a value not there) stays empty.
fn moved(range: &Range<usize>, edits: &[Edit]) -> Range<usize> {
    if range.is_empty() {
        return 0..0;
    }
    let shift = |p: usize| edits.iter().filter(|e| e.at.end <= p).fold(p, |at, e| at + e.len - e.at.len());
    shift(range.start)..shift(range.end)
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
            let (raw, layout) = serialize(&v);
            assert_eq!(raw, serde_json::to_vec(&v).unwrap(), "{v}");
            let found = |at: &Range<usize>| serde_json::from_slice::<Value>(&raw[at.clone()]).ok();
            assert_eq!(found(&layout.meta).as_ref(), v.get("metadata"), "{v}");
            assert_eq!(found(&layout.status).as_ref(), v.get("status"), "{v}");
            assert_eq!(found(&layout.rv_at).as_ref(), v.pointer("/metadata/resourceVersion"), "{v}");
        }
    }

    #[test]
    fn the_resource_version_and_status_are_found_in_the_bytes() {
        let cases = [
            json!({"metadata": {"annotations": {"resourceVersion": "9"}, "resourceVersion": "12"},
                   "spec": {"status": 1}, "status": {"phase": "Running"}}),
            json!({"metadata": {"name": "no-rv"}, "status": null}),
            json!({"metadata": "not an object", "status": []}),
            json!({"a": {"resourceVersion": "1"}, "status": {"resourceVersion": "2"}}),
        ];
        for v in cases {
            let (raw, layout) = serialize(&v);
            let found = |at: Range<usize>| (!at.is_empty()).then(|| serde_json::from_slice::<Value>(&raw[at]).unwrap());
            assert_eq!(found(layout.rv_at), v.pointer("/metadata/resourceVersion").cloned(), "{v}");
            assert_eq!(found(layout.status), v.get("status").cloned(), "{v}");
        }
    }

    #[test]
    fn a_pointer_reads_what_serde_json_s_pointer_reads() {
        let v = json!({"a": {"b/c": 1, "d~e": [10, 11, {"": 3}], "": {"x": 4}, "0": "zero"}, "l": [[5]]});
        let pointers = [
            "",
            "/",
            "/a",
            "/a/b~1c",
            "/a/d~0e",
            "/a/d~0e/1",
            "/a/d~0e/2/",
            "/a//x",
            "/a/0",
            "/l/0/0",
            "/l/00",
            "/l/+0",
            "/l/-0",
            "/l/1",
            "/a/b~1c/x",
            "a",
            "/a/d~01e",
            "/a/d~e",
            "/missing/x",
            "/a/d~0e/-",
        ];
        for p in pointers {
            assert_eq!(pointer(&v, p), v.pointer(p), "{p:?}");
        }
    }

    #[test]
    fn ranges_move_by_what_the_edits_before_them_add_or_remove() {
        let edits = [Edit { at: 2..4, len: 5 }, Edit { at: 10..20, len: 1 }];
        let cases = [
            (0..2, 0..2, "before both, touching the first"),
            (2..4, 2..7, "the first edit itself"),
            (1..6, 1..9, "holding the first edit"),
            (4..10, 7..13, "between the edits, touching both"),
            (10..20, 13..14, "the second edit itself"),
            (0..30, 0..24, "holding both"),
            (25..30, 19..24, "after both"),
            (0..0, 0..0, "absent"),
        ];
        for (range, want, what) in cases {
            assert_eq!(moved(&range, &edits), want, "{what}");
        }
    }

    fn pod(rv: &str, status: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": rv,
                            "labels": {"a": "1"}, "finalizers": ["f"],
                            "ownerReferences": [{"uid": "o", "blockOwnerDeletion": true}]},
               "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
               "status": status})
    }

    #[test]
    fn an_object_with_its_status_replaced_is_the_one_made_from_the_whole_value() {
        let registry = crate::resources::Registry::with_builtins();
        let def = registry.get("", "v1", "pods").expect("pods are built in");
        let cases = [
            (
                "a longer status",
                "7",
                json!({"phase": "Pending"}),
                "8",
                json!({"phase": "Running", "podIP": "10.0.0.1"}),
            ),
            (
                "a shorter status and a longer resourceVersion",
                "9",
                json!({"phase": "Running", "message": "ü\"x"}),
                "10",
                json!({}),
            ),
            ("a status that is not an object", "99", json!({"phase": "Failed"}), "100", json!("odd")),
        ];
        for (what, rv, status, new_rv, new_status) in cases {
            let cur = Obj::new(&def, &pod(rv, status));
            assert!(cur.splices_status(), "{what}");
            let fields = cur.fields_with_status(&def, &new_status).expect("the pod's fields");
            let spliced = cur.with_status(new_rv.parse().unwrap(), &serde_json::to_vec(&new_status).unwrap(), fields);
            let whole = Obj::new(&def, &pod(new_rv, new_status));
            assert_eq!(format!("{spliced:?}"), format!("{whole:?}"), "{what}");
            // And once more, from the spliced object.
            let again = spliced.with_status(spliced.rv + 1, spliced.status_bytes(), spliced.fields.clone());
            assert_eq!(
                again.value(),
                {
                    let mut v = whole.value();
                    v["metadata"]["resourceVersion"] = json!((spliced.rv + 1).to_string());
                    v
                },
                "{what}"
            );
        }
    }

    #[test]
    fn only_an_object_whose_bytes_hold_its_status_and_resource_version_is_spliced() {
        let registry = crate::resources::Registry::with_builtins();
        let def = registry.get("", "v1", "pods").expect("pods are built in");
        let mut no_status = pod("3", json!({}));
        no_status.as_object_mut().unwrap().remove("status");
        let mut no_rv = pod("3", json!({}));
        no_rv["metadata"].as_object_mut().unwrap().remove("resourceVersion");
        let cases = [
            ("status and resourceVersion", pod("3", json!({})), true),
            ("no status", no_status, false),
            ("no resourceVersion", no_rv, false),
            ("a resourceVersion that is not a number", pod("x", json!({})), false),
            ("a resourceVersion with a leading zero", pod("03", json!({})), false),
        ];
        for (what, v, splices) in cases {
            assert_eq!(Obj::new(&def, &v).splices_status(), splices, "{what}");
        }
    }

    #[test]
    fn the_selectable_fields_under_status_are_read_from_the_new_status() {
        let registry = crate::resources::Registry::with_builtins();
        let def = registry.get("", "v1", "pods").expect("pods are built in");
        let cur = Obj::new(&def, &pod("1", json!({"phase": "Pending", "podIP": "10.0.0.1"})));
        let fields = cur.fields_with_status(&def, &json!({"phase": "Running"})).unwrap();
        let field = |name: &str| {
            let i = def.selectable_fields.iter().position(|(f, _)| f == name).unwrap();
            fields[i].as_str()
        };
        assert_eq!(field("status.phase"), "Running");
        assert_eq!(field("status.podIP"), "", "gone from the status");
        assert_eq!(field("spec.nodeName"), "n1", "kept");
        let other = registry.get("batch", "v1", "jobs").unwrap();
        assert_eq!(cur.fields_with_status(&other, &json!({})), None, "fields of another kind");
    }

    #[test]
    fn relabelling_replaces_only_the_metadata_bytes() {
        let registry = crate::resources::Registry::with_builtins();
        let def = registry.get("", "v1", "pods").expect("pods are built in");
        let v = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "1"}},
                       "spec": {"nodeName": "n1"}});
        let new_meta = json!({"name": "p", "labels": {"a": "2", "b": "3"}, "resourceVersion": "7"});
        let obj = Obj::new(&def, &v).relabelled(7, Relabel::new(new_meta.as_object().unwrap().clone()));
        let mut want = v.clone();
        want["metadata"] = new_meta;
        assert_eq!(obj.value(), want);
        assert_eq!(obj.raw, serde_json::to_vec(&want).unwrap());
        assert_eq!(serde_json::from_slice::<Value>(&obj.raw[obj.meta.clone()]).unwrap(), want["metadata"]);
        assert_eq!(obj.labels.get("b").map(String::as_str), Some("3"));
        assert_eq!(format!("{obj:?}"), format!("{:?}", Obj::new(&def, &want)), "located and indexed as a new object");
    }

    #[test]
    fn relabelling_writes_the_new_resource_version_where_the_metadata_has_one_or_not() {
        let registry = crate::resources::Registry::with_builtins();
        let def = registry.get("", "v1", "pods").expect("pods are built in");
        let stored = pod("41", json!({"phase": "Running"}));
        // The stored metadata with other labels and annotations, and `rv` as its resourceVersion.
        let meta = |rv: Option<Value>, labels: Value, annotations: Value| {
            let mut m = stored["metadata"].clone();
            m["labels"] = labels;
            m["annotations"] = annotations;
            let m = m.as_object_mut().unwrap();
            m.remove("resourceVersion");
            m.extend(rv.map(|rv| ("resourceVersion".to_string(), rv)));
            Value::Object(m.clone())
        };
        let cases = [
            ("the stored one", meta(Some(json!("41")), json!({"x": "y", "n": 1}), json!({}))),
            ("none", meta(None, json!({}), json!({"resourceVersion": "a"}))),
            ("not a string", meta(Some(json!(41)), json!({"a": "1"}), json!({"b": "2"}))),
        ];
        for (what, meta) in cases {
            let obj = Obj::new(&def, &stored).relabelled(1234, Relabel::new(meta.as_object().unwrap().clone()));
            let mut want = stored.clone();
            want["metadata"] = meta;
            want["metadata"]["resourceVersion"] = json!("1234");
            assert_eq!(format!("{obj:?}"), format!("{:?}", Obj::new(&def, &want)), "{what}");
            assert!(obj.splices_status(), "{what}: the status and resourceVersion are found again");
        }
    }
}
