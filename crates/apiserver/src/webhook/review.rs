//! `admission.k8s.io/v1` AdmissionReview: the request sent to a webhook, the checks of its
//! answer, and the errors kube-apiserver makes of both (k8s.io/apiserver
//! pkg/admission/plugin/webhook/{request,errors}, pkg/util/webhook/error.go, and the
//! dispatchers' `apierrors.NewInternalError`).

use serde_json::{Value, json};

use super::matching::Operation;
use crate::auth::Identity;
use crate::error::ApiError;

/// What is being admitted, in the terms of an AdmissionRequest.
#[derive(Debug, Clone)]
pub struct RequestInfo {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    pub namespace: String,
    pub operation: Operation,
    pub user: Identity,
    pub dry_run: bool,
    /// `CreateOptions`, `UpdateOptions` or `PatchOptions` as the request gave them.
    pub options: Value,
}

/// The AdmissionReview version a webhook is sent: the first of its `admissionReviewVersions`
/// this server speaks, or kube-apiserver's error.
pub fn review_version(versions: &[String]) -> Result<&'static str, String> {
    for v in versions {
        match v.as_str() {
            "v1" => return Ok("v1"),
            "v1beta1" => return Ok("v1beta1"),
            _ => {}
        }
    }
    Err("could not create admission objects: webhook does not accept known AdmissionReview versions (v1, v1beta1)"
        .into())
}

/// `CreateV1AdmissionReview` (v1beta1 has the same shape).
pub fn request(
    version: &str,
    uid: &str,
    info: &RequestInfo,
    object: Option<&Value>,
    old_object: Option<&Value>,
) -> Value {
    let mut user = json!({"username": info.user.username});
    if !info.user.uid.is_empty() {
        user["uid"] = json!(info.user.uid);
    }
    if !info.user.groups.is_empty() {
        user["groups"] = json!(info.user.groups);
    }
    if !info.user.extra.is_empty() {
        user["extra"] = json!(info.user.extra);
    }
    let gvk = json!({"group": info.group, "version": info.version, "kind": info.kind});
    let gvr = json!({"group": info.group, "version": info.version, "resource": info.resource});
    let mut req = json!({
        "uid": uid,
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": info.name,
        "namespace": info.namespace,
        "operation": info.operation.as_str(),
        "userInfo": user,
        "object": object,
        "oldObject": old_object,
        "dryRun": info.dry_run,
        "options": info.options,
    });
    if !info.subresource.is_empty() {
        req["subResource"] = json!(info.subresource);
        req["requestSubResource"] = json!(info.subresource);
    }
    if info.namespace.is_empty() {
        req.as_object_mut().map(|o| o.remove("namespace"));
    }
    if info.name.is_empty() {
        req.as_object_mut().map(|o| o.remove("name"));
    }
    json!({"apiVersion": format!("admission.k8s.io/{version}"), "kind": "AdmissionReview", "request": req})
}

/// What a webhook answered, once checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub allowed: bool,
    /// `response.status` (a `metav1.Status`), if given.
    pub status: Option<Value>,
    /// A JSON patch (mutating webhooks only), decoded from base64.
    pub patch: Option<Value>,
    pub warnings: Vec<String>,
}

/// Why a webhook call failed.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// kube-apiserver's `ErrCallingWebhook`: the webhook could not be asked or answered
    /// nonsense. `failurePolicy` decides; the text follows `failed calling webhook "<name>": `.
    Calling(String),
    /// The webhook answered, and its answer cannot be applied (a patch that does not apply):
    /// always an error, whatever the failure policy.
    Internal(String),
}

