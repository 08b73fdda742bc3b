//! What kube-apiserver does to a custom resource as it decodes it: schema defaults
//! (`defaulting.Default`), pruning of unknown fields with their paths
//! (`pruning.PruneWithOptions`, `objectmeta` for embedded metadata), and removal of nulls the
//! schema does not allow (`PruneNonNullableNullsWithoutDefaults`).

use serde_json::{Map, Value};

use super::{CrdSchema, FieldValidation, Structural};

/// Whether `key` is one of `metav1.ObjectMeta`'s JSON fields: anything else in a `metadata` is
/// unknown.
fn is_object_meta_field(key: &str) -> bool {
    key == "managedFields" || crate::review::OBJECT_META_FIELDS.contains(&key)
}

const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Tracks the path being pruned, as `UnknownFieldPathOptions` does: `spec.list[0].x`.
struct Paths {
    parent: Vec<String>,
    unknown: Vec<String>,
}

impl Paths {
    fn push_key(&mut self, k: &str) -> usize {
        let l = self.parent.len();
        if !self.parent.is_empty() {
            self.parent.push(".".into());
        }
        self.parent.push(k.to_string());
        l
    }
    fn push_index(&mut self, i: usize) -> usize {
        let l = self.parent.len();
        self.parent.push(format!("[{i}]"));
        l
    }
    fn record(&mut self, k: &str) {
        let l = self.push_key(k);
        self.unknown.push(self.parent.concat());
        self.parent.truncate(l);
    }
}

/// Removes from `obj` every field `s` does not specify, returning the paths removed (sorted), as
/// `PruneWithOptions(obj, s, isResourceRoot=true)`: `apiVersion`, `kind` and `metadata` of the
/// root and of embedded resources are kept (their metadata is pruned as `ObjectMeta`).
pub fn prune(obj: &mut Value, s: &Structural) -> Vec<String> {
    let mut paths = Paths { parent: vec![], unknown: vec![] };
    prune_node(obj, Some(s), true, &mut paths);
    paths.unknown.sort();
    paths.unknown
}

fn prune_node(x: &mut Value, s: Option<&Structural>, embedded_root: bool, p: &mut Paths) {
    if let Some(s) = s
        && s.preserve_unknown
    {
        skip_prune(x, s, embedded_root, p);
        return;
    }
    match x {
        Value::Object(o) => {
            let Some(s) = s else {
                let keys: Vec<String> = o.keys().cloned().collect();
                for k in keys {
                    p.record(&k);
                }
                o.clear();
                return;
            };
            let embedded = embedded_root || s.embedded;
            let keys: Vec<String> = o.keys().cloned().collect();
            for k in keys {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(prop) = s.properties.get(&k) {
                    let l = p.push_key(&k);
                    prune_node(o.get_mut(&k).expect("listed key"), Some(prop), false, p);
                    p.parent.truncate(l);
                } else if let Some(ap) = &s.additional {
                    let l = p.push_key(&k);
                    let ap = match ap {
                        super::Additional::Schema(s) => Some(s.as_ref()),
                        // `additionalProperties: true` is a schema that allows anything, which
                        // upstream converts to an empty structural schema.
                        super::Additional::Allows(_) => None,
                    };
                    prune_node(o.get_mut(&k).expect("listed key"), ap, false, p);
                    p.parent.truncate(l);
                } else {
                    if !META_FIELDS.contains(&k.as_str()) || !p.parent.is_empty() {
                        p.record(&k);
                    }
                    o.remove(&k);
                }
            }
            if embedded {
                prune_metadata(o, p);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                let l = p.push_index(i);
                prune_node(v, s.and_then(|s| s.items.as_deref()), false, p);
                p.parent.truncate(l);
            }
        }
        _ => {}
    }
}

