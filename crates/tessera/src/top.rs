//! `tessera top`: a live view of the node, refreshed in place — GPUs with the shares
//! their running tenants hold, each tenant's entitled against received share, SLA
//! attainment and memory, and the daemon's recent decisions. `q` quits.

use anyhow::{Context, Result};
use clap::Args;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, Wrap};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tessera_client::proto::{StatusReport, TenantClass};
use tessera_client::{Client, StatusFilter};

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Control socket (default: $TESSERA_SOCKET, else the node's /run/tessera/tesserad.sock when it exists, else the per-user $XDG_RUNTIME_DIR/tesserad.sock).
    #[arg(long, env = "TESSERA_SOCKET")]
    socket: Option<PathBuf>,
    /// Seconds between refreshes.
    #[arg(long, default_value = "1")]
    interval: f64,
}

/// Recent events shown.
const EVENTS: u32 = 12;

/// Colours of the tenants' bars, by tenant id.
const PALETTE: [Color; 6] =
    [Color::Cyan, Color::Magenta, Color::Yellow, Color::Green, Color::Blue, Color::Red];

fn colour(tenant: Option<u64>) -> Color {
    tenant.map_or(Color::DarkGray, |t| PALETTE[t as usize % PALETTE.len()])
}

/// What the view shows: the latest report, or why there is none.
struct View {
    socket: PathBuf,
    report: Option<StatusReport>,
    error: Option<String>,
    fetched: Option<Instant>,
}

pub fn run(a: TopArgs) -> Result<()> {
    if !(a.interval > 0.0 && a.interval.is_finite()) {
        anyhow::bail!("--interval needs a positive number of seconds, got {}", a.interval);
    }
    let socket = a.socket.clone().unwrap_or_else(crate::default_socket);
    // a daemon that is not there is said at once, before the screen is taken over
    let mut client = Some(
        Client::connect_control(&socket)
            .with_context(|| format!("no tesserad at {}", socket.display()))?,
    );
    let mut view = View { socket: socket.clone(), report: None, error: None, fetched: None };
    let every = Duration::from_secs_f64(a.interval);
    let mut terminal = ratatui::try_init().context("setting up the terminal")?;
    let result = (|| -> Result<()> {
        loop {
            if view.fetched.is_none_or(|t| t.elapsed() >= every) {
                refresh(&mut view, &mut client);
            }
            terminal.draw(|f| draw(f, &view))?;
            let wait = every.saturating_sub(view.fetched.map_or(every, |t| t.elapsed()));
            if event::poll(wait.max(Duration::from_millis(10)))?
                && let Event::Key(k) = event::read()?
                && k.kind == KeyEventKind::Press
            {
                let ctrl_c =
                    k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                if matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                    return Ok(());
                }
            }
        }
    })();
    ratatui::restore();
    result
}

/// Ask the daemon again (reconnecting if it went away).
fn refresh(view: &mut View, client: &mut Option<Client>) {
    view.fetched = Some(Instant::now());
    if client.is_none() {
        *client = Client::connect_control(&view.socket).ok();
    }
    let Some(c) = client else {
        view.error = Some(format!("no tesserad at {}; retrying", view.socket.display()));
        return;
    };
    // one page of tenants (the title says how many there are in all)
    match c.status_page(StatusFilter { events: EVENTS, ..Default::default() }, 0) {
        Ok(r) => {
            view.report = Some(r);
            view.error = None;
        }
        Err(e) => {
            view.error = Some(format!("{e}; retrying"));
            *client = None;
        }
    }
}

/// A bar of `width` cells filled to `fraction`, eighths included.
fn bar(fraction: f64, width: usize) -> String {
    const EIGHTHS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let cells = fraction.clamp(0.0, 1.0) * width as f64;
    let full = cells.floor() as usize;
    let mut s = "█".repeat(full);
    if full < width {
        s.push(EIGHTHS[((cells - full as f64) * 8.0) as usize % 8]);
        s.push_str(&" ".repeat(width - full - 1));
    }
    s
}

fn gib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / f64::from(1u32 << 30))
}

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{:.0}%", v * 100.0))
}

fn draw(f: &mut ratatui::Frame, view: &View) {
    let Some(r) = &view.report else {
        let msg = view.error.clone().unwrap_or_else(|| "asking the daemon...".into());
        f.render_widget(
            Paragraph::new(msg).block(Block::bordered().title(" tessera top ")),
            f.area(),
        );
        return;
    };
    let gpu_rows = r.gpus.len() as u16 + 2;
    let tenant_rows = (r.tenants.len() as u16 + 3).min(f.area().height / 2);
    let [header, gpus, tenants, events, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(gpu_rows),
        Constraint::Length(tenant_rows),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(f.area());
    let t = &r.totals;
    let sla = (t.uf_done > 0).then(|| t.uf_met as f64 / t.uf_done as f64);
    f.render_widget(
        Line::from(vec![
            " tessera top ".bold().reversed(),
            format!(
                "  policy {}  {}  up {:.0} s  tenants {}  done {} (SLA met {})  failed {}  cancelled {}  resets {}  migrations {}",
                r.policy,
                r.executor,
                r.uptime_s,
                r.tenants_total,
                t.uf_done + t.batch_done,
                pct(sla),
                t.failed,
                t.cancelled,
                t.resets,
                t.migrations
            )
            .into(),
        ]),
        header,
    );
    draw_gpus(f, gpus, r);
    draw_tenants(f, tenants, r);
    let lines: Vec<Line> = r
        .events
        .iter()
        .rev()
        .map(|e| {
            Line::from(vec![
                Span::styled(format!("{:>8.1}s ", e.at_s), Style::new().fg(Color::DarkGray)),
                Span::styled(format!("{:<18} ", e.kind), Style::new().fg(Color::Cyan)),
                Span::raw(e.text.clone()),
            ])
        })
        .collect();
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(" recent events (newest first) ")),
        events,
    );
    let status = match &view.error {
        Some(e) => Span::styled(format!(" {e} "), Style::new().fg(Color::Red)),
        None => Span::raw(format!(" {} ", view.socket.display())),
    };
    f.render_widget(Line::from(vec![" q ".reversed(), " quit ".into(), status]), footer);
}

