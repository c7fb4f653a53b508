//! A paper's claims beside ours, shared by every experiment's report: each claim states
//! what the paper says with its magnitude, how our number is judged against it (the
//! test and its tolerance, chosen before looking at our number), our number, and the
//! verdict — which says "no" whenever our data falls outside the tolerance.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// How our number is judged against the paper's.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Test {
    /// Ours at least the paper's, less the tolerance.
    AtLeast {
        /// The paper's value.
        paper: f64,
        /// Allowed shortfall.
        tolerance: f64,
    },
    /// Ours at most the paper's, plus the tolerance.
    AtMost {
        /// The paper's value.
        paper: f64,
        /// Allowed excess.
        tolerance: f64,
    },
    /// Ours within the tolerance of the paper's, either way.
    Near {
        /// The paper's value.
        paper: f64,
        /// Allowed distance.
        tolerance: f64,
    },
    /// A ratio at least the paper's divided by `factor`.
    RatioAtLeast {
        /// The paper's ratio.
        paper: f64,
        /// Allowed factor of shortfall.
        factor: f64,
    },
    /// A ratio within `factor` of the paper's, either way.
    RatioNear {
        /// The paper's ratio.
        paper: f64,
        /// Allowed factor either way.
        factor: f64,
    },
    /// A trend: ours is a later value over an earlier one (say resets at the heaviest
    /// load over those at the lightest) and must be below 1, as the paper's is.
    Falls {
        /// The paper's own later-over-earlier ratio, where it gives both values.
        paper: Option<f64>,
    },
}

/// How far past a band's edge a value may lie by rounding alone and still be on the
/// edge: 1.0 is within 1.01 +- 0.01, though 1.0 - 1.01 is -0.010000000000000009 in
/// binary floating point.
const EDGE: f64 = 1e-9;

impl Test {
    fn passes(self, ours: f64) -> bool {
        match self {
            Test::AtLeast { paper, tolerance } => ours >= paper - tolerance - EDGE,
            Test::AtMost { paper, tolerance } => ours <= paper + tolerance + EDGE,
            Test::Near { paper, tolerance } => (ours - paper).abs() <= tolerance + EDGE,
            Test::RatioAtLeast { paper, factor } => ours >= paper / factor,
            Test::RatioNear { paper, factor } => ours >= paper / factor && ours <= paper * factor,
            Test::Falls { .. } => ours < 1.0,
        }
    }

    /// The paper's value the test compares with.
    pub fn paper(self) -> f64 {
        match self {
            Test::AtLeast { paper, .. }
            | Test::AtMost { paper, .. }
            | Test::Near { paper, .. }
            | Test::RatioAtLeast { paper, .. }
            | Test::RatioNear { paper, .. } => paper,
            Test::Falls { paper } => paper.unwrap_or(f64::NAN),
        }
    }

    fn describe(self, unit: Unit) -> String {
        match self {
            Test::AtLeast { paper, tolerance } => {
                format!(
                    ">= {} (paper {} less {})",
                    unit.show(paper - tolerance),
                    unit.show(paper),
                    unit.span(tolerance)
                )
            }
            Test::AtMost { paper, tolerance } => {
                format!(
                    "<= {} (paper {} plus {})",
                    unit.show(paper + tolerance),
                    unit.show(paper),
                    unit.span(tolerance)
                )
            }
            Test::Near { paper, tolerance } => {
                format!("{} ± {}", unit.show(paper), unit.span(tolerance))
            }
            Test::RatioAtLeast { paper, factor } => {
                format!(
                    ">= {}x (paper {}x within a factor {})",
                    short(paper / factor),
                    short(paper),
                    short(factor)
                )
            }
            Test::RatioNear { paper, factor } => {
                // a share judged within a factor shows as the share it is
                let v = |x: f64| match unit {
                    Unit::Ratio => format!("{}x", short(x)),
                    // small shares: a tenth of a point would round the band away
                    Unit::Percent => format!("{:.2}%", 100.0 * x),
                    _ => unit.show(x),
                };
                format!(
                    "{} to {} (paper {} within a factor {} either way)",
                    v(paper / factor),
                    v(paper * factor),
                    v(paper),
                    short(factor)
                )
            }
            Test::Falls { paper: Some(paper) } => {
                format!("< 1x: falls (paper {}x)", short(paper))
            }
            Test::Falls { paper: None } => "< 1x: falls (the paper gives no values)".into(),
        }
    }
}

