//! DCUDA's report: the contention fit, §2.2's light pairs, the means over the orders,
//! one order's load bands (Figure 10), why the slicing step loses, where we differ,
//! and the claims.

use super::judge::light_names;
use super::*;

/// The report, every number from `r`.
pub fn report(r: &DcudaResults) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# DCUDA: reproduction\n");
    let _ = writeln!(
        s,
        "{} applications (DCUDA Table 1; their launch shapes, loops and sizes are ours, \
         from `data/dcuda/apps.csv`: each loop's host and kernel time per iteration derived \
         from the benchmark's source, so its duty cycle follows), each a program looping \
         over CPU work and one kernel; {} random arrival orders per load, {} GPUs (1080 Ti: 28 SMs). Co-running \
         kernels share a GPU by spatial multiplexing as thread blocks on its SMs (the \
         engine's block model): a greedy in-order dispatcher places each kernel's blocks \
         where the occupancy arithmetic says they fit, so a kernel with many blocks holds \
         up a small one launched after it; past the GPU's capacity, co-running kernels \
         also slow each other by a contention factor {}. The monitor's \
         demand is each kernel's occupancy (from its launch shape) weighted by the time \
         the application's kernels run in each 100 ms sample. Least-loaded: each application placed on the GPU with \
         the least monitored load when it arrives, never moved. `dcuda`, DCUDA with the \
         constants tesserad runs (`DcudaParams::DAEMON`; judged since issue 57, the \
         paper's before): the same placement, then every 100 ms the monitor's sample, load \
         balancing with hysteresis (over 100%, under 90%), energy compaction (two GPUs \
         merged when one can hold both below 90%; the paper: up to 100%) and fair slicing \
         of still-overloaded GPUs (100 ms slices), a moved application staying at least 1 s \
         (the paper: no stay), no stream priorities (the paper raises those of a group's \
         light applications; the daemon cannot re-create a client's streams); migrations \
         between an application's tasks with a 100 ms pause, data moved on demand. \
         `dcuda-paper`, with the paper's constants, is a row of the steps' table below. \
         `dcuda-no-slicing`: `dcuda` without the slicing \
         step (a diagnostic, not the paper's system; claims are judged on `dcuda`). \
         Overloaded time counts the monitor's samples in which the demand of the \
         applications placed on a GPU exceeds its capacity (§4.3's definition), so that \
         slicing, which holds some of them back, does not count as removing overload; \
         utilization is §4.3's too (that demand over the capacity, at most 100%), with \
         the cores actually in use and the busy time (an application placed) beside it. \
         Figures: `fig10.svg`, `fig11.svg`, `fig12.svg`, `fig13.svg`, `fig14.svg`.\n",
        r.apps.len(),
        r.config.orders,
        GPUS,
        match &r.contention_fit {
            Some(f) => format!(
                "(1 + {} per unit of summed demand above it), **fitted** on least-loaded alone \
                 (below)",
                f.chosen
            ),
            None => format!(
                "of 1 + {} per unit of summed demand above it",
                r.config.constants.contention
            ),
        },
    );
    let _ = writeln!(
        s,
        "Each application is a program on the program engine (issue 57's item 11): its \
         CPU work on the testbed's 16 cores (two 8-core Xeon E5-2620 v4, §4.1), a woken \
         thread placed on an idle core as Linux places it, its kernels with their launch \
         shapes placed, migrated and sliced by the policy. At most {} applications were \
         in a CPU phase at once over these runs{}.\n",
        r.cpu_phases_at_most,
        if r.cpu_phases_at_most <= 16 {
            ", so none waited for a core: the runs equal the task engine's, whose CPU \
             phases are delays (checked in `dcuda::programs`' tests)"
        } else {
            ": more than the cores, so some waited for one"
        }
    );
    if let Some(f) = &r.contention_fit {
        let _ = writeln!(s, "## The contention fit (least-loaded only)\n");
        let _ = writeln!(
            s,
            "Least-loaded at medium load on {} arrival orders per value; the value whose \
             share of applications within 20% of solo is nearest {} (Figure 13(a): \
             least-loaded keeps \"fewer than 60%\" there; we take the bound as the value) is \
             used everywhere below. DCUDA never runs in the fit, so all of its numbers are \
             predictions; `fig13a-least-loaded` is the fit's input and is not counted.\n",
            f.orders,
            pct(f.target_qos)
        );
        if let (Some((_, at_zero)), Some((_, fitted))) = (
            f.candidates.iter().find(|(c, _)| *c == 0.0),
            f.candidates.iter().find(|(c, _)| *c == f.chosen),
        ) {
            // the judged runs use more orders than the fit: their share differs (issue 57
            // item 8's audit: the report said 62.5% where the runs below show 70.5%)
            let judged = r
                .claims
                .iter()
                .find(|c| c.id == "fig13a-least-loaded")
                .and_then(|c| c.ours)
                .map_or("—".to_string(), pct);
            let _ = writeln!(
                s,
                "With no contention least-loaded already keeps {} of applications within 20% of \
                 solo; with the fitted constant it keeps {} on the fit's {} orders and {} on the \
                 orders judged below (`fig13a-least-loaded`): least-loaded's unfairness here, \
                 which DCUDA is judged against, comes from the fit, not from placement alone.\n",
                pct(*at_zero),
                pct(*fitted),
                f.orders,
                judged
            );
        }
        let _ = writeln!(s, "| contention | least-loaded within 20% of solo |\n|---|---|");
        for (c, q) in &f.candidates {
            let mark = if *c == f.chosen { " (chosen)" } else { "" };
            let _ = writeln!(s, "| {c}{mark} | {} |", pct(*q));
        }
        let _ = writeln!(s);
        if let Some(edge) = fit_at_its_edge(f) {
            let _ = writeln!(s, "{edge}\n");
        }
    }
    if !r.pairs.is_empty() {
        let _ = writeln!(s, "## Two light applications on one GPU (§2.2)\n");
        let _ = writeln!(
            s,
            "The {} applications of least mean demand ({}), every pair on one GPU, the second \
             started half an iteration of the first after it (started at the same instant \
             they slow alike since a fix to the engine, 2026-11-29: issue 57's 26.3% at no \
             contention was a kernel's finish collected a wave late, not blocking); each \
             one's run time over its time alone, less one.\n",
            LIGHT_APPS,
            light_names(r)
        );
        let _ = writeln!(s, "| pair | slowdowns |\n|---|---|");
        for p in &r.pairs {
            let _ = writeln!(
                s,
                "| {} + {} | {} / {} |",
                r.apps[p.apps[0]].name,
                r.apps[p.apps[1]].name,
                pct(p.slowdown[0]),
                pct(p.slowdown[1])
            );
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "## Means over the orders\n");
    let _ = writeln!(
        s,
        "| load | policy | utilization (§4.3) | cores in use | busy time | overloaded time | mean run time / solo | within 20% of solo | Jain index | energy (J) | migrations | makespan (s) |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for m in &r.summaries {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.2} | {} | {:.3} | {:.0} | {:.1} | {:.0} |",
            m.load,
            m.policy,
            pct(m.utilization),
            pct(m.cores_used),
            pct(m.busy),
            pct(m.overloaded),
            m.mean_normalized,
            pct(m.qos),
            m.jain,
            m.energy_j,
            m.migrations,
            m.makespan_s
        );
    }
    let _ = writeln!(
        s,
        "\nEnergy: idle {:.1} W (the paper's 441 J over ~30 s); the first application's step \
         {:.1} W is **calibrated** so that least-loaded at medium load uses Table 2's \
         {:.0} J, each further application adds {:.1} W (a tenth of it, our reading of \
         Figure 1's shape). Only the savings are judged below; the medium least-loaded \
         energy matches by construction.\n",
        r.power.idle_w, r.power.active_step_w, TABLE2_LL_MEDIUM_J, r.power.per_colocated_w
    );
    if let (Some(dc), Some(ll)) = (
        r.runs_of("dcuda", "medium").find(|x| x.order == 0),
        r.runs_of("least-loaded", "medium").find(|x| x.order == 0),
    ) {
        let _ = writeln!(s, "## One order, medium load (Figure 10)\n");
        let _ = writeln!(
            s,
            "| GPU | least-loaded: <50% / 50-100% / overloaded | DCUDA: <50% / 50-100% / overloaded |\n|---|---|---|"
        );
        for (g, (a, b)) in ll.bands.iter().zip(&dc.bands).enumerate() {
            let _ = writeln!(
                s,
                "| {g} | {} / {} / {} | {} / {} / {} |",
                pct(a[0]),
                pct(a[1]),
                pct(a[2]),
                pct(b[0]),
                pct(b[1]),
                pct(b[2])
            );
        }
        let _ = writeln!(
            s,
            "\nThe monitor evaluated {} kernel configurations in the DCUDA run (one per \
             application: each runs one launch shape), however many tasks ran.\n",
            dc.occupancy_evaluations
        );
    }
    s.push_str(&slicing_section(r));
    s.push_str(&slicing_qos(r));
    s.push_str(&steps_section(r));
    s.push_str(&overload_section(r));
    s.push_str(&load_curve_section(r));
    let _ = writeln!(s, "## Where we differ\n");
    let _ = writeln!(s, "{}\n", differences(r));
    let _ = writeln!(s, "## Claims\n");
    let _ = writeln!(s, "{}", claims::table(&r.claims));
    let (yes, no, unmeasured) = claims::tally(&r.claims);
    let _ = writeln!(s, "{yes} hold, {no} do not, {unmeasured} not measured.");
    if !r.sensitivity.is_empty() {
        let _ = writeln!(
            s,
            "\n{}",
            claims::robustness_lines(&r.claims, &r.sensitivity, yes).trim_end()
        );
        let orders = r.config.orders.min(SENSITIVITY_ORDERS);
        let what = format!("{orders} orders (the sensitivity's used values)");
        let all = format!("all {}", r.config.orders);
        let _ =
            writeln!(s, "{}", claims::used_verdicts_differ(&r.claims, &r.sensitivity, &what, &all));
        let judged = format!(
            "every claim judged again, on {} arrival orders per load (the used values too, so \
             that the columns compare like with like; the claims above are on {})",
            r.config.orders.min(SENSITIVITY_ORDERS),
            r.config.orders,
        );
        let _ = writeln!(s, "\n{}", claims::sensitivity_section(&judged, &r.sensitivity));
    }
    s
}

