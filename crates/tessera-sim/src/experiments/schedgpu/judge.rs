//! schedGPU's claims (§7.3, Figure 11, Tables 1-3), each judged on the run's scenarios.

use super::*;

/// The paper's claims, judged on `scenarios`.
pub(super) fn claims(scenarios: &[ScenarioResult]) -> Vec<Claim> {
    let mut out = Vec::new();
    let mixed = |configuration: &str| {
        scenarios.iter().find(|x| {
            x.configuration == configuration
                && (x.scenario == "mixed" || x.scenario == "mixed-sequential")
        })
    };
    for (configuration, paper_s, paper_gpu, paper_memory) in TABLE_3 {
        let ours = mixed(configuration);
        let slug = configuration.to_lowercase().replace(' ', "-");
        let measures = [
            (
                "makespan",
                format!("the mixed workload takes {paper_s:.2} s"),
                Test::Near { paper: paper_s, tolerance: MAKESPAN * paper_s },
                Unit::Seconds,
                ours.map(|x| x.makespan_s),
            ),
            (
                "gpu-util",
                format!("average GPU utilisation {paper_gpu:.2}%"),
                Test::Near {
                    paper: paper_gpu / 100.0,
                    tolerance: utilisation_tolerance(paper_gpu / 100.0),
                },
                Unit::Percent,
                ours.map(|x| x.gpu_util),
            ),
            (
                "memory",
                format!("average GPU memory utilisation {paper_memory:.2}%"),
                Test::Near {
                    paper: paper_memory / 100.0,
                    tolerance: utilisation_tolerance(paper_memory / 100.0),
                },
                Unit::Percent,
                ours.map(|x| x.memory_util),
            ),
        ];
        for (measure, paper, test, unit, value) in measures {
            let claim = Claim::judge(
                &format!("table3-{measure}-{slug}"),
                "mixed workload",
                "Table 3",
                &format!("{configuration}: {paper}"),
                test,
                unit,
                value,
                String::new(),
            );
            // one application at a time: its time and GPU use are the sum of the single
            // instances the profiles are built from (its memory is a result)
            let input = configuration == "sequential" && measure != "memory";
            out.push(if input { claim.input(PROFILE_INPUT) } else { claim });
        }
    }
    // the paper's order: FIFO slowest, then MMU, Priority FIFO, Priority MMU
    let order = ["FIFO", "MMU", "Priority FIFO", "Priority MMU"];
    let makespans: Option<Vec<f64>> =
        order.iter().map(|c| mixed(c).map(|x| x.makespan_s)).collect();
    // strictly: a tie is not the paper's order (issue 56: three policies tied at 459.5 s
    // and "held" by `>=`)
    let in_order = makespans.as_ref().map(|m| m.windows(2).filter(|w| w[0] > w[1]).count() as f64);
    out.push(Claim::judge(
        "table3-policy-order",
        "mixed workload",
        "Table 3",
        "the notification policies order by makespan FIFO > MMU > Priority FIFO > Priority MMU, strictly (3 of 3 neighbouring pairs)",
        Test::Near { paper: 3.0, tolerance: 0.0 },
        Unit::Count,
        in_order,
        makespans.map_or(String::new(), |m| {
            format!("{:.1} / {:.1} / {:.1} / {:.1} s", m[0], m[1], m[2], m[3])
        }),
    ));
    // §7.3.2's two statements, each two-sided (the paper's values from Table 3)
    let span = |c: &str| mixed(c).map(|x| x.makespan_s);
    let (fifo, mmu) = (span("FIFO"), span("MMU"));
    let best_priority = span("Priority FIFO").zip(span("Priority MMU")).map(|(a, b)| a.min(b));
    out.push(Claim::judge(
        "table3-priority-faster-than-mmu",
        "mixed workload",
        "§7.3.2, Table 3",
        "the priority policies reduce the total execution time by 15 seconds over the best non-priority policy (MMU): 527.22 - 512.53 s",
        Test::Near { paper: 527.22 - 512.53, tolerance: PRIORITY_GAIN_S },
        Unit::Seconds,
        mmu.zip(best_priority).map(|(m, p)| m - p),
        String::new(),
    ));
    out.push(Claim::judge(
        "table3-mmu-faster-than-fifo",
        "mixed workload",
        "§7.3.2, Table 3",
        "the MMU policy results in a reduction of nearly 3% in the execution time of the workload over the FIFO policy: (542.51 - 527.22) / 542.51",
        Test::Near { paper: (542.51 - 527.22) / 542.51, tolerance: MMU_GAIN },
        Unit::Percent,
        fifo.zip(mmu).map(|(f, m)| (f - m) / f),
        String::new(),
    ));
    for (app, paper) in FIGURE_11 {
        let name = format!("12 x {app}");
        let time = |configuration: &str| {
            find_scenario(scenarios, &name, configuration).map(|x| x.makespan_s)
        };
        let speed_up = time("sequential").zip(time("FIFO")).map(|(s, c)| s / c);
        out.push(Claim::judge(
            &format!("fig11-speed-up-{}", app.to_lowercase()),
            "twelve instances",
            "Figure 11",
            &format!(
                "twelve {app} instances run {paper}x faster concurrently than one after another"
            ),
            Test::Near { paper, tolerance: SPEED_UP * paper },
            Unit::Ratio,
            speed_up,
            String::new(),
        ));
    }
    let find =
        |scenario: &str, configuration: &str| find_scenario(scenarios, scenario, configuration);
    // Table 1: the single instance is an input; the packed and schedGPU columns results
    for (app, columns, fit) in TABLE_1 {
        let id = app.to_lowercase();
        let runs = [
            (find(&format!("1 x {app}"), "alone"), "1-instance", "one instance alone".to_string()),
            (
                find(&format!("12 x {app}"), "manual packing"),
                "max-concurrent",
                format!("{fit} instances at once without schedGPU"),
            ),
            (find(&format!("12 x {app}"), "FIFO"), "12-schedgpu", "12 under schedGPU".into()),
        ];
        for (i, (run, column, what)) in runs.into_iter().enumerate() {
            let (gpu, memory) = columns[i];
            for (measure, paper, ours) in [
                ("gpu", gpu, run.map(|x| x.gpu_util)),
                ("memory", memory, run.map(|x| x.memory_util)),
            ] {
                let claim = Claim::judge(
                    &format!("table1-{id}-{measure}-{column}"),
                    "single application",
                    "Table 1",
                    &format!(
                        "{app}, {what}: average GPU {} {paper:.2}%",
                        if measure == "gpu" { "utilisation" } else { "memory utilisation" }
                    ),
                    Test::Near {
                        paper: paper / 100.0,
                        tolerance: utilisation_tolerance(paper / 100.0),
                    },
                    Unit::Percent,
                    ours,
                    String::new(),
                );
                // the GPU shares are built from the single instance's utilisation; the
                // memory from §6's maxima, so Table 1's average memory is a result, except
                // ARA's alone: its GPU phase's length is that average over its share held
                // (0.37% / 16%, workloads::schedgpu)
                let input = i == 0 && (measure == "gpu" || app == "ARA");
                out.push(if input {
                    claim.input(if measure == "gpu" { PROFILE_INPUT } else { ARA_MEMORY_INPUT })
                } else {
                    claim
                });
            }
        }
    }
    // Table 2: one instance alone (an input) and the mean instance of twelve
    for (app, alone, twelve) in TABLE_2 {
        let id = app.to_lowercase();
        out.push(
            Claim::judge(
                &format!("table2-{id}-alone"),
                "single application",
                "Table 2",
                &format!("{app}: one instance alone takes {alone} s"),
                Test::Near { paper: alone, tolerance: MAKESPAN * alone },
                Unit::Seconds,
                find(&format!("1 x {app}"), "alone").map(|x| x.mean_job_s),
                String::new(),
            )
            .input(PROFILE_INPUT),
        );
        out.push(Claim::judge(
            &format!("table2-{id}-mean-of-12"),
            "single application",
            "Table 2",
            &format!("{app}: an instance among twelve under schedGPU takes {twelve} s on average"),
            Test::Near { paper: twelve, tolerance: MAKESPAN * twelve },
            Unit::Seconds,
            find(&format!("12 x {app}"), "FIFO").map(|x| x.mean_job_s),
            String::new(),
        ));
    }
    // Figure 11 against manual packing: "the speed-up is approximately doubled when
    // running 12 concurrent instances of ARA and MUMmerGPU" (§7.3.1)
    for app in ["ARA", "MUMmerGPU"] {
        let name = format!("12 x {app}");
        let (packed, sched) = (find(&name, "manual packing"), find(&name, "FIFO"));
        let ratio = packed.zip(sched).map(|(p, c)| p.makespan_s / c.makespan_s);
        out.push(Claim::judge(
            &format!("fig11-{}-over-manual-packing", app.to_lowercase()),
            "single application",
            "§7.3.1, Figure 11",
            &format!(
                "twelve {app} instances: schedGPU's speed-up approximately doubles that of manually packing as many as fit"
            ),
            Test::Near { paper: 2.0, tolerance: SPEED_UP * 2.0 },
            Unit::Ratio,
            ratio,
            packed.zip(sched).map_or(String::new(), |(p, c)| {
                format!("packed {:.1} s, schedGPU {:.1} s", p.makespan_s, c.makespan_s)
            }),
        ));
    }
    // Figure 11's curve for GPU-BLAST: "4 concurrent instances achieving maximum
    // speed-up" (§7.3.1)
    // one instance is its own sequential run: speed-up 1
    let best = std::iter::once((1usize, 1.0))
        .chain((2..=12usize).filter_map(|n| {
            let name = format!("{n} x GPU-BLAST");
            Some((n, find(&name, "sequential")?.makespan_s / find(&name, "FIFO")?.makespan_s))
        }))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    out.push(Claim::judge(
        "fig11-gpu-blast-peak-at-4",
        "single application",
        "§7.3.1, Figure 11",
        "GPU-BLAST reaches its largest speed-up with 4 concurrent instances",
        Test::Near { paper: 4.0, tolerance: 1.0 },
        Unit::Count,
        best.map(|b| b.0 as f64),
        best.map_or(String::new(), |(n, x)| format!("largest speed-up {x:.2}x at {n} instances")),
    ));
    // not reproduced: what the simulator cannot measure, with the reason
    out.push(Claim::judge(
        "fig9-life-cycle-below-1-ms",
        "overheads",
        "§7.1, Figure 9",
        "every stage of the life cycle (initialisation, pre-allocation, post-free, shutdown) takes less than one millisecond (judged in ms)",
        Test::AtMost { paper: 1.0, tolerance: 0.0 },
        Unit::Count,
        None,
        "not measured here: the simulator has no implementation overhead; tessera's ledger is real code, timed by its own tests, not by this experiment".into(),
    ));
    for (id, paper, value) in [
        (
            "fig10-over-sequential",
            "12 instances of 10 Rodinia and 8 Parboil benchmarks run over 2x faster under schedGPU than one after another",
            2.0,
        ),
        (
            "fig10-against-manual-packing",
            "the same take 40% longer under schedGPU than manually packed",
            1.4,
        ),
    ] {
        out.push(Claim::judge(
            id,
            "benchmarks",
            "§7.2, Figure 10",
            paper,
            Test::Near { paper: value, tolerance: SPEED_UP * value },
            Unit::Ratio,
            None,
            "not measured here: the paper gives none of the 18 benchmarks' CPU and GPU phases or memory, so there is nothing to build their profiles from".into(),
        ));
    }
    out
}
