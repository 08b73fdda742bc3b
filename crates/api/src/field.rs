//! Field-level validation errors, mirroring `k8s.io/apimachinery/pkg/util/validation/field`.
//!
//! A [`FieldError`] renders exactly as kube-apiserver renders a `field.Error` in a 422 Status:
//! [`FieldError::reason`] is the cause `reason` (`FieldValueInvalid`, ...), [`FieldError::message`]
//! is the cause `message` (`ErrorBody()`), and `Display` gives `<field>: <message>` (`Error()`),
//! the form used in the Status `message` (`<Kind> "<name>" is invalid: [<err>, <err>]`, where
//! upstream drops repeated texts).
//!
//! Bad values are kept pre-rendered the way `ErrorBody()` renders them: strings Go-quoted (`%q`),
//! numbers and booleans bare, anything else as Go's `json.Marshal` would write it (map keys sorted,
//! `<`, `>`, `&` escaped). See [`render`], [`quote`] and [`go_json`].

use std::fmt;

use serde_json::Value;

/// The kind of a field error (`field.ErrorType`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    Invalid,
    Required,
    NotSupported {
        supported: Vec<String>,
    },
    Forbidden,
    TooMany,
    Duplicate,
    TooLong,
    /// `field.InternalError`; the value is never shown.
    Internal,
}

impl ErrorKind {
    /// The human-readable prefix of a message (`ErrorType.String()`).
    pub fn label(&self) -> &'static str {
        match self {
            ErrorKind::Invalid => "Invalid value",
            ErrorKind::Required => "Required value",
            ErrorKind::NotSupported { .. } => "Unsupported value",
            ErrorKind::Forbidden => "Forbidden",
            ErrorKind::TooMany => "Too many",
            ErrorKind::Duplicate => "Duplicate value",
            ErrorKind::TooLong => "Too long",
            ErrorKind::Internal => "Internal error",
        }
    }
}

/// One validation problem of one field (`field.Error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `spec.podFailurePolicy.rules[0].onExitCodes.values[1]`.
    pub field: String,
    pub kind: ErrorKind,
    /// Upstream's `Detail` (for NotSupported: `supported values: "A", "B"`).
    pub detail: String,
    /// The bad value, already rendered; `None` when upstream omits it.
    pub value: Option<String>,
}

impl FieldError {
    /// `field.Invalid(path, value, detail)`.
    pub fn invalid(field: impl Into<String>, value: &Value, detail: impl Into<String>) -> Self {
        Self { field: field.into(), kind: ErrorKind::Invalid, detail: detail.into(), value: Some(render(value)) }
    }

    /// `field.Invalid(path, value, detail)` with a value rendered by the caller (see [`render`]).
    pub fn invalid_rendered(field: impl Into<String>, value: String, detail: impl Into<String>) -> Self {
        Self { field: field.into(), kind: ErrorKind::Invalid, detail: detail.into(), value: Some(value) }
    }

    /// `field.Invalid(path, field.OmitValueType{}, detail)`.
    pub fn invalid_omit(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { field: field.into(), kind: ErrorKind::Invalid, detail: detail.into(), value: None }
    }

    /// `field.Required(path, detail)`.
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { field: field.into(), kind: ErrorKind::Required, detail: detail.into(), value: None }
    }

    /// `field.NotSupported(path, value, supported)`.
    pub fn not_supported(field: impl Into<String>, value: &Value, supported: &[&str]) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| quote(s)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self {
            field: field.into(),
            kind: ErrorKind::NotSupported { supported: supported.iter().map(|s| s.to_string()).collect() },
            detail,
            value: Some(render(value)),
        }
    }

    /// `field.Forbidden(path, detail)`.
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { field: field.into(), kind: ErrorKind::Forbidden, detail: detail.into(), value: None }
    }

    /// `field.TooMany(path, actual, max)`.
    pub fn too_many(field: impl Into<String>, actual: usize, max: usize) -> Self {
        let items = if max == 1 { "item" } else { "items" };
        Self {
            field: field.into(),
            kind: ErrorKind::TooMany,
            detail: format!("must have at most {max} {items}"),
            value: Some(actual.to_string()),
        }
    }

    /// `field.Duplicate(path, value)`.
    pub fn duplicate(field: impl Into<String>, value: &Value) -> Self {
        Self { field: field.into(), kind: ErrorKind::Duplicate, detail: String::new(), value: Some(render(value)) }
    }

    /// `field.TooLong(path, value, max)` (the value is never shown).
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        let bytes = if max == 1 { "byte" } else { "bytes" };
        Self {
            field: field.into(),
            kind: ErrorKind::TooLong,
            detail: format!("may not be more than {max} {bytes}"),
            value: None,
        }
    }

    /// `field.InternalError(path, err)`; a nil path renders as `<nil>`.
    pub fn internal(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { field: field.into(), kind: ErrorKind::Internal, detail: detail.into(), value: None }
    }

    /// The Status cause `reason` (`metav1.CauseType`).
    pub fn reason(&self) -> &'static str {
        match self.kind {
            ErrorKind::Invalid => "FieldValueInvalid",
            ErrorKind::Required => "FieldValueRequired",
            ErrorKind::NotSupported { .. } => "FieldValueNotSupported",
            ErrorKind::Forbidden => "FieldValueForbidden",
            ErrorKind::TooMany => "FieldValueTooMany",
            ErrorKind::Duplicate => "FieldValueDuplicate",
            ErrorKind::TooLong => "FieldValueTooLong",
            ErrorKind::Internal => "InternalError",
        }
    }

    /// The Status cause `message` (`ErrorBody()`), e.g. `Invalid value: 3: must be less than or equal to 2`.
    pub fn message(&self) -> String {
        let mut s = self.kind.label().to_string();
        let shows_value =
            !matches!(self.kind, ErrorKind::Required | ErrorKind::Forbidden | ErrorKind::TooLong | ErrorKind::Internal);
        if let (true, Some(v)) = (shows_value, &self.value) {
            s.push_str(": ");
            s.push_str(v);
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message())
    }
}

