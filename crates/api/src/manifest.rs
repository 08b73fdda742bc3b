//! Reading manifest files into objects, with where each came from (file, document, line).
//! Pure: no I/O besides what the caller hands in. Used by `jobset apply` and `jobset run`; here,
//! in a library crate, so that the fuzz targets (`fuzz/`) reach it.

use std::fmt;

use serde_json::Value;

/// One object read from a manifest file.
#[derive(Debug, Clone, PartialEq)]
pub struct Doc {
    /// The file name as the user gave it (`-` for stdin).
    pub file: String,
    /// 1-based document number within the file.
    pub document: usize,
    /// 1-based line where the document starts.
    pub line: usize,
    /// The object as read.
    pub object: Value,
}

impl Doc {
    /// `kind` (empty when not a string).
    pub fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or_default()
    }
    /// `apiVersion` (empty when not a string).
    pub fn api_version(&self) -> &str {
        self.object["apiVersion"].as_str().unwrap_or_default()
    }
    /// `metadata.name` (empty when not a string).
    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or_default()
    }
    /// `metadata.namespace`, when set and not empty.
    pub fn namespace(&self) -> Option<&str> {
        self.object["metadata"]["namespace"].as_str().filter(|s| !s.is_empty())
    }
}

/// Bad input: the message names the file (and line or document).
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestError(pub String);

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ManifestError {}

/// The objects of one file: multi-document YAML (`---`) or JSON, with `List` kinds flattened.
/// Every object must have `apiVersion`, `kind` and `metadata.name` (or `generateName`).
pub fn parse(file: &str, text: &str) -> Result<Vec<Doc>, ManifestError> {
    let mut docs = Vec::new();
    for (document, (line, value)) in documents(file, text)?.into_iter().enumerate() {
        let document = document + 1;
        flatten(file, document, line, value, &mut docs)?;
    }
    Ok(docs)
}

fn flatten(file: &str, document: usize, line: usize, value: Value, out: &mut Vec<Doc>) -> Result<(), ManifestError> {
    let at = |what: &str| ManifestError(format!("{file}: document {document} (line {line}): {what}"));
    let Value::Object(map) = &value else {
        return Err(at("expected an object with apiVersion and kind"));
    };
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or_default();
    let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    if kind.is_empty() || api_version.is_empty() {
        let missing = match (api_version.is_empty(), kind.is_empty()) {
            (true, true) => "apiVersion and kind are not set",
            (true, false) => "apiVersion is not set",
            _ => "kind is not set",
        };
        return Err(at(&format!("Object 'Kind' is missing: {missing}")));
    }
    if kind.ends_with("List")
        && let Some(items) = map.get("items")
    {
        let Value::Array(items) = items else { return Err(at("items of a List must be a list")) };
        for item in items.clone() {
            flatten(file, document, line, item, out)?;
        }
        return Ok(());
    }
    let meta = &value["metadata"];
    if meta["name"].as_str().unwrap_or_default().is_empty()
        && meta["generateName"].as_str().unwrap_or_default().is_empty()
    {
        return Err(at(&format!("{kind}: metadata.name is not set")));
    }
    out.push(Doc { file: file.to_string(), document, line, object: value });
    Ok(())
}

/// The non-empty documents of a file with the line each starts on.
fn documents(file: &str, text: &str) -> Result<Vec<(usize, Value)>, ManifestError> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        return json_documents(file, text);
    }
    let mut out = Vec::new();
    for (start, chunk) in split_yaml(text) {
        if chunk.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
            continue;
        }
        // The document's line: its first line with content, not the `---` before it.
        let first = chunk.lines().position(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')).unwrap_or(0);
        match serde_saphyr::from_str::<Value>(&chunk) {
            Ok(Value::Null) => {}
            Ok(v) => out.push((start + first, v)),
            Err(e) => return Err(yaml_error(file, start, &e)),
        }
    }
    Ok(out)
}

/// JSON: one value, or several concatenated (as `kubectl get -o json` streams).
fn json_documents(file: &str, text: &str) -> Result<Vec<(usize, Value)>, ManifestError> {
    let mut out = Vec::new();
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    loop {
        let offset = stream.byte_offset();
        let line = 1 + text[..offset].matches('\n').count();
        let skipped = text[offset..].len() - text[offset..].trim_start().len();
        let line = line + text[offset..offset + skipped].matches('\n').count();
        match stream.next() {
            None => return Ok(out),
            Some(Ok(v)) => out.push((line, v)),
            Some(Err(e)) => {
                return Err(ManifestError(format!("{file}:{}:{}: {}", e.line(), e.column(), strip_json_location(&e))));
            }
        }
    }
}

