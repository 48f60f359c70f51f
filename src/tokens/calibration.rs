//! Calibration of an estimated count against the provider's own.
//!
//! A model without a public tokenizer is counted by [`super::Estimator`],
//! which errs high (about 2× on Claude bodies) so that no budget is broken.
//! Every provider response says how many input tokens it counted; with those
//! reports compactd learns, per tenant and model family, how many provider
//! tokens one estimated token is at most, and counts with that bound
//! instead. The state is a small document kept beside the tenant's plans,
//! so replicas share it.
//!
//! The rules, all pure (the caller gives the time):
//! - A report is a *ratio*: provider input tokens over compactd's raw
//!   estimate of the same body. Bodies under [`MIN_BODY_TOKENS`] are not
//!   learned from (fixed provider overheads dominate them, and no budget
//!   binds there).
//! - Until [`MIN_REPORTS`] reports, the scale is 1 (today's conservative
//!   estimate), unless a report shows the estimate undercounts.
//! - From then on the scale is the [`QUANTILE`] of the reports, weighted by
//!   age (half-life [`SAMPLE_HALF_LIFE_MS`]), plus [`MARGIN`], rounded up to
//!   a multiple of [`STEP`] and kept within [`FLOOR`]..[`CEILING`].
//! - A report above the scale raises it at once to that report plus the
//!   margin. Such a raise relaxes back to the quantile with half-life
//!   [`RELAX_HALF_LIFE_MS`], never at once.
//! - The scale only falls when the new value is at least two steps lower
//!   (a count that moves with every report would change every body, and
//!   with it the provider's prompt cache).
//! - A second report on the same body (same digest) is not counted again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use super::TokenCounter;

/// Reports needed before the learned scale replaces the estimate's own.
pub const MIN_REPORTS: usize = 3;
/// Reports kept (newest).
pub const MAX_SAMPLES: usize = 64;
/// Reports on bodies smaller than this (in the raw estimate) are not learned.
pub const MIN_BODY_TOKENS: u32 = 512;
/// Which quantile of the reported ratios the scale covers.
pub const QUANTILE: f64 = 0.95;
/// Headroom on top of the quantile.
pub const MARGIN: f64 = 0.05;
/// The scale is a multiple of this.
pub const STEP: f64 = 1.0 / 64.0;
/// Lowest scale: an estimate is never trusted to be more than 4× high.
pub const FLOOR: f64 = 0.25;
/// Highest scale.
pub const CEILING: f64 = 4.0;
/// A report's weight halves over this age.
pub const SAMPLE_HALF_LIFE_MS: u64 = 7 * 24 * 3_600_000;
/// A raise by a report above the scale halves its excess over this time.
pub const RELAX_HALF_LIFE_MS: u64 = 24 * 3_600_000;
/// Ratios outside this range are not a count of the body named (a report
/// for another request, or a broken client) and are refused.
pub const PLAUSIBLE: (f64, f64) = (0.05, 20.0);

/// One provider report.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Provider input tokens per raw estimated token.
    pub ratio: f64,
    /// When it was learned (unix ms).
    pub at_ms: u64,
    /// The body it answers ([`crate::render::cache::body_digest`]).
    pub digest: u64,
}

/// What a count is based on, for the budget report.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Applied {
    /// Counted tokens per raw estimated token (1 until calibrated).
    pub scale: f64,
    /// Expected provider tokens per raw estimated token (the reports'
    /// weighted median), for predictions; `None` without reports.
    pub central: Option<f64>,
    /// Reports the scale was learned from.
    pub reports: u32,
    /// Whether the learned scale is in force (else the estimate's own,
    /// possibly raised by a report).
    pub calibrated: bool,
}

impl Applied {
    /// Provider tokens expected per counted token, for predictions in the
    /// provider's count (1 without reports).
    pub fn provider_per_counted(&self) -> f64 {
        match self.central {
            Some(c) if self.scale > 0.0 => c / self.scale,
            _ => 1.0,
        }
    }
}

