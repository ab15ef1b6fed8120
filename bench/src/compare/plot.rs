//! SVG plots of a comparison (plotters, SVG backend): per load the figure
//! and the CPU per unit against the number of services, one line per
//! datapath (median over runs, min–max as error bars), and the time to
//! program one endpoint change against the number of services.
//!
//! Invariants: the x axis (services) is logarithmic; every file is written
//! whole or not at all (plotters renders into a string first).

use super::report::{Row, Spread, UpdateRow, gateway_us, rows, spread, update_rows};
use super::run::{Datapath, Load, Report};
use plotters::prelude::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

#[derive(thiserror::Error, Debug)]
pub enum PlotError {
    #[error("drawing {file}: {reason}")]
    Draw { file: String, reason: String },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn colour(datapath: Datapath) -> RGBColor {
    match datapath {
        Datapath::Portico(super::run::PorticoDriver::AfPacket) => RGBColor(0x1f, 0x77, 0xb4),
        Datapath::Portico(super::run::PorticoDriver::AfXdp) => RGBColor(0x2c, 0xa0, 0x2c),
        Datapath::Portico(super::run::PorticoDriver::Dpdk) => RGBColor(0x94, 0x67, 0xbd),
        Datapath::Portico(super::run::PorticoDriver::AfPacketBlocks) => RGBColor(0x17, 0xbe, 0xcf),
        Datapath::Portico(super::run::PorticoDriver::AfXdpBusyPoll) => RGBColor(0xbc, 0xbd, 0x22),
        Datapath::Portico(super::run::PorticoDriver::AfPacketGso) => RGBColor(0x8c, 0x56, 0x4b),
        Datapath::Iptables => RGBColor(0xd6, 0x27, 0x28),
        Datapath::Nftables => RGBColor(0xff, 0x7f, 0x0e),
    }
}

/// One line: datapath and its (services, spread) points.
type Series = (Datapath, Vec<(f64, Spread)>);

fn draw(
    file: &str,
    title: &str,
    y_label: &str,
    series: &[Series],
    log_y: bool,
) -> Result<String, PlotError> {
    let err = |e: &dyn std::fmt::Display| PlotError::Draw {
        file: file.to_owned(),
        reason: e.to_string(),
    };
    let points = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x_max, mut y_max, mut y_min) = (10.0f64, 0.0f64, f64::MAX);
    for (x, s) in points {
        x_max = x_max.max(*x);
        y_max = y_max.max(s.max);
        if s.min > 0.0 {
            y_min = y_min.min(s.min);
        }
    }
    let y_max = if y_max > 0.0 { y_max * 1.15 } else { 1.0 };
    let y_min = if y_min < f64::MAX {
        y_min / 1.5
    } else {
        y_max / 1000.0
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 460)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70);
        let x_range = (0.7f64..x_max * 1.5).log_scale();
        // Two chart types (linear or log y) share the drawing code below.
        macro_rules! body {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc("services (log scale)")
                    .y_desc(y_label)
                    .x_label_formatter(&|x| format!("{x:.0}"))
                    .draw()
                    .map_err(|e| err(&e))?;
                for (datapath, pts) in series {
                    let c = colour(*datapath);
                    chart
                        .draw_series(LineSeries::new(
                            pts.iter().map(|(x, s)| (*x, s.median)),
                            c.stroke_width(2),
                        ))
                        .map_err(|e| err(&e))?
                        .label(datapath.name())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                        });
                    chart
                        .draw_series(pts.iter().map(|(x, s)| {
                            ErrorBar::new_vertical(*x, s.min, s.median, s.max, c.filled(), 8)
                        }))
                        .map_err(|e| err(&e))?;
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .position(SeriesLabelPosition::UpperRight)
                    .draw()
                    .map_err(|e| err(&e))?;
            }};
        }
        if log_y {
            body!(
                builder
                    .build_cartesian_2d(x_range, (y_min..y_max).log_scale())
                    .map_err(|e| err(&e))?
            );
        } else {
            body!(
                builder
                    .build_cartesian_2d(x_range, 0.0..y_max)
                    .map_err(|e| err(&e))?
            );
        }
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

fn series_of(rows: &[Row], load: Load, figure: impl Fn(&Row) -> Option<Spread>) -> Vec<Series> {
    let datapaths: BTreeSet<Datapath> = rows.iter().map(|r| r.datapath).collect();
    datapaths
        .into_iter()
        .map(|d| {
            let pts = rows
                .iter()
                .filter(|r| r.load == load && r.datapath == d)
                .filter_map(|r| figure(r).map(|s| (r.services.max(1) as f64, s)))
                .collect();
            (d, pts)
        })
        .filter(|(_, p): &Series| !p.is_empty())
        .collect()
}

fn write(dir: &Path, name: &str, svg: &str, written: &mut Vec<PathBuf>) -> Result<(), PlotError> {
    let path = dir.join(name);
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&path, svg))
        .map_err(|source| PlotError::Write {
            path: path.clone(),
            source,
        })?;
    written.push(path);
    Ok(())
}

/// Draw every plot of `report` into `dir`; returns the files written.
pub fn plot_all(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    let rows = rows(report);
    let mut written = Vec::new();
    let loads: BTreeSet<Load> = rows.iter().map(|r| r.load).collect();
    for load in loads {
        let name = format!("throughput-{}.svg", load.key());
        let svg = draw(
            &name,
            &format!("{} vs services", load.title()),
            load.unit(),
            &series_of(&rows, load, |r| Some(r.value)),
            false,
        )?;
        write(dir, &name, &svg, &mut written)?;
        let name = format!("cpu-{}.svg", load.key());
        // Per run, then spread: the same figure as the table's.
        let cpu = |r: &Row| {
            spread(
                report
                    .samples
                    .iter()
                    .filter(|s| {
                        s.load == r.load && s.services == r.services && s.datapath == r.datapath
                    })
                    .map(gateway_us),
            )
        };
        let svg = draw(
            &name,
            &format!(
                "CPU per {}: Portico process vs kernel sys+softirq ({})",
                load.per(),
                load.key()
            ),
            &format!("µs per {}", load.per()),
            &series_of(&rows, load, cpu),
            false,
        )?;
        write(dir, &name, &svg, &mut written)?;
    }
    let updates: Vec<UpdateRow> = update_rows(report);
    if !updates.is_empty() {
        let datapaths: BTreeSet<Datapath> = updates.iter().map(|u| u.datapath).collect();
        let series: Vec<Series> = datapaths
            .into_iter()
            .map(|d| {
                let pts = updates
                    .iter()
                    .filter(|u| u.datapath == d)
                    .map(|u| (u.services.max(1) as f64, u.millis))
                    .collect();
                (d, pts)
            })
            .collect();
        let svg = draw(
            "update.svg",
            "Programming one endpoint removal vs services",
            "ms (log scale)",
            &series,
            true,
        )?;
        write(dir, "update.svg", &svg, &mut written)?;
    }
    Ok(written)
}
