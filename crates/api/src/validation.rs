//! Format checks of `k8s.io/apimachinery/pkg/util/validation` (DNS labels and subdomains, label
//! keys and values, domain-prefixed paths, condition reasons), shared by the Job and JobSet
//! admission code. Messages are upstream's, byte for byte; no regex engine is used.

use serde_json::json;

use crate::field::{FieldError, quote};

pub(crate) const LABEL_KEY_ERR: &str =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
pub(crate) const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
pub(crate) const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
pub(crate) const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
pub(crate) const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
pub(crate) const HTTP_PATH_FMT: &str = r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+";

/// `validation.RegexError`.
pub(crate) fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!("{msg} (e.g. {}regex used for validation is '{fmt}')", examples.join(" or "))
}

pub(crate) fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// Go's `%q` of a `[]string`: `["A" "B"]`.
pub(crate) fn go_quoted_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}

pub(crate) fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
pub(crate) fn is_label_key_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_alnum(b[0])
        && is_alnum(b[b.len() - 1])
        && b.iter().all(|&c| is_alnum(c) || c == b'-' || c == b'_' || c == b'.')
}

/// `content.IsLabelKey` / `IsQualifiedName`.
pub(crate) fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let name = match value.split_once('/') {
        None => value,
        Some((_, suffix)) if suffix.contains('/') => {
            return vec![format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(LABEL_KEY_ERR, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
            )];
        }
        Some((prefix, suffix)) => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(dns1123_subdomain_errors(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            suffix
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !is_label_key_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(LABEL_KEY_ERR, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
        ));
    }
    errs
}

/// `content.IsLabelValue`.
pub(crate) fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !value.is_empty() && !is_label_key_name(value) {
        errs.push(regex_error(LABEL_VALUE_ERR, &format!("({LABEL_KEY_FMT})?"), &["MyValue", "my_value", "12345"]));
    }
    errs
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` without the length limit.
pub(crate) fn matches_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty() && edge(b[0]) && edge(b[b.len() - 1]) && b.iter().all(|&c| edge(c) || c == b'-')
}

/// `IsDNS1123Label(s)` is empty.
pub(crate) fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && matches_dns1123_label(s)
}

/// `IsDNS1123Subdomain`.
pub fn dns1123_subdomain_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !value.split('.').all(matches_dns1123_label) {
        let fmt = format!(r"{DNS1123_LABEL_FMT}(\.{DNS1123_LABEL_FMT})*");
        errs.push(regex_error(DNS1123_SUBDOMAIN_ERR, &fmt, &["example.com"]));
    }
    errs
}

/// `IsDomainPrefixedPath`.
pub(crate) fn validate_domain_prefixed_path(path: &str, value: &str, errs: &mut Vec<FieldError>) {
    if value.is_empty() {
        errs.push(FieldError::required(path, ""));
        return;
    }
    let Some((host, rest)) = value.split_once('/').filter(|(h, r)| !h.is_empty() && !r.is_empty()) else {
        errs.push(FieldError::invalid(
            path,
            &json!(value),
            r#"must be a domain-prefixed path (such as "acme.io/foo")"#,
        ));
        return;
    };
    for msg in dns1123_subdomain_errors(host) {
        errs.push(FieldError::invalid(path, &json!(host), msg));
    }
    let http_path_char = |c: u8| c.is_ascii_alphanumeric() || b"/-._~%!$&'()*+,;=:".contains(&c);
    if !rest.bytes().all(http_path_char) {
        errs.push(FieldError::invalid(path, &json!(rest), regex_error("Invalid path", HTTP_PATH_FMT, &[])));
    }
}

const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_ERR: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";

/// `IsDNS1035Label`: the length message first, then the format message.
pub fn dns1035_label_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63));
    }
    let b = value.as_bytes();
    let ok = !b.is_empty()
        && b[0].is_ascii_lowercase()
        && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
        && b.iter().all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
    if !ok {
        errs.push(regex_error(DNS1035_LABEL_ERR, DNS1035_LABEL_FMT, &["my-name", "abc-123"]));
    }
    errs
}

/// `[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?`
pub(crate) fn is_condition_reason(s: &str) -> bool {
    let b = s.as_bytes();
    let last = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    !b.is_empty()
        && b[0].is_ascii_alphabetic()
        && (b.len() == 1 || last(b[b.len() - 1]))
        && b.iter().all(|&c| last(c) || c == b',' || c == b':')
}