/// What a count is based on, as the budget report says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CountBasis {
    /// Not said (reports made before it was).
    #[default]
    Unstated,
    /// The model's own tokenizer.
    Exact,
    /// The conservative estimate (scaled up when a report showed it low).
    Estimate,
    /// The estimate under the scale learned from the provider's reports.
    Calibrated,
}

/// The basis of a count and the scale it was made at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Counting {
    /// Exact, estimated or calibrated.
    pub basis: CountBasis,
    /// Counted tokens per estimated token, in millionths (0: not said).
    #[serde(default)]
    pub scale_ppm: u32,
    /// Reports the calibration was learned from.
    #[serde(default)]
    pub reports: u32,
}

impl Counting {
    /// How `counter` counts.
    pub fn of(counter: &dyn TokenCounter) -> Counting {
        if counter.is_exact() {
            return Counting {
                basis: CountBasis::Exact,
                scale_ppm: 1_000_000,
                reports: 0,
            };
        }
        let applied = counter.calibration();
        Counting {
            basis: match applied {
                Some(a) if a.calibrated => CountBasis::Calibrated,
                _ => CountBasis::Estimate,
            },
            scale_ppm: applied.map_or(1_000_000, |a| (a.scale * 1e6).round() as u32),
            reports: applied.map_or(0, |a| a.reports),
        }
    }

    /// The scale as a number (1 when not said).
    pub fn scale(&self) -> f64 {
        if self.scale_ppm == 0 {
            1.0
        } else {
            f64::from(self.scale_ppm) / 1e6
        }
    }
}

/// Why a report was not learned from.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum Refused {
    /// The same body was reported before.
    #[error("a report on this body was learned from already")]
    Duplicate,
    /// Too small a body to learn from.
    #[error("the body is too small to learn the count from")]
    Small,
    /// Not a count of the body named.
    #[error("the reported input is {0:.2}× compactd's estimate: not a count of the body named")]
    Implausible(f64),
}

/// The learned relation of one tenant's model family's count to the
/// estimate (persisted as JSON; no content).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Calibration {
    /// Reports, oldest first.
    #[serde(default)]
    samples: Vec<Sample>,
    /// The scale in force (0: none yet, i.e. 1).
    #[serde(default)]
    scale: f64,
    /// The last raise by a report above the scale: (scale, when).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    raised: Option<(f64, u64)>,
}

impl Calibration {
    /// Learns from a report of `provider` input tokens on a body of `raw`
    /// estimated tokens. The scale is updated at once.
    pub fn observe(
        &mut self,
        provider: u32,
        raw: f64,
        digest: u64,
        now_ms: u64,
    ) -> Result<(), Refused> {
        if raw < f64::from(MIN_BODY_TOKENS) {
            return Err(Refused::Small);
        }
        let ratio = f64::from(provider) / raw;
        if !(PLAUSIBLE.0..=PLAUSIBLE.1).contains(&ratio) {
            return Err(Refused::Implausible(ratio));
        }
        if self.samples.iter().any(|s| s.digest == digest) {
            return Err(Refused::Duplicate);
        }
        self.samples.push(Sample {
            ratio,
            at_ms: now_ms,
            digest,
        });
        if self.samples.len() > MAX_SAMPLES {
            let extra = self.samples.len() - MAX_SAMPLES;
            self.samples.drain(..extra);
        }
        self.rescale(ratio, now_ms);
        Ok(())
    }

    /// What counts are based on now.
    pub fn applied(&self, now_ms: u64) -> Applied {
        let scale = if self.scale > 0.0 { self.scale } else { 1.0 };
        Applied {
            scale,
            central: (!self.samples.is_empty()).then(|| self.quantile(0.5, now_ms)),
            reports: u32::try_from(self.samples.len()).unwrap_or(u32::MAX),
            calibrated: self.samples.len() >= MIN_REPORTS,
        }
    }

