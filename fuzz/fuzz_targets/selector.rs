//! Label and field selectors (`jobset_apiserver::selector`): the string forms
//! (`LabelSelector::parse`, `FieldSelector::parse`), the structured `metav1.LabelSelector`
//! (`from_label_selector_json`), and matching them against objects' labels and fields.
//!
//! Input: a header line (`label`, `field` or `json`), the selector (one line, JSON for `json`),
//! then `key=value` lines: the labels or fields matched against.
#![no_main]

use std::collections::BTreeMap;

use jobset_apiserver::selector::{FieldSelector, LabelSelector, from_label_selector_json};
use jobset_fuzz::{choose, header};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

#[derive(Clone, Copy)]
enum Mode {
    Label,
    Field,
    Json,
}

/// Matching through every entry point agrees.
fn check_label_match(selector: &LabelSelector, labels: &BTreeMap<String, String>) {
    let by_map = selector.matches(labels);
    let json: Value = labels.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
    assert_eq!(by_map, selector.matches_json(Some(&json)), "{selector} on {labels:?}");
    assert_eq!(by_map, selector.matches_fn(|k| labels.get(k).map(String::as_str)), "{selector} on {labels:?}");
}

/// The canonical form parses, to a selector with the same canonical form.
fn check_label_round_trip(selector: &LabelSelector) {
    let text = selector.to_string();
    let again =
        LabelSelector::parse(&text).unwrap_or_else(|e| panic!("the canonical form {text:?} does not parse: {e}"));
    assert_eq!(again.to_string(), text);
}

fuzz_target!(|data: &[u8]| {
    let Some((head, rest)) = header(data) else { return };
    let mode = *choose(head, &[("label", Mode::Label), ("field", Mode::Field), ("json", Mode::Json)]);
    let (line, pairs) = rest.split_once('\n').unwrap_or((rest, ""));
    let map: BTreeMap<String, String> =
        pairs.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
    match mode {
        Mode::Label => {
            if let Ok(selector) = LabelSelector::parse(line) {
                check_label_round_trip(&selector);
                check_label_match(&selector, &map);
            }
        }
        Mode::Field => {
            if let Ok(selector) = FieldSelector::parse(line) {
                // The string form parses to the same terms; their order may differ, as upstream's
                // (`ParseSelector` sorts the terms as written, `String()` writes `==` as `=`).
                let text = selector.to_string();
                let again = FieldSelector::parse(&text)
                    .unwrap_or_else(|e| panic!("the string form {text:?} does not parse: {e}"));
                let sorted = |s: &FieldSelector| {
                    let mut fields: Vec<String> = s.fields().map(str::to_string).collect();
                    fields.sort();
                    fields
                };
                assert_eq!(sorted(&again), sorted(&selector), "{text}");
                let get = |f: &str| map.get(f).map(String::as_str);
                assert_eq!(again.matches(get), selector.matches(get), "{text} on {map:?}");
                if selector.matches(get)
                    && let Some((field, value)) = selector.first_exact()
                {
                    assert_eq!(get(field).unwrap_or_default(), value, "{text}");
                }
            }
        }
        Mode::Json => {
            let Ok(v) = serde_json::from_str::<Value>(line) else { return };
            if let Ok(selector) = from_label_selector_json(&v) {
                check_label_round_trip(&selector);
                check_label_match(&selector, &map);
            }
        }
    }
});