fn strip_json_location(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Splits on `---` lines: (first line of the document, its text). The text keeps the marker's
/// line (blanked), so that columns and content after `--- ` stay where they were.
fn split_yaml(text: &str) -> Vec<(usize, String)> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    for (i, line) in text.lines().enumerate() {
        let is_marker = line == "---" || line.starts_with("--- ") || line.starts_with("---\t");
        let is_end = line == "..." || line.starts_with("... ");
        if is_marker || is_end {
            if !current.is_empty() {
                docs.push((start, std::mem::take(&mut current)));
            }
            start = i + 1;
            if is_marker {
                current.push_str("   ");
                current.push_str(&line[3..]);
            }
            current.push('\n');
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    if !current.is_empty() {
        docs.push((start, current));
    }
    docs
}

fn yaml_error(file: &str, start: usize, e: &serde_saphyr::Error) -> ManifestError {
    let message = yaml_message(e);
    match e.location() {
        Some(loc) => {
            let line = start + loc.line() as usize - 1;
            ManifestError(format!("{file}:{line}:{}: {message}", loc.column()))
        }
        None => ManifestError(format!("{file}: {message}")),
    }
}

/// The error's message without the location serde_saphyr puts around it
/// (`error: line 6 column 5: illegal placement of ':' indicator`).
fn yaml_message(e: &serde_saphyr::Error) -> String {
    let s = e.to_string();
    let mut first = s.lines().next().unwrap_or_default().trim();
    first = first.strip_prefix("error:").unwrap_or(first).trim_start();
    if let Some(rest) = first.strip_prefix("line ")
        && let Some((position, message)) = rest.split_once(": ")
        && position.contains(" column ")
    {
        first = message;
    }
    match first.rfind(" at line ") {
        Some(i) => first[..i].to_string(),
        None => first.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: &str = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: a\nspec: {}\n";

    #[test]
    fn multi_document_yaml_keeps_order_and_start_lines() {
        let text = format!("# leading comment\n{JOB}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n---\n");
        let docs = parse("f.yaml", &text).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!((docs[0].kind(), docs[0].name(), docs[0].line, docs[0].document), ("Job", "a", 2, 1));
        assert_eq!((docs[1].kind(), docs[1].name(), docs[1].line, docs[1].document), ("ConfigMap", "b", 8, 2));
    }

    #[test]
    fn syntax_errors_name_the_file_and_the_line_in_the_whole_file() {
        let text = format!("{JOB}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [b\n");
        let err = parse("examples/bad.yaml", &text).unwrap_err().0;
        assert!(err.starts_with("examples/bad.yaml:"), "{err}");
        let line: usize = err.split(':').nth(1).unwrap().parse().unwrap();
        assert!((9..=10).contains(&line), "{err}");
        assert!(!err.contains("line"), "the location is not repeated: {err}");
        assert!(!err.contains("error:"), "{err}");
    }

    #[test]
    fn objects_without_kind_name_the_document() {
        let text = format!("{JOB}---\napiVersion: v1\nmetadata:\n  name: b\n");
        let err = parse("x.yaml", &text).unwrap_err().0;
        assert_eq!(err, "x.yaml: document 2 (line 7): Object 'Kind' is missing: kind is not set");
        let err = parse("x.yaml", "- 1\n").unwrap_err().0;
        assert!(err.contains("document 1"), "{err}");
        let err = parse("x.yaml", "apiVersion: v1\nkind: ConfigMap\n").unwrap_err().0;
        assert!(err.contains("metadata.name is not set"), "{err}");
    }

    #[test]
    fn lists_are_flattened_and_json_is_read() {
        let text = r#"{"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}]}"#;
        let docs = parse("l.json", text).unwrap();
        assert_eq!(docs.iter().map(|d| d.name()).collect::<Vec<_>>(), ["a", "b"]);
        let err = parse("l.json", "{\"a\": \n  [1,}").unwrap_err().0;
        assert!(err.starts_with("l.json:2:"), "{err}");
    }

    #[test]
    fn empty_documents_and_content_after_the_marker() {
        let docs =
            parse("e.yaml", "---\n# nothing\n---\n--- {apiVersion: v1, kind: Namespace, metadata: {name: ns1}}\n")
                .unwrap();
        assert_eq!(docs.len(), 1);
        assert_eq!((docs[0].name(), docs[0].line), ("ns1", 4));
    }
}
