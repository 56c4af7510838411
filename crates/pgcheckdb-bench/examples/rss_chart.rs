//! Peak RSS against the number of relation files, as a PNG: the chart of docs/PERFORMANCE.md.
//!
//! `cargo run --release -p pgcheckdb-bench --example rss_chart -- RSS.json OUT.png`, where
//! RSS.json is what `scripts/bench-many-files.py --rss-json` writes: `{"<files>": {"<command>":
//! <peak RSS in MB>, ...}, ...}`. One line per command, files on a logarithmic axis.

use std::collections::BTreeMap;

use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        return Err(anyhow!("usage: rss_chart RSS.json OUT.png"));
    };
    let raw: BTreeMap<String, BTreeMap<String, f64>> =
        serde_json::from_str(&std::fs::read_to_string(input).context("reading the RSS file")?)?;
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for (files, by_command) in &raw {
        let files: f64 = files.parse().context("file count")?;
        for (command, mb) in by_command {
            series
                .entry(command.clone())
                .or_default()
                .push((files, *mb));
        }
    }
    for points in series.values_mut() {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let font = std::fs::read(FONT).context("reading the DejaVu Sans font")?;
    let font: &'static [u8] = Box::leak(font.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, font)
        .map_err(|_| anyhow!("font not usable"))?;
    let x_max = series.values().flatten().map(|p| p.0).fold(1.0, f64::max) * 1.5;
    let y_max = series.values().flatten().map(|p| p.1).fold(1.0, f64::max) * 1.15;
    let root = BitMapBackend::new(output, (1000, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "pgcheckdb verify -j 2: peak RSS vs relation files (PostgreSQL 18)",
            ("sans-serif", 24),
        )
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(60)
        .build_cartesian_2d((500f64..x_max).log_scale(), 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("relation files (log scale)")
        .y_desc("peak RSS, MB")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()?;
    let colors = [RED, BLUE, GREEN, BLACK, MAGENTA];
    for (i, (name, points)) in series.iter().enumerate() {
        let color = colors[i % colors.len()];
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