/// Each GPU: pool, state, memory, and a bar of the shares its running tasks hold (in
/// their tenants' colours).
fn draw_gpus(f: &mut ratatui::Frame, area: Rect, r: &StatusReport) {
    let width = (area.width as usize).saturating_sub(70).clamp(10, 60);
    let rows: Vec<Line> = r
        .gpus
        .iter()
        .map(|g| {
            let mut spans = vec![
                Span::styled(
                    format!(" GPU {:<2}", g.gpu),
                    Style::new().add_modifier(Modifier::BOLD),
                ),
                Span::raw(format!(
                    " {:<11} {:<10} mem {:>5}/{:<5} GiB busy {:>4} ",
                    g.pool,
                    g.busy.chars().take(10).collect::<String>(),
                    gib(g.memory_used),
                    gib(g.memory_total),
                    pct(Some(g.utilization))
                )),
                "│".into(),
            ];
            // the shares: each running task's cells in its tenant's colour
            let mut used = 0;
            for task in &g.running {
                let share = task.share.unwrap_or(1.0 / g.running.len().max(1) as f64);
                let cells = ((share * width as f64).round() as usize).min(width - used);
                used += cells;
                let label = task.tenant.map_or("busy".into(), |t| format!("t{t}"));
                let text: String = format!("{label:<cells$}").chars().take(cells).collect();
                spans.push(Span::styled(
                    text,
                    Style::new().fg(Color::Black).bg(colour(task.tenant)),
                ));
            }
            spans.push(" ".repeat(width - used).into());
            spans.push("│".into());
            if !g.partitions.is_empty() {
                spans.push(format!(" partitions {:?}%", g.partitions).into());
            }
            if let Some((load, state)) = &g.load {
                spans.push(format!(" load {:.0}% {state}", load * 100.0).into());
            }
            Line::from(spans)
        })
        .collect();
    f.render_widget(
        Paragraph::new(rows).block(Block::bordered().title(" GPUs (running shares) ")),
        area,
    );
}

/// Each tenant: who, its weight and entitled against received share (bar), its SLA,
/// memory and queue.
fn draw_tenants(f: &mut ratatui::Frame, area: Rect, r: &StatusReport) {
    const BAR: usize = 20;
    let header = Row::new([
        "tenant",
        "uid",
        "pid",
        "class",
        "job",
        "GPUs",
        "weight",
        "entitled",
        "received share",
        "SLA met",
        "memory",
        "queued",
        "done",
    ])
    .style(Style::new().add_modifier(Modifier::BOLD));
    let rows = r.tenants.iter().map(|t| {
        let received = t.received_share.unwrap_or(0.0);
        let entitled = t.entitled_share;
        // the bar's colour: received within 10% of entitled, or not
        let fair = entitled.is_none_or(|e| (received - e).abs() <= 0.1);
        Row::new([
            Cell::from(Span::styled(
                format!("{}", t.tenant),
                Style::new().fg(colour(Some(t.tenant))),
            )),
            Cell::from(t.uid.to_string()),
            Cell::from(t.pid.to_string()),
            Cell::from(match t.class {
                TenantClass::UserFacing => format!("uf {}ms", t.sla_ms),
                TenantClass::Batch => "batch".into(),
            }),
            Cell::from(t.job.map_or("-".into(), |j| j.to_string())),
            Cell::from(format!("{:?}", t.gpus)),
            Cell::from(t.weight.to_string()),
            Cell::from(pct(entitled)),
            Cell::from(Line::from(vec![
                Span::styled(
                    bar(received, BAR),
                    Style::new().fg(if fair { Color::Green } else { Color::Yellow }),
                ),
                Span::raw(format!(" {}", pct(t.received_share))),
            ])),
            Cell::from(pct(t.sla_met)),
            Cell::from(format!("{} MiB", t.memory_held >> 20)),
            Cell::from(t.queued.to_string()),
            Cell::from(t.done.to_string()),
        ])
    });
    let widths = [
        Constraint::Length(6),
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Length(9),
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Length(BAR as u16 + 5),
        Constraint::Length(7),
        Constraint::Length(10),
        Constraint::Length(6),
        Constraint::Length(8),
    ];
    let title = if (r.tenants.len() as u64) < r.tenants_total {
        format!(" tenants ({} of {}) ", r.tenants.len(), r.tenants_total)
    } else {
        format!(" tenants ({}) ", r.tenants.len())
    };
    f.render_widget(
        Table::new(rows, widths).header(header).block(Block::bordered().title(title)),
        area,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_fill_in_eighths_and_never_overflow() {
        assert_eq!(bar(0.0, 4), "    ");
        assert_eq!(bar(1.0, 4), "████");
        assert_eq!(bar(2.0, 4), "████");
        assert_eq!(bar(0.5, 4), "██  ");
        assert_eq!(bar(0.25 + 1.0 / 32.0, 4), "█▏  ");
        assert_eq!(bar(0.75, 20).chars().count(), 20);
    }
}
