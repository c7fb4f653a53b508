//! `tessera slurm …`: the hooks a Slurm node runs (Prolog, Epilog, TaskProlog), the
//! `gres.conf` generator, and a smoke client for checking a node. See docs/slurm.md.
//!
//! Failure policy: a failing Prolog drains the whole node and holds the job, so the
//! hooks never fail. When the Prolog cannot register the job with tesserad it cancels
//! that job (`scancel`), or, with `--on-failure exclusive`, lets a job of whole GPUs run
//! unmanaged (nothing else shares those GPUs: Slurm gave them whole) and cancels a job
//! of shards. The Epilog and TaskProlog only report.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use tessera_client::proto::JobGrant;
use tessera_client::{Client, TaskRequest, TenantOptions};
use tesserad::slurm::{gres_conf, parse_gpu_list, parse_scontrol_job};

/// The hooks and tools for a Slurm node.
#[derive(Debug, Subcommand)]
pub enum SlurmCommand {
    /// Slurm's Prolog (as root, at job start): register the job with tesserad.
    Prolog(PrologArgs),
    /// Slurm's Epilog (as root, at job end): release everything the job held.
    Epilog(HookArgs),
    /// Slurm's TaskProlog (as the job's user, before each task): print the `export`
    /// lines that make the job's programs its tenant.
    TaskProlog(TaskPrologArgs),
    /// Print this node's gres.conf and the `Gres=` fragment of its NodeName line.
    GresConf(GresConfArgs),
    /// Check a node from inside a job (`srun --gres=shard:2 tessera slurm smoke`):
    /// register as the job's tenant, run emulated tasks, print what the daemon gave.
    Smoke(SmokeArgs),
}

/// Where tesserad is.
#[derive(Debug, Args)]
pub struct HookArgs {
    /// tesserad's socket (default: $TESSERA_SOCKET, else the node's /run/tessera/tesserad.sock when it exists, else the per-user $XDG_RUNTIME_DIR/tesserad.sock).
    #[arg(long)]
    socket: Option<PathBuf>,
}

/// What the Prolog does when tesserad cannot take the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnFailure {
    /// Cancel the job (the node stays up).
    Cancel,
    /// Let a job of whole GPUs run unmanaged; cancel a job of shards.
    Exclusive,
}

/// The Prolog's settings.
#[derive(Debug, Args)]
pub struct PrologArgs {
    #[command(flatten)]
    hook: HookArgs,
    /// When tesserad cannot be reached or refuses the job.
    #[arg(long, value_enum, default_value = "cancel")]
    on_failure: OnFailure,
    /// The scontrol command (for tests).
    #[arg(long, default_value = "scontrol")]
    scontrol: String,
    /// The scancel command (for tests).
    #[arg(long, default_value = "scancel")]
    scancel: String,
}

/// The TaskProlog's settings.
#[derive(Debug, Args)]
pub struct TaskPrologArgs {
    #[command(flatten)]
    hook: HookArgs,
    /// The interposer to preload into the job's programs (default: libtessera_cuda.so
    /// beside this program; none if absent).
    #[arg(long)]
    preload: Option<PathBuf>,
}

/// The generator's settings.
#[derive(Debug, Args)]
pub struct GresConfArgs {
    #[command(flatten)]
    hook: HookArgs,
    /// Device files, `{}` standing for the GPU's index.
    #[arg(long, default_value = "/dev/nvidia{}")]
    device: String,
}

/// The smoke client's settings.
#[derive(Debug, Args)]
pub struct SmokeArgs {
    #[command(flatten)]
    hook: HookArgs,
    /// Emulated tasks to run.
    #[arg(long, default_value_t = 10)]
    tasks: u32,
    /// Each task's emulated work, ms.
    #[arg(long, default_value_t = 50)]
    task_ms: u64,
    /// GPU memory to declare, bytes (default: `TESSERA_MEMORY`, which the TaskProlog
    /// sets to this task's part of the job's entitlement).
    #[arg(long)]
    memory: Option<u64>,
    /// Stay registered this long after the tasks, ms.
    #[arg(long, default_value_t = 0)]
    hold_ms: u64,
}

