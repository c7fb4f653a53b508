//! The checks, each judged from what the programs measured: the thresholds are the
//! issue's (shares within ±0.05 at 1:3 and ±0.1 at 1:1, memory back within 2 s, at
//! most 100 ns per launch over direct).

use super::tenants::{Tenants, View};
use super::{Check, SelftestArgs};
use anyhow::{Context, Result};
use serde_json::json;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
const OUT_OF_MEMORY: u64 = 2;
/// How long a program may take to start and answer (cuInit on a large GPU takes a
/// second or more).
const START: Duration = Duration::from_secs(60);

pub(super) fn run(name: &'static str, env: &Tenants, args: &SelftestArgs, view: &View) -> Check {
    let expected = match name {
        "share" => "cuMemGetInfo and NVML show the tenant's limit",
        "memory" => {
            "past the limit: out of memory within 100 ms; free and retry succeed; a neighbour's allocation succeeds"
        }
        "kill" => "a killed tenant's memory is back in the ledger and the driver within 2 s",
        "launch" => {
            "p50 launch through tessera at most 100 ns over the driver's own (same process; with no hook within ±50 ns)"
        }
        "fair-weights" => "weights 1:3, the weight-1 tenant receives 0.25 ± 0.05 of the GPU time",
        "fair-kernels" => "100 ms kernels beside 1 ms kernels at 1:1, each receives 0.5 ± 0.1",
        _ => "",
    };
    let result = match name {
        "share" => share(env, args, view, expected),
        "memory" => memory(env, args, expected),
        "kill" => kill(env, args, expected),
        "launch" => launch(env, args, expected),
        "fair-weights" => {
            fair(env, args, name, (1, 3), (2_000_000, 2_000_000), 0.25, 0.05, expected)
        }
        "fair-kernels" => {
            fair(env, args, name, (1, 1), (100_000_000, 1_000_000), 0.5, 0.1, expected)
        }
        _ => unreachable!("checked against the list"),
    };
    result.unwrap_or_else(|e| Check::failed(name, format!("{e:#}"), expected))
}

fn role(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / MIB as f64)
}

fn share(env: &Tenants, args: &SelftestArgs, view: &View, expected: &str) -> Result<Check> {
    let limit = args.memory_mib * MIB;
    let v = env.tenant("share", Some(args.memory_mib), None, &role(&["share"]))?.finish(START)?;
    let total = v["total"].as_u64().unwrap_or(0);
    let nvml_total = v["nvml"]["total"].as_u64();
    let measured = format!(
        "cuMemGetInfo {}, NVML {} (the GPU has {})",
        mib(total),
        nvml_total.map_or_else(|| format!("unavailable: {}", v["nvml"]), mib),
        mib(view.total)
    );
    Ok(Check::judged("share", total == limit && nvml_total == Some(limit), measured, expected)
        .with(v))
}

fn memory(env: &Tenants, args: &SelftestArgs, expected: &str) -> Result<Check> {
    // a neighbour holding a quarter of its own limit, first
    let quarter = (args.memory_mib / 4).max(1);
    let mut neighbour = env.tenant(
        "neighbour",
        Some(args.memory_mib),
        None,
        &role(&["hold", "--mib", &quarter.to_string()]),
    )?;
    neighbour.next(START)?;
    let v = env
        .tenant(
            "memory",
            Some(args.memory_mib),
            None,
            &role(&["memory", "--mib", &args.memory_mib.to_string()]),
        )?
        .finish(START)?;
    neighbour.send(&format!("more {quarter}"))?;
    let more = neighbour.next(START)?;
    neighbour.finish(START)?;
    let (first, over, retry) = (v["first"].as_u64(), v["over"].as_u64(), v["retry"].as_u64());
    let over_ms = v["over_ms"].as_f64().unwrap_or(f64::MAX);
    let neighbour_ok = more["code"].as_u64() == Some(0);
    let pass = first == Some(0)
        && over == Some(OUT_OF_MEMORY)
        && over_ms <= 100.0
        && retry == Some(0)
        && neighbour_ok;
    let measured = format!(
        "past the limit: code {} in {over_ms:.1} ms; retry: code {}; the neighbour's {quarter} MiB more: code {}",
        over.map_or("?".into(), |c| c.to_string()),
        retry.map_or("?".into(), |c| c.to_string()),
        more["code"]
    );
    Ok(Check::judged("memory", pass, measured, expected)
        .with(json!({"tenant": v, "neighbour": more})))
}

