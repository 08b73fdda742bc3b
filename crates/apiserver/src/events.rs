//! events.k8s.io/v1 `Event` served over core/v1 `Event` storage, converted field by field as
//! kube-apiserver does, so that kube-runtime's `Recorder` (events.k8s.io) and `kubectl describe`
//! (core/v1 events with `involvedObject` field selectors) see the same events.

use serde_json::{Map, Value};

/// (core/v1 field, events.k8s.io/v1 field) for the fields whose names differ.
const RENAMES: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];

fn rename(v: Value, api_version: &str, to_v1: bool) -> Value {
    let Value::Object(mut m) = v else { return v };
    let mut out = Map::new();
    for (core, v1) in RENAMES {
        let (from, to) = if to_v1 { (core, v1) } else { (v1, core) };
        if let Some(x) = m.remove(*from) {
            out.insert(to.to_string(), x);
        }
    }
    out.extend(m);
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    out.insert("kind".into(), Value::String("Event".into()));
    Value::Object(out)
}

pub fn core_to_v1(v: Value) -> Value {
    rename(v, "events.k8s.io/v1", true)
}

pub fn v1_to_core(v: Value) -> Value {
    rename(v, "v1", false)
}

/// `regarding.name` → `involvedObject.name`, `reportingController` → `reportingComponent`.
pub fn v1_field_to_core(field: &str) -> String {
    let (head, rest) = field.split_once('.').map(|(h, r)| (h, Some(r))).unwrap_or((field, None));
    let head = RENAMES.iter().find(|(_, v1)| *v1 == head).map(|(core, _)| *core).unwrap_or(head);
    match rest {
        Some(r) => format!("{head}.{r}"),
        None => head.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_convert_both_ways_without_loss() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Job", "name": "j"}, "note": "Job completed", "reason": "Completed", "type": "Normal",
            "reportingController": "job-controller", "reportingInstance": "i", "action": "Sync",
            "eventTime": "2026-01-01T00:00:00.000000Z", "series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:01.000000Z"},
            "deprecatedCount": 3});
        let core = v1_to_core(v1.clone());
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "j");
        assert_eq!(core["message"], "Job completed");
        assert_eq!(core["reportingComponent"], "job-controller");
        assert_eq!(core["count"], 3);
        assert_eq!(core["series"]["count"], 2);
        assert_eq!(core_to_v1(core), v1);
    }

    #[test]
    fn field_selectors_map_to_the_stored_names() {
        assert_eq!(v1_field_to_core("regarding.name"), "involvedObject.name");
        assert_eq!(v1_field_to_core("reportingController"), "reportingComponent");
        assert_eq!(v1_field_to_core("reason"), "reason");
        assert_eq!(v1_field_to_core("metadata.name"), "metadata.name");
    }
}
