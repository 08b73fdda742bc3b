//! `x-kubernetes-validations`: CEL rules compiled with kube-cel when a CRD is registered and
//! evaluated per node with `self` (and `oldSelf` on updates where the node correlates), worded as
//! k8s.io/apiextensions-apiserver pkg/apiserver/schema/cel/validation.go words its errors.

use serde_json::Value;

use super::{child, index};
use crate::error::Cause;

/// One rule as written in the schema.
#[derive(Debug, Clone, Default)]
struct Rule {
    rule: String,
    message: String,
    message_expression: String,
    reason: Option<String>,
    field_path: String,
    optional_old_self: Option<bool>,
}

impl Rule {
    fn parse(v: &Value) -> Rule {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        Rule {
            rule: s("rule"),
            message: s("message"),
            message_expression: s("messageExpression"),
            reason: v.get("reason").and_then(Value::as_str).map(str::to_string),
            field_path: s("fieldPath"),
            optional_old_self: v.get("optionalOldSelf").and_then(Value::as_bool),
        }
    }

    /// The rule as Go renders the internal `apiextensions.ValidationRule` in a `field.Invalid`
    /// (JSON, with its untagged field names).
    fn rendered(&self) -> String {
        // Built by hand: upstream's field order, which a JSON map would sort.
        fn j<T: serde::Serialize>(v: &T) -> String {
            serde_json::to_string(v).unwrap_or_default()
        }
        format!(
            "{{\"Rule\":{},\"Message\":{},\"MessageExpression\":{},\"Reason\":{},\"FieldPath\":{},\"OptionalOldSelf\":{}}}",
            j(&self.rule),
            j(&self.message),
            j(&self.message_expression),
            j(&self.reason),
            j(&self.field_path),
            j(&self.optional_old_self),
        )
    }

    /// `ruleErrorString`.
    fn error_string(&self) -> &str {
        if self.message.trim().is_empty() { self.rule.trim() } else { self.message.trim() }
    }

    /// `ruleMessageOrDefault`.
    fn message_or_default(&self) -> String {
        if self.message.is_empty() {
            format!("failed rule: {}", self.rule.trim())
        } else {
            self.message.trim().to_string()
        }
    }
}

/// The rules of one schema node, compiled once when the CRD is registered. Each write converts
/// the node's value to CEL once (with the node's schema: formats, escaped field names, defaults)
/// and runs the node's own programs on it; kube-cel's `validate_compiled` would instead walk the
/// node's whole subtree converting every descendant's subtree again, which made a JobSet write
/// quadratic in the size of its spec (the `spec` and `replicatedJobs` rules hold the pod
/// templates).
pub struct Rules {
    rules: Vec<Rule>,
    /// kube-cel's compilation of `rules`, one result per rule, in order.
    compiled: Vec<Result<kube_cel::CompilationResult, kube_cel::CompilationError>>,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules").field("rules", &self.rules).finish()
    }
}

thread_local! {
    /// A CEL context with the Kubernetes extension functions, built once per thread (as
    /// kube-cel's own thread-local validator is); each evaluation binds `self` and `oldSelf` in
    /// a scope of its own.
    static BASE: kube_cel::cel::Context<'static> = {
        use kube_cel::KubeCelExt as _;
        kube_cel::cel::Context::default().with_all()
    };
}

/// CEL's reserved words: a field of that name is `__name__` in a rule (upstream's
/// `Escape`, as kube-cel's conversion does).
const CEL_RESERVED_WORDS: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// A rule (an `x-kubernetes-validations` item) whose selections of a reserved-word field
/// (`x.namespace`) are written escaped (`x.__namespace__`), string literals left alone.
/// Kubernetes resolves both spellings (`unstructuredMap.Find` unescapes the key it is asked
/// for), our conversion only the escaped one, so upstream JobSet's
/// `!has(t.metadata.namespace)` would otherwise never see the field.
fn with_reserved_selections_escaped(rule: &Value) -> Value {
    let mut rule = rule.clone();
    let Some(Value::String(text)) = rule.get_mut("rule") else { return rule };
    let mut out = String::with_capacity(text.len());
    let mut quote: Option<char> = None;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        out.push(c);
        match (quote, c) {
            (Some(_), '\\') => out.extend(chars.next().map(|(_, next)| next)),
            (Some(q), c) if c == q => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            (None, '.') => {
                let rest = &text[i + 1..];
                let word = &rest[..rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len())];
                if CEL_RESERVED_WORDS.contains(&word) {
                    out.push_str(&format!("__{word}__"));
                    chars.nth(word.len() - 1);
                }
            }
            _ => {}
        }
    }
    *text = out;
    rule
}

