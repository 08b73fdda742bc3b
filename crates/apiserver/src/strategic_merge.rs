#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StrategicMergeError(String);
pub fn apply(_kind: &str, original: &serde_json::Value, patch: &serde_json::Value) -> Result<serde_json::Value, StrategicMergeError> {
    let mut o = original.clone(); json_patch::merge(&mut o, patch); Ok(o)
}