/// Reads the body of a webhook's 2xx answer as the rest client and `VerifyAdmissionResponse`
/// do; `Err` is the reason of an `ErrCallingWebhook`.
pub fn verify(version: &str, uid: &str, mutating: bool, content_type: &str, body: &[u8]) -> Result<Answer, String> {
    let media = content_type.split(';').next().unwrap_or_default().trim();
    if !media.is_empty() && media != "application/json" {
        return Err(format!("failed to call webhook: serializer for {media} doesn't exist"));
    }
    let review: Value = serde_json::from_slice(body)
        .map_err(|e| format!("failed to call webhook: couldn't get version/kind; json parse error: {e}"))?;
    let (api_version, kind) = (
        review.get("apiVersion").and_then(Value::as_str).unwrap_or_default(),
        review.get("kind").and_then(Value::as_str).unwrap_or_default(),
    );
    if kind.is_empty() {
        return Err(format!("failed to call webhook: Object 'Kind' is missing in '{}'", String::from_utf8_lossy(body)));
    }
    let invalid = |why: String| format!("received invalid webhook response: {why}");
    let Some(resp) = review.get("response").filter(|r| !r.is_null()) else {
        return Err(invalid("webhook response was absent".into()));
    };
    let patch_b64 = resp.get("patch").and_then(Value::as_str).filter(|p| !p.is_empty());
    let patch_type = resp.get("patchType").and_then(Value::as_str);
    if version == "v1" {
        let got_uid = resp.get("uid").and_then(Value::as_str).unwrap_or_default();
        if got_uid != uid {
            return Err(invalid(format!("expected response.uid={uid:?}, got {got_uid:?}")));
        }
        let (group, ver) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        if (group, ver, kind) != ("admission.k8s.io", "v1", "AdmissionReview") {
            return Err(invalid(format!(
                "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {api_version}, Kind={kind}"
            )));
        }
        if mutating {
            match (patch_b64, patch_type) {
                (Some(_), None) => {
                    return Err(invalid("webhook returned response.patch but not response.patchType".into()));
                }
                (None, Some(_)) => {
                    return Err(invalid("webhook returned response.patchType but not response.patch".into()));
                }
                (_, Some("")) => return Err(invalid("webhook returned invalid response.patchType of \"\"".into())),
                _ => {}
            }
        } else {
            if patch_b64.is_some() {
                return Err(invalid("validating webhook may not return response.patch".into()));
            }
            if patch_type.is_some() {
                return Err(invalid("validating webhook may not return response.patchType".into()));
            }
        }
    }
    let patch = match patch_b64.filter(|_| mutating) {
        None => None,
        Some(b64) => {
            if let Some(t) = patch_type.filter(|t| *t != "JSONPatch") {
                return Err(format!("unsupported patch type {t:?}"));
            }
            use base64::Engine;
            let raw = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| format!("failed to call webhook: illegal base64 data: {e}"))?;
            let p: Value = serde_json::from_slice(&raw)
                .map_err(|e| format!("received undecodable patch in webhook response: {e}"))?;
            if !p.is_array() {
                return Err("received undecodable patch in webhook response: a JSON patch must be an array".into());
            }
            Some(p)
        }
    };
    Ok(Answer {
        allowed: resp.get("allowed").and_then(Value::as_bool).unwrap_or(false),
        status: resp.get("status").filter(|s| !s.is_null()).cloned(),
        patch,
        warnings: resp
            .get("warnings")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default(),
    })
}