/// A field name as rules see it: `foo-bar` is `foo__dash__bar`.
fn escape_field_name(name: &str) -> String {
    if CEL_RESERVED_WORDS.contains(&name) {
        return format!("__{name}__");
    }
    if !name.contains(['_', '.', '-', '/']) {
        return name.to_string();
    }
    let mut escaped = String::with_capacity(name.len() * 2);
    for ch in name.chars() {
        match ch {
            '_' => escaped.push_str("__"),
            '.' => escaped.push_str("__dot__"),
            '-' => escaped.push_str("__dash__"),
            '/' => escaped.push_str("__slash__"),
            _ => escaped.push(ch),
        }
    }
    escaped
}

/// The key of field `k` of an object of schema `s` in its CEL map: escaped, unless the object is
/// a map (`additionalProperties`), whose keys are data.
fn cel_key(s: &super::Structural, k: &str) -> kube_cel::cel::objects::Key {
    let is_map = s.additional.as_ref().is_some_and(|a| !matches!(a, super::Additional::Allows(false)));
    kube_cel::cel::objects::Key::String(std::sync::Arc::new(if is_map { k.to_string() } else { escape_field_name(k) }))
}

/// `value` as a CEL value under schema `s` (none: no schema below), as kube-cel converts it for
/// its rules: the schema's defaults of missing properties filled in (`defaults`), strings of
/// format `date-time`, `duration` and `byte` as timestamps, durations and bytes (kept as strings
/// when they do not parse), field names escaped except a map's keys, an embedded resource with
/// `apiVersion`, `kind` and `metadata`.
fn to_cel(value: &Value, s: Option<&super::Structural>, defaults: bool) -> kube_cel::cel::Value {
    use std::collections::HashMap;
    use std::sync::Arc;

    use kube_cel::cel::Value as Cel;
    use kube_cel::cel::objects::{Key, Map};
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Cel::Int(i),
            (None, Some(u)) => Cel::UInt(u),
            _ => Cel::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(text) => {
            let string = || Cel::String(Arc::new(text.clone()));
            let Some(s) = s.filter(|s| !s.int_or_string) else { return string() };
            let parsed = match s.format.as_str() {
                "date-time" => kube_cel::cel::functions::time::timestamp(Arc::new(text.clone())).ok(),
                "duration" => kube_cel::cel::functions::time::duration(Arc::new(text.clone())).ok(),
                "byte" => {
                    use base64::Engine as _;
                    base64::engine::general_purpose::STANDARD.decode(text).ok().map(|b| Cel::Bytes(Arc::new(b)))
                }
                _ => None,
            };
            parsed.unwrap_or_else(string)
        }
        Value::Array(items) => {
            let item_schema = s.and_then(|s| s.items.as_deref());
            Cel::List(Arc::new(items.iter().map(|i| to_cel(i, item_schema, defaults)).collect()))
        }
        Value::Object(o) => {
            let Some(s) = s else {
                let map = o.iter().map(|(k, v)| (Key::String(Arc::new(escape_field_name(k))), to_cel(v, None, false)));
                return Cel::Map(Map { map: Arc::new(map.collect()) });
            };
            let key = |k: &str| cel_key(s, k);
            // kube-cel defaults a map's values only where unknown fields are not preserved.
            let default_values = defaults && !s.preserve_unknown;
            let mut map: HashMap<Key, Cel> = HashMap::with_capacity(o.len());
            for (k, v) in o {
                let (child, child_defaults) = match s.properties.get(k) {
                    Some(p) => (Some(p), defaults),
                    None => (s.additional_schema(), default_values),
                };
                map.insert(key(k), to_cel(v, child, child_defaults));
            }
            if defaults {
                for (k, p) in &s.properties {
                    if let Some(d) = &p.default
                        && !o.contains_key(k)
                    {
                        map.insert(key(k), to_cel(d, Some(p), false));
                    }
                }
            }
            if s.embedded {
                for k in ["apiVersion", "kind"] {
                    map.entry(Key::String(Arc::new(k.into()))).or_insert_with(|| Cel::String(Arc::new(String::new())));
                }
                map.entry(Key::String(Arc::new("metadata".into())))
                    .or_insert_with(|| Cel::Map(Map { map: Arc::new(HashMap::new()) }));
            }
            Cel::Map(Map { map: Arc::new(map) })
        }
    }
}

