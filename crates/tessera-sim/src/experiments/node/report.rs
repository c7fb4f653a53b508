//! The node experiment's report and figures.

use super::*;

/// The report: the workload, the measures side by side, the claims, and where the
/// composed policy falls short, which mechanism's interaction costs it.
pub fn report(r: &NodeResults) -> String {
    let c = &r.config;
    let mut s = String::new();
    let _ = writeln!(s, "# One node policy beside the single ones (issue 30)\n");
    let _ = writeln!(
        s,
        "A node of {} GPUs with {} GiB each. The workload comes from Alibaba's GPU-sharing \
         trace (`data/traces/alibaba-openb`): the first {} LS and {} BE pods asking for one \
         GPU or part of one, from day {} on. Their arrivals keep the trace's spacing, \
         compressed into {} s. Services send Poisson requests of {} ms with a {} ms SLA \
         until {} s; batch tenants are backlogged with {} ms tasks. Memory, loads and \
         work follow from each pod's `gpu_milli` as `crates/tessera-sim/src/experiments/node_workload.rs` \
         states. Every policy runs on the same engine (processor-shared GPUs: DCUDA \
         co-runs its tenants, the others run one task per GPU at a time).\n",
        c.gpus,
        c.gpu_memory_gib,
        c.services,
        c.batch,
        c.start_day,
        c.arrival_span_s,
        c.request_ms,
        c.sla_ms,
        c.arrival_span_s + c.tail_s,
        c.batch_task_ms,
    );
    let _ = writeln!(
        s,
        "| tenant | pod | class | gpu_milli | weight | memory | arrives | trace lifetime | work |\n\
         |---|---|---|---|---|---|---|---|---|"
    );
    for t in &r.tenants {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {:.2} GiB | {:.1} s | {} s | {:.1} s |",
            t.tenant,
            t.pod,
            t.class,
            t.gpu_milli,
            t.weight,
            t.memory_gib,
            t.arrival_s,
            t.trace_lifetime_s,
            t.work_s
        );
    }
    let _ = writeln!(
        s,
        "\n## Each class's measure, side by side\n\n\
         | policy | SLA met | batch max-min ratio | worst batch share | OOM tenants (failed dispatches) | \
         utilization | energy | makespan | migrations |\n|---|---|---|---|---|---|---|---|---|"
    );
    for x in &r.rows {
        let _ = writeln!(
            s,
            "| {} | {:.2}% | {:.2} | {:.2} | {} ({}) | {:.1}% | {:.0} J | {:.1} s | {} |",
            x.policy,
            100.0 * x.sla_met,
            x.max_min_ratio,
            x.worst_share,
            x.crashed_tenants,
            x.oom_failures,
            100.0 * x.utilization,
            x.energy_j,
            x.makespan_s,
            x.migrations
        );
    }
    let m = &r.margins;
    let _ = writeln!(
        s,
        "\nMargins, fixed before the run: SLA within {:.0} points of the best single policy, \
         max-min ratio within {:.2}, at most {} memory crashes, utilization within {:.0} \
         points, energy at most {:.0}% above the least.\n",
        100.0 * m.sla,
        m.fairness,
        m.crashes,
        100.0 * m.utilization,
        100.0 * (m.energy - 1.0)
    );
    let _ = writeln!(s, "| measure | within its margin |\n|---|---|");
    for (measure, who) in &r.within {
        let _ = writeln!(s, "| {measure} | {} |", who.join(", "));
    }
    let _ = writeln!(s, "\n## Claims\n\n{}", claims::table(&r.claims));
    let (yes, no, unmeasured) = claims::tally(&r.claims);
    let structural = r.claims.iter().filter(|c| !c.is_evidence()).count();
    let _ = writeln!(
        s,
        "{yes} hold, {no} do not, {unmeasured} not measured; {structural} structural (every \
         single policy within the margin too), not counted.\n"
    );
    let held = held_out_table(r);
    if !held.is_empty() {
        let _ = writeln!(s, "## Held-out windows\n\n{held}");
    }
    let _ = writeln!(s, "## What each part of the composition does\n\n{}", ablation_table(r));
    if let Some(a) = &r.inference {
        let _ = writeln!(
            s,
            "## Where gpu-lets is needed: a registered model\n\n{}",
            crate::experiments::node_inference::report(a)
        );
    }
    let _ = writeln!(s, "## Where the composition costs\n\n{}", costs(r));
    let seeds = seeds_table(r);
    if !seeds.is_empty() {
        let _ = writeln!(s, "## Other seeds\n\n{seeds}");
    }
    s
}