/// What a claim's numbers are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// A fraction shown as a percentage; tolerances in percentage points.
    Percent,
    /// A ratio.
    Ratio,
    /// A ratio between 0 and 1 where a tenth is coarse (a max-min ratio): two
    /// decimals, no "x".
    Fraction,
    /// Seconds.
    Seconds,
    /// A count.
    Count,
}

impl Unit {
    /// A value in this unit, for people.
    pub fn show(self, x: f64) -> String {
        match self {
            Unit::Percent => format!("{:.1}%", 100.0 * x),
            // two decimals: a tolerance of 0.04 about 1.01 is read off the value
            Unit::Ratio => format!("{x:.2}x"),
            Unit::Fraction => format!("{x:.2}"),
            Unit::Seconds => format!("{x:.1} s"),
            Unit::Count => format!("{x:.0}"),
        }
    }

    fn span(self, x: f64) -> String {
        match self {
            // a tolerance of 1.4 points is not "1 points"
            Unit::Percent => {
                let points = format!("{:.1}", 100.0 * x);
                format!("{} points", points.strip_suffix(".0").unwrap_or(&points))
            }
            // a tolerance of 0.04 is not "0.0"
            Unit::Ratio => short(x),
            Unit::Fraction => format!("{x:.2}"),
            Unit::Seconds => format!("{x:.1} s"),
            Unit::Count => format!("{x:.0}"),
        }
    }
}

/// The verdict on one claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Our number passes the test.
    Holds,
    /// It does not.
    DoesNotHold,
    /// Our run did not produce the number (e.g. a curve never reaches the utilization).
    NotMeasured,
}

impl Verdict {
    /// Whether it holds; `None` when not measured.
    pub fn holds(self) -> Option<bool> {
        match self {
            Verdict::Holds => Some(true),
            Verdict::DoesNotHold => Some(false),
            Verdict::NotMeasured => None,
        }
    }

    /// For tables.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Holds => "yes",
            Verdict::DoesNotHold => "**no**",
            Verdict::NotMeasured => "not measured",
        }
    }
}

/// Whether a claim is evidence for the model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ClaimKind {
    /// It tests the mechanism: counted in the tally.
    #[default]
    Evidence,
    /// Any policy would give it (capacity alone, say): judged and shown, not counted.
    Structural {
        /// Why it follows from structure, not from the mechanism.
        why: String,
    },
    /// The model was built from this number: shown, not counted.
    Input {
        /// What was built from it.
        into: String,
    },
}

impl ClaimKind {
    fn is_evidence(&self) -> bool {
        *self == ClaimKind::Evidence
    }
}

/// One claim of a paper and what our run says of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// Short id.
    pub id: String,
    /// Which runs it was checked on (e.g. a submission mode).
    pub scope: String,
    /// Where the paper says it.
    pub source: String,
    /// What the paper says, with its magnitude.
    pub paper: String,
    /// How ours is judged.
    pub test: Test,
    /// Unit of the numbers.
    pub unit: Unit,
    /// Our number.
    pub ours: Option<f64>,
    /// The numbers behind ours.
    pub detail: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Evidence, or structural (outside the tally).
    #[serde(default, skip_serializing_if = "ClaimKind::is_evidence")]
    pub kind: ClaimKind,
    /// A stated deviation of ours the number depends on, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<String>,
}