/// Whether the run's isolating experiment found slicing's cost to go with the CPU
/// phases (its cost without them less than half of it with them).
fn slicing_explains(r: &DcudaResults) -> bool {
    r.slicing_cause.as_ref().is_some_and(|x| {
        let (with, without) = x.cost();
        with >= 1.0 + MATERIAL_COST && (without - 1.0) < 0.5 * (with - 1.0)
    })
}

/// A slicing cost in run time below which the slicing step explains no loss (2%: the
/// spread of a 10-order mean between two policies that differ in nothing else is of
/// that order). Before the applications' duty cycles came from their loops (issue 57,
/// item 7) slicing cost 1.14x with the CPU phases; after, 1.005x, which the section's
/// old rule (any cost above 1) still read as the cause of a loss DCUDA no longer had.
const MATERIAL_COST: f64 = 0.02;

/// What the report says when the fit chose the last value it tried and least-loaded
/// there is still more than a point from the target: the fit ran out of range, so the
/// contention it uses is censored, not fitted (with the applications' loops of issue
/// 57's item 7, 62.5% at 0.6 against 60%).
fn fit_at_its_edge(f: &ContentionFit) -> Option<String> {
    let (last, qos) = *f.candidates.last()?;
    (f.chosen == last && (qos - f.target_qos).abs() > 0.01).then(|| {
        format!(
            "The fit reached the largest value it tries ({last}) with least-loaded at {}, \
             not the target {}: the contention used below is the range's end, not a fit, and \
             least-loaded here is fairer than the paper's; `fig13a-least-loaded` says by how \
             much.",
            pct(qos),
            pct(f.target_qos)
        )
    })
}