fn kill(env: &Tenants, args: &SelftestArgs, expected: &str) -> Result<Check> {
    let hold = (args.memory_mib / 2).max(1);
    // the checks before this one ended their programs; the daemon returns their memory
    // a moment later: the baseline is the ledger once it stopped moving
    let ledger_before = settled_ledger(env)?;
    let mut watch = env.direct("nvml-watch", &role(&["nvml-watch"]))?;
    let nvml_before = watch.next(START)?["used"].as_u64();
    let mut holder = env.tenant(
        "holder",
        Some(args.memory_mib),
        None,
        &role(&["hold", "--mib", &hold.to_string()]),
    )?;
    holder.next(START)?;
    let ledger_held = env.ledger_used()?;
    let pid = holder.pid();
    let killed = Instant::now();
    holder.kill();
    // the ledger, as the daemon reports it
    let mut ledger_ms = None;
    while killed.elapsed() < Duration::from_secs(5) {
        if env.ledger_used()? <= ledger_before {
            ledger_ms = Some(killed.elapsed().as_secs_f64() * 1e3);
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // the driver, as NVML reports it (with 64 MiB of slack for the driver's own)
    let driver = match nvml_before {
        Some(before) => {
            watch.send(&format!("below {}", before + 64 * MIB))?;
            let w = watch.next(Duration::from_secs(15))?;
            let since_kill = killed.elapsed().as_secs_f64() * 1e3;
            w["below"].as_bool().unwrap_or(false).then_some(since_kill)
        }
        None => None,
    };
    drop(watch);
    let measured = format!(
        "pid {pid} held {hold} MiB (ledger {} → {}); back in the ledger after {}, in the driver (NVML) after {}",
        mib(ledger_before),
        mib(ledger_held),
        ledger_ms.map_or("more than 5 s".into(), |m| format!("{m:.0} ms")),
        driver.map_or("more than 10 s".into(), |m| format!("at most {m:.0} ms")),
    );
    let pass = ledger_held >= ledger_before + hold * MIB
        && ledger_ms.is_some_and(|m| m <= 2000.0)
        && driver.is_some_and(|m| m <= 2000.0);
    Ok(Check::judged("kill", pass, measured, expected)
        .with(json!({"ledger_ms": ledger_ms, "driver_ms": driver, "held_mib": hold})))
}

/// The CPU both sides of the launch check run on: the last this process may use (the
/// daemon and the shell tend to the first ones; a daemon the self-test starts is kept
/// off it, see `Tenants::new`).
pub(super) fn launch_cpu() -> Option<usize> {
    let set = rustix::thread::sched_getaffinity(None).ok()?;
    (0..rustix::thread::CpuSet::MAX_CPU).rev().find(|&c| set.is_set(c))
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 }
}

/// The launch path's added cost between processes, from rounds of (direct p50,
/// through-tessera p50), each pair run back to back: the median of the pairs'
/// differences, so that one pair that drew a slow process (on the H200 a direct p50
/// moved 2.9 -> 3.4 µs between two runs) does not decide it. Reported beside the
/// verdict, which is [`hook_cost`]'s.
pub(super) fn launch_overhead(pairs: &[(f64, f64)]) -> f64 {
    median(&pairs.iter().map(|(d, t)| t - d).collect::<Vec<_>>())
}

/// What the launch check judges, from each program's two p50s: the one through its
/// `cuLaunchKernel` (the hook, under tessera) and the one through the driver's own,
/// timed in alternating blocks in the same process. `governed`: the programs run
/// under tessera; `control`: the programs run directly, where both entry points are
/// the driver's. Returns (the hook's cost: the median of the governed programs'
/// differences, the control's median, whether it passes). Between processes the same
/// binaries differed by -32 to +411 ns on the H200 (seven runs' medians of 1-5 pairs:
/// -6 to +407 ns), which a cost of 100 ns cannot be told apart from; within a process
/// that difference is gone, and the control shows what the comparison reads with no
/// hook at all: the verdict needs it near zero (|control| <= 50 ns), or the method is
/// not measuring what it claims.
pub(super) fn hook_cost(governed: &[(f64, f64)], control: &[(f64, f64)]) -> (f64, f64, bool) {
    let diff =
        |v: &[(f64, f64)]| median(&v.iter().map(|(hook, own)| hook - own).collect::<Vec<_>>());
    let (cost, ctl) = (diff(governed), diff(control));
    (cost, ctl, cost <= 100.0 && ctl.abs() <= 50.0)
}

fn launch(env: &Tenants, args: &SelftestArgs, expected: &str) -> Result<Check> {
    let rounds = args.launch_rounds.max(1);
    let count = (args.launches / rounds).max(100).to_string();
    let cpu = args.launch_cpu;
    let mut words = vec!["launch", "--count", &count];
    let cpu_text = cpu.map(|c| c.to_string());
    if let Some(c) = &cpu_text {
        words.extend(["--cpu", c]);
    }
    let p50 = |v: &serde_json::Value| v["p50_ns"].as_f64().unwrap_or(f64::NAN);
    let own50 = |v: &serde_json::Value| v["own_p50_ns"].as_f64().unwrap_or(f64::NAN);
    let rate = |v: &serde_json::Value| v["per_second"].as_f64().unwrap_or(f64::NAN);
    let (mut directs, mut governed) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let direct = || env.direct(&format!("launch-direct-{r}"), &role(&words))?.finish(START);
        let tenant =
            || env.tenant(&format!("launch-{r}"), None, None, &role(&words))?.finish(START);
        // A B, B A, ...: a drift during the check weighs on both sides alike
        let (d, t) = if r % 2 == 0 {
            let d = direct()?;
            (d, tenant()?)
        } else {
            let t = tenant()?;
            (direct()?, t)
        };
        directs.push(d);
        governed.push(t);
    }
    let pairs: Vec<(f64, f64)> =
        directs.iter().zip(&governed).map(|(d, t)| (p50(d), p50(t))).collect();
    let within = |v: &[serde_json::Value]| v.iter().map(|x| (p50(x), own50(x))).collect::<Vec<_>>();
    let (hooked, control) = (within(&governed), within(&directs));
    let (cost, ctl, pass) = hook_cost(&hooked, &control);
    let between = launch_overhead(&pairs);
    let d50 = median(&pairs.iter().map(|p| p.0).collect::<Vec<_>>());
    let t50 = median(&pairs.iter().map(|p| p.1).collect::<Vec<_>>());
    let d_rate = median(&directs.iter().map(rate).collect::<Vec<_>>());
    let t_rate = median(&governed.iter().map(rate).collect::<Vec<_>>());
    let signed = |v: Vec<f64>| v.iter().map(|x| format!("{x:+.0}")).collect::<Vec<_>>().join(" ");
    let measured = format!(
        "the hook {cost:+.0} ns over the driver's own cuLaunchKernel in the same process (median of \
         {rounds} programs: {}; with no hook the same comparison reads {ctl:+.0}: {}); between \
         processes p50 {d50:.0} ns direct, {t50:.0} ns through tessera, {between:+.0} (paired \
         rounds: {}){}; {d_rate:.0} and {t_rate:.0} launches/s (ratio {:.2})",
        signed(hooked.iter().map(|(h, o)| h - o).collect()),
        signed(control.iter().map(|(h, o)| h - o).collect()),
        signed(pairs.iter().map(|(d, t)| t - d).collect()),
        cpu.map(|c| format!(" on CPU {c}")).unwrap_or_default(),
        t_rate / d_rate
    );
    Ok(Check::judged("launch", pass, measured, expected).with(json!({
        "direct": {"p50_ns": d50, "per_second": d_rate, "rounds": directs},
        "tessera": {"p50_ns": t50, "per_second": t_rate, "rounds": governed},
        "hook_ns": cost, "control_ns": ctl,
        "over_ns": between, "paired_over_ns": pairs.iter().map(|(d, t)| t - d).collect::<Vec<_>>(),
        "cpu": cpu,
    })))
}

