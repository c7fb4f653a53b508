//! The claims' judging, tally and sensitivity, against hand-made claims.

use super::*;

/// A claim that holds is robust unless a constant of ours at its low or high value
/// makes it fail; structural and failing claims are neither.
#[test]
fn robust_and_fragile_claims_are_told_apart_by_the_sweep() {
    let at = |id: &str, holds: [Option<bool>; 3]| ClaimAtValues {
        id: id.into(),
        ours: [None; 3],
        holds,
    };
    let sweep = vec![Sensitivity {
        constant: "k".into(),
        what: String::new(),
        values: ["1".into(), "2".into(), "3".into()],
        claims: vec![
            at("steady", [Some(true), Some(true), Some(true)]),
            at("shaky", [Some(true), Some(true), Some(false)]),
        ],
    }];
    let holds = |id: &str| {
        Claim::judge(
            id,
            "",
            "",
            "",
            Test::AtLeast { paper: 0.0, tolerance: 0.0 },
            Unit::Count,
            Some(1.0),
            String::new(),
        )
    };
    let claims = vec![
        holds("steady"),
        holds("shaky"),
        holds("built-in").structural("by construction"),
        Claim::judge(
            "fails",
            "",
            "",
            "",
            Test::AtLeast { paper: 2.0, tolerance: 0.0 },
            Unit::Count,
            Some(1.0),
            String::new(),
        ),
    ];
    let (robust, fragile) = robustness(&claims, &sweep);
    assert_eq!(robust.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["steady"]);
    assert_eq!(fragile.len(), 1);
    assert_eq!(fragile[0].0.id, "shaky");
    assert_eq!(fragile[0].1, vec!["`k` at its high value 3".to_string()]);
    // a holding claim no constant's run judged again is not counted as robust
    let mut more = claims.clone();
    more.push(holds("unswept"));
    let lines = robustness_lines(&more, &sweep, 3);
    assert!(lines.contains("below): 1; fragile: 1."), "{lines}");
    assert!(lines.contains("- fragile: `shaky`, fails with `k` at its high value 3"), "{lines}");
    assert!(
        lines.contains("- not run again (it does not depend on the setting): `unswept`"),
        "{lines}"
    );
}

#[test]
fn verdicts_follow_the_test_and_can_say_no() {
    let t = Test::AtLeast { paper: 0.98, tolerance: 0.03 };
    let judge = |x| Claim::judge("c", "s", "§", "p", t, Unit::Percent, x, String::new()).verdict;
    assert_eq!(judge(Some(0.96)), Verdict::Holds);
    assert_eq!(judge(Some(0.94)), Verdict::DoesNotHold);
    assert_eq!(judge(None), Verdict::NotMeasured);
    assert_eq!(judge(Some(f64::NAN)), Verdict::NotMeasured);
    let r = Test::RatioAtLeast { paper: 10.0, factor: 2.0 };
    assert!(r.passes(5.0) && !r.passes(4.9));
    assert!(Test::Near { paper: 0.5, tolerance: 0.1 }.passes(0.41));
    assert!(!Test::AtMost { paper: 0.4, tolerance: 0.1 }.passes(0.6));
    // two-sided ratios say no above as well as below
    let near = Test::RatioNear { paper: 10.0, factor: 2.0 };
    assert!(near.passes(5.0) && near.passes(20.0));
    assert!(!near.passes(4.9) && !near.passes(20.1));
    // a trend: later over earlier must be below 1
    assert!(Test::Falls { paper: Some(0.24) }.passes(0.9));
    assert!(!Test::Falls { paper: None }.passes(1.0));
}

/// Structural claims are shown with their verdict but left out of the tally.
#[test]
fn structural_claims_are_not_counted() {
    let t = Test::AtLeast { paper: 0.5, tolerance: 0.0 };
    let c = |x| Claim::judge("c", "s", "§", "p", t, Unit::Percent, Some(x), String::new());
    let claims = [c(0.6), c(0.4), c(0.7).structural("capacity"), c(0.1).structural("capacity")];
    assert_eq!(tally(&claims), (1, 1, 0));
    let t = table(&claims);
    assert!(t.contains("structural, not counted: capacity"), "{t}");
    let d = c(0.6).depends_on("the corrected reset rule");
    assert!(table(&[d]).contains("depends on a deviation: the corrected reset rule"));
}

/// A model whose number is its constant: the claim "at least 0.5" holds at the used
/// 0.6 and the high 0.9, not at the low 0.2; a claim left out is not listed; the
/// table names the flip and only it.
#[test]
fn sensitivity_judges_each_claim_at_the_low_and_high_values() {
    let t = Test::AtLeast { paper: 0.5, tolerance: 0.0 };
    let measure = |k: &f64| -> Result<Vec<Claim>, ()> {
        Ok(["a", "b"]
            .iter()
            .map(|id| Claim::judge(id, "", "", "", t, Unit::Ratio, Some(*k), String::new()))
            .collect())
    };
    let variations = [
        Variation {
            name: "k",
            what: "",
            show: |k: &f64| k.to_string(),
            low: |k| *k = 0.2,
            high: |k| *k = 0.9,
        },
        Variation {
            name: "same",
            what: "",
            show: |k: &f64| k.to_string(),
            low: |k| *k = 0.55,
            high: |k| *k = 0.7,
        },
    ];
    let base = measure(&0.6).unwrap();
    let s = sensitivity(&0.6, &base, &variations, |c| c.id == "a", measure).unwrap();
    assert_eq!(s[0].values, ["0.2".to_string(), "0.6".into(), "0.9".into()]);
    assert_eq!(s[0].claims.len(), 1);
    assert_eq!(s[0].claims[0].holds, [Some(false), Some(true), Some(true)]);
    assert_eq!(s[0].claims[0].ours, [Some(0.2), Some(0.6), Some(0.9)]);
    let table = sensitivity_table(&s);
    assert!(table.contains("| `k` |") && table.contains("a: 0.200 / 0.600 / 0.900"));
    assert!(table.contains("| `same` |  | 0.55 / 0.6 / 0.7 | none |"), "{table}");
}

/// A verdict on the sweep's used values (a smaller run) that differs from the claim's
/// is named with its number; none differing says so.
#[test]
fn verdicts_on_the_sweeps_used_values_that_differ_are_named() {
    let t = Test::AtLeast { paper: 0.5, tolerance: 0.0 };
    let claim =
        |id: &str, x: f64| Claim::judge(id, "", "", "", t, Unit::Ratio, Some(x), String::new());
    let at = |id: &str, used: f64| ClaimAtValues {
        id: id.into(),
        ours: [None, Some(used), None],
        holds: [None, Some(used >= 0.5), None],
    };
    let sweep = |a: f64, b: f64| {
        vec![Sensitivity {
            constant: "k".into(),
            what: String::new(),
            values: ["1".into(), "2".into(), "3".into()],
            claims: vec![at("a", a), at("b", b)],
        }]
    };
    let claims = vec![claim("a", 0.6), claim("b", 0.4)];
    let same = used_verdicts_differ(&claims, &sweep(0.7, 0.3), "10 orders", "all 50");
    assert_eq!(same, "On 10 orders every counted claim's verdict is its verdict on all 50.\n");
    let differ = used_verdicts_differ(&claims, &sweep(0.45, 0.55), "10 orders", "all 50");
    assert_eq!(
        differ,
        "On 10 orders these verdicts differ from those on all 50: `a` does not hold (0.450); \
         `b` holds (0.550).\n"
    );
}
