//! The in-place restart agent's configuration (`jobset agent`): its environment
//! (`AgentConfig::from_env`, every duration through `parse_duration`) and the barrier endpoint
//! read from its own pod (`barrier_endpoint_from_pod`).
//!
//! Input: `NAME=value` lines; after a `---` line, optionally the pod as JSON.
#![no_main]

use std::collections::HashMap;
use std::path::Path;

use jobset_agent::config::{AgentConfig, barrier_endpoint_from_pod, parse_duration};
use k8s_openapi::api::core::v1::Pod;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (vars, pod) = text.split_once("\n---\n").unwrap_or((text, ""));
    let env: HashMap<&str, &str> = vars.lines().filter_map(|l| l.split_once('=')).collect();
    for value in env.values() {
        if let Some(d) = parse_duration(value) {
            assert!(d.as_secs_f64().is_finite(), "{value:?}");
        }
    }
    // No namespace file: a config without NAMESPACE is an error, not a read of the host's.
    let config = AgentConfig::from_env(|k| env.get(k).map(|v| v.to_string()), Path::new("/nonexistent-fuzz"));
    match &config {
        Ok(c) => assert!(c.backoff.max >= c.backoff.initial && !c.backoff.initial.is_zero(), "{c:?}"),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    if let Ok(pod) = serde_json::from_str::<Pod>(pod) {
        let container = config.as_ref().ok().and_then(|c| c.container_name.as_deref());
        let choice = barrier_endpoint_from_pod(&pod, container);
        assert!(choice.endpoint().port > 0, "{choice:?}");
    }
});
