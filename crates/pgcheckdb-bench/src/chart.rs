//! PNG charts with plotters' bitmap backend. [`spec`] turns a report into what is drawn (panels,
//! axis labels with units, legend entries, Okabe-Ito colours, 95 % intervals, the quick-run
//! note); `chart.json` holds it next to `chart.png`, so what a person sees can be checked. Text is drawn with plotters' pure-Rust `ab_glyph`
//! renderer from a TrueType font read at run time (DejaVu Sans, Liberation Sans or FreeSans in
//! the usual places, or what `fc-match sans` names): no system font library is linked. Without
//! any font file the chart is still drawn, without text.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use serde::Serialize;

use crate::report::{Bar, Chart, Report};

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

/// Chart size in pixels with two panels side by side.
const SIZE_TWO: (u32, u32) = (1400, 650);
/// Tick labels longer than this are replaced by letters explained in the legend.
const MAX_TICK_LABEL: usize = 8;
/// Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
const PALETTE: [(u8, u8, u8); 7] = [
    (0, 114, 178),   // blue
    (213, 94, 0),    // vermillion
    (0, 158, 115),   // bluish green
    (230, 159, 0),   // orange
    (86, 180, 233),  // sky blue
    (204, 121, 167), // reddish purple
    (240, 228, 66),  // yellow
];
/// What a bar panel's marks mean, shown in its legend.
pub const BAR_MARKS: &str = "bar: mean; whisker: 95 % CI of the mean; dots: single runs";
/// The mark of a quick run, drawn under the title.
pub const QUICK_NOTE: &str =
    "quick run: not significant (too few runs; the 95 % intervals are too wide to conclude)";

/// Everything the chart shows, in data: what [`render`] draws, and what tests assert.
#[derive(Debug, Clone, Serialize)]
pub struct ChartSpec {
    pub title: String,
    /// [`QUICK_NOTE`] on quick runs.
    pub note: Option<String>,
    pub panels: Vec<Panel>,
}

/// One set of axes.
#[derive(Debug, Clone, Serialize)]
pub struct Panel {
    pub title: String,
    pub x_label: String,
    /// With the unit, e.g. "WAL written per run (MB)".
    pub y_label: String,
    pub data: PanelData,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PanelData {
    Bars {
        bars: Vec<BarSpec>,
        /// [`BAR_MARKS`].
        marks: String,
    },
    Lines {
        series: Vec<LineSpec>,
    },
}

/// One bar: its tick label, its legend entry, colour, mean, 95 % CI and runs.
#[derive(Debug, Clone, Serialize)]
pub struct BarSpec {
    pub tick: String,
    pub legend: String,
    pub colour: (u8, u8, u8),
    pub mean: f64,
    /// Student-t 95 % interval of the mean; `None` with fewer than two runs.
    pub ci95: Option<(f64, f64)>,
    pub points: Vec<f64>,
}

/// One line with its legend entry and colour.
#[derive(Debug, Clone, Serialize)]
pub struct LineSpec {
    pub legend: String,
    pub colour: (u8, u8, u8),
    pub points: Vec<(f64, f64)>,
}

/// The chart of a report: its main panel, a WAL panel when the runs measured WAL bytes
/// (checksum-overhead), and the quick-run note.
pub fn spec(report: &Report) -> ChartSpec {
    let quick = report.settings.get("quick").and_then(|v| v.as_bool()) == Some(true);
    let mut panels = vec![main_panel(report)];
    if let Some(wal) = wal_panel(report) {
        panels.push(wal);
    }
    ChartSpec {
        title: report.title.clone(),
        note: quick.then(|| QUICK_NOTE.to_string()),
        panels,
    }
}

fn main_panel(report: &Report) -> Panel {
    match &report.chart {
        Chart::Bars { y_label, bars } => Panel {
            title: "time".into(),
            x_label: "variant".into(),
            y_label: y_label.clone(),
            data: bar_data(bars),
        },
        Chart::Lines {
            x_label,
            y_label,
            series,
        } => Panel {
            title: String::new(),
            x_label: x_label.clone(),
            y_label: y_label.clone(),
            data: PanelData::Lines {
                series: series
                    .iter()
                    .enumerate()
                    .map(|(i, s)| LineSpec {
                        legend: s.name.clone(),
                        colour: PALETTE[i % PALETTE.len()],
                        points: s.points.clone(),
                    })
                    .collect(),
            },
        },
    }
}

/// WAL bytes per run of each variant, in MB, when every variant measured them.
fn wal_panel(report: &Report) -> Option<Panel> {
    const WAL: &str = "wal_bytes";
    let Chart::Bars { bars, .. } = &report.chart else {
        return None;
    };
    let wal: Vec<Bar> = bars
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let points: Vec<f64> = crate::schedule::values_of(&report.trials, i, Some(WAL))
                .into_iter()
                .map(|v| v / 1e6)
                .collect();
            Bar {
                label: b.label.clone(),
                mean: crate::stats::mean(&points),
                points,
            }
        })
        .collect();
    if wal.is_empty() || wal.iter().any(|b| b.points.is_empty()) {
        return None;
    }
    Some(Panel {
        title: "WAL".into(),
        x_label: "variant".into(),
        y_label: "WAL written per run (MB, 10^6 bytes)".into(),
        data: bar_data(&wal),
    })
}

