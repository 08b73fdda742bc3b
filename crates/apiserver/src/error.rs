//! Errors as `metav1.Status`, the only error shape kubectl and kube-rs understand.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Value, json};

use crate::resources::ResourceDef;

/// One `details.causes` entry: a field path and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

impl Cause {
    pub fn invalid(field: impl Into<String>, value: impl std::fmt::Display, detail: &str) -> Cause {
        Cause {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: \"{value}\": {detail}"),
        }
    }
    pub fn required(field: impl Into<String>) -> Cause {
        Cause { reason: "FieldValueRequired", field: field.into(), message: "Required value".into() }
    }
    /// `field.Required(path, detail)` with a detail: `Required value: <detail>`.
    pub fn required_because(field: impl Into<String>, detail: &str) -> Cause {
        Cause { reason: "FieldValueRequired", field: field.into(), message: format!("Required value: {detail}") }
    }
    /// `field.Invalid` with the value already rendered as Go prints it (`60`, `[]string{"a"}`).
    pub fn invalid_rendered(field: impl Into<String>, rendered: &str, detail: &str) -> Cause {
        Cause {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {rendered}: {detail}"),
        }
    }
    /// `field.NotSupported`: `Unsupported value: "x": supported values: "a", "b"`.
    pub fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Cause {
        let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        Cause {
            reason: "FieldValueNotSupported",
            field: field.into(),
            message: format!("Unsupported value: {value:?}: supported values: {}", supported.join(", ")),
        }
    }
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Cause {
        Cause { reason: "FieldValueForbidden", field: field.into(), message: format!("Forbidden: {detail}") }
    }
    fn render(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

pub type Result<T, E = ApiError> = std::result::Result<T, E>;

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { code, reason, message: message.into(), details: None }
    }
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }
    pub fn not_found_path() -> ApiError {
        ApiError::new(404, "NotFound", "the server could not find the requested resource")
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "InternalError", format!("Internal error occurred: {}", message.into()))
    }
    pub fn method_not_allowed(method: &str) -> ApiError {
        ApiError::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }
    pub fn unauthorized() -> ApiError {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(413, "RequestEntityTooLarge", format!("Request entity too large: limit is {limit}"))
    }
    pub fn unsupported_media(content_type: &str) -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format ({content_type}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
            ),
        )
    }
    fn with_details(self, def: &ResourceDef, name: &str, kind: &str) -> ApiError {
        self.with_group_details(&def.group, name, kind)
    }
    /// `metav1.StatusDetails`: `name`, `group` and `kind`, each left out when empty (`omitempty`).
    fn with_group_details(mut self, group: &str, name: &str, kind: &str) -> ApiError {
        let mut d = serde_json::Map::new();
        for (k, v) in [("name", name), ("group", group), ("kind", kind)] {
            if !v.is_empty() {
                d.insert(k.into(), json!(v));
            }
        }
        self.details = Some(Value::Object(d));
        self
    }
    pub fn not_found(def: &ResourceDef, name: &str) -> ApiError {
        ApiError::new(404, "NotFound", format!("{} \"{name}\" not found", def.qualified_plural())).with_details(
            def,
            name,
            &def.plural,
        )
    }
    pub fn already_exists(def: &ResourceDef, name: &str) -> ApiError {
        ApiError::new(409, "AlreadyExists", format!("{} \"{name}\" already exists", def.qualified_plural()))
            .with_details(def, name, &def.plural)
    }
    pub fn conflict(def: &ResourceDef, name: &str, why: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{name}\": {why}", def.qualified_plural()),
        )
        .with_details(def, name, &def.plural)
    }
    pub fn stale(def: &ResourceDef, name: &str) -> ApiError {
        ApiError::conflict(
            def,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }
    pub fn forbidden(def: &ResourceDef, name: &str, why: impl std::fmt::Display) -> ApiError {
        ApiError::forbidden_resource(&def.group, &def.plural, name, why)
    }
    /// kube-apiserver's `NewForbidden`: `<resource>.<group> "<name>" is forbidden: <why>`, or
    /// `forbidden: <why>` when there is no resource (a non-resource path).
    pub fn forbidden_resource(group: &str, resource: &str, name: &str, why: impl std::fmt::Display) -> ApiError {
        let qualified = if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") };
        let message = match (resource.is_empty(), name.is_empty()) {
            (true, _) => format!("forbidden: {why}"),
            (false, true) => format!("{qualified} is forbidden: {why}"),
            (false, false) => format!("{qualified} \"{name}\" is forbidden: {why}"),
        };
        ApiError::new(403, "Forbidden", message).with_group_details(group, name, resource)
    }
    /// 422 with one cause per field, worded like kube-apiserver's `errors.NewInvalid`.
    pub fn invalid(def: &ResourceDef, name: &str, causes: Vec<Cause>) -> ApiError {
        ApiError::invalid_kind(&def.group, &def.kind, name, causes)
    }
    /// [`ApiError::invalid`] for a kind that is not a stored resource (a `TokenRequest`).
    pub fn invalid_kind(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> ApiError {
        let mut rendered: Vec<String> = Vec::new();
        for r in causes.iter().map(Cause::render) {
            if !rendered.contains(&r) {
                rendered.push(r);
            }
        }
        let summary = if rendered.len() == 1 { rendered[0].clone() } else { format!("[{}]", rendered.join(", ")) };
        let qualified_kind = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
        let mut e = ApiError::new(422, "Invalid", format!("{qualified_kind} \"{name}\" is invalid: {summary}"))
            .with_group_details(group, name, kind);
        let causes: Vec<Value> =
            causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect();
        if let Some(d) = e.details.as_mut() {
            d["causes"] = Value::Array(causes);
        }
        e
    }
    pub fn gone(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    pub fn status_json(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.status_json()).unwrap_or_default();
        (code, [(http::header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}
