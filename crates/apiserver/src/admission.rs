//! Admission hook points: per-kind defaulting, validation and warnings, called on create and update.
//!
//! The JobSet and Job webhooks of later work plug in here; built-in defaults live in `builtin`.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::auth::Identity;
use crate::error::Cause;
use crate::resources::ResourceDef;
use crate::selector::LabelSelector;

/// Read access to stored objects, for hooks that check a request against the cluster (as a
/// webhook would with GET), within the request's transaction.
pub trait Lookup {
    /// Object `name` of resource `group`/`plural` in `namespace`, as stored.
    fn get(&self, group: &str, plural: &str, namespace: &str, name: &str) -> Option<Value>;
    /// The objects of resource `group`/`plural` in `namespace` whose labels `selector` matches,
    /// as stored (a webhook's LIST).
    fn list(&self, group: &str, plural: &str, namespace: &str, selector: &LabelSelector) -> Vec<Value>;
    /// The objects of resource `group`/`plural` in `namespace` whose JSON, as serde_json writes
    /// it (compact, as the store keeps it), contains `needle`: a hook looking for objects with
    /// one field value parses only those that may have it (it still checks the parsed ones).
    fn list_containing(&self, group: &str, plural: &str, namespace: &str, needle: &[u8]) -> Vec<Value> {
        let objects = self.list(group, plural, namespace, &LabelSelector::everything());
        objects.into_iter().filter(|v| serde_json::to_vec(v).is_ok_and(|raw| contains(&raw, needle))).collect()
    }
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

pub trait AdmissionHook: Send + Sync {
    /// Mutates a new object (create) or the merged result of an update.
    fn default(&self, _obj: &mut Value, _old: Option<&Value>) {}
    /// [`AdmissionHook::default`] for a hook that needs to know who is asking (`requester`, as
    /// an admission webhook's `userInfo`); the server calls this one.
    fn default_as(&self, obj: &mut Value, old: Option<&Value>, _requester: &Identity) {
        self.default(obj, old);
    }
    /// Returns every problem found; an empty list admits the object.
    fn validate(&self, _obj: &Value, _old: Option<&Value>, _lookup: &dyn Lookup) -> Vec<Cause> {
        vec![]
    }
    /// Admission of a new object that reads the cluster and may change or refuse it, as a
    /// kube-apiserver admission plugin (or a webhook's plain denial): `Err(why)` is answered
    /// 403 Forbidden, `<resource> "<name>" is forbidden: <why>`.
    /// Runs after the defaults, before the admission webhooks (kube-apiserver's mutating
    /// admission plugins run before `MutatingAdmissionWebhook`) and validation.
    fn admit_create(&self, _obj: &mut Value, _lookup: &dyn Lookup) -> Result<(), String> {
        Ok(())
    }
    /// Validating admission that reads the cluster and may refuse a create or an update (`old`),
    /// as a kube-apiserver validating admission plugin: `Err(why)` is answered 403 Forbidden,
    /// `<resource> "<name>" is forbidden: <why>`. Runs after validation.
    fn validate_admission(&self, _obj: &Value, _old: Option<&Value>, _lookup: &dyn Lookup) -> Result<(), String> {
        Ok(())
    }
    /// Warnings about an admitted object, as an admission webhook's `warnings`: the request
    /// succeeds and the client shows each (kubectl: `Warning: <text>` on stderr).
    fn warnings(&self, _obj: &Value, _old: Option<&Value>) -> Vec<String> {
        vec![]
    }
    /// Whether a patch that changes only metadata (labels, annotations, finalizers, owner
    /// references) must reach this hook. When no hook of a built-in kind needs them, the server
    /// merges such patches into the stored metadata without rebuilding the object (controllers
    /// write them to pods by the thousand).
    fn sees_metadata_patches(&self) -> bool {
        true
    }
    /// Whether [`AdmissionHook::validate_status`] checks anything: the status path copies the
    /// stored object for it only then (pods, whose status thousands of node agents write, skip).
    fn validates_status(&self) -> bool {
        false
    }
    /// Validates a write through the status subresource (a registry's status strategy
    /// `ValidateUpdate`): `obj` is the stored object with the written status, `old` the stored
    /// one. Returns every problem found; an empty list admits the write. Called only when
    /// [`AdmissionHook::validates_status`] says so.
    fn validate_status(&self, _obj: &Value, _old: &Value) -> Vec<Cause> {
        vec![]
    }
}

/// Hooks by (API group, kind).
#[derive(Default, Clone)]
pub struct Admission {
    hooks: HashMap<(String, String), Vec<Arc<dyn AdmissionHook>>>,
}

impl Admission {
    pub fn register(&mut self, group: &str, kind: &str, hook: Arc<dyn AdmissionHook>) {
        self.hooks.entry((group.to_string(), kind.to_string())).or_default().push(hook);
    }