impl Claim {
    /// A claim judged now: the verdict follows from `ours` and `test`.
    // each argument is one field of the claim; a builder would only rename them
    #[allow(clippy::too_many_arguments)]
    pub fn judge(
        id: &str,
        scope: &str,
        source: &str,
        paper: &str,
        test: Test,
        unit: Unit,
        ours: Option<f64>,
        detail: String,
    ) -> Claim {
        let verdict = match ours {
            Some(x) if x.is_finite() && test.passes(x) => Verdict::Holds,
            Some(x) if x.is_finite() => Verdict::DoesNotHold,
            _ => Verdict::NotMeasured,
        };
        Claim {
            id: id.into(),
            scope: scope.into(),
            source: source.into(),
            paper: paper.into(),
            test,
            unit,
            ours,
            detail,
            verdict,
            kind: ClaimKind::Evidence,
            depends_on: None,
        }
    }

    /// This claim, marked as following from structure alone (outside the tally).
    pub fn structural(mut self, why: &str) -> Claim {
        self.kind = ClaimKind::Structural { why: why.into() };
        self
    }

    /// This claim, marked as depending on a stated deviation of ours.
    pub fn depends_on(mut self, deviation: &str) -> Claim {
        self.depends_on = Some(deviation.into());
        self
    }

    /// This claim, marked as an input of the model (outside the tally).
    pub fn input(mut self, into: &str) -> Claim {
        self.kind = ClaimKind::Input { into: into.into() };
        self
    }

    /// Counted in the tally.
    pub fn is_evidence(&self) -> bool {
        self.kind == ClaimKind::Evidence
    }
}

/// The claims as a Markdown table.
pub fn table(claims: &[Claim]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| claim | runs | paper (where) | test | ours | holds |\n|---|---|---|---|---|---|"
    );
    for c in claims {
        let ours = match c.ours {
            Some(x) if x.is_finite() => c.unit.show(x),
            _ => "—".into(),
        };
        let mut detail =
            if c.detail.is_empty() { String::new() } else { format!(" ({})", c.detail) };
        if let Some(d) = &c.depends_on {
            let _ = write!(detail, "; depends on a deviation: {d}");
        }
        let verdict = match &c.kind {
            ClaimKind::Evidence => c.verdict.label().to_string(),
            ClaimKind::Structural { why } => {
                format!("{} (structural, not counted: {why})", c.verdict.label())
            }
            ClaimKind::Input { into } => {
                format!("{} (an input, not counted: {into})", c.verdict.label())
            }
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} ({}) | {} | {}{} | {} |",
            c.id,
            c.scope,
            c.paper,
            c.source,
            c.test.describe(c.unit),
            ours,
            detail,
            verdict
        );
    }
    s
}

/// Counts of verdicts of the evidence claims (structural ones are left out): (holds,
/// does not hold, not measured).
pub fn tally(claims: &[Claim]) -> (usize, usize, usize) {
    claims.iter().filter(|c| c.is_evidence()).fold((0, 0, 0), |(y, n, m), c| match c.verdict {
        Verdict::Holds => (y + 1, n, m),
        Verdict::DoesNotHold => (y, n + 1, m),
        Verdict::NotMeasured => (y, n, m + 1),
    })
}

/// `x` with at most two decimals and no trailing zeros: 2, 2.5, 2.09.
fn short(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests;

/// A claim as every experiment's `results.json` lists it (one schema for all five):
/// what the paper says and where, our number, the test that judges it with its
/// tolerance, and the verdict — `null` only with the reason.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The claim's id.
    pub id: String,
    /// Which runs it was checked on (empty: the experiment's only ones).
    pub scope: String,
    /// What the paper says, with its magnitude, and where.
    pub paper: String,
    /// Our number.
    pub ours: Option<f64>,
    /// How ours is judged (kind, the paper's value, the tolerance).
    pub test: Test,
    /// Whether it holds; `None` when this run gave no number to judge.
    pub holds: Option<bool>,
    /// Why `holds` is `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why it follows from structure alone, when it does (then it is not evidence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structural: Option<String>,
    /// The stated deviation of ours it depends on, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<String>,
}

