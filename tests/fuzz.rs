//! The fuzz harness (issue 21: no input makes compactd panic), on the
//! stable toolchain: inputs generated from random bytes and mutated from
//! known ones run through import → compact → render in every output format
//! (see `compactd_testkit::fuzz`), for `COMPACTD_FUZZ_SECONDS` (default 3;
//! `scripts/fuzz.sh` runs 60, optimized). `COMPACTD_FUZZ_SEED` repeats a
//! run; `COMPACTD_FUZZ_SEEDS` adds directories of thread files to mutate
//! (`../shared/realworld`, say); `COMPACTD_FUZZ_KEEP_GOING=1` records every
//! distinct finding and fails at the end instead of at the first.
//!
//! Every input that ever made compactd misbehave is kept in
//! `tests/fuzz_corpus/` (`<name>.json`, with the request's knobs in
//! `<name>.knobs.json` when they matter) and replayed on every run
//! (`COMPACTD_FUZZ_CORPUS` replays another directory instead). A new
//! finding is written to `COMPACTD_FUZZ_CRASH_DIR` (default the target's
//! tmp dir), shrunk, and the test fails naming the files. An input that
//! runs longer than `COMPACTD_FUZZ_HANG_SECONDS` (default 120) is written
//! there too and ends the run: a hang is a finding, and a test that never
//! ends reports nothing.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use compactd_testkit::fuzz::{generate, knobs_from, mutate, Finding, Knobs, Oracle, Tally};
use serde_json::Value;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fuzz_corpus");

/// A corpus entry: the thread file and the knobs it is replayed with.
struct Entry {
    path: PathBuf,
    doc: Vec<u8>,
    knobs: Vec<Knobs>,
}

/// The thread files of `dir` (not their `.knobs.json`), in name order;
/// each with the replay sweep plus its own knobs.
fn entries(dir: &Path) -> Vec<Entry> {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = listing
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.ends_with(".json") && !name.ends_with(".knobs.json")
        })
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let doc = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            // COMPACTD_FUZZ_SWEEP=0: only the entry's own knobs (to debug one).
            let mut knobs = if std::env::var("COMPACTD_FUZZ_SWEEP").as_deref() == Ok("0") {
                Vec::new()
            } else {
                Knobs::sweep()
            };
            let sidecar = path.with_extension("knobs.json");
            if let Ok(text) = std::fs::read_to_string(&sidecar) {
                let v: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", sidecar.display()));
                match v {
                    Value::Array(all) => knobs.extend(all.iter().map(Knobs::from_json)),
                    one => knobs.push(Knobs::from_json(&one)),
                }
            }
            Entry { path, doc, knobs }
        })
        .collect()
}

#[test]
fn the_crash_corpus_replays_clean() {
    // Another directory (a crash dir, say) replays the same way.
    let dir = std::env::var("COMPACTD_FUZZ_CORPUS").unwrap_or_else(|_| CORPUS.to_string());
    let corpus = entries(Path::new(&dir));
    assert!(
        dir != CORPUS || corpus.len() >= 4,
        "the corpus holds at least the issue's four strings"
    );
    let mut oracle = Oracle::new();
    let mut tally = Tally::default();
    let watchdog = Watchdog::start();
    for e in &corpus {
        for knobs in &e.knobs {
            watchdog.watch(&e.doc, knobs);
            match oracle.check(&e.doc, knobs) {
                Ok(t) => tally += t,
                Err(f) => panic!("{}: {f}\nknobs: {}", e.path.display(), knobs.to_json()),
            }
        }
    }
    println!("fuzz corpus: {tally}");
    // The replay reaches compaction and rendering, not only refusals.
    assert!(tally.rendered > corpus.len() as u64, "{tally}");
}