/// Issue 57 item 6: why the slicing step turns a gain into a loss, from the experiment
/// that isolates it.
fn slicing_section(r: &DcudaResults) -> String {
    let Some(x) = &r.slicing_cause else { return String::new() };
    let (with, without) = x.cost();
    format!(
        "## What the slicing step costs (issue 57)\n\n\
         DCUDA with and without its fair slicing at medium load, {} arrival orders, the \
         applications as they are (each loop iteration a kernel and a CPU phase) and with \
         their CPU phases removed (the same kernels, as many, back to back; their demand \
         is then the kernel's, so the placement sees heavier applications):\n\n\
         | applications | DCUDA | DCUDA without slicing | slicing's cost |\n|---|---|---|---|\n\
         | with CPU phases | {:.3}x solo | {:.3}x solo | {:.3}x |\n\
         | CPU phases removed | {:.3}x solo | {:.3}x solo | {:.3}x |\n\n\
         With the CPU phases, §4.3's utilization is {} under DCUDA and {} without slicing. \
         {}\n\n",
        x.orders,
        x.with_cpu[0],
        x.with_cpu[1],
        with,
        x.without_cpu[0],
        x.without_cpu[1],
        without,
        pct(x.utilization_with_cpu[0]),
        pct(x.utilization_with_cpu[1]),
        if slicing_explains(r) {
            "Slicing's cost goes with the CPU phases: an application sliced out cannot run \
             its kernels while the one whose slice it is computes on its CPU, so the GPU \
             idles through that CPU work where, unsliced, another application's kernels fill \
             it. That is why DCUDA, whose other steps gain, loses overall in this model."
                .to_string()
        } else if with < 1.0 + MATERIAL_COST {
            format!(
                "With the CPU phases slicing costs under {:.0}% in run time, so it explains \
                 no loss of DCUDA's here; with them removed it changes run time by {:.3}x.",
                MATERIAL_COST * 100.0,
                without
            )
        } else {
            "Slicing's cost does not go with the CPU phases here: this experiment does not \
             identify the CPU phases as its cause."
                .to_string()
        }
    )
}