/// Two tenants spinning kernels of `ns` at `weights` on one GPU for the run's
/// seconds; the first one's share of the GPU time both received while both ran, from
/// the kernels' own start and end stamps.
#[allow(clippy::too_many_arguments)]
fn fair(
    env: &Tenants,
    args: &SelftestArgs,
    name: &'static str,
    weights: (u32, u32),
    ns: (u64, u64),
    want: f64,
    within: f64,
    expected: &str,
) -> Result<Check> {
    if let Ok(status) = env.status()
        && status.policy != "fair"
    {
        return Ok(Check::skipped(
            name,
            format!("the daemon's policy is {}; fair shares need `--policy fair`", status.policy),
            expected,
        ));
    }
    let seconds = format!("{}", args.seconds);
    let out = |i: u32| env.scratch().join(format!("{name}-{i}.stamps"));
    let start = |i: u32, w: u32, ns: u64| {
        env.tenant(
            &format!("{name}-{i}"),
            None,
            Some(w),
            &role(&[
                "spin",
                "--ns",
                &ns.to_string(),
                "--seconds",
                &seconds,
                "--out",
                &out(i).to_string_lossy(),
            ]),
        )
    };
    let a = start(0, weights.0, ns.0)?;
    let b = start(1, weights.1, ns.1)?;
    let limit = START + Duration::from_secs_f64(args.seconds * 3.0);
    let (ka, kb) = (a.finish(limit)?, b.finish(limit)?);
    let runs = [stamps(&out(0))?, stamps(&out(1))?];
    let from = runs.iter().map(|r| r.first().map_or(0, |k| k.0)).max().unwrap_or(0);
    let to = runs.iter().map(|r| r.last().map_or(0, |k| k.1)).min().unwrap_or(0);
    let received = |r: &[(u64, u64)]| {
        r.iter().map(|(s, e)| (*e).min(to).saturating_sub((*s).max(from))).sum::<u64>() as f64 / 1e9
    };
    let (ra, rb) = (received(&runs[0]), received(&runs[1]));
    let window = to.saturating_sub(from) as f64 / 1e9;
    let share = ra / (ra + rb);
    let measured = format!(
        "{share:.3} (weight {}: {ra:.2} s of {} ms kernels, weight {}: {rb:.2} s of {} ms kernels, both running {window:.2} s)",
        weights.0,
        ns.0 / 1_000_000,
        weights.1,
        ns.1 / 1_000_000
    );
    let pass = window >= args.seconds * 0.5 && (share - want).abs() <= within;
    Ok(Check::judged(name, pass, measured, expected).with(json!({
        "share": share, "received_s": [ra, rb], "window_s": window, "kernels": [ka["kernels"], kb["kernels"]],
    })))
}