/// The reason of the `ErrCallingWebhook` for a non-2xx answer: the rest client's error, the
/// Status' message when the body is one.
pub fn error_answer(code: u16, body: &[u8]) -> String {
    let status: Option<Value> = serde_json::from_slice(body).ok();
    if let Some(msg) = status
        .as_ref()
        .filter(|s| s.get("kind").and_then(Value::as_str) == Some("Status"))
        .and_then(|s| s.get("message").and_then(Value::as_str))
    {
        return format!("failed to call webhook: {msg}");
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let generic = match code {
        404 => "the server could not find the requested resource".to_string(),
        _ if text.is_empty() => {
            format!("an error on the server (\"unknown\") has prevented the request from succeeding (code {code})")
        }
        _ => format!("an error on the server ({text:?}) has prevented the request from succeeding"),
    };
    format!("failed to call webhook: {generic}")
}

/// The `metav1.StatusReason`s a webhook may give, as static strings (the error type's reason
/// is one); any other reason is dropped.
const REASONS: [&str; 20] = [
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Gone",
    "Invalid",
    "ServerTimeout",
    "StoreReadError",
    "Timeout",
    "TooManyRequests",
    "BadRequest",
    "MethodNotAllowed",
    "NotAcceptable",
    "RequestEntityTooLarge",
    "UnsupportedMediaType",
    "InternalError",
    "Expired",
    "ServiceUnavailable",
    "UnknownReason",
];

/// `webhookerrors.ToStatusErr`: a denial, with the webhook's code (at least 400), reason and
/// details, and `admission webhook "<name>" denied the request: <message>`.
pub fn denied(webhook: &str, status: Option<&Value>) -> ApiError {
    let empty = json!({});
    let status = status.unwrap_or(&empty);
    let code = status.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok()).unwrap_or(0).max(400);
    let reason_text = status.get("reason").and_then(Value::as_str).unwrap_or_default();
    let reason = REASONS.iter().find(|r| **r == reason_text).copied().unwrap_or("");
    let denied_by = format!("admission webhook {webhook:?} denied the request");
    let message = match status.get("message").and_then(Value::as_str).filter(|m| !m.is_empty()) {
        Some(m) => format!("{denied_by}: {m}"),
        None if !reason_text.is_empty() => format!("{denied_by}: {reason_text}"),
        None => format!("{denied_by} without explanation"),
    };
    let mut e = ApiError::new(code, reason, message);
    e.details = status.get("details").filter(|d| !d.is_null()).cloned();
    e
}

/// `apierrors.NewInternalError(err)`: 500, `Internal error occurred: <err>`, one cause.
pub fn internal(err: &str) -> ApiError {
    let mut e = ApiError::internal(err);
    e.details = Some(json!({"causes": [{"message": err}]}));
    e
}