/// The explanation of the differences, with numbers from the run.
fn differences(r: &DcudaResults) -> String {
    let get = |p: &str| r.summary(p, "medium");
    let (Some(ll), Some(dc), Some(ns)) =
        (get("least-loaded"), get("dcuda"), get("dcuda-no-slicing"))
    else {
        return "The medium load was not run.".into();
    };
    let k = &r.config.constants;
    let mean_demand = r.apps.iter().map(App::mean_demand).sum::<f64>() / r.apps.len() as f64;
    let per_gpu = r.apps.iter().map(|a| a.solo_s).sum::<f64>()
        / r.apps.len() as f64
        / r.config.loads.iter().find(|l| l.name == "medium").map_or(5.0, |l| l.interval_s as f64)
        / GPUS as f64;
    // beside each failing claim: the run's numbers that bear on it
    let beside = |c: &Claim| -> String {
        if ["fig10", "fig11", "fig12", "fig13", "fig14"].iter().any(|f| c.id.starts_with(f)) {
            let mut cause = r.slicing_cause.as_ref().map_or(String::new(), |x| {
                let (with, without) = x.cost();
                format!(
                    " Slicing costs {:.2}x in run time with the applications' CPU phases and \
                     {:.2}x without them (\"What the slicing step costs\" above).",
                    with, without
                )
            });
            // issue 57 item 6: the step that loses what step 1 gains
            if let (Some(one), Some(two)) = (r.steps.get(1), r.steps.get(2)) {
                let _ = write!(
                    cause,
                    " Step 1's migrations alone run {:.3}x solo with {} within 20%, {} \
                     overloaded; step 2's compaction takes that to {:.3}x, {}, {} (\"What each \
                     of DCUDA's steps gives\" above).",
                    one.mean_normalized,
                    pct(one.qos),
                    pct(one.overloaded),
                    two.mean_normalized,
                    pct(two.qos),
                    pct(two.overloaded)
                );
            }
            if c.id == "fig14-medium-best" && load_curve_explains(r) {
                return format!(
                    "{} (\"DCUDA's cut in run time against load\" above.)",
                    load_curve_reading(r)
                );
            }
            if let Some(why) = ceiling_cause(r, &c.id) {
                return format!("{why} (issue 57 item 6: what any policy could reach.)");
            }
            let overload_claim =
                ["fig10-dcuda-overload", "fig11-overload"].contains(&c.id.as_str());
            if let Some(why) = overload_cause(r).filter(|_| overload_claim) {
                return format!("{why} (\"Where the overload comes from\" above.)");
            }
            format!(
                "At medium load DCUDA without its slicing step (a diagnostic) runs {:.2}x solo \
                 (DCUDA {:.2}x, least-loaded {:.2}x), utilization {}, overloaded {}, {} within \
                 20% of solo, Jain {:.3}.{cause}",
                ns.mean_normalized,
                dc.mean_normalized,
                ll.mean_normalized,
                pct(ns.utilization),
                pct(ns.overloaded),
                pct(ns.qos),
                ns.jain
            )
        } else if c.id.starts_with("table2") {
            format!(
                "At medium load DCUDA migrates {:.1} times per run; its makespan is {:.0} s \
                 against least-loaded's {:.0} s.",
                dc.migrations, dc.makespan_s, ll.makespan_s
            )
        } else if c.id.starts_with("s2.2") {
            let worst = r.pairs.iter().max_by(|a, b| {
                a.slowdown[0].max(a.slowdown[1]).total_cmp(&b.slowdown[0].max(b.slowdown[1]))
            });
            worst.map_or(String::new(), |p| {
                let (a, b) = (&r.apps[p.apps[0]], &r.apps[p.apps[1]]);
                format!(
                    "The worst pair is {} + {}: light on average ({} and {} of a GPU), but \
                     each kernel fills {} and {} of the block slots, so when both kernels run \
                     they exceed the GPU (queued blocks, and the fitted contention).",
                    a.name,
                    b.name,
                    pct(a.mean_demand()),
                    pct(b.mean_demand()),
                    pct(a.kernel_demand()),
                    pct(b.kernel_demand())
                )
            })
        } else if c.id.starts_with("fig2") || c.id.starts_with("fig10") {
            format!(
                "Our applications' mean demand is {} of a GPU, about {per_gpu:.1} running per \
                 GPU at medium load.",
                pct(mean_demand)
            )
        } else {
            String::new()
        }
    };
    format!(
        "What the model is, not why it differs: our applications' launch shapes and loops \
         are derived, not measured (`data/dcuda/apps.csv`); co-running kernels slow \
         each other through SMs{}; migration pauses are {} ms with data moved on demand at \
         no cost; the fairness groups may exceed the GPU by {:.0}%. Each claim that does not \
         hold, with the run's numbers beside it and the constants of ours that, at their \
         low or high value (on {} orders), make it hold:\n\n{}",
        if k.contention > 0.0 {
            format!(
                " and a contention slowdown of {} per unit of excess demand{}",
                k.contention,
                match &r.contention_fit {
                    Some(f) if fit_at_its_edge(f).is_some() => {
                        " (the end of the fit's range: the fit on least-loaded did not reach \
                         its target)"
                    }
                    Some(_) => " (fitted on least-loaded)",
                    None => "",
                }
            )
        } else {
            " only".into()
        },
        k.migration_pause_ms,
        100.0 * k.group_slack,
        SENSITIVITY_ORDERS.min(r.config.orders),
        claims::differences_list_explained(&r.claims, &r.sensitivity, beside, |c| {
            (slicing_explains(r)
                && (c.id.starts_with("fig11")
                    || c.id.starts_with("fig12")
                    || c.id.starts_with("fig13")))
                || (["fig10-dcuda-overload", "fig11-overload"].contains(&c.id.as_str())
                    && overload_cause(r).is_some())
                || (c.id == "fig14-medium-best" && load_curve_explains(r))
                || ceiling_cause(r, &c.id).is_some()
        })
        .trim_end()
    )
}