fn skip_prune(x: &mut Value, s: &Structural, embedded_root: bool, p: &mut Paths) {
    let embedded = embedded_root || s.embedded;
    match x {
        Value::Object(o) => {
            let keys: Vec<String> = o.keys().cloned().collect();
            for k in keys {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let sub = s.properties.get(&k).or_else(|| s.additional_schema());
                if let Some(sub) = sub {
                    let l = p.push_key(&k);
                    prune_node(o.get_mut(&k).expect("listed key"), Some(sub), false, p);
                    p.parent.truncate(l);
                }
            }
            if embedded {
                prune_metadata(o, p);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                let l = p.push_index(i);
                if let Some(it) = &s.items {
                    skip_prune(v, it, false, p);
                }
                p.parent.truncate(l);
            }
        }
        _ => {}
    }
}

/// An object's `metadata` decoded as `ObjectMeta`: fields it does not have are dropped and
/// reported as `<path>.metadata.<field>`.
fn prune_metadata(o: &mut Map<String, Value>, p: &mut Paths) {
    let Some(Value::Object(meta)) = o.get_mut("metadata") else { return };
    let unknown: Vec<String> = meta.keys().filter(|k| !is_object_meta_field(k)).cloned().collect();
    if unknown.is_empty() {
        return;
    }
    let l = p.push_key("metadata");
    for k in unknown {
        p.record(&k);
        meta.remove(&k);
    }
    p.parent.truncate(l);
}

/// Applies the schema's `default`s to `x` (`defaulting.Default`): a missing field, or a null
/// one the schema does not allow, takes its default; nested objects and items likewise.
pub fn default(x: &mut Value, s: &Structural) {
    let non_nullable_null = |v: &Value, s: &Structural| v.is_null() && !s.nullable;
    match x {
        Value::Object(o) => {
            for (k, prop) in &s.properties {
                let Some(d) = &prop.default else { continue };
                if o.get(k).is_none_or(|v| non_nullable_null(v, prop)) {
                    o.insert(k.clone(), d.clone());
                }
            }
            for (k, v) in o.iter_mut() {
                if let Some(prop) = s.properties.get(k) {
                    default(v, prop);
                } else if let Some(ap) = s.additional_schema() {
                    if non_nullable_null(v, ap)
                        && let Some(d) = &ap.default
                    {
                        *v = d.clone();
                    }
                    default(v, ap);
                }
            }
        }
        Value::Array(items) => {
            let Some(is) = &s.items else { return };
            for v in items.iter_mut() {
                if non_nullable_null(v, is)
                    && let Some(d) = &is.default
                {
                    *v = d.clone();
                }
                default(v, is);
            }
        }
        _ => {}
    }
}

/// `PruneNonNullableNullsWithoutDefaults`: nulls the schema does not allow and cannot default
/// are removed.
fn prune_nulls(x: &mut Value, s: Option<&Structural>) {
    match x {
        Value::Object(o) => {
            let schema_of = |k: &str| s.and_then(|s| s.properties.get(k).or_else(|| s.additional_schema()));
            o.retain(|k, v| !(v.is_null() && schema_of(k).is_some_and(|s| !s.nullable && s.default.is_none())));
            for (k, v) in o.iter_mut() {
                prune_nulls(v, schema_of(k));
            }
        }
        Value::Array(items) => {
            for v in items.iter_mut() {
                prune_nulls(v, s.and_then(|s| s.items.as_deref()));
            }
        }
        _ => {}
    }
}