/// xorshift64*: the run's bytes from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = 1 + self.below(max);
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn fuzz_for_a_while() {
    let seconds: f64 = env_or("COMPACTD_FUZZ_SECONDS", 3.0);
    let seed: u64 = env_or(
        "COMPACTD_FUZZ_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    );
    // Mutation seeds: the corpus, the examples, and any directory named.
    let mut seeds: Vec<Vec<u8>> = entries(Path::new(CORPUS))
        .into_iter()
        .map(|e| e.doc)
        .collect();
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/threads");
    seeds.extend(entries(Path::new(examples)).into_iter().map(|e| e.doc));
    for dir in std::env::var("COMPACTD_FUZZ_SEEDS")
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
    {
        seeds.extend(entries(Path::new(dir)).into_iter().map(|e| e.doc));
    }

    let mut rng = Rng(seed | 1);
    let watchdog = Watchdog::start();
    let mut oracle = Oracle::new();
    let mut tally = Tally::default();
    let (mut generated, mut mutated) = (0u64, 0u64);
    let keep_going = std::env::var_os("COMPACTD_FUZZ_KEEP_GOING").is_some();
    // Distinct findings (their first line) and what was written for each.
    let mut findings: std::collections::BTreeMap<String, String> = Default::default();
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds.max(0.0));
    // On past the deadline until a body was rendered (a first input that is
    // large and refused can take the whole budget of a debug build), within
    // a bound: the last assertion is about the generator, not the clock.
    let hard_stop = deadline + Duration::from_secs_f64(seconds * 10.0 + 30.0);
    while (Instant::now() < deadline || tally.rendered == 0) && Instant::now() < hard_stop {
        let bytes = rng.bytes(4_096);
        let (doc, knobs) = if !seeds.is_empty() && rng.below(3) == 0 {
            mutated += 1;
            let base = &seeds[rng.below(seeds.len())];
            let other = &seeds[rng.below(seeds.len())];
            let knob_bytes = rng.bytes(64);
            (mutate(base, other, &bytes), knobs_from(&knob_bytes))
        } else {
            generated += 1;
            generate(&bytes)
        };
        watchdog.watch(&doc, &knobs);
        match oracle.check(&doc, &knobs) {
            Ok(t) => tally += t,
            Err(f) => {
                // One of each kind: the first line without its numbers.
                let key: String = f
                    .to_string()
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .chars()
                    .filter(|c| !c.is_ascii_digit())
                    .collect();
                if let std::collections::btree_map::Entry::Vacant(slot) = findings.entry(key) {
                    let written = report(&mut oracle, &doc, &knobs, &f, seed);
                    if !keep_going {
                        panic!("{written}");
                    }
                    eprintln!("{written}");
                    slot.insert(written);
                }
            }
        }
    }
    println!(
        "fuzz: seed {seed}, {generated} generated + {mutated} mutated inputs in {:.1}s: {tally}",
        start.elapsed().as_secs_f64()
    );
    assert!(
        findings.is_empty(),
        "{} distinct findings:\n{}",
        findings.len(),
        findings.into_values().collect::<Vec<_>>().join("\n\n")
    );
    // The generator reaches rendering, not only the importer's refusals.
    assert!(tally.rendered > 0, "{tally}");
}

/// Writes an input and its knobs as `<name>.json` and `<name>.knobs.json`
/// where a developer can pick them up for the corpus; returns the path.
fn save(name: &str, doc: &[u8], knobs: &Knobs) -> String {
    let dir = std::env::var("COMPACTD_FUZZ_CRASH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-crashes"));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{name}.json"));
    let knobs_text = serde_json::to_string_pretty(&knobs.to_json()).unwrap_or_default();
    let written = std::fs::write(&path, doc)
        .and_then(|()| std::fs::write(dir.join(format!("{name}.knobs.json")), knobs_text));
    match written {
        Ok(()) => path.display().to_string(),
        Err(e) => format!("(could not write {}: {e})", path.display()),
    }
}

/// The input being run, since when.
type Running = Arc<Mutex<Option<(Instant, Vec<u8>, Knobs)>>>;

/// Ends the process when one input runs too long, after saving it.
struct Watchdog {
    current: Running,
}