/// The reading of [`super::ceilings`] for claim `id`, where its rule names the cause.
fn ceiling_cause(r: &DcudaResults, id: &str) -> Option<String> {
    match id {
        "fig11-utilization" => super::ceilings::utilization_cause(r),
        "fig12-stable" => super::ceilings::stability_cause(r),
        "fig13b-fairness" => super::ceilings::fairness_cause(r),
        _ => None,
    }
}

/// Issue 57 item 6, the overload claims: the overloaded GPU-samples taken apart by
/// whether the node's summed demand fitted its GPUs at the sample.
fn overload_section(r: &DcudaResults) -> String {
    let mut out = String::from(
        "## Where the overload comes from (issue 57)\n\n\
         At each of the monitor's samples, whether the applications' summed demand fitted \
         the node's GPUs: where it did not, some GPU is overloaded whatever the placement \
         (and an even balance overloads them all), so no balancer can remove that overload. \
         Overloaded GPU-samples, as a share of all, and of those at the samples where the \
         node had room; the samples where it had none; the overloaded GPU-samples that \
         arose since the sample before, and those the sample's own moves relieved:\n\n\
         | load | policy | overloaded | node's demand over its GPUs (samples) | overloaded where the node had room | arisen since the sample before | relieved by the sample's moves |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for s in &r.summaries {
        let o = &s.overload;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            s.load,
            s.policy,
            pct(o.overloaded),
            pct(o.node_over),
            pct(o.with_room),
            pct(o.new),
            pct(o.relieved)
        );
    }
    if let Some(text) = overload_cause(r) {
        let _ = writeln!(out, "\n{text}\n");
    }
    out
}