/// One rule's outcome, as kube-cel's validator classifies it.
enum Outcome {
    /// The rule evaluated to false; the message to report.
    Failed(String),
    /// The rule could not be run (an evaluation error, a non-bool result, a compile error found
    /// only now); the error text.
    Error(String),
    /// The rule did not compile; the error text (upstream's "rule compile error").
    NotCompiled(String),
}

impl Rules {
    /// The node's rules, compiled; `None` when it has none.
    pub fn compile(s: &Value) -> Option<Rules> {
        let raw = s.get("x-kubernetes-validations")?.as_array()?;
        if raw.is_empty() {
            return None;
        }
        let escaped: Vec<Value> = raw.iter().map(with_reserved_selections_escaped).collect();
        let own = serde_json::json!({ "x-kubernetes-validations": escaped });
        Some(Rules {
            rules: raw.iter().map(Rule::parse).collect(),
            compiled: kube_cel::compile_schema(&own).validations,
        })
    }

    /// Runs each rule against `value` (and `old` where the node correlates with the old
    /// object), as kube-cel's `Validator` does: a transition rule is skipped without `old`
    /// unless `optionalOldSelf` (then `oldSelf` is null); a failed rule's message is its
    /// `messageExpression`'s string, else its message, else `failed rule: <rule>`.
    /// `converted` holds the values as CEL values when an ancestor's rules converted them; what
    /// this node's rules need and is not there is converted here and left there for the nodes
    /// below. `oldSelf` is converted and bound only for rules that read it: binding a variable
    /// copies the value once more (cel's `Box<dyn Val>`).
    fn outcomes(
        &self,
        s: &super::Structural,
        (value, old): (&Value, Option<&Value>),
        converted: &mut Converted,
    ) -> Vec<(&Rule, Outcome)> {
        use kube_cel::CompilationError as E;
        use kube_cel::cel::Value as Cel;
        let runs = |c: &kube_cel::CompilationResult| {
            !c.is_transition_rule || old.is_some() || c.rule.optional_old_self == Some(true)
        };
        let running = || self.compiled.iter().filter_map(|c| c.as_ref().ok()).filter(|c| runs(c));
        let needs_self = running().next().is_some();
        let needs_old_self = running().any(|c| c.is_transition_rule);
        BASE.with(|base| {
            let mut ctx = base.new_inner_scope();
            if needs_self {
                let new = converted.new.get_or_insert_with(|| to_cel(value, Some(s), true));
                ctx.add_variable_from_value("self", new.clone());
            }
            if needs_old_self {
                let old = match old {
                    Some(o) => converted.old.get_or_insert_with(|| to_cel(o, Some(s), true)).clone(),
                    None => Cel::Null,
                };
                ctx.add_variable_from_value("oldSelf", old);
            }
            let mut out = vec![];
            for (rule, compiled) in self.rules.iter().zip(&self.compiled) {
                let outcome = match compiled {
                    Ok(c) if !runs(c) => continue,
                    Ok(c) => match c.program.execute(&ctx) {
                        Ok(Cel::Bool(true)) => continue,
                        Ok(Cel::Bool(false)) => {
                            let expressed = c.message_program.as_ref().and_then(|p| match p.execute(&ctx) {
                                Ok(Cel::String(m)) => Some((*m).clone()),
                                _ => None,
                            });
                            Outcome::Failed(expressed.unwrap_or_else(|| rule.message_or_default()))
                        }
                        Ok(_) => Outcome::Error(format!("rule \"{}\" did not evaluate to bool", c.rule.rule)),
                        Err(e) => Outcome::Error(e.to_string()),
                    },
                    Err(E::Parse { rule, source }) => {
                        Outcome::Error(format!("failed to compile rule \"{rule}\": {source}"))
                    }
                    Err(E::MessageExpressionParse { rule, message_expression, source }) => Outcome::Error(format!(
                        "failed to compile messageExpression \"{message_expression}\" for rule \"{rule}\": {source}"
                    )),
                    Err(e) => Outcome::NotCompiled(e.to_string()),
                };
                out.push((rule, outcome));
            }
            out
        })
    }

