//! What an admission webhook answers, shared by every place that admits JobSets and AppWrappers:
//! the Status of a denial as apimachinery builds it (`errors.NewInvalid`, an `ErrorList`'s
//! aggregate), and AppWrapper's defaulting with the requesting user (upstream's mutating webhook,
//! which needs to know who asks).

use serde_json::{Map, Value, json};

use crate::appwrapper::keys::{USER_LABEL, USERID_LABEL};
use crate::field::{FieldError, quote};

/// `field.ErrorList.ToAggregate().Error()`: one error's text alone, several as `[a, b]`, a text
/// repeated only once.
pub fn aggregate(errs: &[FieldError]) -> String {
    aggregate_texts(errs.iter().map(ToString::to_string))
}

/// [`aggregate`] of plain error texts (`utilerrors.NewAggregate(...).Error()`).
pub fn aggregate_texts(texts: impl IntoIterator<Item = String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for t in texts {
        if !seen.contains(&t) {
            seen.push(t);
        }
    }
    match seen.len() {
        1 => seen.remove(0),
        _ => format!("[{}]", seen.join(", ")),
    }
}

/// The Status of `apierrors.NewInvalid(<kind>.<group>, name, errs)`: 422 `Invalid`, one cause
/// per error, the message `<Kind>.<group> "<name>" is invalid: <aggregate>`. As Go marshals a
/// `metav1.Status` with no type meta (what a webhook puts in its response's `status`).
pub fn invalid_status(group: &str, kind: &str, name: &str, errs: &[FieldError]) -> Value {
    let qualified = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
    let message = match errs.is_empty() {
        true => format!("{qualified} {} is invalid", quote(name)),
        false => format!("{qualified} {} is invalid: {}", quote(name), aggregate(errs)),
    };
    let causes: Vec<Value> =
        errs.iter().map(|e| json!({"reason": e.reason(), "message": e.message(), "field": e.field})).collect();
    let mut details = Map::new();
    if !name.is_empty() {
        details.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    details.insert("kind".into(), json!(kind));
    if !causes.is_empty() {
        details.insert("causes".into(), Value::Array(causes));
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Invalid",
        "details": details,
        "code": 422,
    })
}

/// AppWrapper's `SanitizeLabel`: the first 63 bytes, every character but `-`, `_`, `.` and ASCII
/// letters and digits replaced by `_` (each byte of a character cut in two, too), then `-`, `_`
/// and `.` trimmed from both ends.
pub fn sanitize_label(s: &str) -> String {
    let bytes = &s.as_bytes()[..s.len().min(63)];
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            out.push(if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' });
        }
        out.extend(std::iter::repeat_n('_', chunk.invalid().len()));
    }
    out.trim_matches(|c| matches!(c, '-' | '_' | '.')).to_string()
}

/// Upstream AppWrapper's defaulting on create: labels `workload.codeflare.dev/user` and
/// `workload.codeflare.dev/userid` with the requesting user's name and uid (sanitized), over any
/// value the object carried. (Its default queue name needs Kueue, which is not here.)
pub fn default_appwrapper_user(obj: &mut Value, username: &str, uid: &str) {
    let Some(root) = obj.as_object_mut() else { return };
    let meta = root.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else { return };
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if !labels.is_object() {
        *labels = json!({});
    }
    let labels = labels.as_object_mut().expect("made an object");
    labels.insert(USER_LABEL.into(), json!(sanitize_label(username)));
    labels.insert(USERID_LABEL.into(), json!(sanitize_label(uid)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_aggregate_is_one_text_alone_or_several_in_brackets_without_repeats() {
        let a = FieldError::forbidden("spec.a", "no");
        let b = FieldError::required("spec.b", "");
        assert_eq!(aggregate(std::slice::from_ref(&a)), "spec.a: Forbidden: no");
        assert_eq!(aggregate(&[a.clone(), b.clone(), a]), "[spec.a: Forbidden: no, spec.b: Required value]");
        assert_eq!(aggregate_texts(["x".to_string()]), "x");
    }

    #[test]
    fn an_invalid_status_is_apimachinery_s_new_invalid() {
        let errs = [FieldError::invalid("spec.x", &json!(3), "must be small"), FieldError::internal("<nil>", "boom")];
        let s = invalid_status("jobset.x-k8s.io", "JobSet", "js", &errs);
        assert_eq!(
            s,
            json!({
                "metadata": {}, "status": "Failure", "reason": "Invalid", "code": 422,
                "message": "JobSet.jobset.x-k8s.io \"js\" is invalid: [spec.x: Invalid value: 3: must be small, <nil>: Internal error: boom]",
                "details": {"name": "js", "group": "jobset.x-k8s.io", "kind": "JobSet", "causes": [
                    {"reason": "FieldValueInvalid", "message": "Invalid value: 3: must be small", "field": "spec.x"},
                    {"reason": "InternalError", "message": "Internal error: boom", "field": "<nil>"},
                ]},
            })
        );
    }

    #[test]
    fn labels_are_sanitized_as_appwrapper_does() {
        let (x70, x63, a61) = ("x".repeat(70), "x".repeat(63), "a".repeat(61));
        let cut = format!("{a61}中");
        let cases = [
            ("kubernetes-admin", "kubernetes-admin"),
            ("system:serviceaccount:ns:sa", "system_serviceaccount_ns_sa"),
            ("--a b--", "a_b"),
            ("", ""),
            (x70.as_str(), x63.as_str()),
            // A 3-byte character cut in two at byte 63: its stub becomes `_`s, then trimmed.
            (cut.as_str(), a61.as_str()),
            ("é-x", "x"),
        ];
        for (input, want) in cases {
            assert_eq!(sanitize_label(input), want, "{input:?}");
        }
    }

    #[test]
    fn the_user_labels_override_what_the_object_carried() {
        let mut aw = json!({"metadata": {"name": "a", "labels": {USER_LABEL: "mallory", "team": "x"}}});
        default_appwrapper_user(&mut aw, "alice@example.com", "1234-abcd");
        assert_eq!(
            aw["metadata"]["labels"],
            json!({USER_LABEL: "alice_example.com", USERID_LABEL: "1234-abcd", "team": "x"})
        );
        let mut bare = json!({"metadata": {"name": "a"}});
        default_appwrapper_user(&mut bare, "bob", "");
        assert_eq!(bare["metadata"]["labels"], json!({USER_LABEL: "bob", USERID_LABEL: ""}));
    }
}
