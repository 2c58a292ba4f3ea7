//! JSON as a person may have edited it: a key repeated in one object (where serde keeps the last
//! one silently) is an error naming the key and its place, found before the seed is decoded.

use std::collections::BTreeSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// The first key repeated within one object of `text`, as `path.to.key`; `None` when every
/// object's keys are distinct (or the text is not JSON: decoding reports that).
pub fn repeated_key(text: &str) -> Option<String> {
    let mut de = serde_json::Deserializer::from_str(text);
    match (Walk { path: String::new() }).deserialize(&mut de) {
        Ok(()) => None,
        Err(e) => {
            let msg = e.to_string();
            msg.strip_prefix(REPEATED).map(|rest| rest.split(" at line").next().unwrap_or(rest).to_string())
        }
    }
}

const REPEATED: &str = "repeated key ";

/// Walks any JSON value, remembering where it is.
struct Walk {
    path: String,
}

impl Walk {
    fn child(&self, key: &str) -> Walk {
        Walk { path: if self.path.is_empty() { key.to_string() } else { format!("{}.{key}", self.path) } }
    }
}

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
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

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        while seq.next_element_seed(self.child(&format!("[{i}]")))?.is_some() {
            i += 1;
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let child = self.child(&key);
            if !seen.insert(key) {
                return Err(de::Error::custom(format!("{REPEATED}{}", child.path)));
            }
            map.next_value_seed(child)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::repeated_key;

    #[test]
    fn a_repeated_key_is_found_where_it_is() {
        assert_eq!(repeated_key(r#"{"a": 1, "b": {"c": 2}}"#), None);
        assert_eq!(repeated_key(r#"{"case": {"dims": {"d": 1, "d": 2}}}"#).as_deref(), Some("case.dims.d"));
        assert_eq!(repeated_key(r#"{"x": [{"k": 1}, {"k": 1, "k": 2}]}"#).as_deref(), Some("x.[1].k"));
        assert_eq!(repeated_key("not json"), None, "decoding reports what is not JSON");
    }
}