/// What the overload claims' failure comes from, when the split says (`None`: it does
/// not): DCUDA's cut in overload where the node had room against its cut over all
/// samples, at medium load, and order 0's split (Figure 10).
fn overload_cause(r: &DcudaResults) -> Option<String> {
    let (ll, dc) = (r.summary("least-loaded", "medium")?, r.summary("dcuda", "medium")?);
    let (lo, dco) = (&ll.overload, &dc.overload);
    let cut = 1.0 - dco.overloaded / lo.overloaded.max(1e-9);
    let cut_with_room = 1.0 - dco.with_room / lo.with_room.max(1e-9);
    // the split explains the claims only where the node was over its GPUs often and
    // DCUDA's cut where it had room is the paper's or better
    if dco.node_over < 0.05 || cut_with_room < 0.783 {
        return None;
    }
    let order0 = r.runs.iter().find(|x| x.policy == "dcuda" && x.load == "medium" && x.order == 0);
    let zero = order0.map_or(String::new(), |x| {
        format!(
            " In order 0 (Figure 10(b)'s) the node's demand was over its GPUs at {} of DCUDA's \
             samples, and where it had room DCUDA's GPUs were overloaded {} of the time on \
             average.",
            pct(x.overload.node_over),
            pct(x.overload.with_room)
        )
    });
    Some(format!(
        "At medium load the applications' summed demand was over the node's 4 GPUs at {} of \
         DCUDA's samples ({} of least-loaded's). Where the node had room, DCUDA cuts \
         overloaded GPU-samples by {} ({} against {}), more than the paper's 78.3%; over all \
         samples the cut is {}. DCUDA's overload at this load is the load's: our \
         applications' demands (derived, `data/dcuda/apps.csv`) exceed the node at a share \
         of the samples where no placement can keep every GPU within its capacity (a reading \
         whose rule, the node over its GPUs at 5% of the samples or more and the cut where \
         it had room at least the paper's, was written after the run that first showed \
         these numbers, 2026-12-04).{zero}",
        pct(dco.node_over),
        pct(lo.node_over),
        pct(cut_with_room),
        pct(dco.with_room),
        pct(lo.with_room),
        pct(cut)
    ))
}

/// Issue 57 item 6, Figure 14: DCUDA's cut in run time at the paper's loads and two
/// heavier.
fn load_curve_section(r: &DcudaResults) -> String {
    if r.load_curve.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "## DCUDA's cut in run time against load (issue 57)\n\n\
         Least-loaded and DCUDA over {} arrival orders at the paper's three loads (7, 5 and \
         3 s between arrivals) and two heavier; the node's summed demand over its GPUs as \
         a share of DCUDA's samples:\n\n{}",
        r.slicing_cause.as_ref().map_or(0, |x| x.orders),
        curve_table(&r.load_curve)
    );
    if !r.load_curve_no_contention.is_empty() {
        let _ = write!(
            out,
            "\nThe same with the contention off (the block model's SM sharing alone):\n\n{}",
            curve_table(&r.load_curve_no_contention)
        );
    }
    let _ = writeln!(out, "\n{}\n", load_curve_reading(r));
    out
}

/// A load curve as a table (header and one row per load).
fn curve_table(curve: &[super::LoadPoint]) -> String {
    let mut out = String::from(
        "| s between arrivals | least-loaded | DCUDA | DCUDA's cut | node's demand over its GPUs |\n\
         |---|---|---|---|---|\n",
    );
    for p in curve {
        let _ = writeln!(
            out,
            "| {} | {:.3}x solo | {:.3}x solo | {} | {} |",
            p.interval_s,
            p.mean_normalized[0],
            p.mean_normalized[1],
            pct(p.cut),
            pct(p.node_over)
        );
    }
    out
}