impl std::error::Error for FieldError {}

/// Renders a bad value as `ErrorBody()` does: strings `%q`, numbers/booleans bare, the rest as JSON
/// (`null` for an absent pointer).
pub fn render(v: &Value) -> String {
    match v {
        Value::String(s) => quote(s),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => go_json(v),
    }
}

/// Go's `strconv.Quote` / `%q` for a string.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `json.Marshal` of a value decoded into maps: object keys sorted, HTML characters escaped.
pub fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(v, &mut out);
    out
}

fn write_go_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_go_json_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json_str(k, out);
                out.push(':');
                write_go_json(&map[k.as_str()], out);
            }
            out.push('}');
        }
    }
}

/// A JSON string as Go's encoder writes it.
pub(crate) fn write_go_json_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_render_like_kube_apiserver() {
        let cases: Vec<(FieldError, &str, &str)> = vec![
            (
                FieldError::invalid("spec.parallelism", &json!(3), "must be less than or equal to 2"),
                "FieldValueInvalid",
                "Invalid value: 3: must be less than or equal to 2",
            ),
            (
                FieldError::invalid("spec.managedBy", &json!("x"), "bad"),
                "FieldValueInvalid",
                r#"Invalid value: "x": bad"#,
            ),
            (FieldError::invalid("spec.completions", &Value::Null, "field is immutable"), "FieldValueInvalid", {
                "Invalid value: null: field is immutable"
            }),
            (
                FieldError::invalid("l", &json!({"b": "2", "a": "<1>"}), "d"),
                "FieldValueInvalid",
                r#"Invalid value: {"a":"\u003c1\u003e","b":"2"}: d"#,
            ),
            (FieldError::invalid_omit("spec.x", "is wrong"), "FieldValueInvalid", "Invalid value: is wrong"),
            (
                FieldError::required("spec.template.spec.restartPolicy", r#"valid values: "OnFailure", "Never""#),
                "FieldValueRequired",
                r#"Required value: valid values: "OnFailure", "Never""#,
            ),
            (FieldError::required("spec.selector", ""), "FieldValueRequired", "Required value"),
            (
                FieldError::not_supported("a", &json!("Foo"), &["Count", "FailIndex", "FailJob", "Ignore"]),
                "FieldValueNotSupported",
                r#"Unsupported value: "Foo": supported values: "Count", "FailIndex", "FailJob", "Ignore""#,
            ),
            (FieldError::forbidden("f", "not allowed"), "FieldValueForbidden", "Forbidden: not allowed"),
            (FieldError::too_many("r", 21, 20), "FieldValueTooMany", "Too many: 21: must have at most 20 items"),
            (FieldError::too_many("r", 2, 1), "FieldValueTooMany", "Too many: 2: must have at most 1 item"),
            (FieldError::duplicate("v[1]", &json!(3)), "FieldValueDuplicate", "Duplicate value: 3"),
            (FieldError::too_long("m", 63), "FieldValueTooLong", "Too long: may not be more than 63 bytes"),
            (FieldError::internal("<nil>", "boom"), "InternalError", "Internal error: boom"),
        ];
        for (err, reason, message) in cases {
            assert_eq!(err.reason(), reason, "{err:?}");
            assert_eq!(err.message(), message, "{err:?}");
        }
    }

    #[test]
    fn display_prefixes_the_field_path() {
        let e = FieldError::duplicate("spec.x[1]", &json!("a"));
        assert_eq!(e.to_string(), r#"spec.x[1]: Duplicate value: "a""#);
    }

    #[test]
    fn quote_escapes_like_go() {
        assert_eq!(quote("a\"b\\c\n\u{1}"), r#""a\"b\\c\n\x01""#);
        assert_eq!(quote("héllo"), "\"héllo\"");
    }
}