/// Decodes a custom resource as kube-apiserver's CRD handler does (defaults, pruning, nulls),
/// returning the unknown fields it dropped as strict decoding errors (`unknown field "spec.x"`)
/// where `directive` asks for them (Warn, Strict); Ignore drops them silently.
pub fn decode(obj: &mut Value, schema: &CrdSchema, directive: FieldValidation) -> Vec<String> {
    default(obj, &schema.root);
    if schema.preserve_unknown {
        return vec![];
    }
    let unknown = prune(obj, &schema.root);
    prune_nulls(obj, Some(&schema.root));
    if directive == FieldValidation::Ignore {
        return vec![];
    }
    unknown.into_iter().map(|p| format!("unknown field {p:?}")).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::compile;
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "failurePolicy": {"type": "object", "properties": {"maxRestarts": {"type": "integer", "default": 0}}},
                "mode": {"type": "string", "default": "Any"},
                "list": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"typed": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                "template": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}}},
                "nullable": {"type": "string", "nullable": true},
                "plain": {"type": "string"}}}}})
    }

    #[test]
    fn unknown_fields_are_pruned_and_reported_with_their_paths() {
        let s = compile(&schema());
        let cases = [
            (
                "a misspelled field",
                json!({"spec": {"failurPolicy": {}}}),
                json!({"spec": {}}),
                vec!["spec.failurPolicy"],
            ),
            (
                "inside list items",
                json!({"spec": {"list": [{"name": "a"}, {"name": "b", "nmae": "c"}]}}),
                json!({"spec": {"list": [{"name": "a"}, {"name": "b"}]}}),
                vec!["spec.list[1].nmae"],
            ),
            (
                "map values are kept",
                json!({"spec": {"labels": {"any": "x"}}}),
                json!({"spec": {"labels": {"any": "x"}}}),
                vec![],
            ),
            (
                "preserved unknown fields are kept, typed fields under them pruned",
                json!({"spec": {"open": {"free": 1, "typed": {"a": "x", "b": "y"}}}}),
                json!({"spec": {"open": {"free": 1, "typed": {"a": "x"}}}}),
                vec!["spec.open.typed.b"],
            ),
            (
                "embedded resources keep apiVersion, kind and metadata; unknown metadata is dropped",
                json!({"spec": {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "nmae": "q"}, "spec": {"x": "1", "y": "2"}}}}),
                json!({"spec": {"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": "1"}}}}),
                vec!["spec.template.metadata.nmae", "spec.template.spec.y"],
            ),
            (
                "root metadata fields that ObjectMeta lacks",
                json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "n", "label": {}}, "extra": 1}),
                json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "n"}}),
                vec!["extra", "metadata.label"],
            ),
        ];
        for (what, mut obj, want, paths) in cases {
            assert_eq!(prune(&mut obj, &s), paths, "{what}");
            assert_eq!(obj, want, "{what}");
        }
    }

    #[test]
    fn an_open_root_keeps_everything_but_unknown_metadata() {
        let s = compile(&json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
        let mut obj = json!({"metadata": {"name": "n", "nmae": "x"}, "spec": {"any": 1}});
        assert_eq!(prune(&mut obj, &s), ["metadata.nmae"]);
        assert_eq!(obj, json!({"metadata": {"name": "n"}, "spec": {"any": 1}}));
    }

    #[test]
    fn defaults_fill_missing_and_non_nullable_null_fields() {
        let s = compile(&schema());
        let mut obj = json!({"spec": {"failurePolicy": {}, "mode": null}});
        default(&mut obj, &s);
        assert_eq!(obj, json!({"spec": {"failurePolicy": {"maxRestarts": 0}, "mode": "Any"}}));
        let mut untouched = json!({"spec": {"mode": "All"}});
        default(&mut untouched, &s);
        assert_eq!(untouched, json!({"spec": {"mode": "All"}}), "set values are kept; absent objects are not created");
    }

    #[test]
    fn decode_reports_unknown_fields_unless_ignored_and_drops_disallowed_nulls() {
        let schema = CrdSchema { root: compile(&schema()), preserve_unknown: false };
        let obj = json!({"spec": {"failurPolicy": {}, "plain": null, "nullable": null}});
        let mut warned = obj.clone();
        assert_eq!(decode(&mut warned, &schema, FieldValidation::Warn), ["unknown field \"spec.failurPolicy\""]);
        assert_eq!(warned, json!({"spec": {"mode": "Any", "nullable": null}}));
        let mut ignored = obj.clone();
        assert_eq!(decode(&mut ignored, &schema, FieldValidation::Ignore), Vec::<String>::new());
        assert_eq!(ignored, warned, "Ignore prunes the same fields, silently");
    }
}