impl Watchdog {
    fn start() -> Watchdog {
        let limit = Duration::from_secs_f64(env_or("COMPACTD_FUZZ_HANG_SECONDS", 120.0));
        let current: Running = Arc::default();
        let watched = Arc::clone(&current);
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            let guard = watched.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((since, doc, knobs)) = guard.as_ref() {
                if since.elapsed() > limit {
                    let path = save(&format!("hang-{:016x}", fnv(doc)), doc, knobs);
                    eprintln!(
                        "fuzz finding: one input ran longer than {limit:?}; written to {path}"
                    );
                    std::process::exit(101);
                }
            }
        });
        Watchdog { current }
    }

    fn watch(&self, doc: &[u8], knobs: &Knobs) {
        let mut guard = self.current.lock().unwrap_or_else(|e| e.into_inner());
        *guard = Some((Instant::now(), doc.to_vec(), knobs.clone()));
    }
}

impl Drop for Watchdog {
    /// Disarmed when its test ends (the other test may run on).
    fn drop(&mut self) {
        let mut guard = self.current.lock().unwrap_or_else(|e| e.into_inner());
        *guard = None;
    }
}

/// Writes the input (and a shrunk copy) where a developer can pick it up
/// for the corpus; says what was found and where it was written.
fn report(oracle: &mut Oracle, doc: &[u8], knobs: &Knobs, f: &Finding, seed: u64) -> String {
    let name = format!("crash-{:016x}", fnv(doc));
    let full = save(&name, doc, knobs);
    oracle.quiet(true);
    let small = shrink(oracle, doc, knobs);
    oracle.quiet(false);
    let shrunk = if small.len() < doc.len() {
        format!(
            "\nshrunk to {} bytes: {}",
            small.len(),
            save(&format!("{name}.min"), &small, knobs)
        )
    } else {
        String::new()
    };
    format!(
        "fuzz finding (seed {seed}): {f}\ninput ({} bytes): {full}{shrunk}\n\
         Fix it, then copy the .json and .knobs.json into tests/fuzz_corpus/.",
        doc.len()
    )
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A smaller input that still fails: messages and array elements removed,
/// strings halved, for at most 30 seconds.
fn shrink(oracle: &mut Oracle, doc: &[u8], knobs: &Knobs) -> Vec<u8> {
    let Ok(mut best) = serde_json::from_slice::<Value>(doc) else {
        return doc.to_vec();
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let fails = |o: &mut Oracle, v: &Value| o.check(v.to_string().as_bytes(), knobs).is_err();
    let mut progress = true;
    while progress && Instant::now() < deadline {
        progress = false;
        let mut spots = Vec::new();
        spots_of(&best, String::new(), &mut spots);
        for (pointer, is_array) in spots.into_iter().rev() {
            if Instant::now() >= deadline {
                break;
            }
            let mut tries: Vec<Value> = Vec::new();
            match best.pointer(&pointer) {
                Some(Value::Array(a)) if is_array => {
                    for i in 0..a.len() {
                        let mut t = best.clone();
                        if let Some(Value::Array(a)) = t.pointer_mut(&pointer) {
                            a.remove(i);
                        }
                        tries.push(t);
                    }
                }
                Some(Value::String(s)) if s.len() > 1 => {
                    let mut cut = s.len() / 2;
                    while !s.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    for keep in [&s[..cut], &s[cut..]] {
                        let mut t = best.clone();
                        if let Some(Value::String(s)) = t.pointer_mut(&pointer) {
                            *s = keep.to_string();
                        }
                        tries.push(t);
                    }
                }
                _ => {}
            }
            if let Some(t) = tries.into_iter().find(|t| fails(oracle, t)) {
                best = t;
                progress = true;
                break;
            }
        }
    }
    best.to_string().into_bytes()
}

/// JSON pointers of the arrays and strings under `v`, outermost first.
fn spots_of(v: &Value, at: String, out: &mut Vec<(String, bool)>) {
    match v {
        Value::Array(a) => {
            out.push((at.clone(), true));
            for (i, x) in a.iter().enumerate() {
                spots_of(x, format!("{at}/{i}"), out);
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                let k = k.replace('~', "~0").replace('/', "~1");
                spots_of(x, format!("{at}/{k}"), out);
            }
        }
        Value::String(_) => out.push((at, false)),
        _ => {}
    }
}