/// What the curve with the contention off says of the rise.
fn contention_reading(r: &DcudaResults) -> String {
    match super::contention_carries_the_rise(&r.load_curve_no_contention) {
        Some((m, heavy)) if m.cut > 0.0 => format!(
            "With the contention off the cut falls from {} at {} s to {} at {} s: the rise \
             comes from the fitted contention term (each GPU's kernels slowed by {} per unit \
             of its demand above the GPU), which makes evening out an overloaded node pay more \
             the more it is overloaded; on SM sharing alone the cut is larger at medium load \
             than at the heaviest, as the paper's is.",
            pct(m.cut),
            m.interval_s,
            pct(heavy.cut),
            heavy.interval_s,
            r.config.constants.contention
        ),
        Some((m, heavy)) => format!(
            "With the contention off DCUDA is slower than least-loaded at both loads run \
             ({} at {} s, {} at {} s): its gain in this model, and the gain's rise with load, \
             come from the fitted contention term (each GPU's kernels slowed by {} per unit \
             of its demand above the GPU), which makes evening out an overloaded node pay more \
             the more it is overloaded; on SM sharing alone DCUDA loses, the more the heavier \
             the load.",
            pct(m.cut),
            m.interval_s,
            pct(heavy.cut),
            heavy.interval_s,
            r.config.constants.contention
        ),
        None if r.load_curve_no_contention.is_empty() => {
            "Why our model keeps gaining there is not identified.".into()
        }
        None => "With the contention off the cut still does not fall at the heaviest load: \
                 why our model keeps gaining there is not identified."
            .into(),
    }
}

/// Whether the load curves say what Figure 14's claim fails on.
fn load_curve_explains(r: &DcudaResults) -> bool {
    super::peak_beyond_the_papers(&r.load_curve).is_some()
        || super::contention_carries_the_rise(&r.load_curve_no_contention).is_some()
}

/// What the curve says of Figure 14's claim (the cut largest at the paper's medium
/// load), from [`super::peak_beyond_the_papers`].
fn load_curve_reading(r: &DcudaResults) -> String {
    match super::peak_beyond_the_papers(&r.load_curve) {
        Some(peak) => format!(
            "The cut grows with the load up to {} s between arrivals ({}), where the node's \
             demand is over its GPUs at {} of DCUDA's samples, and falls beyond: the paper's \
             shape (a largest cut between a load with little to balance and one with no room \
             to balance into), at loads heavier than the paper's. At the paper's intervals our \
             node has not reached that point: our heavy load (3 s) lies before the peak, \
             and Figure 14's claim (largest at medium) fails on where our loads fall on \
             the curve, not on DCUDA's balancing.",
            peak.interval_s,
            pct(peak.cut),
            pct(peak.node_over)
        ),
        None => {
            let rising = r.load_curve.windows(2).all(|w| w[1].cut >= w[0].cut);
            let heaviest = r.load_curve.iter().min_by_key(|p| p.interval_s);
            match heaviest.filter(|_| rising) {
                Some(h) => format!(
                    "The cut grows with every heavier load, to {} at {} s between arrivals, \
                     where the node's demand is over its GPUs at {} of DCUDA's samples: in this \
                     model DCUDA gains more the more the node is overloaded, and the fall the \
                     paper reads at its heavy load (no room to balance into) appears at none of \
                     the loads run. {}",
                    pct(h.cut),
                    h.interval_s,
                    pct(h.node_over),
                    contention_reading(r)
                ),
                None => format!(
                    "The curve does not turn beyond the paper's loads. {}",
                    contention_reading(r)
                ),
            }
        }
    }
}