/// A spin program's kernels: (start, end) nanoseconds of the GPU's clock.
fn stamps(path: &std::path::Path) -> Result<Vec<(u64, u64)>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace().map(|x| x.parse::<u64>());
            Some((f.next()?.ok()?, f.next()?.ok()?))
        })
        .collect())
}

/// The ledger's use on GPU 0 once it has not moved for 200 ms (at most 5 s).
fn settled_ledger(env: &Tenants) -> Result<u64> {
    let began = Instant::now();
    let (mut last, mut since) = (env.ledger_used()?, Instant::now());
    while since.elapsed() < Duration::from_millis(200) && began.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
        let now = env.ledger_used()?;
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The H200's first run (2026-11-28) judged one pair of processes: +411 ns, FAIL,
    /// where the same binaries a minute later gave -32 ns. Paired rounds judge the
    /// median difference: one slow draw no longer decides, a steady cost still does.
    #[test]
    fn one_slow_pair_does_not_decide_the_launch_verdict_but_a_steady_cost_does() {
        let noisy = [(3369.0, 3780.0), (2898.0, 2866.0), (3010.0, 3030.0), (3100.0, 3080.0)];
        assert!(launch_overhead(&noisy) <= 100.0, "{}", launch_overhead(&noisy));
        assert!(launch_overhead(&noisy) >= -100.0);
        let steady = [(3000.0, 3150.0), (2900.0, 3040.0), (3100.0, 3230.0), (3369.0, 3200.0)];
        assert!(launch_overhead(&steady) > 100.0, "{}", launch_overhead(&steady));
        assert_eq!(median(&[1.0, f64::NAN, 3.0]), 2.0);
        assert!(median(&[]).is_nan());
    }

    /// The H200's runs judged the launch path between processes: seven medians from -6
    /// to +407 ns, the same binaries, so a 100 ns cost could neither pass nor fail
    /// reliably. The verdict is now the in-process comparison (the hook beside the
    /// driver's own entry point), which such a spread between processes does not move,
    /// checked by a control that must read near zero.
    #[test]
    fn the_launch_verdict_is_the_in_process_difference_with_a_control_near_zero() {
        // the processes differ by hundreds of ns; within each, the hook adds ~40
        let governed = [(3420.0, 3380.0), (2950.0, 2905.0), (3810.0, 3772.0)];
        let control = [(2900.0, 2896.0), (3300.0, 3309.0), (3050.0, 3047.0)];
        let (cost, ctl, pass) = hook_cost(&governed, &control);
        assert!((cost - 40.0).abs() < 1e-9 && ctl.abs() <= 5.0 && pass, "{cost} {ctl}");
        // a steady 150 ns fails, however the processes fall
        let slow = [(3550.0, 3400.0), (3050.0, 2900.0), (3200.0, 3049.0)];
        assert!(!hook_cost(&slow, &control).2);
        // a method that reads 80 ns with no hook present judges nothing
        let biased = [(3000.0, 2920.0), (3100.0, 3020.0), (2990.0, 2911.0)];
        assert!(!hook_cost(&governed, &biased).2);
        // a program that reported nothing is not a pass
        assert!(!hook_cost(&[(f64::NAN, f64::NAN)], &control).2);
    }
}