/// The claims as `results.json`'s `comparisons`.
pub fn comparisons(claims: &[Claim]) -> Vec<Comparison> {
    claims
        .iter()
        .map(|c| {
            let holds = c.verdict.holds();
            let reason = holds.is_none().then(|| {
                if c.detail.is_empty() {
                    "no data: this run gave no number for it".to_string()
                } else {
                    format!("no data: {}", c.detail)
                }
            });
            Comparison {
                id: c.id.clone(),
                scope: c.scope.clone(),
                paper: format!("{} ({})", c.paper, c.source),
                ours: c.ours,
                test: c.test,
                holds,
                reason,
                structural: match &c.kind {
                    ClaimKind::Structural { why } => Some(why.clone()),
                    ClaimKind::Input { into } => Some(format!("an input: {into}")),
                    ClaimKind::Evidence => None,
                },
                depends_on: c.depends_on.clone(),
            }
        })
        .collect()
}

/// One constant of ours (not the paper's) varied: the claims judged again at a low and
/// a high plausible value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sensitivity {
    /// Its name in the experiment's constants.
    pub constant: String,
    /// What it is, and why the range.
    pub what: String,
    /// Low, used, high.
    pub values: [String; 3],
    /// Every claim that depends on it, at each value.
    pub claims: Vec<ClaimAtValues>,
}

/// One claim at a constant's low, used and high value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClaimAtValues {
    /// The claim.
    pub id: String,
    /// Our number at each value.
    pub ours: [Option<f64>; 3],
    /// Whether it holds at each (`null`: not measured).
    pub holds: [Option<bool>; 3],
}

/// A constant of ours, with the plausible range the report judges the claims over.
#[derive(Debug)]
pub struct Variation<K> {
    /// Its name in `K`.
    pub name: &'static str,
    /// What it is, and why the range.
    pub what: &'static str,
    /// Its value in `K`, for the report.
    pub show: fn(&K) -> String,
    /// Set it to its low value.
    pub low: fn(&mut K),
    /// Set it to its high value.
    pub high: fn(&mut K),
}

/// Each variation's low and high value, every other constant as `used`: the claims
/// `measure` judges there, beside `base` (judged at `used`). Claims for which
/// `depends` is false are left out; a claim is matched by id and scope. The runs go in
/// parallel.
pub fn sensitivity<K, E>(
    used: &K,
    base: &[Claim],
    variations: &[Variation<K>],
    depends: impl Fn(&Claim) -> bool,
    measure: impl Fn(&K) -> Result<Vec<Claim>, E> + Sync,
) -> Result<Vec<Sensitivity>, E>
where
    K: Clone + Sync + Send,
    E: Send,
{
    use rayon::prelude::*;
    let constants: Vec<K> = variations
        .iter()
        .flat_map(|v| {
            [v.low, v.high].map(|set| {
                let mut k = used.clone();
                set(&mut k);
                k
            })
        })
        .collect();
    let judged: Vec<Vec<Claim>> = constants.par_iter().map(&measure).collect::<Result<_, _>>()?;
    Ok(variations
        .iter()
        .zip(constants.chunks(2).zip(judged.chunks(2)))
        .map(|(v, (k, at))| {
            let claims = base
                .iter()
                .filter(|c| depends(c))
                .filter_map(|c| {
                    let same = |x: &&Claim| x.id == c.id && x.scope == c.scope;
                    let l = at[0].iter().find(same)?;
                    let h = at[1].iter().find(same)?;
                    Some(ClaimAtValues {
                        id: c.id.clone(),
                        ours: [l.ours, c.ours, h.ours],
                        holds: [l.verdict.holds(), c.verdict.holds(), h.verdict.holds()],
                    })
                })
                .collect();
            Sensitivity {
                constant: v.name.into(),
                what: v.what.into(),
                values: [(v.show)(&k[0]), (v.show)(used), (v.show)(&k[1])],
                claims,
            }
        })
        .collect())
}

/// Which constants of ours, at their low or high value, make the claim `id` hold:
/// "`name` at its low value v", for the report's explanations of a difference.
pub fn makes_hold(sensitivity: &[Sensitivity], id: &str) -> Vec<String> {
    verdict_at_ends(sensitivity, id, true)
}