/// The claims judged on the held-out windows (issue 56): one row per window, each
/// measure as the composed policy's value / the best single policy's, and per claim
/// the windows where it holds, beside the development window's verdicts.
fn held_out_table(r: &NodeResults) -> String {
    let mut s = String::new();
    if r.held_out.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "The same comparison on {} windows of the trace chosen before any run at them \
         (`HELD_OUT_DAYS`; the claims above are the development window's, day {}), seed \
         {}, margins as above. Each cell: the composed policy, then the best single policy.\n\n\
         | start day | SLA met | batch max-min ratio | OOM tenants | utilization | energy | claims holding |\n\
         |---|---|---|---|---|---|---|",
        r.held_out.len(),
        r.config.start_day,
        r.config.seed
    );
    for x in &r.held_out {
        let _ = writeln!(
            s,
            "{}",
            comparison_row(&x.start_day.map_or("-".into(), |d| format!("{d}")), x)
        );
    }
    let _ = writeln!(
        s,
        "\n| claim | development window | held-out windows where it holds | where it separates no policy (structural) |\n|---|---|---|---|"
    );
    for c in &r.claims {
        let counted =
            r.held_out.iter().filter(|x| x.holds.iter().any(|(id, _)| *id == c.id)).count();
        let n =
            r.held_out.iter().filter(|x| x.holds.iter().any(|(id, h)| *id == c.id && *h)).count();
        let dev = if !c.is_evidence() {
            "structural"
        } else {
            match c.verdict.holds() {
                Some(true) => "holds",
                Some(false) => "does not hold",
                None => "not measured",
            }
        };
        let _ = writeln!(
            s,
            "| {} | {dev} | {n} of {counted} | {} of {} |",
            c.id,
            r.held_out.len() - counted,
            r.held_out.len()
        );
    }
    let all = r.held_out.iter().filter(|x| x.holds.iter().all(|(_, h)| *h)).count();
    let _ = writeln!(
        s,
        "\nEvery claim holds in {all} of the {} held-out windows: what the composed policy \
         is shown to do out of sample is the per-claim count above, not the development \
         window's tally.",
        r.held_out.len()
    );
    s
}

/// The ablation runs beside the whole, each measure with its difference to the whole.
fn ablation_table(r: &NodeResults) -> String {
    let mut s = String::new();
    let Some(node) = r.rows.iter().find(|x| x.composed) else { return s };
    let _ = writeln!(
        s,
        "The composed policy again, with one part switched off at a time \
         (`NodeParams`' switches); in brackets, the difference to the whole.\n\n\
         | run | SLA met | batch max-min ratio | OOM tenants | utilization | energy | migrations |\n\
         |---|---|---|---|---|---|---|"
    );
    let _ = writeln!(
        s,
        "| {} (whole) | {:.2}% | {:.2} | {} | {:.1}% | {:.0} J | {} |",
        node.policy,
        100.0 * node.sla_met,
        node.max_min_ratio,
        node.crashed_tenants,
        100.0 * node.utilization,
        node.energy_j,
        node.migrations
    );
    for a in &r.ablations {
        let _ = writeln!(
            s,
            "| {} | {:.2}% ({:+.2}) | {:.2} ({:+.2}) | {} ({:+}) | {:.1}% ({:+.1}) | {:.0} J ({:+.1}%) | {} |",
            a.policy,
            100.0 * a.sla_met,
            100.0 * (a.sla_met - node.sla_met),
            a.max_min_ratio,
            a.max_min_ratio - node.max_min_ratio,
            a.crashed_tenants,
            a.crashed_tenants as i64 - node.crashed_tenants as i64,
            100.0 * a.utilization,
            100.0 * (a.utilization - node.utilization),
            a.energy_j,
            100.0 * (a.energy_j / node.energy_j - 1.0),
            a.migrations
        );
    }
    s
}

