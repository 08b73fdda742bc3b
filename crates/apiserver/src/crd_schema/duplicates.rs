//! Duplicate fields of a JSON body, found as sigs.k8s.io/json's strict decoding finds them
//! (`duplicate field "spec.x"`, in document order): parsing into a map keeps only the last.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The paths of keys repeated within one object of `body` (`spec.list[0].name`); nothing for a
/// body that does not parse (the parse error is reported elsewhere).
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    let mut out = vec![];
    let mut de = serde_json::Deserializer::from_slice(body);
    let walk = Walk { path: &mut vec![], out: &mut out };
    if walk.deserialize(&mut de).is_err() {
        return vec![];
    }
    out
}

struct Walk<'a> {
    path: &'a mut Vec<String>,
    out: &'a mut Vec<String>,
}

impl Walk<'_> {
    fn push_key(&mut self, k: &str) -> usize {
        let l = self.path.len();
        if !self.path.is_empty() {
            self.path.push(".".into());
        }
        self.path.push(k.to_string());
        l
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(k) = map.next_key::<String>()? {
            let l = self.push_key(&k);
            if !seen.insert(k) {
                self.out.push(self.path.concat());
            }
            map.next_value_seed(Walk { path: self.path, out: self.out })?;
            self.path.truncate(l);
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            let l = self.path.len();
            self.path.push(format!("[{i}]"));
            let more = seq.next_element_seed(Walk { path: self.path, out: self.out })?;
            self.path.truncate(l);
            if more.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_keys_are_found_with_their_paths_in_document_order() {
        let cases = [
            (r#"{"a": 1, "b": 2}"#, vec![]),
            (r#"{"spec": {"size": 1, "size": 2}, "spec": {}}"#, vec!["spec.size", "spec"]),
            (r#"{"l": [{"n": 1}, {"n": 1, "n": 2}]}"#, vec!["l[1].n"]),
            (r#"[{"x": 1, "x": 1}]"#, vec!["[0].x"]),
            (r#"{"a": "#, vec![]),
        ];
        for (body, want) in cases {
            assert_eq!(duplicate_fields(body.as_bytes()), want, "{body}");
        }
    }
}