/// `--socket`, else `TESSERA_SOCKET` (the TaskProlog exports it to the job), else the
/// clients' default ([`crate::default_socket`]).
fn socket(h: &HookArgs) -> PathBuf {
    h.socket
        .clone()
        .or_else(|| env("TESSERA_SOCKET").map(PathBuf::from))
        .unwrap_or_else(crate::default_socket)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn job_id() -> Result<u64> {
    let v = env("SLURM_JOB_ID").context("SLURM_JOB_ID is not set: run this from Slurm")?;
    v.parse().with_context(|| format!("SLURM_JOB_ID={v:?} is not a job id"))
}

/// Run `cmd args`, giving up after `limit` (Slurm commands retry for ever when a
/// daemon is down). Its output is read while it runs, however long.
fn run_with_timeout(cmd: &str, args: &[&str], limit: Duration) -> Result<String> {
    let child = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {cmd}"))?;
    let pid = rustix::process::Pid::from_child(&child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(limit) {
        Ok(out) => out?,
        Err(_) => {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            bail!("{cmd} {} did not answer within {limit:?}", args.join(" "));
        }
    };
    if !out.status.success() {
        bail!("{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A control connection to tesserad that gives up after [`HOOK_TIMEOUT`].
fn hook_client(socket: &std::path::Path) -> Result<Client> {
    let mut c = Client::connect_control(socket)
        .with_context(|| format!("no tesserad at {}", socket.display()))?;
    c.set_timeout(HOOK_TIMEOUT)?;
    Ok(c)
}

/// How long a hook waits for tesserad or a Slurm command: well inside Slurm's own
/// Prolog timeout, which drains the node.
const HOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// What Slurm gave the job, from the Prolog's environment and scontrol.
fn read_grant(a: &PrologArgs, job: u64) -> Result<JobGrant> {
    let uid: u32 = env("SLURM_JOB_UID")
        .context("SLURM_JOB_UID is not set")?
        .parse()
        .context("SLURM_JOB_UID is not a uid")?;
    // SLURM_JOB_GPUS, never CUDA_VISIBLE_DEVICES (which device cgroups renumber from 0)
    let gpus_var = env("SLURM_JOB_GPUS").or_else(|| env("SLURM_STEP_GPUS")).unwrap_or_default();
    let gpus = parse_gpu_list(&gpus_var)
        .with_context(|| format!("SLURM_JOB_GPUS={gpus_var:?} is not a list of GPU indices"))?;
    let text =
        run_with_timeout(&a.scontrol, &["-d", "show", "job", &job.to_string()], HOOK_TIMEOUT)?;
    let node = env("SLURMD_NODENAME").unwrap_or_default();
    let s = parse_scontrol_job(&text, &node);
    // Slurm leaves SLURM_JOB_GPUS empty when its GPU files are not device files; the
    // detail's IDX list says the same thing
    let gpus = if gpus.is_empty() { s.gpus.clone() } else { gpus };
    Ok(JobGrant {
        job,
        uid,
        gpus,
        shards: s.shards,
        partition: env("SLURM_JOB_PARTITION").unwrap_or(s.partition),
        qos: s.qos,
        comment: s.comment,
    })
}

fn prolog(a: &PrologArgs) -> Result<()> {
    let job = job_id()?;
    let grant = read_grant(a, job);
    let outcome = grant
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e:#}"))
        .and_then(|g| Ok(hook_client(&socket(&a.hook))?.job_start(g.clone())?));
    match outcome {
        Ok(r) => {
            eprintln!(
                "tessera: job {job} registered: GPUs {:?}, weight {}, {} bytes of GPU memory",
                r.gpus, r.weight, r.memory_entitled
            );
            Ok(())
        }
        Err(e) => {
            let whole_gpus = grant.as_ref().is_ok_and(|g| g.shards == 0 && !g.gpus.is_empty());
            if a.on_failure == OnFailure::Exclusive && whole_gpus {
                eprintln!("tessera: job {job} runs unmanaged on its whole GPUs: {e:#}");
                return Ok(());
            }
            eprintln!("tessera: cancelling job {job}: tesserad cannot protect it: {e:#}");
            // never fail the Prolog: that would drain the node
            if let Err(c) = run_with_timeout(&a.scancel, &[&job.to_string()], HOOK_TIMEOUT) {
                eprintln!("tessera: could not cancel job {job}: {c:#}");
            }
            Ok(())
        }
    }
}

fn epilog(a: &HookArgs) -> Result<()> {
    let job = job_id()?;
    let ended = hook_client(&socket(a)).and_then(|mut c| Ok(c.job_end(job)?));
    match ended {
        Ok(n) => eprintln!("tessera: job {job} ended: {n} tenant(s) closed"),
        // the daemon gone means its state about the job is gone too
        Err(e) => eprintln!("tessera: job {job}: could not reach tesserad: {e:#}"),
    }
    Ok(())
}

fn task_prolog(a: &TaskPrologArgs) -> Result<()> {
    let job = job_id()?;
    let socket = socket(&a.hook);
    let info = hook_client(&socket).and_then(|mut c| Ok(c.job_info(job)?));
    let r = match info {
        Ok(r) => r,
        Err(e) => {
            // a job the Prolog let run unmanaged (exclusive) gets nothing
            eprintln!("tessera: job {job} is not managed by tesserad: {e:#}");
            return Ok(());
        }
    };
    println!("export TESSERA_SOCKET={}", socket.display());
    println!("export TESSERA_SLURM_JOB={job}");
    println!("export TESSERA_WEIGHT={}", r.weight);
    // each of the step's tasks here gets its part, so that all of them fit (the
    // entitlement is the whole job's)
    let tasks_here = ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"]
        .iter()
        .find_map(|v| env(v).as_deref().and_then(tasks_on_this_node))
        .unwrap_or(1);
    println!("export TESSERA_MEMORY={}", r.memory_entitled / u64::from(tasks_here.max(1)));
    match r.class {
        tessera_client::proto::TenantClass::UserFacing => {
            println!("export TESSERA_CLASS=user-facing");
            println!("export TESSERA_SLA_MS={}", r.sla_ms);
        }
        tessera_client::proto::TenantClass::Batch => println!("export TESSERA_CLASS=batch"),
    }
    if let Some(p) = a.preload.clone().or_else(crate::run::default_preload).filter(|p| p.is_file())
    {
        let mut list = p.display().to_string();
        if let Some(old) = env("LD_PRELOAD") {
            list = format!("{list}:{old}");
        }
        println!("export LD_PRELOAD={list}");
    }
    Ok(())
}

/// The most tasks a `SLURM_*TASKS_PER_NODE` value gives a node: `2`, `2(x3)`, `3,1`.
fn tasks_on_this_node(v: &str) -> Option<u32> {
    v.split(',').filter_map(|p| p.split('(').next()?.trim().parse::<u32>().ok()).max()
}

fn gres(a: &GresConfArgs) -> Result<()> {
    let socket = socket(&a.hook);
    let mut c = Client::connect_control(&socket)
        .with_context(|| format!("no tesserad at {}", socket.display()))?;
    let st = c.status()?;
    let shards = st.slurm_shards_per_gpu.max(1);
    let (conf, node) = gres_conf(st.gpus.len(), shards, &a.device);
    println!(
        "# gres.conf for this node ({} GPUs of {shards} shards, {} executor)",
        st.gpus.len(),
        st.executor
    );
    print!("{conf}");
    println!("# slurm.conf: GresTypes=gpu,shard and, on this node's NodeName line:");
    println!("# {node}");
    Ok(())
}

fn smoke(a: &SmokeArgs) -> Result<()> {
    let job = job_id()?;
    let socket = socket(&a.hook);
    let mut c =
        Client::connect(&socket).with_context(|| format!("no tesserad at {}", socket.display()))?;
    let info = c.job_info(job)?;
    let memory = a
        .memory
        .or_else(|| env("TESSERA_MEMORY").and_then(|v| v.parse().ok()))
        .unwrap_or(info.memory_entitled);
    let (tenant, gpus) = c
        .register_placed(TenantOptions { job: Some(job), memory, ..TenantOptions::batch() }, 0)
        .with_context(|| format!("registering as job {job}'s tenant"))?;
    println!(
        "tenant {tenant} job {job} weight {} gpus {gpus:?} memory {memory} entitled {}",
        info.weight, info.memory_entitled
    );
    let task = TaskRequest {
        kernel: 1,
        cost: Duration::from_millis(a.task_ms),
        memory: 0,
        input: vec![],
        output_len: 0,
    };
    let mut ran_on = std::collections::BTreeSet::new();
    for _ in 0..a.tasks {
        let h = c.submit(tenant, &task)?;
        let done = c.wait(h, Duration::from_secs(600))?;
        if done.outcome != tessera_client::Outcome::Done {
            bail!("a task ended {:?}", done.outcome);
        }
        ran_on.extend(done.gpu);
    }
    println!("ran {} tasks on GPUs {:?}", a.tasks, ran_on.into_iter().collect::<Vec<_>>());
    std::thread::sleep(Duration::from_millis(a.hold_ms));
    Ok(())
}

/// A hook's error is logged, never its exit status: a Prolog or Epilog that fails
/// drains the node.
fn never_fail(hook: &str, r: Result<()>) -> Result<()> {
    if let Err(e) = r {
        eprintln!("tessera: slurm {hook}: {e:#}");
    }
    Ok(())
}

pub fn run(cmd: SlurmCommand) -> Result<()> {
    match cmd {
        SlurmCommand::Prolog(a) => never_fail("prolog", prolog(&a)),
        SlurmCommand::Epilog(a) => never_fail("epilog", epilog(&a)),
        SlurmCommand::TaskProlog(a) => never_fail("task-prolog", task_prolog(&a)),
        SlurmCommand::GresConf(a) => gres(&a),
        SlurmCommand::Smoke(a) => smoke(&a),
    }
}