    /// Evaluates the rules against `value` (and `old` where the node correlates with the old
    /// object), as `Validator.validateExpressions` does, converting the values with the schema
    /// `s` of the node (the node itself, or the node an `allOf` branch of it belongs to).
    fn validate(
        &self,
        path: &str,
        s: &super::Structural,
        (value, old): (&Value, Option<&Value>),
        converted: &mut Converted,
        out: &mut Vec<Cause>,
    ) {
        if value.is_null() {
            return;
        }
        let ty = &s.ty;
        for (rule, outcome) in self.outcomes(s, (value, old), converted) {
            match outcome {
                Outcome::NotCompiled(message) => {
                    // A CRD stored before rules were checked: upstream's "rule compile error".
                    out.push(Cause::invalid_rendered(
                        path,
                        &format!("{ty:?}"),
                        &format!("rule compile error: {message}"),
                    ));
                }
                Outcome::Failed(detail) => {
                    let at = if rule.field_path.is_empty() {
                        path.to_string()
                    } else {
                        let fp = rule.field_path.trim();
                        if fp.starts_with('.') || fp.starts_with('[') {
                            format!("{path}{}", fp)
                        } else {
                            child(path, fp)
                        }
                    };
                    // Objects and arrays are not printed (`field.OmitValueType`); scalars are.
                    let value_text = match value {
                        Value::Object(_) | Value::Array(_) => None,
                        Value::String(s) => Some(format!("{s:?}")),
                        other => Some(other.to_string()),
                    };
                    out.push(match rule.reason.as_deref() {
                        Some("FieldValueForbidden") => Cause::forbidden(at, &detail),
                        Some("FieldValueRequired") => Cause::required_because(at, &detail),
                        Some("FieldValueDuplicate") => Cause {
                            reason: "FieldValueDuplicate",
                            field: at,
                            message: match value_text {
                                Some(v) => format!("Duplicate value: {v}"),
                                None => "Duplicate value".into(),
                            },
                        },
                        _ => match value_text {
                            Some(v) => Cause::invalid_rendered(at, &v, &detail),
                            None => Cause {
                                reason: "FieldValueInvalid",
                                field: at,
                                message: format!("Invalid value: {detail}"),
                            },
                        },
                    });
                }
                Outcome::Error(cause) => {
                    // Evaluation errors: "<error> evaluating rule: <rule>", with the node's type.
                    out.push(Cause::invalid_rendered(
                        path,
                        &format!("{ty:?}"),
                        &format!("{cause} evaluating rule: {}", rule.error_string()),
                    ));
                }
            }
        }
    }
}