    /// Sets the scale after a report of `ratio`.
    fn rescale(&mut self, ratio: f64, now_ms: u64) {
        let current = if self.scale > 0.0 { self.scale } else { 1.0 };
        let learned = if self.samples.len() >= MIN_REPORTS {
            self.quantile(QUANTILE, now_ms) * (1.0 + MARGIN)
        } else {
            1.0
        };
        let needed = ratio * (1.0 + MARGIN);
        if needed > current {
            self.raised = Some((needed, now_ms));
        }
        let raised = self.raised.map_or(0.0, |(r, at)| {
            let age = now_ms.saturating_sub(at) as f64;
            let left = 0.5f64.powf(age / RELAX_HALF_LIFE_MS as f64);
            learned + (r - learned).max(0.0) * left
        });
        let wanted = round_up(learned.max(raised).max(needed));
        // Before calibration the estimate's own scale stays the floor.
        let wanted = if self.samples.len() < MIN_REPORTS {
            wanted.max(1.0)
        } else {
            wanted
        };
        if wanted > current || current - wanted >= 2.0 * STEP - 1e-12 {
            self.scale = wanted;
        } else if self.scale <= 0.0 {
            self.scale = current;
        }
    }

    /// The age-weighted `q` quantile of the reported ratios.
    fn quantile(&self, q: f64, now_ms: u64) -> f64 {
        let mut weighted: Vec<(f64, f64)> = self
            .samples
            .iter()
            .map(|s| {
                let age = now_ms.saturating_sub(s.at_ms) as f64;
                (s.ratio, 0.5f64.powf(age / SAMPLE_HALF_LIFE_MS as f64))
            })
            .collect();
        weighted.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total: f64 = weighted.iter().map(|w| w.1).sum();
        let mut seen = 0.0;
        for (ratio, w) in &weighted {
            seen += w;
            if seen >= q * total - 1e-12 {
                return *ratio;
            }
        }
        weighted.last().map_or(1.0, |w| w.0)
    }
}

/// `x` rounded up to a multiple of [`STEP`], within the bounds.
fn round_up(x: f64) -> f64 {
    ((x / STEP - 1e-9).ceil() * STEP).clamp(FLOOR, CEILING)
}

/// The family a model's calibration is kept under: the name without a
/// vendor path or region, release date or version suffix, so that
/// `claude-sonnet-4-5-20250929`, `anthropic/claude-sonnet-4-5` and
/// `us.anthropic.claude-sonnet-4-5-20250929-v1:0` share one. Safe as one
/// path segment.
pub fn model_family(model: &str) -> String {
    let m = super::normalize_model(model);
    let m = m.rsplit_once("anthropic.").map_or(m.as_str(), |(_, r)| r);
    let m = strip_version(m);
    let m = m.strip_suffix("-latest").unwrap_or(m);
    let m = strip_date(m);
    let family: String = m
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '.' | '-' | '_' => c,
            _ => '_',
        })
        .take(64)
        .collect();
    if family.is_empty() || family.chars().all(|c| c == '.') {
        "unknown".to_owned()
    } else {
        family
    }
}

/// Without a Bedrock `-v1:0` suffix.
fn strip_version(m: &str) -> &str {
    match m.rsplit_once("-v") {
        Some((head, tail))
            if tail
                .split(':')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) =>
        {
            head
        }
        _ => m,
    }
}

/// Without a `-20250929` or `@20250929` release date.
fn strip_date(m: &str) -> &str {
    let n = m.len();
    if n > 9 && m.is_char_boundary(n - 9) {
        let (head, tail) = m.split_at(n - 9);
        let mut t = tail.bytes();
        if matches!(t.next(), Some(b'-' | b'@')) && t.all(|b| b.is_ascii_digit()) {
            return head;
        }
    }
    m
}

/// A counter with what the provider's reports taught about it.
///
/// An estimate is counted through the calibration: each count is the
/// estimate's times the scale, rounded up, so a sum of counts is never below
/// the scaled sum; it is named by the estimate and the scale, so the ledger
/// never serves a count made at another scale. An exact count stays exact
/// and keeps its name (the budget needs no bound); only its predictions of
/// the provider's count (the expected cache read) use the reports.
#[derive(Debug, Clone)]
pub struct Calibrated {
    inner: Arc<dyn TokenCounter>,
    applied: Applied,
    name: &'static str,
}