/// The constants of ours that, at their low or high value, make `id` fail (the
/// reverse of [`makes_hold`]): a claim that holds as judged but fails at one of them is
/// fragile.
pub fn makes_fail(sensitivity: &[Sensitivity], id: &str) -> Vec<String> {
    verdict_at_ends(sensitivity, id, false)
}

/// The constants at whose low or high value `id`'s verdict is `holds`.
fn verdict_at_ends(sensitivity: &[Sensitivity], id: &str, holds: bool) -> Vec<String> {
    let mut out = Vec::new();
    for v in sensitivity {
        for k in v.claims.iter().filter(|k| k.id == id) {
            for (i, side) in [(0usize, "low"), (2, "high")] {
                if k.holds[i] == Some(holds) {
                    out.push(format!("`{}` at its {side} value {}", v.constant, v.values[i]));
                }
            }
        }
    }
    out
}

/// Of the counted claims that hold, those that hold at every constant's low and high
/// value (robust) and those that fail at one (fragile, with what flips them). Only
/// meaningful when `sensitivity` was run over these claims.
pub fn robustness<'a>(
    claims: &'a [Claim],
    sensitivity: &[Sensitivity],
) -> (Vec<&'a Claim>, Vec<(&'a Claim, Vec<String>)>) {
    let (mut robust, mut fragile) = (Vec::new(), Vec::new());
    for c in claims.iter().filter(|c| c.is_evidence() && c.verdict == Verdict::Holds) {
        let flips = makes_fail(sensitivity, &c.id);
        if flips.is_empty() { robust.push(c) } else { fragile.push((c, flips)) }
    }
    (robust, fragile)
}

/// The report's lines beside the tally: of the `holds` counted claims that hold, the
/// robust (they hold at every constant of ours at its low and high value) and the
/// fragile (one flips them: named, with the value), and the tally counting only the
/// robust (issue 56: a reader counting only what survives the sweep; issue 57 item 9:
/// the sensitivity beside the headline). Holding claims that no constant's run judged
/// again (they do not depend on the setting) are named apart, not counted as robust.
pub fn robustness_lines(claims: &[Claim], sensitivity: &[Sensitivity], holds: usize) -> String {
    let swept = |c: &Claim| sensitivity.iter().any(|v| v.claims.iter().any(|k| k.id == c.id));
    let (robust, fragile) = robustness(claims, sensitivity);
    let (robust, unswept): (Vec<&Claim>, Vec<&Claim>) = robust.into_iter().partition(|c| swept(c));
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Of the {holds} that hold, robust (they hold at every constant of ours at its low and high value, \
         below): {}; fragile: {}. Counted as judged, {holds} hold; counting only the robust, {}.\n",
        robust.len(),
        fragile.len(),
        robust.len()
    );
    for c in &robust {
        let _ = writeln!(s, "- robust: `{}`", c.id);
    }
    for (c, flips) in &fragile {
        let _ = writeln!(s, "- fragile: `{}`, fails with {}", c.id, flips.join(", "));
    }
    for c in &unswept {
        let _ = writeln!(s, "- not run again (it does not depend on the setting): `{}`", c.id);
    }
    s.push('\n');
    s
}

/// The counted claims whose verdict at the sweep's used values (`used`, say "10 orders":
/// a smaller run than the claims') differs from their verdict (on `all`, say "all 50"):
/// how far a verdict rests on the size of the run (issue 57).
pub fn used_verdicts_differ(
    claims: &[Claim],
    sensitivity: &[Sensitivity],
    used: &str,
    all: &str,
) -> String {
    let differ: Vec<String> = claims
        .iter()
        .filter(|c| c.is_evidence())
        .filter_map(|c| {
            let k = sensitivity.iter().flat_map(|v| &v.claims).find(|k| k.id == c.id)?;
            let there = k.holds[1]?;
            (there != (c.verdict == Verdict::Holds)).then(|| {
                format!(
                    "`{}` {} ({})",
                    c.id,
                    if there { "holds" } else { "does not hold" },
                    k.ours[1].map_or("-".into(), |x| format!("{x:.3}"))
                )
            })
        })
        .collect();
    if differ.is_empty() {
        format!("On {used} every counted claim's verdict is its verdict on {all}.\n")
    } else {
        format!("On {used} these verdicts differ from those on {all}: {}.\n", differ.join("; "))
    }
}