/// The compile errors of a node's rules, at `<path>.x-kubernetes-validations[i].rule` (or
/// `.messageExpression`), as kube-apiserver reports them when the CRD is written.
pub(super) fn compile_errors(s: &Value, path: &str) -> Vec<Cause> {
    let Some(raw) = s.get("x-kubernetes-validations") else { return vec![] };
    let at = child(path, "x-kubernetes-validations");
    let Some(raw) = raw.as_array() else {
        return vec![Cause::invalid_rendered(at, "\"\"", "must be a list of validation rules")];
    };
    let mut causes = vec![];
    for (i, r) in raw.iter().enumerate() {
        let rule = Rule::parse(r);
        let at = index(&at, i);
        if !r.is_object() || !r.get("rule").is_some_and(Value::is_string) {
            causes.push(Cause::required(child(&at, "rule")));
            continue;
        }
        if rule.rule.trim().is_empty() {
            continue;
        }
        if let Err(e) = kube_cel::cel::Program::compile(&rule.rule) {
            causes.push(Cause::invalid_rendered(
                child(&at, "rule"),
                &rule.rendered(),
                &format!("compilation failed: {e}"),
            ));
        }
        if !rule.message_expression.is_empty()
            && let Err(e) = kube_cel::cel::Program::compile(&rule.message_expression)
        {
            causes.push(Cause::invalid_rendered(
                child(&at, "messageExpression"),
                &rule.rendered(),
                &format!("messageExpression compilation failed: {e}"),
            ));
        }
    }
    causes
}

/// A node's new and old values as CEL values, once some rule converted them.
#[derive(Default)]
struct Converted {
    new: Option<kube_cel::cel::Value>,
    old: Option<kube_cel::cel::Value>,
}

impl Converted {
    /// The converted values of a child of this node: field `k` of an object of schema `s`
    /// (`correlated`: whether its old value is the old object's field), or item `i` (and old
    /// item `old_i`) of a list. A child whose ancestors converted nothing converts its own.
    fn child(&self, s: &super::Structural, field: Result<(&str, bool), (usize, Option<usize>)>) -> Converted {
        use kube_cel::cel::Value as Cel;
        let get = |v: &Option<Cel>, old: bool| -> Option<Cel> {
            match (v.as_ref()?, field) {
                (Cel::Map(m), Ok((k, correlated))) => {
                    (!old || correlated).then(|| m.map.get(&cel_key(s, k)).cloned())?
                }
                (Cel::List(l), Err((i, old_i))) => l.get(if old { old_i? } else { i }).cloned(),
                _ => None,
            }
        };
        Converted { new: get(&self.new, false), old: get(&self.old, true) }
    }
}

/// Walks `value` along `s`, evaluating every node's rules: `oldSelf` reaches a node through
/// object properties and map keys, and through `x-kubernetes-list-type: map` items matched by
/// their keys (upstream's correlation); elsewhere transition rules are skipped. Only subtrees
/// with rules are walked, and a value is converted to CEL once, by the highest node whose rules
/// read it (the nodes below take their part of it).
pub(super) fn validate_tree(
    s: &super::Structural,
    path: &str,
    value: &Value,
    old: Option<&Value>,
    out: &mut Vec<Cause>,
) {
    walk(s, path, (value, old), Converted::default(), out);
}

