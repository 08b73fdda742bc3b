//! Duplicate fields of a JSON body, found as sigs.k8s.io/json's strict decoding finds them
//! (`duplicate field "spec.x"`, in document order): parsing into a map keeps only the last.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The paths of keys repeated within one object of `body` (`spec.list[0].name`); nothing for a
/// body that does not parse (the parse error is reported elsewhere). Every custom-resource write
/// with a schema runs this, so it reads keys as slices of the body and builds a path only for a
/// key that repeats.
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    let mut out = vec![];
    let mut de = serde_json::Deserializer::from_slice(body);
    let walk = Walk { path: &mut vec![], out: &mut out };
    if walk.deserialize(&mut de).is_err() {
        return vec![];
    }
    out
}

/// One step of the path to a value.
enum Step<'de> {
    Key(Cow<'de, str>),
    Index(usize),
}

/// `field.Path`'s rendering of `path`: `spec.list[0].name`.
fn render(path: &[Step<'_>]) -> String {
    let mut s = String::new();
    for step in path {
        match step {
            Step::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Step::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

struct Walk<'a, 'de> {
    path: &'a mut Vec<Step<'de>>,
    out: &'a mut Vec<String>,
}

/// A key, borrowed from the body unless it has escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v))
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// Objects with at most this many keys are checked for repeats by comparing with each earlier
/// key, without a hash set.
const SMALL_OBJECT: usize = 16;

impl<'de> Visitor<'de> for Walk<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen: Vec<Cow<'de, str>> = vec![];
        let mut many: HashSet<Cow<'de, str>> = HashSet::new();
        while let Some(k) = map.next_key_seed(Key)? {
            let repeated = if many.is_empty() && seen.len() < SMALL_OBJECT {
                let r = seen.contains(&k);
                seen.push(k.clone());
                r
            } else {
                many.extend(seen.drain(..));
                !many.insert(k.clone())
            };
            self.path.push(Step::Key(k));
            if repeated {
                self.out.push(render(self.path));
            }
            map.next_value_seed(Walk { path: self.path, out: self.out })?;
            self.path.pop();
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            self.path.push(Step::Index(i));
            let more = seq.next_element_seed(Walk { path: self.path, out: self.out })?;
            self.path.pop();
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
            (r#"{"a\u0062": 1, "ab": 2}"#, vec!["ab"]),
            (
                r#"{"m": {"k0": 0, "k1": 1, "k2": 2, "k3": 3, "k4": 4, "k5": 5, "k6": 6, "k7": 7, "k8": 8,
                    "k9": 9, "k10": 10, "k11": 11, "k12": 12, "k13": 13, "k14": 14, "k15": 15, "k16": 16, "k3": 3, "k16": 0}}"#,
                vec!["m.k3", "m.k16"],
            ),
        ];
        for (body, want) in cases {
            assert_eq!(duplicate_fields(body.as_bytes()), want, "{body}");
        }
    }
}