impl Calibrated {
    /// `inner` under `applied`.
    pub fn new(inner: Arc<dyn TokenCounter>, applied: Applied) -> Self {
        let (name, applied) = if inner.is_exact() {
            let exact = Applied {
                scale: 1.0,
                calibrated: false,
                ..applied
            };
            (intern_name(inner.name(), None), exact)
        } else {
            (intern_name(inner.name(), Some(applied.scale)), applied)
        };
        Calibrated {
            inner,
            applied,
            name,
        }
    }
}

impl TokenCounter for Calibrated {
    fn count(&self, text: &str) -> usize {
        let n = self.inner.count(text);
        if n == 0 || self.inner.is_exact() {
            return n;
        }
        ((n as f64 * self.applied.scale).ceil() as usize).max(1)
    }

    fn name(&self) -> &str {
        self.name
    }

    fn is_exact(&self) -> bool {
        self.inner.is_exact()
    }

    fn calibration(&self) -> Option<Applied> {
        Some(self.applied)
    }
}

/// One name per (counter, scale): scales are steps of [`STEP`] within
/// bounds, so the names are few. Without a scale, the counter's own name.
fn intern_name(inner: &str, scale: Option<f64>) -> &'static str {
    type Names = HashMap<(String, Option<u64>), &'static str>;
    static NAMES: OnceLock<Mutex<Names>> = OnceLock::new();
    let names = NAMES.get_or_init(Default::default);
    let mut names = names.lock().unwrap_or_else(|p| p.into_inner());
    names
        .entry((inner.to_owned(), scale.map(f64::to_bits)))
        .or_insert_with(|| {
            let name = match scale {
                Some(s) => format!("{inner}×{s:.6}"),
                None => inner.to_owned(),
            };
            Box::leak(name.into_boxed_str())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HOUR: u64 = 3_600_000;

    fn learned(ratios: &[f64]) -> Calibration {
        let mut c = Calibration::default();
        for (i, r) in ratios.iter().enumerate() {
            let raw = 10_000.0;
            c.observe((r * raw) as u32, raw, i as u64, i as u64 * 1000)
                .expect("learned");
        }
        c
    }

    #[test]
    fn uncalibrated_keeps_the_estimate_until_enough_reports() {
        let c = learned(&[0.5, 0.5]);
        let a = c.applied(0);
        assert_eq!((a.scale, a.calibrated, a.reports), (1.0, false, 2));
        assert!((a.central.unwrap() - 0.5).abs() < 1e-9);
        let c = learned(&[0.5, 0.5, 0.5]);
        let a = c.applied(0);
        assert!(a.calibrated);
        // 0.5 × 1.05 = 0.525, rounded up to 34/64.
        assert_eq!(a.scale, 34.0 / 64.0);
        assert!((a.provider_per_counted() - 0.5 / a.scale).abs() < 1e-12);
    }

    #[test]
    fn a_report_above_the_scale_raises_it_at_once_and_relaxes_slowly() {
        let mut c = learned(&[0.5; 10]);
        let before = c.applied(10_000).scale;
        c.observe(8_000, 10_000.0, 99, 10_000).unwrap();
        let raised = c.applied(10_000).scale;
        assert!(raised >= 0.8 * 1.05, "raised to {raised}");
        assert!(raised > before);
        // Ordinary reports an hour later: still near the raise.
        c.observe(5_000, 10_000.0, 100, 10_000 + HOUR).unwrap();
        assert!(c.applied(0).scale > 0.8);
        // Days later it is back near the learned scale.
        for d in 1..=10u64 {
            c.observe(5_000, 10_000.0, 200 + d, 10_000 + d * 24 * HOUR)
                .unwrap();
        }
        assert!(c.applied(0).scale < 0.6, "{}", c.applied(0).scale);
    }

    #[test]
    fn an_undercounting_estimate_is_raised_before_calibration() {
        let mut c = Calibration::default();
        c.observe(15_000, 10_000.0, 1, 0).unwrap();
        assert!(c.applied(0).scale >= 1.5 * 1.05);
        assert!(!c.applied(0).calibrated);
    }

    #[test]
    fn small_duplicate_and_implausible_reports_are_refused() {
        let mut c = Calibration::default();
        assert_eq!(c.observe(100, 100.0, 1, 0), Err(Refused::Small));
        c.observe(5_000, 10_000.0, 1, 0).unwrap();
        assert_eq!(c.observe(5_000, 10_000.0, 1, 0), Err(Refused::Duplicate));
        assert!(matches!(
            c.observe(1, 10_000.0, 2, 0),
            Err(Refused::Implausible(_))
        ));
        assert_eq!(c.applied(0).reports, 1);
    }

    #[test]
    fn small_moves_do_not_change_the_scale() {
        let mut c = learned(&[0.50; 8]);
        let s = c.applied(0).scale;
        c.observe(4_900, 10_000.0, 77, 9_000).unwrap();
        assert_eq!(c.applied(0).scale, s);
    }

    #[test]
    fn it_round_trips_as_json() {
        let c = learned(&[0.4, 0.6, 0.5, 0.55]);
        let back: Calibration = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        assert_eq!(
            serde_json::from_str::<Calibration>("{}").unwrap(),
            Calibration::default()
        );
    }

    #[test]
    fn families_share_one_name() {
        for m in [
            "claude-sonnet-4-5",
            "claude-sonnet-4-5-20250929",
            "anthropic/claude-sonnet-4-5",
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "claude-sonnet-4-5@20250929",
            "Claude-Sonnet-4-5-latest",
        ] {
            assert_eq!(model_family(m), "claude-sonnet-4-5", "{m}");
        }
        assert_eq!(model_family("gemini-2.5-pro"), "gemini-2.5-pro");
        assert_eq!(model_family("模型"), "__");
        assert_eq!(model_family(""), "unknown");
        assert_eq!(model_family(".."), "unknown");
    }

    #[test]
    fn a_calibrated_count_scales_up_and_names_its_scale() {
        let inner = crate::tokens::counter_for_model("claude-sonnet-4-5");
        let applied = Applied {
            scale: 0.5,
            central: Some(0.45),
            reports: 3,
            calibrated: true,
        };
        let c = Calibrated::new(Arc::clone(&inner), applied);
        let text = "The quick brown fox jumps over the lazy dog, twice.";
        assert_eq!(
            c.count(text),
            (inner.count(text) as f64 * 0.5).ceil() as usize
        );
        assert_eq!(c.count(""), 0);
        assert_eq!(c.count("a"), 1);
        assert_ne!(c.name(), inner.name());
        assert_eq!(c.name(), Calibrated::new(inner, applied).name());
        assert_eq!(c.calibration(), Some(applied));
        // An exact count stays as it is; only its predictions use reports.
        let exact = Calibrated::new(crate::tokens::o200k(), applied);
        assert_eq!(exact.count(text), crate::tokens::o200k().count(text));
        assert_eq!(exact.name(), "o200k_base");
        assert!(exact.is_exact());
        let a = exact.calibration().expect("applied");
        assert_eq!((a.scale, a.calibrated), (1.0, false));
        assert!((a.provider_per_counted() - 0.45).abs() < 1e-12);
        assert_eq!(Counting::of(&exact).basis, CountBasis::Exact);
    }

    proptest! {
        /// Whatever is reported, the scale stays within its bounds, a
        /// multiple of the step, and once a report is learned it covers that
        /// report with the margin.
        #[test]
        fn the_scale_covers_the_newest_report(
            reports in proptest::collection::vec((0.06f64..15.0, 0u64..400), 1..80)
        ) {
            let mut c = Calibration::default();
            let mut now = 0;
            for (i, (ratio, gap)) in reports.iter().enumerate() {
                now += gap * HOUR;
                let raw = 100_000.0;
                let provider = (ratio * raw) as u32;
                if c.observe(provider, raw, i as u64, now).is_ok() {
                    let a = c.applied(now);
                    prop_assert!((FLOOR..=CEILING).contains(&a.scale));
                    prop_assert!(((a.scale / STEP).round() * STEP - a.scale).abs() < 1e-9);
                    let needed = (f64::from(provider) / raw * (1.0 + MARGIN)).min(CEILING);
                    prop_assert!(a.scale + 1e-9 >= needed, "{} < {}", a.scale, needed);
                    if !a.calibrated {
                        prop_assert!(a.scale >= 1.0);
                    }
                }
            }
        }
    }
}