    /// Adds every hook of `other` after this one's.
    pub fn extend(&mut self, other: Admission) {
        for (k, hooks) in other.hooks {
            self.hooks.entry(k).or_default().extend(hooks);
        }
    }

    fn for_def(&self, def: &ResourceDef) -> &[Arc<dyn AdmissionHook>] {
        self.hooks.get(&(def.group.clone(), def.kind.clone())).map(Vec::as_slice).unwrap_or_default()
    }

    /// Whether a hook of the kind must see patches that change only metadata.
    pub fn sees_metadata_patches(&self, def: &ResourceDef) -> bool {
        self.for_def(def).iter().any(|h| h.sees_metadata_patches())
    }

    /// Runs every hook's defaulting for a request by `requester`.
    pub fn apply_defaults(&self, def: &ResourceDef, obj: &mut Value, old: Option<&Value>, requester: &Identity) {
        for h in self.for_def(def) {
            h.default_as(obj, old, requester);
        }
    }

    /// Runs every hook's [`AdmissionHook::admit_create`] until one refuses.
    pub fn admit_create(&self, def: &ResourceDef, obj: &mut Value, lookup: &dyn Lookup) -> Result<(), String> {
        self.for_def(def).iter().try_for_each(|h| h.admit_create(obj, lookup))
    }

    /// Runs every hook's [`AdmissionHook::validate_admission`] until one refuses.
    pub fn validate_admission(
        &self,
        def: &ResourceDef,
        obj: &Value,
        old: Option<&Value>,
        lookup: &dyn Lookup,
    ) -> Result<(), String> {
        self.for_def(def).iter().try_for_each(|h| h.validate_admission(obj, old, lookup))
    }

    pub fn validate(&self, def: &ResourceDef, obj: &Value, old: Option<&Value>, lookup: &dyn Lookup) -> Vec<Cause> {
        self.for_def(def).iter().flat_map(|h| h.validate(obj, old, lookup)).collect()
    }

    /// Whether a hook of the kind validates status writes.
    pub fn validates_status(&self, def: &ResourceDef) -> bool {
        self.for_def(def).iter().any(|h| h.validates_status())
    }

    /// Every hook's [`AdmissionHook::validate_status`] for a status write.
    pub fn validate_status(&self, def: &ResourceDef, obj: &Value, old: &Value) -> Vec<Cause> {
        self.for_def(def).iter().flat_map(|h| h.validate_status(obj, old)).collect()
    }