/// What each part contributes to measure `m`, from the ablations: the whole's value
/// less the value without the part, best first ("+" helps the measure).
fn contributions(r: &NodeResults, node: &PolicyRow, m: Measure) -> String {
    let show = |d: f64| match m {
        Measure::Sla => format!("{:+.2} points", 100.0 * d),
        Measure::Utilization => format!("{:+.1} points", 100.0 * d),
        Measure::Fairness => format!("{d:+.2}"),
        Measure::Crashes => format!("{:+} tenants", -d as i64),
        Measure::Energy => format!("{:+.1}%", 100.0 * d / node.energy_j),
    };
    let mut parts: Vec<(f64, String, String)> = r
        .ablations
        .iter()
        .map(|a| {
            let d = m.value(node) - m.value(a);
            let gain = if m.higher_is_better() { d } else { -d };
            let part = a.policy.split(" without ").nth(1).unwrap_or(&a.policy).to_string();
            (gain, part, show(gain))
        })
        .collect();
    parts.sort_by(|a, b| b.0.total_cmp(&a.0));
    // parts whose difference rounds to nothing at the shown precision are not listed
    let moves = |v: &str| v.chars().any(|c| c.is_ascii_digit() && c != '0');
    let listed: Vec<String> =
        parts.iter().filter(|p| moves(&p.2)).map(|(_, part, v)| format!("{part} {v}")).collect();
    match (listed.is_empty(), listed.len() < parts.len()) {
        (true, _) => "no part moves it".into(),
        (false, true) => format!("{}; no other part moves it", listed.join(", ")),
        (false, false) => listed.join(", "),
    }
}

/// For each measure the composed policy misses, what the runs say costs it: the best
/// single policy's number, the single policy whose mechanism the composition uses for
/// that measure, and each part's measured contribution (the ablations).
fn costs(r: &NodeResults) -> String {
    let mut s = String::new();
    let Some(node) = r.rows.iter().find(|x| x.composed) else { return s };
    let single = |prefix: &str| r.rows.iter().find(|x| x.policy.starts_with(prefix));
    let singles: Vec<&PolicyRow> = r.rows.iter().filter(|x| !x.composed).collect();
    for claim in r.claims.iter().filter(|c| c.verdict.holds() == Some(false)) {
        let Some(measure) = Measure::ALL.into_iter().find(|m| m.claim_id() == claim.id) else {
            continue;
        };
        let (best_value, best_name) = best(measure, &singles).unwrap_or((0.0, "—".into()));
        let show = |x: f64| measure.show(x);
        let _ = write!(
            s,
            "- {}: ours {}, the best single policy ({best_name}) {}. ",
            measure.name(),
            show(measure.value(node)),
            show(best_value)
        );
        match measure {
            Measure::Sla => {
                if let Some(flexy) = single("Flexy") {
                    let _ = write!(
                        s,
                        "Flexy alone, whose pool the composition uses, gets {}: the pool's \
                         sizing by Little's law plans for the SLA with no slack, where \
                         priority gives user-facing work every GPU that frees. ",
                        show(flexy.sla_met)
                    );
                }
            }
            Measure::Fairness => {
                let worst = node.shares.iter().min_by(|a, b| a.1.total_cmp(b.1));
                let most = node.shares.iter().max_by(|a, b| a.1.total_cmp(b.1));
                if let (Some((w, ws)), Some((b, bs))) = (worst, most) {
                    let _ = write!(
                        s,
                        "Tenant {w} received {ws:.2} of its entitlement, tenant {b} {bs:.2}. \
                         FairGV runs any tenant on any GPU and so lost {} tenants to memory; \
                         ours keeps each tenant on one home, where fair queuing is exact \
                         among that GPU's tenants, and evens the summed weights across GPUs \
                         only by whole tenants, when a move gains more than 10%, each move \
                         pausing the tenant, while the pool borrows batch GPUs as the \
                         services' load comes and goes (stopping the tenants furthest \
                         ahead first). ",
                        single("FairGV").map_or(0, |x| x.crashed_tenants)
                    );
                }
            }
            Measure::Crashes => {
                for c in &node.crashes {
                    let _ = write!(
                        s,
                        "Tenant {} on GPU {} at {:.1} s ({:.2} GiB resident). ",
                        c.tenant, c.gpu, c.at_s, c.resident_gib
                    );
                }
            }
            Measure::Utilization | Measure::Energy => {
                let _ = write!(
                    s,
                    "The pool keeps a GPU for the services, idle when they are, and a \
                     tenant's work runs only on its home. "
                );
            }
        }
        let _ = writeln!(
            s,
            "Each part's contribution, measured as the whole less the run without it: {}.",
            contributions(r, node, measure)
        );
    }
    let holding: Vec<Measure> = Measure::ALL
        .into_iter()
        .filter(|m| {
            r.claims.iter().any(|c| c.id == m.claim_id() && c.verdict.holds() == Some(true))
        })
        .collect();
    if !holding.is_empty() {
        if !s.is_empty() {
            s.push('\n');
        }
        let _ = writeln!(
            s,
            "Within its margin on {}. What each part contributes there, measured as the \
             whole less the run without it:",
            holding.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
        );
        for m in holding {
            let _ = writeln!(s, "- {}: {}.", m.name(), contributions(r, node, m));
        }
    }
    s
}