/// The report's list of differences: one line per counted claim that does not hold —
/// ours and the paper's value, what `beside` says the run measured next to it (may be
/// empty), and the constants of ours that make it hold at their low or high value;
/// where none does, that the cause is not identified by this run. Nothing in it is a
/// fixed explanation.
pub fn differences_list(
    claims: &[Claim],
    sensitivity: &[Sensitivity],
    beside: impl Fn(&Claim) -> String,
) -> String {
    differences_list_explained(claims, sensitivity, beside, |_| false)
}

/// [`differences_list`], where `explained` says which claims `beside` gives the cause
/// of (an experiment of the run isolated it): those say so instead of "not identified".
pub fn differences_list_explained(
    claims: &[Claim],
    sensitivity: &[Sensitivity],
    beside: impl Fn(&Claim) -> String,
    explained: impl Fn(&Claim) -> bool,
) -> String {
    let mut s = String::new();
    for c in claims.iter().filter(|c| c.is_evidence() && c.verdict == Verdict::DoesNotHold) {
        let ours = c.ours.map_or("—".into(), |x| c.unit.show(x));
        let paper = c.unit.show(c.test.paper());
        let mut line = format!("- **{}** ({}): ours {ours}, paper {paper}.", c.id, c.source);
        let more = beside(c);
        if !more.is_empty() {
            let _ = write!(line, " {more}");
        }
        let holds_with = makes_hold(sensitivity, &c.id);
        if !holds_with.is_empty() {
            let _ = write!(line, " It holds with {}.", holds_with.join(", "));
        } else if explained(c) {
            line.push_str(" No constant of ours varied in this run makes it hold; its cause is the one stated.");
        } else if !sensitivity.is_empty() {
            line.push_str(
                " No constant of ours varied in this run makes it hold: the cause is not \
                 identified by this run.",
            );
        }
        let _ = writeln!(s, "{line}");
    }
    if s.is_empty() {
        s.push_str("Every claim measured holds.\n");
    }
    s
}

/// The report's "Constants of ours" section, without surrounding blank lines: its
/// intro says which claims were `judged` again (and on what), then the table.
pub fn sensitivity_section(judged: &str, sensitivity: &[Sensitivity]) -> String {
    format!(
        "## Constants of ours\n\nEach constant that is ours, not the paper's, run again at a low and \
         a high plausible value (every other constant as used), {judged}. The claims whose verdict \
         changes:\n\n{}",
        sensitivity_table(sensitivity).trim_end()
    )
}

/// The report's table of constants: for each, the claims whose verdict changes
/// between its low, used and high value.
pub fn sensitivity_table(sensitivity: &[Sensitivity]) -> String {
    let mut s = String::from(
        "| constant | what | low / used / high | claims whose verdict changes (ours at low / used / high) |\n|---|---|---|---|\n",
    );
    let verdict = |h: Option<bool>| match h {
        Some(true) => "holds",
        Some(false) => "**no**",
        None => "not measured",
    };
    for c in sensitivity {
        let flips: Vec<String> = c
            .claims
            .iter()
            .filter(|x| x.holds[0] != x.holds[1] || x.holds[2] != x.holds[1])
            .map(|x| {
                let n = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
                format!(
                    "{}: {} / {} / {} ({} / {} / {})",
                    x.id,
                    n(x.ours[0]),
                    n(x.ours[1]),
                    n(x.ours[2]),
                    verdict(x.holds[0]),
                    verdict(x.holds[1]),
                    verdict(x.holds[2])
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} |",
            c.constant,
            c.what,
            c.values.join(" / "),
            if flips.is_empty() { "none".into() } else { flips.join("; ") }
        );
    }
    s
}
