//! A small SVG line-plot writer for the benchmarks' figures. Hand-written on
//! purpose: one figure type does not justify a plotting crate and its
//! dependency tree (see docs/dependencies.md).

use std::fmt::Write as _;

/// One line of a plot.
pub struct Series {
    /// Legend text.
    pub name: String,
    /// CSS colour of the line and its markers.
    pub color: &'static str,
    /// (x, y) in data units, in drawing order.
    pub points: Vec<(f64, f64)>,
}

/// A horizontal reference line (e.g. a goal), drawn dashed.
pub struct HLine {
    /// Legend text.
    pub name: String,
    /// CSS colour.
    pub color: &'static str,
    /// Height in data units.
    pub y: f64,
}

/// A line plot: linear y axis from 0, x axis linear or log2.
pub struct LinePlot {
    /// Title above the plot.
    pub title: String,
    /// Label of the x axis.
    pub x_label: String,
    /// Label of the y axis.
    pub y_label: String,
    /// Log2 x axis (ticks at the data's x values); else linear.
    pub log2_x: bool,
    /// Formats an x tick (e.g. a byte count as "8 KiB").
    pub x_tick: fn(f64) -> String,
    /// The lines.
    pub series: Vec<Series>,
    /// Dashed reference lines.
    pub hlines: Vec<HLine>,
}

const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 480.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 70.0;
const Y_TICKS: u32 = 5;
const LEGEND_TOP: f64 = 16.0;
const LEGEND_ROW: f64 = 18.0;

impl LinePlot {
    /// The plot as a standalone SVG document.
    pub fn to_svg(&self) -> String {
        let tx = |x: f64| {
            if self.log2_x {
                x.max(f64::MIN_POSITIVE).log2()
            } else {
                x
            }
        };
        let xs: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .collect();
        let (x_min, x_max) = xs
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
                (lo.min(tx(x)), hi.max(tx(x)))
            });
        let (x_min, x_max) = if x_min.is_finite() && x_max > x_min {
            (x_min, x_max)
        } else {
            (0.0, 1.0)
        };
        let y_top = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain(self.hlines.iter().map(|h| h.y))
            .fold(0.0f64, f64::max);
        let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
        // Headroom above the highest line for the legend (top-left corner),
        // so no line crosses it.
        let entries = (self.series.len() + self.hlines.len()) as f64;
        let legend_px = LEGEND_TOP + LEGEND_ROW * entries;
        let y_max = nice_ceiling(y_top * ph / (ph - legend_px).max(ph / 4.0));
        let px = |x: f64| LEFT + (tx(x) - x_min) / (x_max - x_min) * pw;
        let py = |y: f64| TOP + ph - y / y_max * ph;

        let mut svg = String::new();
        // Writing into a String cannot fail; the results are ignored.
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="25" text-anchor="middle" font-size="15">{}</text>"#,
            WIDTH / 2.0,
            escape(&self.title)
        );
        self.write_axes(&mut svg, &xs, y_max, &px, &py);
        let mut legend = Vec::new();
        for h in &self.hlines {
            let _ = writeln!(
                svg,
                r#"<line x1="{LEFT}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="{2}" stroke-width="1.5" stroke-dasharray="6 4"/>"#,
                py(h.y),
                LEFT + pw,
                h.color
            );
            legend.push((h.name.as_str(), h.color, true));
        }
        for s in &self.series {
            let path: Vec<String> = s
                .points
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>"#,
                path.join(" "),
                s.color
            );
            for &(x, y) in &s.points {
                let _ = writeln!(
                    svg,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{}"/>"#,
                    px(x),
                    py(y),
                    s.color
                );
            }
            legend.push((s.name.as_str(), s.color, false));
        }
        write_legend(&mut svg, &legend);
        svg.push_str("</svg>\n");
        svg
    }
    /// The grid, the ticks at `y_max`'s fifths and at the data's x values,
    /// the frame and the axis labels.
    fn write_axes(
        &self,
        svg: &mut String,
        xs: &[f64],
        y_max: f64,
        px: &dyn Fn(f64) -> f64,
        py: &dyn Fn(f64) -> f64,
    ) {
        let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
        // Grid and y ticks.
        for i in 0..=Y_TICKS {
            let y = y_max * f64::from(i) / f64::from(Y_TICKS);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#ddd"/><text x="{2:.1}" y="{3:.1}" text-anchor="end">{4}</text>"##,
                py(y),
                LEFT + pw,
                LEFT - 6.0,
                py(y) + 4.0,
                format_number(y)
            );
        }
        // x ticks at the data's distinct x values.
        let mut ticks = xs.to_vec();
        ticks.sort_by(f64::total_cmp);
        ticks.dedup();
        for &x in &ticks {
            let _ = writeln!(
                svg,
                r##"<line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{1:.1}" stroke="#eee"/><text x="{0:.1}" y="{2:.1}" text-anchor="end" transform="rotate(-35 {0:.1} {2:.1})">{3}</text>"##,
                px(x),
                TOP + ph,
                TOP + ph + 16.0,
                escape(&(self.x_tick)(x))
            );
        }
        let _ = writeln!(
            svg,
            r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            HEIGHT - 8.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            svg,
            r#"<text x="18" y="{0}" text-anchor="middle" transform="rotate(-90 18 {0})">{1}</text>"#,
            TOP + ph / 2.0,
            escape(&self.y_label)
        );
    }
}

/// The legend, in the top-left corner of the plot area: a line (dashed for
/// a reference level) and the name of each entry.
fn write_legend(svg: &mut String, legend: &[(&str, &str, bool)]) {
    // Legend in the top-left corner of the plot area.
    for (i, (name, color, dashed)) in legend.iter().enumerate() {
        let y = TOP + LEGEND_TOP + LEGEND_ROW * i as f64;
        let dash = if *dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = writeln!(
            svg,
            r#"<line x1="{0}" y1="{1:.1}" x2="{2}" y2="{1:.1}" stroke="{3}" stroke-width="2"{4}/><text x="{5}" y="{6:.1}">{7}</text>"#,
            LEFT + 10.0,
            y,
            LEFT + 40.0,
            color,
            dash,
            LEFT + 46.0,
            y + 4.0,
            escape(name)
        );
    }
}

/// The smallest round number (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power
/// of ten) at or above `v`: an axis top whose five ticks read easily.
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let base = 10f64.powf(v.log10().floor());
    [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
        .iter()
        .map(|m| m * base)
        .find(|&c| c >= v)
        .unwrap_or(10.0 * base)
}

fn format_number(v: f64) -> String {
    if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_lines_legend_and_escaped_text() {
        let plot = LinePlot {
            title: "a < b".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log2_x: true,
            x_tick: |x| format!("{x}"),
            series: vec![Series {
                name: "seq".into(),
                color: "steelblue",
                points: vec![(8.0, 10.0), (16.0, 30.0), (32.0, 45.0)],
            }],
            hlines: vec![HLine {
                name: "goal".into(),
                color: "red",
                y: 40.0,
            }],
        };
        let svg = plot.to_svg();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("<polyline") && svg.contains("stroke-dasharray"));
        assert!(svg.contains("a &lt; b") && !svg.contains("a < b"));
        assert_eq!(nice_ceiling(45.0), 50.0);
        assert_eq!(nice_ceiling(1300.0), 1500.0);
        assert_eq!(nice_ceiling(2410.0), 2500.0);
    }
}