/// The error of an `ErrCallingWebhook` that fails the request (`failurePolicy: Fail`).
pub fn calling_error(webhook: &str, reason: &str) -> ApiError {
    internal(&format!("failed calling webhook {webhook:?}: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn b64(v: &Value) -> String {
        base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(v).unwrap())
    }

    fn review(response: Value) -> Vec<u8> {
        serde_json::to_vec(
            &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
        )
        .unwrap()
    }

    #[test]
    fn answers_are_checked_as_verify_admission_response_does() {
        let patch = json!([{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]);
        let ok = |allowed: bool| Answer { allowed, status: None, patch: None, warnings: vec![] };
        // (what, mutating, content type, body, outcome)
        type Case = (&'static str, bool, &'static str, Vec<u8>, Result<Answer, String>);
        let cases: Vec<Case> = vec![
            ("allowed", false, "application/json", review(json!({"uid": "u", "allowed": true})), Ok(ok(true))),
            (
                "a patch",
                true,
                "application/json",
                review(json!({"uid": "u", "allowed": true, "patchType": "JSONPatch", "patch": b64(&patch), "warnings": ["w"]})),
                Ok(Answer { allowed: true, status: None, patch: Some(patch.clone()), warnings: vec!["w".into()] }),
            ),
            (
                "another uid",
                false,
                "application/json",
                review(json!({"uid": "x", "allowed": true})),
                Err(r#"received invalid webhook response: expected response.uid="u", got "x""#.into()),
            ),
            (
                "no response",
                false,
                "application/json",
                serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})).unwrap(),
                Err("received invalid webhook response: webhook response was absent".into()),
            ),
            (
                "another kind",
                false,
                "application/json",
                serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Status", "response": {"uid": "u"}})).unwrap(),
                Err("received invalid webhook response: expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got v1, Kind=Status".into()),
            ),
            (
                "a validating webhook's patch",
                false,
                "application/json",
                review(json!({"uid": "u", "allowed": true, "patchType": "JSONPatch", "patch": b64(&patch)})),
                Err("received invalid webhook response: validating webhook may not return response.patch".into()),
            ),
            (
                "a patch without its type",
                true,
                "application/json",
                review(json!({"uid": "u", "allowed": true, "patch": b64(&patch)})),
                Err("received invalid webhook response: webhook returned response.patch but not response.patchType".into()),
            ),
            (
                "not JSON",
                false,
                "text/plain",
                b"garbage".to_vec(),
                Err("failed to call webhook: serializer for text/plain doesn't exist".into()),
            ),
            (
                "a patch that is no JSON patch",
                true,
                "application/json",
                review(json!({"uid": "u", "allowed": true, "patchType": "JSONPatch", "patch": b64(&json!({"a": 1}))})),
                Err("received undecodable patch in webhook response: a JSON patch must be an array".into()),
            ),
        ];
        for (what, mutating, ct, body, want) in cases {
            assert_eq!(verify("v1", "u", mutating, ct, &body), want, "{what}");
        }
        let garbage = verify("v1", "u", false, "application/json", b"garbage").unwrap_err();
        assert!(
            garbage.starts_with("failed to call webhook: couldn't get version/kind; json parse error: "),
            "{garbage}"
        );
    }

    #[test]
    fn denials_are_worded_and_coded_as_to_status_err() {
        let e = denied("v.kb.io", Some(&json!({"code": 403, "reason": "Forbidden", "message": "no"})));
        assert_eq!(
            (e.code, e.reason, e.message.as_str()),
            (403, "Forbidden", r#"admission webhook "v.kb.io" denied the request: no"#)
        );
        let e = denied("v.kb.io", None);
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, r#"admission webhook "v.kb.io" denied the request without explanation"#)
        );
        let e = denied("v.kb.io", Some(&json!({"code": 200, "reason": "Invalid"})));
        assert_eq!(
            (e.code, e.reason, e.message.as_str()),
            (400, "Invalid", r#"admission webhook "v.kb.io" denied the request: Invalid"#)
        );
        let details = json!({"name": "js", "kind": "JobSet", "causes": [{"field": "spec", "message": "bad"}]});
        let e =
            denied("v.kb.io", Some(&json!({"code": 422, "reason": "Invalid", "message": "bad", "details": details})));
        assert_eq!((e.code, e.details), (422, Some(details)));
        let e = calling_error(
            "m.kb.io",
            "failed to call webhook: Post \"https://s.ns.svc:443/m?timeout=10s\": context deadline exceeded",
        );
        assert_eq!(e.code, 500);
        assert_eq!(
            e.message,
            "Internal error occurred: failed calling webhook \"m.kb.io\": failed to call webhook: Post \"https://s.ns.svc:443/m?timeout=10s\": context deadline exceeded"
        );
    }

    #[test]
    fn the_request_carries_what_admission_review_v1_has() {
        let info = RequestInfo {
            group: "jobset.x-k8s.io".into(),
            version: "v1alpha2".into(),
            kind: "JobSet".into(),
            resource: "jobsets".into(),
            subresource: String::new(),
            name: "js".into(),
            namespace: "default".into(),
            operation: Operation::Update,
            user: Identity { username: "alice".into(), groups: vec!["g".into()], ..Identity::default() },
            dry_run: false,
            options: json!({"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}),
        };
        let r = request("v1", "u1", &info, Some(&json!({"a": 1})), Some(&json!({"a": 0})));
        assert_eq!(r["apiVersion"], "admission.k8s.io/v1");
        let q = &r["request"];
        assert_eq!(q["uid"], "u1");
        assert_eq!(q["kind"], json!({"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"}));
        assert_eq!(q["resource"]["resource"], "jobsets");
        assert_eq!(q["operation"], "UPDATE");
        assert_eq!(q["userInfo"], json!({"username": "alice", "groups": ["g"]}));
        assert_eq!((q["object"]["a"].clone(), q["oldObject"]["a"].clone()), (json!(1), json!(0)));
        assert!(q.get("subResource").is_none());
        assert_eq!(review_version(&["v2".into(), "v1beta1".into()]), Ok("v1beta1"));
        assert!(review_version(&["v2".into()]).is_err());
    }
}