/// Issue 57 item 6: DCUDA's steps added one at a time, and which carries the gain.
fn steps_section(r: &DcudaResults) -> String {
    let Some(base) = r.steps.first() else { return String::new() };
    let mut out = format!(
        "## What each of DCUDA's steps gives (issue 57)\n\n\
         At medium load, over {} arrival orders, each step added to the one before \
         (the orders and applications of the runs above):\n\n\
         | variant | mean run time | utilization | overloaded | QoS met | Jain | migrations a run |\n\
         |---|---|---|---|---|---|---|\n",
        r.slicing_cause.as_ref().map_or(0, |x| x.orders)
    );
    for (row, (_, what)) in r.steps.iter().zip(super::STEPS) {
        let _ = writeln!(
            out,
            "| {what} | {:.3}x solo | {} | {} | {} | {:.3} | {:.1} |",
            row.mean_normalized,
            pct(row.utilization),
            pct(row.overloaded),
            pct(row.qos),
            row.jain,
            row.migrations
        );
    }
    // the cumulative steps; the daemon's row stands beside them
    let cumulative = &r.steps[..r.steps.len().min(5)];
    let gains: Vec<(f64, f64)> = cumulative
        .windows(2)
        .map(|w| (w[1].utilization - w[0].utilization, w[0].overloaded - w[1].overloaded))
        .collect();
    let (most, _) = gains
        .iter()
        .enumerate()
        .fold((0, f64::MIN), |a, (i, g)| if g.1 > a.1 { (i, g.1) } else { a });
    let last = cumulative.last().unwrap_or(base);
    let util_gain = last.utilization / base.utilization.max(1e-9) - 1.0;
    let over_cut = 1.0 - last.overloaded / base.overloaded.max(1e-9);
    let _ = writeln!(
        out,
        "\nLeast-loaded leaves its GPUs overloaded {} of the time at this load (the paper's \
         Figure 10(a), one order: 14.3-51.4% per GPU). Of the cut in overload of DCUDA as \
         the paper evaluates it, {} of {} points come with {}. Whole, it raises utilization \
         by {} and cuts overloaded time by {} against least-loaded here (the paper's means \
         over its loads: 14.6% and \
         78.3%; Figure 10(b)'s one order: 38.1% and 79.5%).\n",
        pct(base.overloaded),
        pct(gains.get(most).map_or(0.0, |g| g.1)),
        pct(base.overloaded - last.overloaded),
        super::STEPS.get(most + 1).map_or("none", |s| s.1.trim_start_matches("+ ")),
        pct(util_gain),
        pct(over_cut),
    );
    if let (Some(one), Some(two), Some(three)) =
        (cumulative.get(1), cumulative.get(2), cumulative.get(3))
    {
        let _ = writeln!(
            out,
            "Step 1 alone runs the applications at {:.3}x solo with {} meeting QoS; step 2's \
             compaction, which merges two GPUs up to 100% as the paper writes it, takes that \
             to {:.3}x and {}, with {:.0} migrations a run against {:.0}: compaction fills a \
             GPU up to step 1's overload threshold, where step 1 moves applications off \
             again. In run time the loss of DCUDA against step 1 alone is there, not in \
             slicing (the section above); in the applications within 20% of solo, \
             compaction costs {:.1} points and slicing {:.1} more.",
            one.mean_normalized,
            pct(one.qos),
            two.mean_normalized,
            pct(two.qos),
            two.migrations,
            one.migrations,
            100.0 * (one.qos - two.qos),
            100.0 * (two.qos - three.qos),
        );
    }
    if let Some(d) = r.steps.get(5) {
        let _ = writeln!(
            out,
            "With the daemon's constants (compaction only below 90%, a moved application \
             staying 1 s, no priorities) DCUDA runs at {:.3}x solo, {} meeting QoS, {} \
             overloaded, {:.0} migrations a run: the DCUDA the claims judge, what ships \
             (until issue 57 they judged the paper's constants, the row above; on the 50 \
             orders of 2026-12-04's last run with them, `fig11-overload` was 65.1% and \
             Table 2's medium saving 8.1%, neither holding: the switch made both hold).\n",
            d.mean_normalized,
            pct(d.qos),
            pct(d.overloaded),
            d.migrations
        );
    }
    out
}

/// What slicing costs in QoS (issue 57 item 6): the main runs with and without it.
fn slicing_qos(r: &DcudaResults) -> String {
    let (Some(dc), Some(ns)) =
        (r.summary("dcuda", "medium"), r.summary("dcuda-no-slicing", "medium"))
    else {
        return String::new();
    };
    format!(
        "In the share of applications within 20% of solo, on the {} orders at medium load, \
         slicing costs {:.1} points: {} without it, {} with it (Jain {:.3} and {:.3}); the paper's \
         steps below, with its constants, lose {} points at step 3 (fair slicing) on their {} \
         orders.\n\n",
        r.config.orders,
        100.0 * (ns.qos - dc.qos),
        pct(ns.qos),
        pct(dc.qos),
        ns.jain,
        dc.jain,
        r.steps
            .get(2)
            .zip(r.steps.get(3))
            .map_or("-".into(), |(a, b)| format!("{:.1}", 100.0 * (a.qos - b.qos))),
        r.config.orders.min(SENSITIVITY_ORDERS),
    )
}