fn walk(
    s: &super::Structural,
    path: &str,
    (value, old): (&Value, Option<&Value>),
    mut converted: Converted,
    out: &mut Vec<Cause>,
) {
    if !s.rules_in_tree {
        return;
    }
    if let Some(rules) = &s.rules {
        rules.validate(path, s, (value, old), &mut converted, out);
    }
    for branch in &s.validation.all_of {
        if let Some(rules) = &branch.rules {
            rules.validate(path, s, (value, old), &mut converted, out);
        }
    }
    match value {
        Value::Object(o) => {
            let correlatable = s.map_type.as_deref().is_none_or(|t| t == "granular" || t == "atomic");
            for (k, v) in o {
                let old_v = old.filter(|_| correlatable).and_then(|o| o.get(k));
                let (child_schema, at) = match s.properties.get(k) {
                    Some(p) => (p, child(path, k)),
                    None => match s.additional_schema() {
                        Some(ap) => (ap, super::key(path, k)),
                        None => continue,
                    },
                };
                if child_schema.rules_in_tree {
                    let c = converted.child(s, Ok((k, correlatable)));
                    walk(child_schema, &at, (v, old_v), c, out);
                }
            }
        }
        Value::Array(items) => {
            let Some(item_schema) = s.items.as_deref().filter(|i| i.rules_in_tree) else { return };
            let old_items = old.and_then(Value::as_array);
            for (i, item) in items.iter().enumerate() {
                let old_i = match (s.list_type.as_deref(), old_items) {
                    (Some("map"), Some(olds)) => {
                        // A missing key is null, as upstream's `MapList` keys are.
                        let key = |x: &Value, k: &str| x.get(k).cloned().unwrap_or(Value::Null);
                        let same_keys = |o: &Value| s.list_map_keys.iter().all(|k| key(o, k) == key(item, k));
                        olds.iter().position(same_keys)
                    }
                    _ => None,
                };
                let old_item = old_i.and_then(|j| old_items?.get(j));
                let c = converted.child(s, Err((i, old_i)));
                walk(item_schema, &index(path, i), (item, old_item), c, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::compile;
    use super::*;

    fn run(schema: Value, obj: Value, old: Option<Value>) -> Vec<String> {
        let s = compile(&schema);
        let mut out = vec![];
        validate_tree(&s, "", &obj, old.as_ref(), &mut out);
        out.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn a_field_named_like_a_reserved_word_is_reachable_unescaped_as_in_kubernetes() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"metadata": {"type": "object", "properties": {"namespace": {"type": "string"}}}},
            "x-kubernetes-validations": [
                {"rule": "!has(self.metadata.namespace) || size(self.metadata.namespace) == 0", "message": "no namespace"},
                {"rule": "!has(self.metadata.__namespace__) || self.metadata.__namespace__ != 'y.namespace'"}]}}});
        assert_eq!(run(schema.clone(), json!({"spec": {"metadata": {}}}), None), Vec::<String>::new());
        assert_eq!(
            run(schema, json!({"spec": {"metadata": {"namespace": "y.namespace"}}}), None),
            [
                "spec: Invalid value: no namespace",
                "spec: Invalid value: failed rule: !has(self.metadata.__namespace__) || self.metadata.__namespace__ != 'y.namespace'",
            ]
        );
        let rule = json!({"rule": "a.in + \"b.in\" + 'c.for\\'.if' + d.inner"});
        assert_eq!(with_reserved_selections_escaped(&rule)["rule"], "a.__in__ + \"b.in\" + 'c.for\\'.if' + d.inner");
    }

    #[test]
    fn rules_report_their_message_as_kube_apiserver_does() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"min": {"type": "integer"}, "max": {"type": "integer",
                "x-kubernetes-validations": [{"rule": "self < 100"}]}},
            "x-kubernetes-validations": [
                {"rule": "self.min <= self.max", "message": "min must not exceed max"},
                {"rule": "self.min > 0", "messageExpression": "'min is ' + string(self.min)", "fieldPath": ".min"},
                {"rule": "self.max != 7", "reason": "FieldValueForbidden", "message": "not seven"}]}}});
        let cases = [
            ("valid", json!({"spec": {"min": 1, "max": 2}}), vec![]),
            (
                "message, messageExpression with fieldPath, scalar value printed",
                json!({"spec": {"min": 0, "max": -1}}),
                vec!["spec: Invalid value: min must not exceed max", "spec.min: Invalid value: min is 0"],
            ),
            ("reason", json!({"spec": {"min": 1, "max": 7}}), vec!["spec: Forbidden: not seven"]),
            (
                "default message on a scalar",
                json!({"spec": {"min": 1, "max": 200}}),
                vec!["spec.max: Invalid value: 200: failed rule: self < 100"],
            ),
        ];
        for (what, obj, want) in cases {
            assert_eq!(run(schema.clone(), obj, None), want, "{what}");
        }
    }

    #[test]
    fn transition_rules_run_only_on_update_and_through_map_list_keys() {
        let schema = json!({"type": "object", "properties": {"items": {"type": "array",
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {"type": "string"}, "size": {"type": "integer",
                "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "may not shrink"}]}}}}}});
        let new = json!({"items": [{"name": "b", "size": 1}, {"name": "a", "size": 5}]});
        assert_eq!(run(schema.clone(), new.clone(), None), Vec::<String>::new(), "create: no oldSelf");
        let old = json!({"items": [{"name": "a", "size": 3}, {"name": "b", "size": 2}]});
        assert_eq!(
            run(schema.clone(), new.clone(), Some(old.clone())),
            ["items[0].size: Invalid value: 1: may not shrink"]
        );
        // With a transition rule on the list too, the items' values come from the list's
        // conversion: the old item must still be the one with the same key, not the same index.
        let mut shared = schema;
        shared["properties"]["items"]["x-kubernetes-validations"] = json!([{"rule": "size(self) >= size(oldSelf)"}]);
        let new = json!({"items": [{"name": "b", "size": 2}, {"name": "a", "size": 1}]});
        assert_eq!(run(shared, new, Some(old)), ["items[1].size: Invalid value: 1: may not shrink"]);
    }

    #[test]
    fn a_rule_that_fails_at_run_time_is_an_error_naming_the_rule() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "x-kubernetes-validations": [{"rule": "self.missing > 1"}]}}});
        let got = run(schema, json!({"spec": {}}), None);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with("spec: Invalid value: \"object\": "), "{got:?}");
        assert!(got[0].ends_with(" evaluating rule: self.missing > 1"), "{got:?}");
    }

    #[test]
    fn rules_see_values_converted_by_the_schema_of_their_node() {
        // Each rule passes only if `self` is converted as kube-cel converts it.
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {
                "max-size": {"type": "integer"},
                "namespace": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "since": {"type": "string", "format": "date-time"},
                "every": {"type": "string", "format": "duration"},
                "blob": {"type": "string", "format": "byte"},
                "port": {"x-kubernetes-int-or-string": true},
                "mode": {"type": "string", "default": "fast"},
                "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                    "x-kubernetes-preserve-unknown-fields": true}},
            "x-kubernetes-validations": [
                {"rule": "self.max__dash__size == 3", "message": "field names are escaped"},
                {"rule": "self.__namespace__ == 'ns'", "message": "reserved words are escaped"},
                {"rule": "self.labels['app.kubernetes.io/name'] == 'x'", "message": "map keys are not escaped"},
                {"rule": "self.since < timestamp('2027-01-01T00:00:00Z')", "message": "date-time is a timestamp"},
                {"rule": "self.every == duration('90s')", "message": "duration is a duration"},
                {"rule": "size(self.blob) == 2", "message": "byte is bytes"},
                {"rule": "self.port == '8080'", "message": "int-or-string stays a string"},
                {"rule": "self.mode == 'fast'", "message": "defaults are filled in"},
                {"rule": "self.template.kind == '' && size(self.template.metadata) == 0",
                    "message": "an embedded resource has kind and metadata"}]}}});
        let obj = json!({"spec": {"max-size": 3, "namespace": "ns", "labels": {"app.kubernetes.io/name": "x"},
            "since": "2026-11-27T06:00:00Z", "every": "1m30s", "blob": "aGk=", "port": "8080", "template": {}}});
        assert_eq!(run(schema, obj, None), Vec::<String>::new());
    }

    #[test]
    fn each_rule_reports_its_own_message_even_when_rules_repeat() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"n": {"type": "integer"}},
            "x-kubernetes-validations": [
                {"rule": "self.n > 1", "message": "first"},
                {"rule": "self.n > 1", "message": "second", "fieldPath": ".n"},
                {"rule": "self.n != oldSelf.n", "message": "must change"},
                {"rule": "oldSelf != null || self.n > 5", "optionalOldSelf": true, "message": "no old self"}]}}});
        let cases = [
            (
                "create: the transition rule is skipped, optionalOldSelf runs with a null oldSelf",
                json!({"spec": {"n": 1}}),
                None,
                vec!["spec: Invalid value: first", "spec.n: Invalid value: second", "spec: Invalid value: no old self"],
            ),
            (
                "update: the transition rule runs",
                json!({"spec": {"n": 2}}),
                Some(json!({"spec": {"n": 2}})),
                vec!["spec: Invalid value: must change"],
            ),
            ("create: every rule that runs passes", json!({"spec": {"n": 6}}), None, vec![]),
        ];
        for (what, obj, old, want) in cases {
            assert_eq!(run(schema.clone(), obj, old), want, "{what}");
        }
    }
}
