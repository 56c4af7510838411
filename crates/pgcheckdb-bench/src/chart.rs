//! PNG charts with plotters' bitmap backend. Text is drawn with plotters' pure-Rust `ab_glyph`
//! renderer from a TrueType font read at run time (DejaVu Sans, Liberation Sans or FreeSans in
//! the usual places, or what `fc-match sans` names): no system font library is linked. Without
//! any font file the chart is still drawn, without text.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::output::{Bar, Chart, Report, Series};

/// Chart size in pixels.
const SIZE: (u32, u32) = (1000, 600);
/// The family name the font is registered under.
const FAMILY: &str = "sans-serif";
/// Font files tried in order.
const FONT_FILES: [&str; 6] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// Registers a font once; true if text can be drawn.
fn have_font() -> bool {
    static FONT: OnceLock<bool> = OnceLock::new();
    *FONT.get_or_init(|| {
        let Some(bytes) = font_candidates()
            .into_iter()
            .find_map(|p| std::fs::read(p).ok())
        else {
            return false;
        };
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font(FAMILY, FontStyle::Normal, bytes).is_ok()
    })
}

fn font_candidates() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = FONT_FILES.iter().map(PathBuf::from).collect();
    if let Ok(out) = std::process::Command::new("fc-match")
        .args(["-f", "%{file}", "sans"])
        .output()
    {
        let file = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if file.ends_with(".ttf") {
            paths.push(PathBuf::from(file));
        }
    }
    paths
}

/// Draws the report's chart into `path` and returns the path.
pub fn render(report: &Report, path: &Path) -> Result<PathBuf> {
    let text = have_font();
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    match &report.chart {
        Chart::Bars { y_label, bars } => draw_bars(&root, &report.title, y_label, bars, text)?,
        Chart::Lines {
            x_label,
            y_label,
            series,
        } => draw_lines(&root, &report.title, x_label, y_label, series, text)?,
    }
    root.present().map_err(plot_err)?;
    Ok(path.to_path_buf())
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("could not draw the chart: {e:?}")
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// The top of the y axis: a little above the largest value.
fn y_top(values: impl Iterator<Item = f64>) -> f64 {
    let max = values.filter(|v| v.is_finite()).fold(0.0, f64::max);
    if max > 0.0 {
        max * 1.15
    } else {
        1.0
    }
}

fn draw_bars(area: &Area, title: &str, y_label: &str, bars: &[Bar], text: bool) -> Result<()> {
    let top = y_top(bars.iter().flat_map(|b| b.points.iter().copied()));
    let n = bars.len().max(1) as i32;
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(20)
        .x_label_area_size(if text { 60 } else { 5 });
    builder.y_label_area_size(if text { 80 } else { 5 });
    if text {
        builder.caption(title, (FAMILY, 24));
    }
    let mut chart = builder
        // `a..b` segmented has b - a + 1 slots: one per bar.
        .build_cartesian_2d((0..(n - 1).max(1)).into_segmented(), 0.0..top)
        .map_err(plot_err)?;
    let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
    let formatter = |x: &SegmentValue<i32>| segment_label(x, &labels);
    let mut mesh = chart.configure_mesh();
    mesh.disable_x_mesh()
        .x_labels(bars.len().max(1))
        .x_label_formatter(&formatter);
    if text {
        mesh.y_desc(y_label)
            .label_style((FAMILY, 14))
            .axis_desc_style((FAMILY, 16));
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(plot_err)?;
    for (i, bar) in bars.iter().enumerate() {
        let i = i as i32;
        // Alternate two colours: the experiments list variants in on/off (or A/B) pairs.
        let color = Palette99::pick(i as usize % 2).mix(0.6);
        let mut rect = Rectangle::new(
            [
                (SegmentValue::Exact(i), 0.0),
                (SegmentValue::Exact(i + 1), bar.mean),
            ],
            color.filled(),
        );
        rect.set_margin(0, 0, 12, 12);
        chart.draw_series(std::iter::once(rect)).map_err(plot_err)?;
        chart
            .draw_series(
                bar.points
                    .iter()
                    .map(|&y| Circle::new((SegmentValue::CenterOf(i), y), 4, BLACK.filled())),
            )
            .map_err(plot_err)?;
    }
    Ok(())
}

fn segment_label(x: &SegmentValue<i32>, labels: &[String]) -> String {
    match x {
        SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => labels
            .get(usize::try_from(*i).unwrap_or(usize::MAX))
            .cloned()
            .unwrap_or_default(),
        SegmentValue::Last => String::new(),
    }
}

fn draw_lines(
    area: &Area,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    text: bool,
) -> Result<()> {
    let points = || series.iter().flat_map(|s| s.points.iter());
    let top = y_top(points().map(|p| p.1));
    let x_max = points().map(|p| p.0).fold(1.0, f64::max);
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(20)
        .x_label_area_size(if text { 50 } else { 5 })
        .y_label_area_size(if text { 80 } else { 5 });
    if text {
        builder.caption(title, (FAMILY, 24));
    }
    let mut chart = builder
        .build_cartesian_2d(0.5..x_max + 0.5, 0.0..top)
        .map_err(plot_err)?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc(x_label)
            .y_desc(y_label)
            .x_labels(x_max as usize + 1)
            .label_style((FAMILY, 14))
            .axis_desc_style((FAMILY, 16));
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(plot_err)?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let line = chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(plot_err)?;
        if text {
            line.label(s.name.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(plot_err)?;
    }
    if text {
        chart
            .configure_series_labels()
            .label_font((FAMILY, 14))
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(plot_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{Machine, Report};

    fn report(chart: Chart) -> Report {
        Report {
            experiment: "t".into(),
            title: "Chart test".into(),
            settings: serde_json::json!({}),
            machine: Machine::start(),
            trials: vec![],
            groups: vec![],
            comparisons: vec![],
            conclusions: vec![],
            chart,
        }
    }

    #[test]
    fn draws_bar_and_line_charts() {
        let dir = tempfile::tempdir().unwrap();
        let bars = report(Chart::Bars {
            y_label: "seconds".into(),
            bars: vec![
                Bar {
                    label: "on".into(),
                    mean: 1.5,
                    points: vec![1.4, 1.6],
                },
                Bar {
                    label: "off".into(),
                    mean: 1.0,
                    points: vec![0.9, 1.1],
                },
            ],
        });
        let p = render(&bars, &dir.path().join("bars.png")).unwrap();
        let bytes = std::fs::read(p).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        let lines = report(Chart::Lines {
            x_label: "jobs".into(),
            y_label: "GB/s".into(),
            series: vec![Series {
                name: "physical".into(),
                points: vec![(1.0, 1.0), (2.0, 1.9)],
            }],
        });
        let p = render(&lines, &dir.path().join("lines.png")).unwrap();
        assert!(std::fs::metadata(p).unwrap().len() > 1000);
    }
}
