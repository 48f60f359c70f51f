//! New inputs from known ones: cheap coverage on the stable toolchain
//! (no coverage feedback, but every mutant starts from a thread that
//! imports, so most reach compaction).

use serde_json::Value;

use super::gen::{corrupt, document, text};
use super::source::Source;

/// A mutant of `base` (a corpus entry or a real log), splicing from
/// `other`, with choices read from `bytes`.
pub fn mutate(base: &[u8], other: &[u8], bytes: &[u8]) -> Vec<u8> {
    let mut src = Source::new(bytes);
    let escapes = src.chance(15);
    if src.chance(80) {
        if let Ok(mut doc) = serde_json::from_slice::<Value>(base) {
            let donor = serde_json::from_slice::<Value>(other).ok();
            for _ in 0..1 + src.below(4) {
                edit(&mut src, &mut doc, donor.as_ref(), escapes);
            }
            let mut out = document(&doc);
            if src.chance(3) {
                corrupt(&mut src, &mut out);
            }
            return out;
        }
    }
    let mut out = base.to_vec();
    for _ in 0..1 + src.below(4) {
        let at = src.below(out.len() + 1);
        match src.below(4) {
            0 if !out.is_empty() => {
                let i = at.min(out.len() - 1);
                out[i] ^= 1 << src.below(8);
            }
            1 => {
                let piece = text(&mut src, 3, escapes);
                out.splice(at..at, piece.into_bytes());
            }
            2 if !other.is_empty() => {
                let from = src.below(other.len());
                let to = (from + src.below(256)).min(other.len());
                out.splice(at..at, other[from..to].iter().copied());
            }
            _ => {
                let end = (at + src.below(32)).min(out.len());
                out.drain(at..end);
            }
        }
    }
    out
}

/// Where a mutation can apply: a string to rewrite or an array to reshape.
enum Spot {
    Str(String),
    Array(String),
}

/// One structural edit of `doc`.
fn edit(src: &mut Source<'_>, doc: &mut Value, donor: Option<&Value>, escapes: bool) {
    let mut spots = Vec::new();
    collect(doc, String::new(), &mut spots);
    if spots.is_empty() {
        return;
    }
    let pick = src.below(spots.len());
    match &spots[pick] {
        Spot::Str(p) => {
            let Some(Value::String(s)) = doc.pointer_mut(p) else {
                return;
            };
            let boundaries: Vec<usize> =
                s.char_indices().map(|(i, _)| i).chain([s.len()]).collect();
            let at = boundaries[src.below(boundaries.len())];
            match src.below(4) {
                0 => *s = text(src, 8, escapes),
                1 => s.truncate(at),
                2 => {
                    let copy = s.clone();
                    s.push_str(&copy);
                }
                _ => s.insert_str(at, &text(src, 3, escapes)),
            }
        }
        Spot::Array(p) => {
            let donated = donor.and_then(|d| {
                let mut theirs = Vec::new();
                collect(d, String::new(), &mut theirs);
                let arrays: Vec<&String> = theirs
                    .iter()
                    .filter_map(|s| match s {
                        Spot::Array(p) => Some(p),
                        Spot::Str(_) => None,
                    })
                    .collect();
                let a = d.pointer(arrays.get(src.below(arrays.len().max(1)))?)?;
                let a = a.as_array()?;
                a.get(src.below(a.len().max(1))).cloned()
            });
            let Some(Value::Array(a)) = doc.pointer_mut(p) else {
                return;
            };
            let n = a.len();
            let i = src.below(n.max(1));
            match src.below(5) {
                0 if n > 0 => {
                    a.remove(i);
                }
                1 if n > 0 => {
                    let copy = a[i].clone();
                    a.insert(src.below(n + 1), copy);
                }
                2 if n > 1 => a.swap(i, src.below(n)),
                3 => {
                    if let Some(v) = donated {
                        a.insert(src.below(n + 1), v);
                    }
                }
                _ if n > 0 => {
                    a.truncate(i);
                }
                _ => {}
            }
        }
    }
}

/// Every string and array under `v`, as JSON pointers.
fn collect(v: &Value, at: String, out: &mut Vec<Spot>) {
    match v {
        Value::String(_) => out.push(Spot::Str(at)),
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                collect(x, format!("{at}/{i}"), out);
            }
            out.push(Spot::Array(at));
        }
        Value::Object(o) => {
            for (k, x) in o {
                let k = k.replace('~', "~0").replace('/', "~1");
                collect(x, format!("{at}/{k}"), out);
            }
        }
        _ => {}
    }
}