/// One row of the seeds' and the held-out windows' tables, labelled `label`: each
/// measure as the composed policy's value / the best single policy's, and the counted
/// claims holding (the others named).
fn comparison_row(label: &str, x: &SeedRun) -> String {
    let b = |m: Measure| {
        x.best_single.iter().find(|(n, _)| n == m.name()).map_or(f64::NAN, |(_, v)| *v)
    };
    let held = x.holds.iter().filter(|(_, h)| *h).count();
    let failing: Vec<&str> =
        x.holds.iter().filter(|(_, h)| !*h).map(|(id, _)| id.as_str()).collect();
    format!(
        "| {label} | {:.2}% / {:.2}% | {:.2} / {:.2} | {} / {} | {:.1}% / {:.1}% | {:.0} J / {:.0} J | {} of {}{} |",
        100.0 * x.node.sla_met,
        100.0 * b(Measure::Sla),
        x.node.max_min_ratio,
        b(Measure::Fairness),
        x.node.crashed_tenants,
        b(Measure::Crashes),
        100.0 * x.node.utilization,
        100.0 * b(Measure::Utilization),
        x.node.energy_j,
        b(Measure::Energy),
        held,
        x.holds.len(),
        if failing.is_empty() { String::new() } else { format!(" (not: {})", failing.join(", ")) }
    )
}

/// The comparison on the other seeds: the composed policy's measures beside the best
/// single policy's, and which claims hold on each.
fn seeds_table(r: &NodeResults) -> String {
    let mut s = String::new();
    if r.other_seeds.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "The same policies on {} more seeds of the services' request arrivals (the \
         claims above judge seed {} only; these show how far they depend on it). Each \
         cell: the composed policy, then the best single policy.\n\n\
         | seed | SLA met | batch max-min ratio | OOM tenants | utilization | energy | claims holding |\n\
         |---|---|---|---|---|---|---|",
        r.other_seeds.len(),
        r.config.seed
    );
    let mut all_hold = 0;
    for x in &r.other_seeds {
        if x.holds.iter().all(|(_, h)| *h) {
            all_hold += 1;
        }
        let _ = writeln!(s, "{}", comparison_row(&x.seed.to_string(), x));
    }
    let _ =
        writeln!(s, "\nEvery claim holds on {all_hold} of these {} seeds.", r.other_seeds.len());
    s
}

/// The figure: each measure, one bar per policy.
pub fn draw(r: &NodeResults, dir: &Path) -> Result<(), ExperimentError> {
    let names: Vec<String> = r.rows.iter().map(|x| short_name(&x.policy)).collect();
    let n = names.len() as f64;
    let panel = |title: &str, y: &str, top: f64, f: fn(&PolicyRow) -> f64| {
        let mut p = Panel::new(title, "policy", y, (-0.5, n - 0.5), (0.0, top));
        p.x_categories = names.clone();
        p.bars = true;
        p.series = vec![Series {
            name: title.into(),
            points: r.rows.iter().enumerate().map(|(i, x)| (i as f64, f(x))).collect(),
            paper: false,
        }];
        p
    };
    let crashes = r.rows.iter().map(|x| x.crashed_tenants).max().unwrap_or(0) as f64;
    let energy = r.rows.iter().map(|x| x.energy_j / 1000.0).fold(0.0, f64::max);
    let panels = vec![
        panel("SLA met (services)", "fraction", 1.05, |x| x.sla_met),
        panel("max-min ratio (batch)", "received/entitled, min/max", 1.05, |x| x.max_min_ratio),
        panel("OOM tenants", "tenants", (crashes + 1.0).max(2.0), |x| x.crashed_tenants as f64),
        panel("GPU utilization", "busy fraction", 1.05, |x| x.utilization),
        panel("energy", "kJ", energy * 1.1 + 1e-9, |x| x.energy_j / 1000.0),
    ];
    draw_panels(&dir.join("node.svg"), &panels)?;
    Ok(())
}

fn short_name(policy: &str) -> String {
    let first = policy.split(' ').next().unwrap_or(policy);
    // eight bars under each plot: the long names ran into each other
    match first {
        "time-slicing" => "RR",
        "least-loaded" => "LL",
        other => other,
    }
    .to_string()
}