    pub fn warnings(&self, def: &ResourceDef, obj: &Value, old: Option<&Value>) -> Vec<String> {
        self.for_def(def).iter().flat_map(|h| h.warnings(obj, old)).collect()
    }
}

/// Total runes of warning text a response carries before each warning is truncated
/// (`truncateAtTotalRunes` in k8s.io/apiserver/pkg/endpoints/filters/warning.go).
const TRUNCATE_AT_TOTAL_RUNES: usize = 4 * 1024;
/// What each warning is truncated to once the total is exceeded (`truncateItemRunes`).
const TRUNCATE_ITEM_RUNES: usize = 256;

/// The `Warning` header values for `texts`, as kube-apiserver's warning recorder writes them
/// (`WithWarningRecorder`): `299 - "<text>"` with `"` and `\` escaped; empty and repeated texts
/// and texts with control characters left out; once the texts exceed 4096 characters together,
/// every text cut to 256 characters, and later ones dropped when that total is reached again.
pub fn warning_headers(texts: &[String]) -> Vec<String> {
    warning_headers_limited(texts, TRUNCATE_AT_TOTAL_RUNES, TRUNCATE_ITEM_RUNES)
}

/// `NewWarningHeader(299, "-", text)` of k8s.io/apimachinery/pkg/util/net.
fn warning_header(text: &str) -> Option<String> {
    if text.chars().any(char::is_control) {
        return None;
    }
    let mut h = String::with_capacity(text.len() + 8);
    h.push_str("299 - \"");
    for c in text.chars() {
        if c == '"' || c == '\\' {
            h.push('\\');
        }
        h.push(c);
    }
    h.push('"');
    Some(h)
}

/// Upstream's `recorder.AddWarning`, applied to each text in order.
fn warning_headers_limited(texts: &[String], total: usize, item: usize) -> Vec<String> {
    let cut = |t: &str| -> (String, usize) {
        let n = t.chars().count();
        if n > item { (t.chars().take(item).collect(), item) } else { (t.to_string(), n) }
    };
    let mut seen = std::collections::HashSet::new();
    let mut ordered: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    let (mut written, mut truncating) = (0, false);
    for t in texts.iter().map(String::as_str) {
        if t.is_empty() || (truncating && written >= total) || !seen.insert(t) {
            continue;
        }
        ordered.push(t);
        let (text, len) = if truncating { cut(t) } else { (t.to_string(), t.chars().count()) };
        let Some(header) = warning_header(&text) else { continue };
        if written + len <= total || truncating {
            written += len;
            out.push(header);
            continue;
        }
        // Over the total: from here on every warning is truncated, the earlier ones too.
        truncating = true;
        written = 0;
        out.clear();
        for w in &ordered {
            let (text, len) = cut(w);
            if let Some(header) = warning_header(&text) {
                written += len;
                out.push(header);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_needle_is_found_anywhere_in_the_bytes() {
        let cases: [(&[u8], &[u8], bool); 7] = [
            (b"abc", b"", true),
            (b"", b"a", false),
            (b"abc", b"abc", true),
            (b"xxabcx", b"abc", true),
            (b"ababac", b"abac", true),
            (b"abab", b"abac", false),
            (b"ab", b"abc", false),
        ];
        for (haystack, needle, want) in cases {
            assert_eq!(contains(haystack, needle), want, "{:?} in {:?}", needle, haystack);
        }
    }

    #[test]
    fn warnings_are_quoted_escaped_and_deduplicated_like_kube_apiserver() {
        let got = warning_headers(&strings(&["mytext1", "", "say \"hi\" \\ bye", "mytext1", "my\ntext", "Iñtërnâtiô"]));
        assert_eq!(got, ["299 - \"mytext1\"", r#"299 - "say \"hi\" \\ bye""#, "299 - \"Iñtërnâtiô\""]);
    }

    /// Upstream's `TestTruncation` (warning_test.go), with its limits of 25 and 5.
    #[test]
    fn warnings_over_the_total_are_truncated_like_kube_apiserver() {
        let limited = |texts: &[&str]| warning_headers_limited(&strings(texts), 25, 5);
        let first = ["aaaaaaaaaa", "aaaaaaaaaa", "bb", "ccc", "Iñtërnâtiô"];
        assert_eq!(limited(&first), ["299 - \"aaaaaaaaaa\"", "299 - \"bb\"", "299 - \"ccc\"", "299 - \"Iñtërnâtiô\""]);
        let mut more = first.to_vec();
        more.push("eeeeeeeeee");
        assert_eq!(
            limited(&more),
            ["299 - \"aaaaa\"", "299 - \"bb\"", "299 - \"ccc\"", "299 - \"Iñtër\"", "299 - \"eeeee\""]
        );
        // Truncated items count 5 each: "fffff" reaches the total of 25, "ggggg" is dropped.
        more.extend(["ffffffffff", "gggggggggg"]);
        assert_eq!(
            limited(&more),
            [
                "299 - \"aaaaa\"",
                "299 - \"bb\"",
                "299 - \"ccc\"",
                "299 - \"Iñtër\"",
                "299 - \"eeeee\"",
                "299 - \"fffff\""
            ]
        );
    }
}
