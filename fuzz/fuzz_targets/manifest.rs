//! Manifest files as `jobset apply -f` and `jobset run` read them: multi-document YAML, JSON,
//! concatenated JSON, `List`s (`jobset_api::manifest::parse`). Bad input is an error naming the
//! file, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

const FILE: &str = "fuzz.yaml";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match jobset_api::manifest::parse(FILE, text) {
        Ok(docs) => {
            for d in &docs {
                assert!(d.document >= 1 && d.line >= 1, "positions are 1-based: {d:?}");
                assert!(!d.kind().is_empty() && !d.api_version().is_empty(), "every object has a kind: {d:?}");
                assert!(d.object["metadata"].is_object(), "every object has metadata: {d:?}");
            }
        }
        Err(e) => assert!(e.0.starts_with(FILE), "the error names the file: {e}"),
    }
});