fn bar_data(bars: &[Bar]) -> PanelData {
    let letters = bars
        .iter()
        .any(|b| b.label.chars().count() > MAX_TICK_LABEL);
    PanelData::Bars {
        bars: bars
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let letter = char::from(b'A' + (i % 26) as u8).to_string();
                BarSpec {
                    tick: if letters {
                        letter.clone()
                    } else {
                        b.label.clone()
                    },
                    legend: if letters {
                        format!("{letter}: {}", b.label)
                    } else {
                        b.label.clone()
                    },
                    colour: PALETTE[i % PALETTE.len()],
                    mean: b.mean,
                    ci95: ci95(&b.points),
                    points: b.points.clone(),
                }
            })
            .collect(),
        marks: BAR_MARKS.into(),
    }
}

/// The Student-t 95 % confidence interval of the mean of `xs`.
pub fn ci95(xs: &[f64]) -> Option<(f64, f64)> {
    if xs.len() < 2 {
        return None;
    }
    let n = xs.len() as f64;
    let m = crate::stats::mean(xs);
    let half = crate::stats::t_975(n - 1.0) * crate::stats::std_dev(xs) / n.sqrt();
    Some((m - half, m + half))
}

/// Draws the report's chart into `path` and returns the path.
pub fn render(report: &Report, path: &Path) -> Result<PathBuf> {
    let text = have_font();
    let spec = spec(report);
    let size = if spec.panels.len() > 1 {
        SIZE_TWO
    } else {
        SIZE
    };
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let body = if text {
        let (head, body) = root.split_vertically(if spec.note.is_some() { 70 } else { 40 });
        head.draw(&Text::new(
            spec.title.clone(),
            (20, 8),
            (FAMILY, 24).into_font().color(&BLACK),
        ))
        .map_err(plot_err)?;
        if let Some(note) = &spec.note {
            head.draw(&Text::new(
                note.clone(),
                (20, 40),
                (FAMILY, 18).into_font().color(&RGBColor(200, 0, 0)),
            ))
            .map_err(plot_err)?;
        }
        body
    } else {
        root.clone()
    };
    let areas = body.split_evenly((1, spec.panels.len().max(1)));
    for (panel, area) in spec.panels.iter().zip(&areas) {
        match &panel.data {
            PanelData::Bars { bars, marks } => draw_bars(area, panel, bars, marks, text)?,
            PanelData::Lines { series } => draw_lines(area, panel, series, text)?,
        }
    }
    root.present().map_err(plot_err)?;
    Ok(path.to_path_buf())
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("could not draw the chart: {e:?}")
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// The top of the y axis: above the largest value, leaving the upper part for the legend.
fn y_top(values: impl Iterator<Item = f64>) -> f64 {
    let max = values.filter(|v| v.is_finite()).fold(0.0, f64::max);
    if max > 0.0 {
        max * 1.8
    } else {
        1.0
    }
}

fn rgb((r, g, b): (u8, u8, u8)) -> RGBColor {
    RGBColor(r, g, b)
}

fn draw_bars(area: &Area, panel: &Panel, bars: &[BarSpec], marks: &str, text: bool) -> Result<()> {
    let top = y_top(bars.iter().flat_map(|b| {
        b.points
            .iter()
            .copied()
            .chain(b.ci95.map(|c| c.1))
            .chain(std::iter::once(b.mean))
    }));
    let n = bars.len().max(1) as i32;
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(20)
        .x_label_area_size(if text { 60 } else { 5 })
        .y_label_area_size(if text { 90 } else { 5 });
    if text && !panel.title.is_empty() {
        builder.caption(&panel.title, (FAMILY, 20));
    }
    let mut chart = builder
        // `a..b` segmented has b - a + 1 slots: one per bar.
        .build_cartesian_2d((0..(n - 1).max(1)).into_segmented(), 0.0..top)
        .map_err(plot_err)?;
    let ticks: Vec<String> = bars.iter().map(|b| b.tick.clone()).collect();
    let formatter = |x: &SegmentValue<i32>| segment_label(x, &ticks);
    let mut mesh = chart.configure_mesh();
    mesh.disable_x_mesh()
        .x_labels(bars.len().max(1))
        .x_label_formatter(&formatter);
    if text {
        mesh.x_desc(&panel.x_label)
            .y_desc(&panel.y_label)
            .label_style((FAMILY, 15))
            .axis_desc_style((FAMILY, 16));
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(plot_err)?;
    for (i, bar) in bars.iter().enumerate() {
        let i = i as i32;
        let colour = rgb(bar.colour);
        let mut rect = Rectangle::new(
            [
                (SegmentValue::Exact(i), 0.0),
                (SegmentValue::Exact(i + 1), bar.mean),
            ],
            colour.mix(0.75).filled(),
        );
        rect.set_margin(0, 0, 14, 14);
        let drawn = chart.draw_series(std::iter::once(rect)).map_err(plot_err)?;
        if text {
            drawn.label(bar.legend.clone()).legend(move |(x, y)| {
                Rectangle::new([(x, y - 6), (x + 16, y + 6)], colour.mix(0.75).filled())
            });
        }
        if let Some((low, high)) = bar.ci95 {
            let x = SegmentValue::CenterOf(i);
            let style = BLACK.stroke_width(2);
            let low = low.max(0.0);
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x.clone(), low), (x.clone(), high)],
                    style,
                )))
                .map_err(plot_err)?;
            for y in [low, high] {
                let cap = EmptyElement::at((x.clone(), y))
                    + PathElement::new(vec![(-9, 0), (9, 0)], style);
                chart.draw_series(std::iter::once(cap)).map_err(plot_err)?;
            }
        }
        chart
            .draw_series(
                bar.points.iter().map(|&y| {
                    Circle::new((SegmentValue::CenterOf(i), y), 3, BLACK.mix(0.6).filled())
                }),
            )
            .map_err(plot_err)?;
    }
    if text {
        // The marks' meaning as one more legend line (no series of its own).
        chart
            .draw_series(std::iter::empty::<Circle<(SegmentValue<i32>, f64), i32>>())
            .map_err(plot_err)?
            .label(marks.to_string())
            .legend(|(x, y)| Circle::new((x + 8, y), 3, BLACK.filled()));
        chart
            .configure_series_labels()
            .label_font((FAMILY, 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
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

fn draw_lines(area: &Area, panel: &Panel, series: &[LineSpec], text: bool) -> Result<()> {
    let points = || series.iter().flat_map(|s| s.points.iter());
    let top = y_top(points().map(|p| p.1));
    let x_max = points().map(|p| p.0).fold(1.0, f64::max);
    let mut builder = ChartBuilder::on(area);
    builder
        .margin(20)
        .x_label_area_size(if text { 50 } else { 5 })
        .y_label_area_size(if text { 90 } else { 5 });
    let mut chart = builder
        .build_cartesian_2d(0.5..x_max + 0.5, 0.0..top)
        .map_err(plot_err)?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc(&panel.x_label)
            .y_desc(&panel.y_label)
            .x_labels(x_max as usize + 1)
            .label_style((FAMILY, 15))
            .axis_desc_style((FAMILY, 16));
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(plot_err)?;
    for s in series {
        let colour = rgb(s.colour);
        let line = chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                colour.stroke_width(3),
            ))
            .map_err(plot_err)?;
        if text {
            line.label(s.legend.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(3))
            });
        }
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 4, colour.filled())))
            .map_err(plot_err)?;
    }
    if text {
        chart
            .configure_series_labels()
            .label_font((FAMILY, 14))
            .background_style(WHITE.mix(0.85))
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
    use crate::report::{Machine, Report};

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
            series: vec![crate::report::Series {
                name: "physical".into(),
                points: vec![(1.0, 1.0), (2.0, 1.9)],
            }],
        });
        let p = render(&lines, &dir.path().join("lines.png")).unwrap();
        assert!(std::fs::metadata(p).unwrap().len() > 1000);
    }

    #[test]
    fn spec_has_units_legend_intervals_wal_panel_and_quick_note() {
        use crate::schedule::{Measurement, Trial, TrialResult};
        let names = ["checksums on, long variant name", "checksums off"];
        let trials: Vec<TrialResult> = [(0, 0, 1.5), (0, 1, 1.0), (1, 0, 1.7), (1, 1, 1.2)]
            .iter()
            .enumerate()
            .map(|(i, &(run, variant, secs))| TrialResult {
                trial: Trial {
                    index: i,
                    run,
                    variant,
                },
                variant_name: names[variant].to_string(),
                measurement: Measurement::seconds(secs)
                    .with("wal_bytes", 2e6 * (2 - variant) as f64 + run as f64),
            })
            .collect();
        let mut r = report(Chart::Bars {
            y_label: "seconds per run".into(),
            bars: crate::experiments::bars(&trials, &names.map(String::from), None),
        });
        r.trials = trials;
        r.settings = serde_json::json!({"quick": true});
        let s = spec(&r);
        assert_eq!(s.note.as_deref(), Some(QUICK_NOTE));
        assert_eq!(s.panels.len(), 2, "time and WAL panels");
        assert_eq!(s.panels[0].y_label, "seconds per run");
        assert!(
            s.panels[1].y_label.contains("(MB"),
            "{}",
            s.panels[1].y_label
        );
        let PanelData::Bars { bars, marks } = &s.panels[1].data else {
            panic!("bars")
        };
        assert_eq!(marks, BAR_MARKS);
        assert!((bars[0].mean - 4.0000005).abs() < 1e-6, "{bars:?}");
        // Long names become letters on the axis and are spelt out in the legend.
        assert_eq!(bars[0].tick, "A");
        assert_eq!(bars[0].legend, "A: checksums on, long variant name");
        let (low, high) = bars[0].ci95.expect("two runs");
        assert!(low < bars[0].mean && bars[0].mean < high);
        assert_ne!(bars[0].colour, bars[1].colour);
        r.settings = serde_json::json!({"quick": false});
        assert_eq!(spec(&r).note, None);
        let dir = tempfile::tempdir().unwrap();
        render(&r, &dir.path().join("two.png")).unwrap();
    }

    #[test]
    fn ci95_matches_student_t() {
        // n = 3, mean 2, sd 1: half width t(2) * 1 / sqrt(3) = 4.303 / 1.732.
        let (low, high) = ci95(&[1.0, 2.0, 3.0]).unwrap();
        assert!(
            (high - 2.0 - 4.302_653 / 3f64.sqrt()).abs() < 1e-3,
            "{high}"
        );
        assert!((2.0 - low - (high - 2.0)).abs() < 1e-9);
        assert_eq!(ci95(&[1.0]), None);
    }
}
