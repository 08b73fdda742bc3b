//! Kubernetes name validation, as `k8s.io/apimachinery/pkg/util/validation`, with the same
//! error messages. Each check returns the list of problems; an empty list means valid.
//!
//! The regular expressions apimachinery uses are implemented as hand-written character checks;
//! the regex text still appears in the messages because clients show it to users.

use serde_json::Value;

/// Maximum length of a DNS-1123 label (`validation.DNS1123LabelMaxLength`).
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// Maximum length of a DNS-1123 subdomain (`validation.DNS1123SubdomainMaxLength`).
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Maximum length of the name part of a qualified name.
pub const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
/// Maximum length of a label value (`validation.LabelValueMaxLength`).
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;
/// Maximum total size of annotation keys and values (`TotalAnnotationSizeLimitB`).
pub const TOTAL_ANNOTATION_SIZE_LIMIT_B: usize = 256 * (1 << 10);

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR_MSG: &str =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `validation.MaxLenError`.
pub fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// `validation.EmptyError`.
pub fn empty_error() -> String {
    "must be non-empty".to_string()
}

/// `validation.RegexError`: the message, examples and the regex text.
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(example);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(fmt);
    out.push_str("')");
    out
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
fn is_dns1123_label_shape(s: &str) -> bool {
    let b = s.as_bytes();
    let lower_alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            lower_alnum(first) && lower_alnum(last) && b.iter().all(|&c| lower_alnum(c) || c == b'-')
        }
        _ => false,
    }
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
fn is_dns1123_subdomain_shape(s: &str) -> bool {
    s.split('.').all(is_dns1123_label_shape)
}

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`
fn is_qualified_name_part_shape(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter().all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `validation.IsDNS1123Label`: at most 63 characters of `[a-z0-9-]`, alphanumeric at both ends.
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !is_dns1123_label_shape(s) {
        if is_dns1123_subdomain_shape(s) {
            // A valid subdomain but not a valid label: it has dots.
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(DNS1123_LABEL_ERR_MSG, DNS1123_LABEL_FMT, &["my-name", "123-abc"]));
        }
    }
    errs
}

/// `validation.IsDNS1123Subdomain`: at most 253 characters, dot-separated DNS-1123 labels.
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !is_dns1123_subdomain_shape(s) {
        errs.push(regex_error(DNS1123_SUBDOMAIN_ERR_MSG, DNS1123_SUBDOMAIN_FMT, &["example.com"]));
    }
    errs
}

/// `validation.IsQualifiedName`: an optional DNS-1123 subdomain prefix and `/`, then a name of
/// at most 63 characters of `[-A-Za-z0-9_.]`, alphanumeric at both ends. Label and annotation
/// keys are qualified names.
pub fn qualified_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let mut parts = s.splitn(3, '/');
    let name = match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, _) => name,
        (Some(prefix), Some(name), None) => {
            if prefix.is_empty() {
                errs.push(format!("prefix part {}", empty_error()));
            } else {
                errs.extend(dns1123_subdomain(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push(format!("name part {}", empty_error()));
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(format!("name part {}", max_len_error(QUALIFIED_NAME_MAX_LENGTH)));
    }
    if !is_qualified_name_part_shape(name) {
        errs.push(format!(
            "name part {}",
            regex_error(QUALIFIED_NAME_ERR_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
        ));
    }
    errs
}

/// `validation.IsValidLabelValue`: empty, or at most 63 characters of `[-A-Za-z0-9_.]`,
/// alphanumeric at both ends.
pub fn label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !s.is_empty() && !is_qualified_name_part_shape(s) {
        errs.push(regex_error(LABEL_VALUE_ERR_MSG, LABEL_VALUE_FMT, &["MyValue", "my_value", "12345"]));
    }
    errs
}

/// The bad value as reported in an error tuple: strings as-is, anything else as JSON.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `metav1validation.ValidateLabels` for a JSON `metadata.labels` value: every key must be a
/// qualified name and every value a label value. Returns `(field path, bad value, message)`;
/// as upstream, the path is `field` itself (not per key). `null` means no labels.
pub fn validate_labels(labels: &Value, field: &str) -> Vec<(String, String, String)> {
    let mut errs = Vec::new();
    let map = match labels {
        Value::Null => return errs,
        Value::Object(map) => map,
        other => {
            errs.push((
                field.to_string(),
                value_text(other),
                "must be a map of string keys to string values".to_string(),
            ));
            return errs;
        }
    };
    for (k, v) in map {
        for msg in qualified_name(k) {
            errs.push((field.to_string(), k.clone(), msg));
        }
        match v {
            Value::String(s) => {
                for msg in label_value(s) {
                    errs.push((field.to_string(), s.clone(), msg));
                }
            }
            other => errs.push((format!("{field}[{k}]"), value_text(other), "must be a string".to_string())),
        }
    }
    errs
}

/// `apimachinery ValidateAnnotations` for a JSON `metadata.annotations` value: every key must be
/// a qualified name (case-insensitively) and keys plus values may total at most 256 KiB.
/// Returns `(field path, bad value, message)`; `null` means no annotations.
pub fn validate_annotations(annotations: &Value, field: &str) -> Vec<(String, String, String)> {
    let mut errs = Vec::new();
    let map = match annotations {
        Value::Null => return errs,
        Value::Object(map) => map,
        other => {
            errs.push((
                field.to_string(),
                value_text(other),
                "must be a map of string keys to string values".to_string(),
            ));
            return errs;
        }
    };
    let mut total = 0usize;
    for (k, v) in map {
        // Lowercased as upstream's `strings.ToLower`, without a copy for the usual lowercase key.
        let lower = if k.bytes().any(|b| !b.is_ascii() || b.is_ascii_uppercase()) {
            std::borrow::Cow::Owned(k.to_lowercase())
        } else {
            std::borrow::Cow::Borrowed(k.as_str())
        };
        for msg in qualified_name(&lower) {
            errs.push((field.to_string(), k.clone(), msg));
        }
        total += k.len();
        match v {
            Value::String(s) => total += s.len(),
            other => errs.push((format!("{field}[{k}]"), value_text(other), "must be a string".to_string())),
        }
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_B {
        errs.push((
            field.to_string(),
            String::new(),
            format!("must have at most {TOTAL_ANNOTATION_SIZE_LIMIT_B} bytes"),
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    const NAME_PART_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

    #[test]
    fn dns1123_label_accepts_lowercase_alphanumerics_and_inner_dashes() {
        for ok in ["a", "0", "abc", "a-b", "a--b", "123-abc", "my-name", &"a".repeat(63)] {
            assert!(dns1123_label(ok).is_empty(), "{ok:?} should be valid");
        }
    }

    #[test]
    fn dns1123_label_rejects_bad_shapes_with_upstream_message() {
        for bad in ["", "A", "aBc", "-a", "a-", "a_b", "a b", "ä", "a/b"] {
            assert_eq!(dns1123_label(bad), vec![LABEL_MSG.to_string()], "{bad:?}");
        }
    }

    #[test]
    fn dns1123_label_with_dots_says_must_not_contain_dots() {
        assert_eq!(dns1123_label("a.b"), vec!["must not contain dots".to_string()]);
    }

    #[test]
    fn dns1123_label_length_limit_is_63() {
        assert!(dns1123_label(&"a".repeat(63)).is_empty());
        assert_eq!(dns1123_label(&"a".repeat(64)), vec!["must be no more than 63 characters".to_string()]);
        assert_eq!(
            dns1123_label(&"A".repeat(64)),
            vec!["must be no more than 63 characters".to_string(), LABEL_MSG.to_string()]
        );
    }

    #[test]
    fn dns1123_subdomain_accepts_dotted_labels() {
        for ok in ["a", "example.com", "a.b.c", "1.2.3", "a-b.c-d", &"a".repeat(253)] {
            assert!(dns1123_subdomain(ok).is_empty(), "{ok:?} should be valid");
        }
    }

    #[test]
    fn dns1123_subdomain_rejects_bad_shapes_with_upstream_message() {
        for bad in ["", ".", "a.", ".a", "a..b", "A.com", "a_b.com", "-a.com", "a-.com", "a.-b"] {
            assert_eq!(dns1123_subdomain(bad), vec![SUBDOMAIN_MSG.to_string()], "{bad:?}");
        }
    }

    #[test]
    fn dns1123_subdomain_length_limit_is_253() {
        let long = format!("{}.{}", "a".repeat(200), "b".repeat(53));
        assert_eq!(long.len(), 254);
        assert_eq!(dns1123_subdomain(&long), vec!["must be no more than 253 characters".to_string()]);
        assert!(dns1123_subdomain(&long[1..]).is_empty());
    }

    #[test]
    fn qualified_name_accepts_names_and_prefixed_names() {
        for ok in ["a", "A", "MyName", "my.name", "my_name", "123-abc", "example.com/MyName", "a/b", &"x".repeat(63)] {
            assert!(qualified_name(ok).is_empty(), "{ok:?} should be valid");
        }
    }

    #[test]
    fn qualified_name_rejects_leading_dash_underscore_and_trailing_dot() {
        for bad in ["-a", "_a", "a.", "a_", "a b", "a$"] {
            assert_eq!(qualified_name(bad), vec![NAME_PART_MSG.to_string()], "{bad:?}");
        }
    }

    #[test]
    fn qualified_name_empty_name_reports_both_errors() {
        assert_eq!(qualified_name(""), vec!["name part must be non-empty".to_string(), NAME_PART_MSG.to_string()]);
        assert_eq!(
            qualified_name("a.com/"),
            vec!["name part must be non-empty".to_string(), NAME_PART_MSG.to_string()]
        );
    }

    #[test]
    fn qualified_name_name_part_limit_is_63() {
        assert!(qualified_name(&format!("example.com/{}", "n".repeat(63))).is_empty());
        assert_eq!(qualified_name(&"n".repeat(64)), vec!["name part must be no more than 63 characters".to_string()]);
    }

    #[test]
    fn more_than_one_slash_is_not_a_qualified_name_and_annotation_keys_are_lowercased_first() {
        let errs = qualified_name("a/b/c");
        assert_eq!(errs.len(), 1);
        assert!(errs[0].starts_with("a qualified name must consist of"), "{errs:?}");
        let annotations = serde_json::json!({"Example.COM/Key": "v", "Bad_Prefix/k": "v"});
        let causes = validate_annotations(&annotations, "metadata.annotations");
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].1, "Bad_Prefix/k");
    }

    #[test]
    fn qualified_name_checks_prefix_as_subdomain() {
        assert_eq!(qualified_name("/a"), vec!["prefix part must be non-empty".to_string()]);
        assert_eq!(qualified_name("Example.com/a"), vec![format!("prefix part {SUBDOMAIN_MSG}")]);
        assert_eq!(qualified_name("ex_ample/a"), vec![format!("prefix part {SUBDOMAIN_MSG}")]);
        assert_eq!(
            qualified_name(&format!("{}/a", "p".repeat(254))),
            vec!["prefix part must be no more than 253 characters".to_string()]
        );
    }

    #[test]
    fn qualified_name_with_two_slashes_is_rejected() {
        assert_eq!(
            qualified_name("a/b/c"),
            vec!["a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".to_string()]
        );
    }

    #[test]
    fn label_value_accepts_empty_and_mixed_case() {
        for ok in ["", "a", "MyValue", "my_value", "12345", "a.b-c_d", &"v".repeat(63)] {
            assert!(label_value(ok).is_empty(), "{ok:?} should be valid");
        }
    }

    #[test]
    fn label_value_rejects_bad_shapes_with_upstream_message() {
        for bad in ["-x", "x-", "_x", ".x", "a b", "a/b", "é"] {
            assert_eq!(label_value(bad), vec![VALUE_MSG.to_string()], "{bad:?}");
        }
    }

    #[test]
    fn label_value_length_limit_is_63() {
        assert_eq!(label_value(&"v".repeat(64)), vec!["must be no more than 63 characters".to_string()]);
    }

    #[test]
    fn validate_labels_reports_bad_keys_and_values_at_the_field() {
        assert!(validate_labels(&Value::Null, "metadata.labels").is_empty());
        assert!(validate_labels(&json!({"app": "web", "example.com/Tier": ""}), "metadata.labels").is_empty());
        let errs = validate_labels(&json!({"-bad": "ok", "good": "bad-"}), "metadata.labels");
        assert_eq!(
            errs,
            vec![
                ("metadata.labels".to_string(), "-bad".to_string(), NAME_PART_MSG.to_string()),
                ("metadata.labels".to_string(), "bad-".to_string(), VALUE_MSG.to_string()),
            ]
        );
    }

    #[test]
    fn validate_labels_rejects_non_string_values_and_non_objects() {
        let errs = validate_labels(&json!({"a": 1}), "metadata.labels");
        assert_eq!(errs, vec![("metadata.labels[a]".to_string(), "1".to_string(), "must be a string".to_string())]);
        assert_eq!(validate_labels(&json!([1]), "metadata.labels").len(), 1);
    }

    #[test]
    fn validate_annotations_allows_any_value_and_uppercase_keys() {
        let big_value = "x".repeat(1000);
        assert!(
            validate_annotations(&json!({"Example.COM/Key": big_value, "k": "-_ anything"}), "metadata.annotations")
                .is_empty()
        );
        assert!(validate_annotations(&Value::Null, "metadata.annotations").is_empty());
    }

    #[test]
    fn validate_annotations_rejects_bad_keys() {
        let errs = validate_annotations(&json!({"_k": "v"}), "metadata.annotations");
        assert_eq!(errs, vec![("metadata.annotations".to_string(), "_k".to_string(), NAME_PART_MSG.to_string())]);
    }

    #[test]
    fn validate_annotations_total_size_limit_is_256_kib() {
        let at_limit = json!({"k": "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT_B - 1)});
        assert!(validate_annotations(&at_limit, "metadata.annotations").is_empty());
        let over = json!({"k": "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT_B)});
        assert_eq!(
            validate_annotations(&over, "metadata.annotations"),
            vec![("metadata.annotations".to_string(), String::new(), "must have at most 262144 bytes".to_string())]
        );
    }
}
